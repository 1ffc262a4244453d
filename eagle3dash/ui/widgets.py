"""Streamlit pieces shared by the pages. Text from users or diagnoses is always escaped.

Nothing here uses `unsafe_allow_html`: findings, paths, URLs and messages go through
`fmt.md_escape` (Markdown) or into st.code / st.dataframe / st.json, which show text as text.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Mapping, Sequence
from dataclasses import MISSING
from typing import Any
from urllib.parse import urlsplit

import pandas as pd
import streamlit as st

from eagle3dash import jobs as jobq
from eagle3dash.diagnosis.options import SCHEMA, Kind
from eagle3dash.diagnosis.stored import StoredDetection, StoredDiagnosis, finding_from_row
from eagle3dash.errors import InputError
from eagle3dash.findings import Finding
from eagle3dash.probe import Probe, probe
from eagle3dash.store import get_findings
from eagle3dash.text import ascii_int
from eagle3dash.ui import charts, provenance, tables, words
from eagle3dash.ui.fmt import (
    DASH,
    delta,
    is_missing,
    md_escape,
    num,
    page_url,
    ratio,
    rows_height,
    severity_color,
    status_label,
)
from eagle3dash.ui.glossary import term_help
from eagle3dash.ui.home import get_store
from eagle3dash.ui.progress import cancel_run, load_progress

RUN_PAGE = "views/run.py"
COMPARE_PAGE = "views/compare.py"
NEW_RUN_PAGE = "views/new_run.py"
RUNS_PAGE = "views/runs.py"
CHECKPOINTS_PAGE = "views/checkpoints.py"
PROBE_TIMEOUT_S = 5.0  # the page waits on a probe: ask briefly, once


# --- links -------------------------------------------------------------------------------------


def base_url() -> str:
    """The app's root URL as the browser sees it ('' when unknown, e.g. under AppTest)."""
    url = None
    with contextlib.suppress(Exception):
        url = st.context.url
    if not url:
        return ""
    parts = urlsplit(url)
    root = (st.get_option("server.baseUrlPath") or "").strip("/")
    return f"{parts.scheme}://{parts.netloc}" + (f"/{root}" if root else "")


def share_link(page: str, **params: Any) -> None:
    """The shareable URL of this view in a code block (with its copy button)."""
    base = base_url()
    url = page_url(base or "", page, **params)
    st.caption("Link to this view (copy it with the button on the right)")
    st.code(url if base else "/" + url, language=None)


def demo_context(run: Mapping[str, Any]) -> None:
    """A demo run's deployment, its fixed run (proof that the fix works) and a stopped endpoint."""
    options = run.get("options") or {}
    parts = []
    if options.get("demo"):
        parts.append(f"demo deployment **{md_escape(options['demo'])}**")
    if run.get("endpoint_stopped_at"):
        parts.append("its endpoint has stopped since (the URL no longer answers)")
    if parts:
        st.caption(" · ".join(parts))
    fixed = options.get("demo_fixed_run")
    if fixed:
        st.page_link(
            RUN_PAGE,
            label=f"The same draft with the fix applied: run #{int(fixed)}",
            query_params={"run": str(int(fixed))},
            icon="🔧",
        )
        st.page_link(
            COMPARE_PAGE,
            label=f"Compare this run with run #{int(fixed)}: what changed, what it did",
            query_params={"a": str(run["id"]), "b": str(int(fixed))},
            icon="⚖️",
        )


def text_table(frame: pd.DataFrame) -> None:
    """A static table whose cells wrap; st.table renders each cell as Markdown, so every text cell
    and header goes through md_escape (a checkpoint name or a server's message is text)."""
    shown = frame.map(lambda v: md_escape(v) if isinstance(v, str) else v)
    st.table(shown.rename(columns=lambda c: md_escape(c)), hide_index=True)


def show_error(error: BaseException) -> None:
    """An InputError's message (no traceback)."""
    st.error(md_escape(str(error)), icon="🚫")


# --- runs --------------------------------------------------------------------------------------

RUNS_ROW_HEIGHT = 72  # px: over Streamlit's 4rem, so a verdict wraps onto three lines
# The key columns' widths in px: together they fit the 940 px a table gets in a 1400 px window.
RUNS_KEY_WIDTHS = {
    "open": 44,
    "run": 44,
    "status": 96,
    "checkpoint": 110,
    "verdict": 256,
    "measured": 76,
    "sim training": 84,
    "sim serving": 80,
    "speedup": 66,
    "tok/s": 60,
}


