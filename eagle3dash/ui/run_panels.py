"""A run's records drawn: the Runs table, where a job ran, a demo run's context, Compare's
headline, the run's charts, the live progress panel, its jobs' logs, its exports."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import streamlit as st

from eagle3dash import jobs as jobq
from eagle3dash import store as db
from eagle3dash.diagnosis.stored import StoredDiagnosis
from eagle3dash.diagnosis.stored_run import StoredRun
from eagle3dash.noise import NOISE_SE
from eagle3dash.ui import charts, icons, tables, words
from eagle3dash.ui.fmt import DASH, delta, md_escape, num, ratio, rows_height, status_label
from eagle3dash.ui.glossary import term_help
from eagle3dash.ui.home import get_store
from eagle3dash.ui.progress import cancel_run, load_progress
from eagle3dash.ui.widgets import COMPARE_PAGE, RUN_PAGE, base_url

RUNS_ROW_HEIGHT = 92  # px: a verdict wraps onto four lines
# The shown columns' widths in px: together exactly the 1238 px a table gets in a 1400 px
# window (the navigation on top; any less and the grid stretches them); the other columns are
# hidden until the table's column menu shows them (the Run page has them all).
RUNS_KEY_WIDTHS = {
    "open": 44,
    "run": 44,
    "status": 86,
    "checkpoint": 110,
    "verdict": 360,
    "measured": 76,
    "sim training": 84,
    "sim serving": 80,
    "speedup": 84,
    "tok/s": 60,
    "findings": 210,
}


def runs_table(rows: Sequence[StoredRun]) -> None:
    """The Runs table: the key columns (link, status, checkpoint, verdict, accept lengths,
    speedup, tok/s, findings) sized to fit 1400 px, the rest hidden until asked for; long
    verdicts wrap; no value shows a dash."""
    number = st.column_config.NumberColumn
    text = st.column_config.TextColumn
    width = RUNS_KEY_WIDTHS
    st.dataframe(
        tables.runs_frame(rows, base_url()),
        hide_index=True,
        width="stretch",
        # every run of the page in sight: a fixed height hid the oldest behind a scroll box
        height=rows_height(len(rows), RUNS_ROW_HEIGHT),
        row_height=RUNS_ROW_HEIGHT,
        placeholder=DASH,
        column_config={
            "open": st.column_config.LinkColumn("open", display_text="open", width=width["open"]),
            "run": number("run", format="%d", width=width["run"]),
            "status": text(
                "status",
                width=width["status"],
                help="queued, running, succeeded, failed or cancelled.",
            ),
            "checkpoint": text(
                "checkpoint", width=width["checkpoint"], help="The draft checkpoint diagnosed."
            ),
            "verdict": text(
                "verdict",
                width=width["verdict"],
                help="The root cause, else the worst warning, else what was not checked, else "
                "healthy (an info note is never the verdict). Click a cell to read it whole.",
            ),
            "measured": number(
                "measured",
                format="%.2f",
                width=width["measured"],
                help="Measured accept length: completion tokens per verify round on the endpoint.",
            ),
            # hidden until the table's column menu shows them (st.column_config's own helpers
            # take no `hidden` in streamlit 1.67; its ColumnConfig dict does)
            "ran on": {
                "label": "ran on",
                "help": "The Ray node, host and GPU the run's job ran on (a dash: the local "
                "worker).",
                "hidden": True,
            },
            **{name: {"label": name, "hidden": True} for name in ("endpoint", "engine", "created")},
            "sim training": number(
                "sim training",
                format="%.2f",
                width=width["sim training"],
                help=term_help("sim training / sim serving"),
            ),
            "sim serving": number(
                "sim serving",
                format="%.2f",
                width=width["sim serving"],
                help=term_help("sim training / sim serving"),
            ),
            "speedup": text(
                "speedup",
                width=width["speedup"],
                help="The endpoint's output tok/s over the baseline's (no speculation), ± "
                f"{NOISE_SE:g} standard errors of both benchmarks' per-request tok/s.",
            ),
            "tok/s": number(
                "tok/s", format="%.1f", width=width["tok/s"], help="The endpoint's output tok/s."
            ),
            "findings": text(
                "findings",
                width=width["findings"],
                help="The rule ids of every finding, as the Run page lists them.",
            ),
        },
    )


def ran_on(jobs: Sequence[jobq.JobRow]) -> None:
    """A caption naming where a run's job ran, when a Ray cluster ran it."""
    placed = [j.placement for j in jobs if j.placement]
    if placed:
        st.caption(f"Ran on {tables.placement_label(placed[-1])} (Ray)")


def demo_context(run: StoredRun) -> None:
    """A demo run's deployment, its fixed run (proof that the fix works) and a stopped endpoint."""
    parts = []
    if run.demo:
        parts.append(f"demo deployment **{md_escape(run.demo)}**")
    if run.endpoint_stopped_at:
        parts.append("its endpoint has stopped since (the URL no longer answers)")
    if parts:
        st.caption(" · ".join(parts))
    for shipped in db.runs_fixed_by(get_store(), run.id):
        st.page_link(
            RUN_PAGE,
            label=f"The run this one fixes: run #{shipped}, the same draft before the fix",
            query_params={"run": str(shipped)},
            icon=icons.FIX,
        )
        st.page_link(
            COMPARE_PAGE,
            label=f"Compare run #{shipped} with this run: what changed, what it did",
            query_params={"a": str(shipped), "b": str(run.id)},
            icon=icons.COMPARE,
        )
    fixed = run.demo_fixed_run
    if fixed:
        st.page_link(
            RUN_PAGE,
            label=f"The same draft with the fix applied: run #{int(fixed)}",
            query_params={"run": str(int(fixed))},
            icon=icons.FIX,
        )
        st.page_link(
            COMPARE_PAGE,
            label=f"Compare this run with run #{int(fixed)}: what changed, what it did",
            query_params={"a": str(run.id), "b": str(int(fixed))},
            icon=icons.COMPARE,
        )


