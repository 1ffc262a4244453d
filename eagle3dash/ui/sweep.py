"""The Sweep page's table, chart and words: a sweep's checkpoints ranked by simulated accept length
under serving, the trainer's own "best" marked, where each ran."""

from __future__ import annotations

from collections.abc import Sequence

import altair as alt
import pandas as pd

from eagle3dash.sweep import SweepEntry
from eagle3dash.ui.charts import ORANGE, SIDE_COLORS
from eagle3dash.ui.fmt import DASH
from eagle3dash.ui.tables import placement_label

SWEEP_COLUMNS = ("rank", "step", "sim serving", "trainer's best", "status", "ran on", "checkpoint")
INTRO = (
    "Every checkpoint's standalone draft evaluated on the taps the server feeds it (one serving "
    "capture), ranked by simulated accept length under serving. The trainer picks its best on "
    "its own validation data and layout; this ranking says which checkpoint serves best."
)
NO_SWEEPS = (
    "No sweeps yet. Queue one with `eagle3dash sweep RUN_FOLDER --run N` (N: a diagnosed run "
    "whose serving capture to use) or with a list of checkpoints and `--capture DIR`."
)
TRAINER_BEST = "trainer's best"


def sweep_frame(entries: Sequence[SweepEntry]) -> pd.DataFrame:
    """One row per checkpoint, best first (`sweep.sweep_results` order)."""
    rows = [
        {
            "rank": i if e.sim_serving is not None else None,
            "step": e.step,
            "sim serving": e.sim_serving,
            TRAINER_BEST: "yes" if e.best else "",
            "status": e.status,
            "ran on": placement_label(e.placement),
            "checkpoint": e.checkpoint,
        }
        for i, e in enumerate(entries, 1)
    ]
    return pd.DataFrame(rows, columns=list(SWEEP_COLUMNS))


def sweep_chart(entries: Sequence[SweepEntry]) -> alt.LayerChart | alt.FacetChart | None:
    """Simulated accept length under serving over training steps; the trainer's best ringed."""
    points = pd.DataFrame(
        [
            {"step": e.step, "sim serving": e.sim_serving, "chosen by": _chosen(e)}
            for e in entries
            if e.step is not None and e.sim_serving is not None
        ]
    )
    if points.empty:
        return None
    points = points.sort_values("step")
    x = alt.X("step:Q", title="training step (or epoch)")
    y = alt.Y("sim serving:Q", title="simulated accept length under serving")
    line = alt.Chart(points).mark_line(color=SIDE_COLORS["serving"]).encode(x=x, y=y)
    marks = (
        alt.Chart(points)
        .mark_point(filled=True, size=70)
        .encode(
            x=x,
            y=y,
            color=alt.Color(
                "chosen by:N",
                scale=alt.Scale(
                    domain=["sweep", TRAINER_BEST], range=[SIDE_COLORS["serving"], ORANGE]
                ),
                title=None,
            ),
            shape=alt.Shape(
                "chosen by:N",
                scale=alt.Scale(domain=["sweep", TRAINER_BEST], range=["circle", "diamond"]),
                title=None,
            ),
            tooltip=["step", "sim serving", "chosen by"],
        )
    )
    return alt.layer(line, marks)


def _chosen(e: SweepEntry) -> str:
    return TRAINER_BEST if e.best else "sweep"


def verdict(entries: Sequence[SweepEntry]) -> str:
    """One sentence: the checkpoint that serves best, and how the trainer's best compares."""
    ranked = [e for e in entries if e.sim_serving is not None]
    if not ranked:
        return "No checkpoint has been evaluated yet."
    top = ranked[0]
    head = f"Step {_step(top)} serves best: {top.sim_serving:.2f} simulated accept length."
    best = next((e for e in ranked if e.best), None)
    if best is None:
        return head + " The trainer chose no best checkpoint (or it is not evaluated yet)."
    if best is top:
        return head + " The trainer's best is the same checkpoint."
    rank = ranked.index(best) + 1
    return (
        head + f" The trainer's best (step {_step(best)}) ranks {rank} of {len(ranked)} with "
        f"{best.sim_serving:.2f}."
    )


def _step(e: SweepEntry) -> str:
    return DASH if e.step is None else str(e.step)


def diagnose_label(e: SweepEntry) -> str:
    """'step 300 · /runs/x/step300' for the diagnose picker."""
    return f"step {_step(e)} · {e.checkpoint}"