def ran_on(jobs: Sequence[Mapping[str, Any]]) -> None:
    """A caption naming where a run's job ran, when a Ray cluster ran it."""
    placed = [j["placement"] for j in jobs if j.get("placement")]
    if placed:
        st.caption(f"Ran on {tables.placement_label(placed[-1])} (Ray)")


def runs_table(rows: Sequence[Mapping[str, Any]]) -> None:
    """The Runs table: the key columns first and narrow (link, status, checkpoint, verdict,
    accept lengths, speedup, tok/s) so they fit 1400 px; long verdicts wrap; no value shows a
    dash."""
    number = st.column_config.NumberColumn
    text = st.column_config.TextColumn
    width = RUNS_KEY_WIDTHS
    st.dataframe(
        tables.runs_frame(rows, base_url()),
        hide_index=True,
        width="stretch",
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
            "ran on": text(
                "ran on",
                help="The Ray node, host and GPU the run's job ran on (a dash: the local worker).",
            ),
            "sim training": number(
                "sim training",
                format="%.2f",
                width=width["sim training"],
                help="Simulated accept length of the standalone draft on the training layout.",
            ),
            "sim serving": number(
                "sim serving",
                format="%.2f",
                width=width["sim serving"],
                help="Simulated accept length of the standalone draft on the states the server "
                "feeds it.",
            ),
            "speedup": number(
                "speedup",
                format="%.2fx",
                width=width["speedup"],
                help="The endpoint's output tok/s over the baseline's (no speculation).",
            ),
            "tok/s": number(
                "tok/s", format="%.1f", width=width["tok/s"], help="The endpoint's output tok/s."
            ),
            "findings": text(
                "findings", help="The rule ids of every finding, as the Run page lists them."
            ),
        },
    )


# --- findings ----------------------------------------------------------------------------------


def findings_list(findings: Sequence[Finding], compact: bool = False) -> None:
    """Each finding: severity badge, title, evidence, fix (as copyable text)."""
    if not findings:  # the verdict says whether that is healthy or only what was checked
        st.caption("No findings.")
        return
    for f in findings:
        severity = str(f.severity or "info")
        with st.container(border=True):
            st.badge(md_escape(severity.upper()), color=severity_color(severity))
            st.markdown(f"**{md_escape(f.title)}**")
            if f.id:
                st.caption(f"rule {md_escape(f.id)}")
            evidence, fix = f.evidence, f.fix
            if compact:
                if fix:
                    st.caption("Fix: " + md_escape(fix))
                continue
            if evidence:
                st.markdown("Evidence: " + md_escape(evidence))
            if fix:
                st.markdown("Fix:")
                st.code(str(fix), language=None, wrap_lines=True)


def diagnosis_warnings(diagnosis: StoredDiagnosis) -> None:
    """The diagnosis's warnings (what it could do only in part)."""
    for item in diagnosis.warnings:
        st.warning(md_escape(item), icon="⚠️")


def stored_findings(run_id: int) -> list[Finding]:
    """A run's findings as the store's findings table keeps them."""
    return [finding_from_row(row) for row in get_findings(get_store(), run_id)]


def without_diagnosis(findings: Sequence[Finding]) -> None:
    """A run with no stored diagnosis (failed, cancelled, or stored by an older version): the
    findings recorded for it, if any."""
    st.caption(
        "No diagnosis is stored for this run: it did not finish, or an older version of "
        "eagle3dash made it. "
        + (
            "Only the findings recorded for it are shown."
            if findings
            else "No findings were recorded for it."
        )
    )
    if findings:
        st.header("Findings")
        findings_list(findings)


# --- the verdict, tables and charts ------------------------------------------------------------


