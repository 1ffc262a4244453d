"""Run: one diagnosis (`?run=<id>`, the link to share): progress, then the verdict and findings
first, all read from the run's one stored diagnosis."""

import streamlit as st

from eagle3dash import jobs as jobq
from eagle3dash import store as db
from eagle3dash.diagnosis.stored_run import read_run
from eagle3dash.ui import (
    data,
    glossary,
    icons,
    layouts,
    real_engine,
    reports,
    run_panels,
    tables,
    timings,
    verdict,
    widgets,
    words,
)
from eagle3dash.ui import profile as profile_ui
from eagle3dash.ui.fmt import md_escape, status_label, when
from eagle3dash.ui.home import get_store
from eagle3dash.ui.progress import progress_view

store = get_store()
run_id, bad = widgets.query_int("run")
if bad is not None:
    st.title("Run")
    st.error(f"{md_escape(bad)} is not a run id: run ids are whole numbers, like ?run=12.")
    st.page_link(widgets.RUNS_PAGE, label="All runs", icon=icons.RUNS)
    st.stop()
if run_id is None:
    st.title("Run")
    st.info("Open a run from the Runs page, or give its id.")
    picked = st.number_input("Run id", min_value=1, step=1, value=None, key="run_pick")
    if picked is not None:
        st.query_params["run"] = str(int(picked))
        st.rerun()
    st.page_link(widgets.RUNS_PAGE, label="All runs", icon=icons.RUNS)
    st.stop()

run = read_run(store, run_id)
if run is None:
    st.title(f"Run #{run_id}")
    st.error(f"There is no run #{run_id} in this home folder ({md_escape(store.home)}).")
    st.page_link(widgets.RUNS_PAGE, label="All runs", icon=icons.RUNS)
    st.stop()

jobs = jobq.read_jobs(store, run_id)
view = progress_view(run, jobs)
# stored once when the run succeeded; read through the one loader (any schema), typed
diagnosis = run.diagnosis()
detections = tables.detections(diagnosis, jobs)

st.title(f"Run #{run_id}")
st.markdown(
    f"{status_label(view.status)} · checkpoint "
    f"**{md_escape(tables.checkpoint_label(run))}** · endpoint "
    f"**{md_escape(run.endpoint_url or '—')}**"
    + (f" ({md_escape(words.engine_words(diagnosis.server))})" if diagnosis else "")
    + (f" · baseline **{md_escape(run.baseline_url)}**" if run.baseline_url else "")
    + f" · created {md_escape(when(run.created_at))}"
)
run_panels.demo_context(run)
real_engine.real_engine_panel(run, diagnosis)
run_panels.ran_on(jobs)
if diagnosis is not None:
    verdict.verdict_banner(diagnosis)
widgets.share_link("run", run=run_id)

if view.active:
    st.subheader("Progress")
    run_panels.progress_panel(run_id, view.poll_every, view.status)
    st.caption("The verdict, findings, tables and charts appear here when the run finishes.")
elif view.status in ("failed", "cancelled"):
    verdict.stopped_notice(view.status, view.error)

if diagnosis is not None:
    st.header("Findings")
    verdict.findings_list(diagnosis.findings, server=diagnosis.server)
    verdict.diagnosis_warnings(diagnosis)

    st.header(
        "Training vs serving",
        help=glossary.term_help("taps", "fc slot", "top-1", "sim training / sim serving"),
    )
    layouts.sides_table(diagnosis)

    st.header("Layer layout", help=glossary.term_help("taps", "fc slot"))
    layouts.layout_diff(diagnosis)
elif not view.active:
    verdict.without_diagnosis(verdict.stored_findings(run_id))

if detections:
    st.header("Layout detective")
    layouts.layout_detectives(detections, sides_above=diagnosis is not None)

profile = None if diagnosis is None else diagnosis.profile  # None: --no-profile, or older
if diagnosis is not None:
    st.header("Charts")
    run_panels.run_charts(diagnosis, per_position=profile is None)
if diagnosis is not None and profile is not None:
    st.header("Acceptance profile")
    profile_ui.profile_section(run_id, diagnosis)

checkpoint_tab, server_tab, logs_tab, export_tab = st.tabs(
    ["Checkpoint", "Server", "Jobs and logs", "Export"]
)
with checkpoint_tab:
    if diagnosis is not None and diagnosis.checkpoint:
        fix = words.config_fix(diagnosis.findings, diagnosis.verdict.root_cause)
        reports.checkpoint_report(diagnosis.checkpoint, fix)
    elif run.checkpoint_id is not None:
        reports.registered_checkpoint_report(db.get_checkpoint(store, run.checkpoint_id))
    else:
        st.info("No checkpoint was registered for this run.")
with server_tab:
    reports.server_settings(data.server_report_of(store, run, diagnosis))
with logs_tab:
    timings.time_spent(diagnosis, unfinished=view.active)
    run_panels.job_logs(jobs)
with export_tab:
    run_panels.export_buttons(run, diagnosis)
if diagnosis is not None:
    glossary.glossary_section()
