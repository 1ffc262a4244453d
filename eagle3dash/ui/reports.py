"""Reports drawn: a checkpoint's inspect report with its provenance card, a server's settings."""

from __future__ import annotations

import streamlit as st

from eagle3dash.diagnosis.stored import StoredCheckpoint, load_checkpoint_report
from eagle3dash.engines.seam import ServerReport
from eagle3dash.errors import InputError
from eagle3dash.findings import Finding
from eagle3dash.severity import Severity
from eagle3dash.store import CheckpointRow
from eagle3dash.ui import icons, provenance, tables, words
from eagle3dash.ui.fmt import md_escape
from eagle3dash.ui.widgets import show_error, text_table


def checkpoint_report(report: StoredCheckpoint | None, layout_fix: Finding | None = None) -> None:
    """An inspect report: main fields, problems, and the whole report as JSON. `layout_fix`: the
    run's finding that edits this checkpoint's config (words.config_fix): its files are then
    readable, and its layout is the issue."""
    if report is None:
        st.info("No checkpoint report.")
        return
    summary = tables.checkpoint_summary(report)
    text_table(summary)  # a long path wraps: a grid's cell cut it short
    provenance_card(report)
    for line in provenance.export_lines(report.spec, report.provenance):
        st.caption("ℹ️ " + md_escape(line))
    for p in report.problems:
        st.warning(md_escape(p), icon=Severity.WARNING.icon)
    if layout_fix is not None:
        st.warning(
            md_escape(words.layout_issue(layout_fix, bool(report.problems))),
            icon=Severity.WARNING.icon,
        )
    elif not report.problems:
        st.caption("No problems found in the checkpoint.")
    with st.expander("Full report (JSON)"):
        st.json(report.document, expanded=False)


def provenance_card(report: StoredCheckpoint | None) -> None:
    """The run folder's provenance card, when the checkpoint came from one."""
    card = provenance.card_of(report)
    if card is None:
        return
    st.subheader("Provenance (the trainer's run folder)")
    st.dataframe(provenance.card_frame(card), hide_index=True, width="stretch")
    for line in [provenance.trainer_note(report), *card.notes]:
        if line:
            st.caption(f"{icons.NOTE} " + md_escape(line))


def registered_checkpoint_report(row: CheckpointRow | None) -> None:
    """A registered checkpoint's stored report; inspected now when none was stored."""
    if row is None:
        st.info("No such checkpoint.")
        return
    raw = row.report
    if raw is None and not row.removed:
        from eagle3dash.checkpoint import inspect

        try:
            raw = inspect(row.path).to_json()
        except InputError as e:
            show_error(e)
            return
    checkpoint_report(None if not raw else load_checkpoint_report(raw))


def server_settings(server: ServerReport | None) -> None:
    """A probe's server settings, and the raw server_info."""
    if server is None:
        st.info("No server report.")
        return
    text_table(tables.server_summary(server))  # a model path wraps too
    with st.expander("Raw server_info (JSON)"):
        st.json(server.server_info, expanded=False)