def verdict_banner(diagnosis: StoredDiagnosis) -> None:
    """The verdict by its status: a problem in red (its root cause, and the fix's one line to
    copy) or yellow (warnings), an incomplete run in blue with what was not checked, a healthy
    one in green with what it rests on; then the measured and simulated accept lengths and the
    speedup, and each check that could not run with the one action that enables it."""
    verdict = diagnosis.verdict
    sentence = f"**{md_escape(words.verdict_sentence(diagnosis))}**"
    status = verdict.status
    root = verdict.root_cause
    if root is not None:
        st.error(sentence, icon="🛑")
        fix = words.fix_line(root)
        if fix is not None:
            where, line = fix
            st.caption(md_escape(f"The fix, to copy ({where}):"))
            st.code(line, language=None, wrap_lines=True)
    elif status == "healthy":
        st.success(sentence, icon="✅")
    elif status == "problem":
        st.warning(sentence, icon="⚠️")
    else:
        st.info(sentence, icon="➖")
    steps = diagnosis.steps or "?"
    columns = st.columns(4)
    columns[0].metric(
        "Measured accept length",
        num(verdict.measured_accept_length),
        help="Completion tokens per verify round, from the endpoint's benchmark.",
    )
    sims = (
        (diagnosis.training, verdict.sim_accept_training, verdict.training_source),
        (diagnosis.serving, verdict.sim_accept_serving, verdict.serving_source),
    )
    for column, (side, simulated, source) in zip(columns[1:3], sims, strict=True):
        column.metric(
            f"Simulated, {side.name} layout",
            num(simulated),
            help=md_escape(
                f"Accept length of the standalone draft on the {side.name} side's states at "
                f"{steps} draft steps; its layout is {words.source_words(source)}."
            ),
        )
        if side.capture_error and is_missing(simulated):  # where the number would be
            column.caption("Not evaluated: " + md_escape(side.capture_error))
    columns[3].metric(
        "Speedup vs baseline",
        ratio(verdict.speedup),
        help="The endpoint's output tok/s over the baseline's (the target without speculation).",
    )
    double = words.double_note(diagnosis.server)
    if double:
        st.caption("ℹ️ " + md_escape(double))
    for item in diagnosis.not_checked:
        st.info("Not checked: " + md_escape(words.not_checked_text(item, "app")), icon="➖")


def sides_table(diagnosis: StoredDiagnosis) -> None:
    """The training vs serving table, whether the endpoint serves this checkpoint's draft, and
    the trainer's own eval beside the training side (a run folder's, converted)."""
    text_table(tables.sides_frame(diagnosis))  # long text wraps
    identity = words.identity_words(diagnosis.identity)
    if identity:
        st.caption("Draft on the endpoint: " + md_escape(identity))
    trainer = provenance.trainer_note(diagnosis.checkpoint)
    if trainer:
        st.caption("ℹ️ " + md_escape(trainer))


def _highlight_differs(row: pd.Series) -> list[str]:
    style = "background-color: rgba(214, 39, 40, 0.18)" if not row["same"] else ""
    return [style] * len(row)


def layout_diff(diagnosis: StoredDiagnosis) -> None:
    """The layer-layout comparison, worded by its weaker side: green only for observed
    agreement, neutral grey with the one action that would check it when a side was predicted
    or assumed; then a diagram of slots to taps, and the slot table."""
    if diagnosis.layout_diff.summary:
        tone, kind, text = words.layout_comparison(diagnosis)
        shown = md_escape(text) if kind is None else f"**{md_escape(kind)}**: {md_escape(text)}"
        if tone == "success":
            st.success(shown, icon="✅")
        elif tone == "error":
            st.error(shown, icon="🛑")
        elif tone == "warning":
            st.warning(shown, icon="⚠️")
        else:
            st.markdown(f":gray-background[➖ {shown}]")
        action = words.layout_check_action(diagnosis, "app")
        if action:
            st.caption("To check it: " + md_escape(action))
    chart = charts.layout_chart(tables.layout_points(diagnosis), diagnosis.num_target_layers)
    if chart is not None:
        st.altair_chart(chart, width="stretch")
    slots_table(diagnosis)


def slots_table(diagnosis: StoredDiagnosis, compact: bool = False) -> None:
    """The layout diff's slot table, the differing slots shaded, the match right after the slot;
    `compact` (half a page wide) shows each side's taps in words only."""
    frame = tables.slots_frame(diagnosis)
    if frame.empty:
        st.caption("No layouts in this diagnosis.")
        return
    hidden = {"same", "training tap", "serving tap"} if compact else {"same"}
    st.dataframe(
        frame.style.apply(_highlight_differs, axis=1),
        hide_index=True,
        width="stretch",
        placeholder=DASH,
        column_order=[c for c in frame.columns if c not in hidden],
    )


