"""Reports drawn: a checkpoint's inspect report with its provenance card, a server's settings."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import streamlit as st

from eagle3dash.errors import InputError
from eagle3dash.ui import provenance, tables
from eagle3dash.ui.fmt import md_escape, rows_height
from eagle3dash.ui.widgets import show_error


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
