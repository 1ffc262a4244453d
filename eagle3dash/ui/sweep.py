"""The Sweep page's table, chart and words: a sweep's checkpoints ranked by simulated accept length
under serving, the trainer's own "best" marked, where each ran."""

from __future__ import annotations

from collections.abc import Sequence

import altair as alt
import pandas as pd
import streamlit as st

from eagle3dash.store import Store
from eagle3dash.sweep import (
    DEFAULT_STEPS,
    ServedRun,
    SweepCheckpoint,
    SweepEntry,
    served_runs,
    submit_sweep,
    sweep_checkpoints,
)
from eagle3dash.ui import widgets
from eagle3dash.ui.charts import ORANGE, SIDE_COLORS
from eagle3dash.ui.fmt import DASH, md_escape
from eagle3dash.ui.glossary import term_help
from eagle3dash.ui.paths import inside_roots
from eagle3dash.ui.tables import placement_label, run_label

SWEEP_COLUMNS = ("rank", "step", "sim serving", "trainer's best", "status", "ran on", "checkpoint")
INTRO = (
    "Every checkpoint's standalone draft evaluated on the taps the server feeds it (one serving "
    "capture), ranked by simulated accept length under serving. The trainer picks its best on "
    "its own validation data and layout; this ranking says which checkpoint serves best."
)
NO_SWEEPS = (
    "No sweeps yet: start one above. From a shell, `eagle3dash sweep RUN_FOLDER --run N` queues "
    "the same (N: the served run whose capture to use), or `eagle3dash sweep CHECKPOINT... "
    "--capture DIR`."
)
NO_SERVED_RUN = (
    "No run in this home kept a serving capture, the states the server feeds its draft that a "
    "sweep evaluates every checkpoint on: diagnose the endpoint once on New run (a server that "
    "returns hidden states), then pick that run here."
)
RUN_FOLDER = "Training run folder on this machine (SpecForge or speculators)"
SERVED_RUN = "Served run: its serving capture holds the taps the server feeds"
WATCHING = "This table updates itself while checkpoints are queued or evaluated."
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
    x = alt.X("step:Q", title="training step (or epoch)", axis=alt.Axis(tickMinStep=1, format="d"))
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


def found_text(checkpoints: Sequence[SweepCheckpoint]) -> str:
    """'3 checkpoints: steps 10, 20 and 30; the trainer's best: step 20.'"""
    steps = [DASH if c.step is None else str(c.step) for c in checkpoints]
    listed = steps[0] if len(steps) == 1 else f"{', '.join(steps[:-1])} and {steps[-1]}"
    best = next((c for c in checkpoints if c.best), None)
    chosen = (
        f"the trainer's best: step {DASH if best.step is None else best.step}"
        if best
        else "the trainer chose no best"
    )
    many = "s" if len(checkpoints) != 1 else ""
    return f"{len(checkpoints)} checkpoint{many}: step{many} {listed}; {chosen}."


def served_label(served: ServedRun) -> str:
    """'#12 draft @ http://gpu:30000 (succeeded)', the served run's picker entry."""
    return run_label(served.run)


def diagnose_label(e: SweepEntry) -> str:
    """'step 300 · /runs/x/step300' for the diagnose picker."""
    return f"step {_step(e)} · {e.checkpoint}"


def start_form(store: Store) -> str | None:
    """'Start a sweep': a training run folder (checked as it is typed: its checkpoints and the
    trainer's best listed) and a served run whose capture to evaluate them on; the sweep's id
    once queued."""
    folder = st.text_input(RUN_FOLDER, placeholder="/data/runs/eagle3-llama", key="sweep_folder")
    checkpoints = None
    if folder.strip():
        checkpoints = widgets.guard(
            lambda: sweep_checkpoints(inside_roots(folder.strip(), "Training run folder"))
        )
        if checkpoints:
            st.caption(md_escape(found_text(checkpoints)))
    served = {s.run.id: s for s in served_runs(store)}
    if not served:
        st.info(NO_SERVED_RUN)
        return None
    picked = st.selectbox(
        SERVED_RUN, list(served), format_func=lambda i: served_label(served[i]), key="sweep_run"
    )
    run = served[picked] if picked is not None else None
    steps = st.number_input(
        "Draft steps evaluated",
        min_value=1,
        max_value=64,
        value=run.steps if run is not None else DEFAULT_STEPS,
        help="Draft tokens per chain; the served run's own steps by default (the server's).",
        key="sweep_steps",
    )
    if not st.button("Start the sweep", disabled=not (checkpoints and run), key="sweep_start"):
        return None
    assert checkpoints and run is not None  # the button is disabled otherwise
    return widgets.guard(
        submit_sweep,
        store,
        checkpoints,
        run.capture,
        run.run.endpoint_url,
        int(steps),
        target=run.target,
    )


def results(entries: Sequence[SweepEntry]) -> None:
    """A sweep's verdict, chart and ranked table, as far as its evaluations got."""
    st.markdown(verdict(entries))
    chart = sweep_chart(entries)
    if chart is not None:
        st.altair_chart(chart, width="stretch")
    st.dataframe(
        sweep_frame(entries),
        hide_index=True,
        width="stretch",
        column_config={
            "sim serving": st.column_config.NumberColumn(
                "sim serving", format="%.2f", help=term_help("sim training / sim serving")
            )
        },
    )