def compare_headline(a: Mapping[str, Any], b: Mapping[str, Any]) -> None:
    """The speedup and the measured accept length of both runs (their summary columns), B's
    with its change from A, above the comparison table."""
    columns = st.columns(4)
    for i, (label, key, show) in enumerate(
        (("Speedup", "speedup", ratio), ("Measured accept length", "measured_accept_length", num))
    ):
        columns[2 * i].metric(f"{label}, run A #{a['id']}", show(a.get(key)))
        change = delta(a.get(key), b.get(key))
        columns[2 * i + 1].metric(
            f"{label}, run B #{b['id']}",
            show(b.get(key)),
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
        _chart(charts.accept_length_chart(metrics)),
        _chart(charts.tok_s_chart(metrics), words.double_note(diagnosis.server)),
    ]
    if not any(drawn):
        st.info("This diagnosis has no numbers to chart.")


def _chart(chart: Any, note: str | None = None) -> bool:
    """Draw a chart (None: nothing to draw) with a note under it; whether it was drawn."""
    if chart is None:
        return False
    st.altair_chart(chart, width="stretch")
    if note:
        st.caption("ℹ️ " + md_escape(note))
    return True


def checkpoint_report(report: Mapping[str, Any] | None) -> None:
    """An inspect report: main fields, problems, and the whole report as JSON."""
    if not report:
        st.info("No checkpoint report.")
        return
    summary = tables.checkpoint_summary(report)
    st.dataframe(summary, hide_index=True, width="stretch", height=rows_height(len(summary)))
    provenance_card(report)
    problems = report.get("problems") or []
    for p in problems:
        st.warning(md_escape(p), icon="⚠️")
    if not problems:
        st.caption("No problems found in the checkpoint.")
    with st.expander("Full report (JSON)"):
        st.json(dict(report), expanded=False)


def provenance_card(report: Mapping[str, Any] | None) -> None:
    """The run folder's provenance card, when the checkpoint came from one."""
    card = provenance.card_of(report)
    if not card:
        return
    st.subheader("Provenance (the trainer's run folder)")
    st.dataframe(provenance.card_frame(card), hide_index=True, width="stretch")
    for line in [provenance.trainer_note(report), *(card.get("notes") or [])]:
        if line:
            st.caption("ℹ️ " + md_escape(line))


def registered_checkpoint_report(row: Mapping[str, Any] | None) -> None:
    """A registered checkpoint's stored report; inspected now when none was stored."""
    if row is None:
        st.info("No such checkpoint.")
        return
    report = row.get("report")
    if report is None and not row.get("removed"):
        from eagle3dash.checkpoint import inspect

        try:
            report = inspect(row["path"]).to_json()
        except InputError as e:
            show_error(e)
            return
    checkpoint_report(report)


def server_settings(server: Mapping[str, Any] | None) -> None:
    """A probe's server settings, and the raw server_info."""
    if not server:
        st.info("No server report.")
        return
    summary = tables.server_summary(server)
    st.dataframe(summary, hide_index=True, width="stretch", height=rows_height(len(summary)))
    with st.expander("Raw server_info (JSON)"):
        st.json(server.get("server_info") or {}, expanded=False)


def job_logs(jobs: Sequence[Mapping[str, Any]]) -> None:
    """Each job's status and the tail of its log."""
    if not jobs:
        st.caption("No jobs.")
        return
    store = get_store()
    for job in jobs:
        label = f"job {job['id']} ({job['kind']}): {job['status']}"
        with st.expander(label):
            if job.get("error"):
                st.code(str(job["error"]), language=None, wrap_lines=True)
            text = jobq.job_log(store, int(job["id"]))
            st.code(text or "(the log is empty)", language=None)


def export_buttons(run: Mapping[str, Any], diagnosis: StoredDiagnosis | None) -> None:
    """Downloads: the stored diagnosis (with the run row) as JSON, its numbers as CSV."""
    if diagnosis is None:
        st.caption("No diagnosis is stored for this run: nothing to export.")
        return
    run_id = run["id"]
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


# --- live progress -----------------------------------------------------------------------------


def stopped_notice(status: str, reason: str | None) -> None:
    """Why a run has no results: a failure in red, a cancel said neutrally."""
    text = md_escape(words.stopped_text(status, reason))
    if status == "cancelled":
        st.info(text, icon="⏹️")
    else:
        st.error(text, icon="❌")


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
        st.markdown(f"**{md_escape(status_label(view.status))}**")
        st.progress(view.percent, text=md_escape(view.message) or None)
        if view.timing:
            st.caption(md_escape(view.timing))
        if view.waiting_for_worker:
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


# --- pickers and inputs ------------------------------------------------------------------------


