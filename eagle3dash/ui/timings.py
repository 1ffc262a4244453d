"""Where a diagnosis's time went: its stored `timings` (wall seconds per stage) in words, for the
Run page and the CLI."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from eagle3dash.ui.fmt import rows_height

if TYPE_CHECKING:
    from eagle3dash.diagnosis.stored import StoredDiagnosis

# The stages in words (diagnosis/stages.py TIMING_KEYS), in the order they run now; a run's
# stored timings keep the order its own stages ran in (an older run captured before it benchmarked).
STAGE_WORDS = {
    "inspect": "inspect the checkpoint",
    "probe": "probe the endpoint",
    "benchmark": "benchmark the endpoint",
    "baseline": "benchmark the baseline",
    "capture_serving": "capture what the server feeds the draft",
    "capture_target": "capture every tap of the local target",
    "read_dump": "read the training dump",
    "detective": "layout detective",
    "evaluate": "standalone draft on each side",
    "profile_temperatures": "profile: per position, category, temperature",
    "profile_formats": "profile: prompt formats",
    "profile_steps": "profile: the cost of a step",
    "findings": "findings",
}


def timing_rows(timings: Mapping[str, float]) -> list[dict]:
    """One row per timed stage, in the order the run's stages ran (its timings' order): stage,
    seconds, share of the total."""
    total = timings.get("total") or sum(v for k, v in timings.items() if k != "total")
    rows = []
    for key, value in timings.items():
        words = STAGE_WORDS.get(key)
        if words is None:  # "total"
            continue
        seconds = float(value)
        rows.append(
            {
                "stage": words,
                "seconds": round(seconds, 1),
                "share": f"{seconds / total:.0%}" if total else "—",
            }
        )
    return rows


def timing_lines(timings: Mapping[str, float]) -> list[str]:
    """The CLI's lines: 'where the time went (25.0 s):' then one stage a line."""
    if not timings:
        return []
    total = timings.get("total")
    head = "where the time went" + (f" ({total:.1f} s):" if total else ":")
    return [head] + [
        f"  {row['stage']:46}{row['seconds']:7.1f} s  {row['share']:>4}"
        for row in timing_rows(timings)
    ]


def time_spent(diagnosis: StoredDiagnosis | None, unfinished: bool = False) -> None:
    """The Run page's "where the time went": each stage's wall time, or why there is none
    (`unfinished`: the run is queued or running)."""
    import streamlit as st

    timings = {} if diagnosis is None else diagnosis.timings
    st.markdown("**Where the time went**")
    if unfinished:
        st.caption("Each stage's wall time appears here when the run finishes.")
        return
    if diagnosis is None:
        st.caption("This run stored no diagnosis, so no stage timings.")
        return
    if not timings:
        st.caption("This run recorded no stage timings (it finished before they were kept).")
        return
    rows = timing_rows(timings)
    total = timings.get("total")
    if total:
        st.caption(f"{total:.1f} s from the first stage to the findings, stage by stage.")
    st.dataframe(rows, hide_index=True, height=rows_height(len(rows)), width="content")