def compare_headline(a: StoredRun, b: StoredRun) -> None:
    """The speedup and the measured accept length of both runs (their summary columns), B's
    with its change from A, above the comparison table."""
    columns = st.columns(4)
    for i, (label, key) in enumerate(
        (("Speedup", "speedup"), ("Measured accept length", "measured_accept_length"))
    ):
        value_a, value_b = getattr(a, key), getattr(b, key)
        shown = [
            ratio(value, run.speedup_noise) if key == "speedup" else num(value)
            for run, value in ((a, value_a), (b, value_b))
        ]
        columns[2 * i].metric(f"{label}, run A #{a.id}", shown[0])
        change = delta(value_a, value_b)
        columns[2 * i + 1].metric(
            f"{label}, run B #{b.id}",
            shown[1],
            delta=None if change == DASH else change,
        )


def run_charts(diagnosis: StoredDiagnosis, per_position: bool = True) -> None:
    """Acceptance per draft position (measured beside both sides' simulation; `per_position`
    False: the acceptance profile draws it); accuracy and acceptance per step of both sides;
    accept length and tok/s per request."""
    metrics = tables.diagnosis_metrics(diagnosis)
    drawn = [
        per_position
        and _chart(charts.per_position_chart(metrics), words.per_position_note(diagnosis)),
        _chart(charts.acceptance_chart(metrics)),
        _chart(charts.accept_length_chart(metrics), words.per_request_note(diagnosis)),
        _chart(charts.tok_s_chart(metrics)),  # an API double's cost: the banner says it once
    ]
    if not any(drawn):
        st.info("This diagnosis has no numbers to chart.")


def _chart(chart: Any, note: str | None = None) -> bool:
    """Draw a chart (None: nothing to draw) with a note under it; whether it was drawn."""
    if chart is None:
        return False
    st.altair_chart(chart, width="stretch")
    if note:
        st.caption(f"{icons.NOTE} " + md_escape(note))
    return True


def progress_panel(run_id: int, poll_every: float | None, shown_status: str) -> None:
    """A fragment polling the run's job: progress, stage, time, cancel. It reruns the whole page
    when the status differs from `shown_status` (the page header's), so the header stays true
    (queued -> running), and when the job finished, to draw the results."""

    @st.fragment(run_every=poll_every)
    def panel() -> None:
        store = get_store()
        view = load_progress(store, run_id)
        if view is None:
            st.error(f"Run {run_id} disappeared from the store.")
            return
        if view.outdated(shown_status):
            st.rerun()
        st.markdown(f"**{status_label(view.status)}**")
        st.progress(view.percent, text=md_escape(view.message) or None)
        if view.timing:
            st.caption(md_escape(view.timing))
        if view.waiting_behind:
            st.caption(words.waiting_behind_words(view.waiting_behind))
        elif view.waiting_for_worker:
            st.caption(
                "Queued: a worker runs it. Start one with `python -m eagle3dash worker` "
                "(`make run` starts one with the app)."
            )
        if view.cancelling:
            st.caption("Cancelling: the worker stops the job within a few seconds.")
        elif store.read_only:  # a read-only home shows its runs; nothing here can change them
            st.caption("The home is read-only: this run cannot be cancelled from here.")
        elif st.button("Cancel this run", key=f"cancel-{run_id}"):
            st.toast(cancel_run(store, run_id))
            st.rerun()

    panel()


def job_logs(jobs: Sequence[jobq.JobRow]) -> None:
    """Each job's status and the tail of its log."""
    if not jobs:
        st.caption("No jobs.")
        return
    store = get_store()
    for job in jobs:
        label = f"job {job.id} ({job.kind}): {job.status}"
        with st.expander(label):
            if job.error:
                st.code(job.error, language=None, wrap_lines=True)
            text = jobq.job_log(store, job.id)
            st.code(text or "(the log is empty)", language=None)


def export_buttons(run: StoredRun, diagnosis: StoredDiagnosis | None) -> None:
    """Downloads: the stored diagnosis (with the run row) as JSON, its numbers as CSV."""
    if diagnosis is None:
        st.caption("No diagnosis is stored for this run: nothing to export.")
        return
    run_id = run.id
    left, right = st.columns(2)
    left.download_button(
        "Download the diagnosis (JSON)",
        data=tables.run_export(run, diagnosis),
        file_name=f"eagle3dash-run-{run_id}.json",
        mime="application/json",
        key="export-json",
    )
    right.download_button(
        "Download the numbers (CSV)",
        data=tables.diagnosis_csv(diagnosis),
        file_name=f"eagle3dash-run-{run_id}-numbers.csv",
        mime="text/csv",
        key="export-csv",
    )