def query_int(name: str) -> tuple[int | None, str | None]:
    """An integer query parameter: (value, None), (None, None) if absent, (None, text) if bad."""
    raw = st.query_params.get(name)
    if raw is None or raw == "":
        return None, None
    value = ascii_int(str(raw).strip().lstrip("#"))
    if value is None or value <= 0:
        return None, str(raw)
    return value, None


def guard(fn, *args: Any, **kwargs: Any) -> Any:
    """Call fn; show an InputError's message, or one box for anything unexpected (its traceback
    goes to the app's log), instead of a traceback on the page; then return None."""
    try:
        return fn(*args, **kwargs)
    except InputError as e:
        show_error(e)
        return None
    except Exception as e:
        logging.getLogger("eagle3dash.app").exception("unexpected error in %s", fn)
        st.error(
            f"Something unexpected went wrong ({md_escape(type(e).__name__)}): a bug in "
            "eagle3dash, not in your input. The details are in the app's log.",
            icon="🚫",
        )
        return None


def option_input(where: Any, name: str, key: str | None = None) -> Any:
    """The widget of one diagnosis option (key opt_<name>), drawn from its schema entry.

    The label is the schema's own constant text, passed as is: Streamlit also makes it the
    input's aria-label, where Markdown escapes would be read out as backslashes."""
    option = SCHEMA[name]
    label, help_text, key = option.label, md_escape(option.help), key or f"opt_{name}"
    if option.kind is Kind.INT:
        low, high = option.bounds or (None, None)
        return where.number_input(label, low, high, option.default, step=1, help=help_text, key=key)
    if option.kind is Kind.SWITCH:
        return where.checkbox(label, value=bool(option.default), help=help_text, key=key)
    if option.kind in (Kind.CHOICE, Kind.SET_OR_FILE):  # a file comes by an upload instead
        entries = list(option.choices) if option.default is not None else [None, *option.choices]
        return where.selectbox(
            label,
            entries,
            index=entries.index(option.default),
            format_func=lambda entry: option.placeholder if entry is None else entry,
            help=help_text,
            key=key,
        )
    placeholder = option.placeholder or (
        f"{option.default_text} (the default)" if option.default not in (None, MISSING) else ""
    )
    return where.text_input(label, placeholder=placeholder, help=help_text, key=key)


def option_row(*names: str) -> dict[str, Any]:
    """Diagnosis options side by side in one row; their values by option name."""
    columns = st.columns(len(names))
    return {name: option_input(col, name) for col, name in zip(columns, names, strict=True)}


# --- checkpoints and endpoints -----------------------------------------------------------------


def _signature(files: Sequence[Any]) -> tuple:
    return tuple((f.name, getattr(f, "size", None), getattr(f, "file_id", None)) for f in files)


def upload_checkpoint(key: str = "upload") -> int | None:
    """Upload a checkpoint (files or one archive); registered once; its id, or None.

    Each distinct upload is processed once per session (streamed to disk, validated with
    inspect, content-addressed, registered); reruns reuse the outcome.
    """
    from eagle3dash import store as db
    from eagle3dash.uploads import UPLOAD_TYPES, register_upload

    files = st.file_uploader(
        "config.json and the .safetensors files, or one .zip / .tar / .tar.gz of the checkpoint "
        "folder",
        type=list(UPLOAD_TYPES),
        accept_multiple_files=True,
        key=key,
    )
    if not files:
        return None
    store = get_store()
    outcomes: dict = st.session_state.setdefault("_upload_outcomes", {})
    signature = (key, _signature(files))
    # ("ok", checkpoint id, registered before) or ("error", message, False)
    outcome: tuple[str, Any, bool] | None = outcomes.get(signature)
    if outcome is not None and outcome[0] == "ok":
        row = db.get_checkpoint(store, outcome[1])
        if row is None or row["removed"]:
            outcome = None  # removed since: store it again
    if outcome is None:
        with st.spinner("Storing and checking the upload..."):
            try:
                result = register_upload(store, files)
            except InputError as e:
                outcome = ("error", str(e), False)
            else:
                outcome = ("ok", result.checkpoint_id, result.already_registered)
        outcomes[signature] = outcome
    if outcome[0] == "error":
        st.error("Upload rejected, nothing registered: " + md_escape(outcome[1]), icon="🚫")
        return None
    row = db.get_checkpoint(store, int(outcome[1]))
    assert row is not None  # registered just now, or found live above
    name = f"checkpoint #{row['id']} {md_escape(row['name'])} ({md_escape(row['format'] or '?')})"
    if outcome[2]:
        st.success(
            f"Already registered as {name}: the same config and weights; using it.", icon="📦"
        )
    else:
        st.success(
            f"Registered {name}, stored as {md_escape((row['sha256'] or '')[:12])}", icon="📦"
        )
    with st.expander("Inspect report", expanded=True):
        checkpoint_report(row.get("report"))
    return int(row["id"])


