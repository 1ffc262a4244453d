"""The layouts drawn (the Run and Compare pages): training vs serving, the layout comparison
with its diagram and slot table, the layout detective's cases."""

from __future__ import annotations

from collections.abc import Sequence

import pandas as pd
import streamlit as st

from eagle3dash.diagnosis.stored import StoredDetection, StoredDiagnosis
from eagle3dash.ui import charts, provenance, tables, words
from eagle3dash.ui.fmt import DASH, md_escape, rows_height
from eagle3dash.ui.glossary import term_help
from eagle3dash.ui.widgets import text_table


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
