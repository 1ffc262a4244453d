"""The layouts drawn (the Run and Compare pages): training vs serving, the layout comparison
with its diagram and slot table, the layout detective's cases."""

from __future__ import annotations

from collections.abc import Sequence

import pandas as pd
import streamlit as st

from eagle3dash.diagnosis.stored import StoredDetection, StoredDiagnosis
from eagle3dash.severity import Severity
from eagle3dash.ui import charts, icons, provenance, tables, words
from eagle3dash.ui.fmt import DASH, md_escape
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
        st.caption(f"{icons.NOTE} " + md_escape(trainer))


def _highlight_differs(row: pd.Series) -> list[str]:
    style = "background-color: rgba(214, 39, 40, 0.18)" if not row["same"] else ""
    return [style] * len(row)


def layout_diff(diagnosis: StoredDiagnosis) -> None:
    """The layer-layout comparison, worded by its weaker side: green only for observed
    agreement, neutral grey with the one action that would check it when a side was predicted
    or assumed; then a diagram of slots to taps, and the slot table."""
    if diagnosis.layout_diff.summary:
        tone, _, text = words.layout_comparison(diagnosis)  # the sentence says the kind
        shown = md_escape(text)
        if tone == "success":
            st.success(shown, icon=icons.OK)
        elif tone == "error":
            st.error(shown, icon=Severity.CRITICAL.icon)
        elif tone == "warning":
            st.warning(shown, icon=Severity.WARNING.icon)
        else:
            st.markdown(f":gray-background[{icons.NOT_CHECKED} {shown}]")
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


def layout_detectives(found: Sequence[tuple[str, StoredDetection]], sides_above: bool) -> None:
    """Each detective case of the run (`tables.detections`), labelled with where it comes from
    when there are several; `sides_above`: the page drew the sides' table above them."""
    for label, detection in found:
        if len(found) > 1:
            st.subheader(f"Layout detective {md_escape(label)}")
        layout_detective(detection, sides_above)


def layout_detective(detection: StoredDetection, sides_above: bool) -> None:
    """A detective case: verdict, ranked layouts, slot-matching heatmap, fc fingerprint."""
    verdict = detection.verdict
    if verdict:
        st.info(md_escape(verdict[0]), icon=icons.DETECTIVE)
        for line in verdict[1:]:
            st.markdown("- " + md_escape(line))
    st.subheader(
        "Candidate layouts on one capture",
        help=term_help("taps", "top-1", "accept length", "behind the best"),
    )
    text_table(tables.sweep_frame(detection))  # a long list of candidates wraps, whole
    ranking = words.SWEEP_RANKING + (" " + words.SIDES_BESIDE_SWEEP if sides_above else "")
    st.caption(md_escape(ranking))
    heatmap = charts.slot_heatmap_chart(tables.slot_heatmap_frame(detection))
    if heatmap is not None:
        st.subheader("Slot matching", help=term_help("fc slot", "margin", "tied"))
        st.altair_chart(heatmap, width="stretch")
        st.caption(md_escape(words.SLOT_MATCH_CAPTION))
    fingerprint = tables.fingerprint_frame(detection)
    if not fingerprint.empty:
        st.subheader("fc.weight fingerprint (a hint)")
        st.dataframe(fingerprint, hide_index=True, width="stretch")
        if detection.fingerprint_limits:
            st.caption(md_escape(detection.fingerprint_limits))