HIDDEN_STATES_WORDS = {"full": "on", "last": "last token only", None: "off"}


def probe_panel(
    url: str, key: str, findings_title: str | None = "Server-side findings"
) -> Probe | None:
    """Probe an endpoint once per URL and session; show version, model, speculative settings and
    (under `findings_title`, unless None) the findings a probe alone can make. Returns the
    Probe, or None (error shown)."""
    from eagle3dash import store as db

    url = (url or "").strip()
    if not url:
        return None
    probes: dict = st.session_state.setdefault("_probes", {})
    if st.button("Probe again", key=f"{key}-reprobe"):
        probes.pop(url, None)
    if url not in probes:
        with st.spinner(f"Probing {url} ..."):
            try:
                found = probe(url, timeout=PROBE_TIMEOUT_S, retries=1)
            except InputError as e:
                probes[url] = ("error", str(e))
            else:
                db.record_probe(get_store(), found.server.url, found.server.to_dict())
                probes[url] = ("ok", found)
    status, value = probes[url]
    if status == "error":
        show_error(InputError(value))
        return None
    server = value.server
    spec = server.speculative
    cols = st.columns(4)
    cols[0].metric("SGLang version", md_escape(server.version or "unknown"))
    cols[1].metric("Speculative", md_escape(spec.algorithm) if spec else "none")
    cols[2].metric("Draft steps", str(spec.num_steps) if spec else "—")
    cols[3].metric("Hidden states", HIDDEN_STATES_WORDS.get(server.hidden_states, "off"))
    st.caption("Model: " + md_escape(server.model_path or "unknown"))
    if spec:
        st.caption("Draft on the server: " + md_escape(spec.draft_model_path or "unknown"))
    if findings_title is not None:
        st.markdown(f"**{md_escape(findings_title)}**")
        findings_list(value.findings)
    with st.expander("Server settings"):
        server_settings(server.to_dict())
    return value


# --- layout detective --------------------------------------------------------------------------


def layout_detectives(found: Sequence[tuple[str, StoredDetection]]) -> None:
    """Each detective case of the run (`tables.detections`), labelled with where it comes from
    when there are several."""
    for label, detection in found:
        if len(found) > 1:
            st.subheader(f"Layout detective {md_escape(label)}")
        layout_detective(detection)


def layout_detective(detection: StoredDetection) -> None:
    """A detective case: verdict, ranked layouts, slot-matching heatmap, fc fingerprint."""
    verdict = detection.verdict
    if verdict:
        st.info(md_escape(verdict[0]), icon="🔎")
        for line in verdict[1:]:
            st.markdown("- " + md_escape(line))
    st.subheader("Candidate layouts on one capture")
    sweep = tables.sweep_frame(detection)
    st.dataframe(
        sweep,
        hide_index=True,
        width="stretch",
        height=rows_height(min(len(sweep), 12)),  # sized to its rows, up to a dozen
        column_config={
            "layout": st.column_config.TextColumn("layout", help=term_help("tap")),
            "top-1": st.column_config.TextColumn("top-1", help=term_help("top-1")),
            "sim accept length": st.column_config.TextColumn(
                "sim accept length", help=term_help("accept length")
            ),
            "behind the best": st.column_config.TextColumn(
                "behind the best", help=term_help("behind the best")
            ),
        },
    )
    st.caption(md_escape(words.SWEEP_RANKING))
    heatmap = charts.slot_heatmap_chart(tables.slot_heatmap_frame(detection))
    if heatmap is not None:
        st.subheader("Slot matching", help=term_help("slot", "margin", "tied"))
        st.altair_chart(heatmap, width="stretch")
        st.caption(md_escape(words.SLOT_MATCH_CAPTION))
    fingerprint = tables.fingerprint_frame(detection)
    if not fingerprint.empty:
        st.subheader("fc.weight fingerprint (a hint)")
        st.dataframe(fingerprint, hide_index=True, width="stretch")
        if detection.fingerprint_limits:
            st.caption(md_escape(detection.fingerprint_limits))
