"""Compare: two runs side by side (`?a=<id>&b=<id>`): the headline numbers (the runs' summary
columns) with their change, each side's layout and accuracy from each run's diagnosis."""

import streamlit as st

from eagle3dash.diagnosis.stored_run import read_run
from eagle3dash.ui import (
    charts,
    compare,
    glossary,
    icons,
    layouts,
    live,
    run_panels,
    tables,
    verdict,
    widgets,
)
from eagle3dash.ui.fmt import md_escape
from eagle3dash.ui.home import get_store

store = get_store()
st.title("Compare runs")

a, bad_a = widgets.query_int("a")
b, bad_b = widgets.query_int("b")
for name, bad in (("a", bad_a), ("b", bad_b)):
    if bad is not None:
        st.error(f"?{name}={md_escape(bad)} is not a run id: run ids are whole numbers.")

left, right = st.columns(2)
pick_a = left.number_input("Run A", min_value=1, step=1, value=a, key="compare_a")
pick_b = right.number_input("Run B", min_value=1, step=1, value=b, key="compare_b")
if (pick_a, pick_b) != (a, b) and st.button("Compare", key="compare_go"):
    st.query_params.from_dict(
        {k: str(int(v)) for k, v in (("a", pick_a), ("b", pick_b)) if v is not None}
    )
    st.rerun()

if a is None or b is None:
    st.info("Pick two runs (their ids are on the Runs page), or open ?a=<id>&b=<id>.")
    st.page_link(widgets.RUNS_PAGE, label="All runs", icon=icons.RUNS)
    st.stop()

found = {"A": read_run(store, a), "B": read_run(store, b)}
unknown = [f"#{i}" for i, r in ((a, found["A"]), (b, found["B"])) if r is None]
if unknown:
    st.error(f"No run {' or '.join(unknown)} in this home folder ({md_escape(store.home)}).")
    st.stop()
runs = {key: run for key, run in found.items() if run is not None}

live.compare_watch(store, {"A": a, "B": b})
compare.what_differs(runs["A"], runs["B"])
widgets.share_link("compare", a=a, b=b)
run_panels.compare_headline(runs["A"], runs["B"])
widgets.text_table(tables.compare_frame(runs["A"], runs["B"]))

chart = charts.compare_acceptance_chart(
    {f"{k} #{r.id}": tables.diagnosis_metrics(r.diagnosis()) for k, r in runs.items()}
)
if chart is not None:
    st.altair_chart(chart, width="stretch")

columns = st.columns(2)
for column, (key, run) in zip(columns, runs.items(), strict=True):
    with column:
        st.subheader(f"Run {key}: #{run.id}")
        st.page_link(
            widgets.RUN_PAGE, label=f"Open run #{run.id}", query_params={"run": str(run.id)}
        )
        st.markdown("**Findings**")
        verdict.findings_list(verdict.stored_findings(run.id), compact=True)
        st.markdown("**Layer layout**", help=glossary.term_help("taps", "fc slot"))
        diagnosis = run.diagnosis()
        if diagnosis is not None:
            layouts.slots_table(diagnosis, compact=True)
        else:
            st.caption("No diagnosis is stored for this run.")
