"""The Sweep page's form, table, chart and words: a sweep's checkpoints ranked by simulated accept
length under serving, the trainer's own "best" marked, where each ran, why any failed, and what
the sweep evaluated on (whose capture, its prompts' format, the draft steps)."""

from __future__ import annotations

from collections.abc import Sequence

import altair as alt
import pandas as pd
import streamlit as st

from eagle3dash.demo import FIXTURES
from eagle3dash.store import Store
from eagle3dash.sweep import (
    CAPTURE_PROMPTS,
    DEFAULT_STEPS,
    ServedRun,
    SweepCheckpoint,
    SweepEntry,
    SweepSetup,
    checkpoint_name,
    checkpoints_given,
    served_runs,
    submit_sweep,
)
from eagle3dash.ui import icons, widgets
from eagle3dash.ui.charts import ORANGE, SIDE_COLORS
from eagle3dash.ui.fmt import md_escape
from eagle3dash.ui.glossary import term_help
from eagle3dash.ui.paths import check_option_path, inside_roots
from eagle3dash.ui.tables import placement_label, run_label

SWEEP_COLUMNS = ("rank", "step", "sim serving", "trainer's best", "status", "ran on", "checkpoint")
INTRO = (
    "Every checkpoint's standalone draft evaluated on the taps the server feeds it (one serving "
    "capture), ranked by simulated accept length under serving. The trainer picks its best on "
    "its own validation data and layout; this ranking says which checkpoint serves best."
)
NO_SWEEPS = (
    "No sweeps yet: start one above. From a shell, `eagle3dash sweep RUN_FOLDER --run N` queues "
    "the same (N: the served run whose capture, target and draft steps to use), or "
    "`eagle3dash sweep CHECKPOINT... --capture DIR --target PATH`."
)
NO_SERVED_RUN = (
    "No run in this home kept a serving capture, the states the server feeds its draft that a "
    "sweep evaluates every checkpoint on: diagnose the endpoint once on New run (a server that "
    "returns hidden states), then pick that run here."
)
CHECKPOINTS = (
    "Checkpoints on this machine: a training run folder (SpecForge, speculators or NeMo "
    "AutoModel), or checkpoint folders one per line"
)
TARGET = "Target model folder (its embedding, for drafts without their own)"
SERVED_RUN = "Served run: its serving capture holds the taps the server feeds"
DEMO_DRAFTS = tuple(str(FIXTURES / name) for name in ("draft-a", "draft-b", "draft-c"))
DEMO_TARGET = str(FIXTURES / "target")
DEMO_DEPLOYMENT = "correct"  # the demo run that serves draft B as trained (demo/__init__.py)
DEMO_OFFER = (
    "**New here? Sweep the demo's drafts.** Fills in the demo's three drafts (A, B and C), its "
    "target and a demo run's serving capture: which draft serves best on what that server feeds."
)
NO_DEMO_RUN = (
    'No demo run in this home kept a serving capture: start the demo on New run ("Try it on '
    'the demo") or with `eagle3dash demo seed`, then come back.'
)
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
        if entries and all(e.reason is not None for e in entries):
            return "No checkpoint could be evaluated: why is below."
        return "No checkpoint has been evaluated yet."
    top = ranked[0]
    head = f"{_subject(top)} serves best: {top.sim_serving:.2f} simulated accept length."
    best = next((e for e in ranked if e.best), None)
    if best is None:
        return head + " The trainer chose no best checkpoint (or it is not evaluated yet)."
    if best is top:
        return head + " The trainer's best is the same checkpoint."
    rank = ranked.index(best) + 1
    return (
        head + f" The trainer's best ({best.name}) ranks {rank} of {len(ranked)} with "
        f"{best.sim_serving:.2f}."
    )


def _subject(e: SweepEntry) -> str:
    """'Step 200', or 'Checkpoint draft-b' (a folder's name keeps its case)."""
    return f"Step {e.step}" if e.step is not None else f"Checkpoint {e.name}"


def failures(entries: Sequence[SweepEntry]) -> list[str]:
    """'draft-a and draft-b could not be evaluated: <why>', one line per distinct reason."""
    why: dict[str, list[str]] = {}
    for e in entries:
        if e.reason is not None:
            why.setdefault(e.reason, []).append(e.name)
    return [f"{_listed(names)} could not be evaluated: {reason}" for reason, names in why.items()]


def setup_text(setup: SweepSetup) -> str:
    """What a sweep evaluated on: whose capture, its prompts' format, the draft steps, the
    target; its numbers are its served run's simulated serving at those steps."""
    if setup.served_run is None:
        where = f"the capture {setup.capture}"
        same = ""
    else:
        where = f"run #{setup.served_run}'s serving capture ({CAPTURE_PROMPTS})"
        same = (
            f" A checkpoint that run served scores here what its Run page reads as simulated "
            f"serving at {setup.steps} draft steps (not its chat-template row)."
        )
    target = f"; target {setup.target}" if setup.target else ""
    return f"Evaluated on {where}, at {setup.steps} draft steps{target}.{same}"


def _listed(items: Sequence[str]) -> str:
    """'a', 'a and b', 'a, b and c'."""
    return items[0] if len(items) == 1 else f"{', '.join(items[:-1])} and {items[-1]}"


def found_text(checkpoints: Sequence[SweepCheckpoint]) -> str:
    """'3 checkpoints: steps 10, 20 and 30; the trainer's best: step 20.' (checkpoints without
    steps by their folders' names)."""
    many = "s" if len(checkpoints) != 1 else ""
    if all(c.step is not None for c in checkpoints):
        listed = f"step{many} " + _listed([str(c.step) for c in checkpoints])
    else:
        listed = _listed([checkpoint_name(c.path, c.step) for c in checkpoints])
    best = next((c for c in checkpoints if c.best), None)
    chosen = (
        f"the trainer's best: {checkpoint_name(best.path, best.step)}"
        if best
        else "the trainer chose no best"
    )
    return f"{len(checkpoints)} checkpoint{many}: {listed}; {chosen}."


def served_label(served: ServedRun) -> str:
    """'#12 draft @ http://gpu:30000 (succeeded)', the served run's picker entry."""
    return run_label(served.run)


def diagnose_label(e: SweepEntry) -> str:
    """'step 300 · /runs/x/step300' for the diagnose picker."""
    return f"{e.name} · {e.checkpoint}"


def demo_run(served: Sequence[ServedRun]) -> ServedRun | None:
    """The demo's served run to sweep its drafts on: the newest that served draft B as trained,
    else the newest demo run that kept a capture."""
    demo = [s for s in served if s.run.demo]
    return next((s for s in demo if s.run.demo == DEMO_DEPLOYMENT), demo[0] if demo else None)


def demo_offer(served: Sequence[ServedRun]) -> None:
    """ "Sweep the demo's drafts": one click fills the form below with the demo's drafts, its
    target and a demo run (drawn before the form, so its widgets take these values)."""
    st.markdown(DEMO_OFFER)
    if not st.button("Sweep the demo's drafts", key="sweep_demo", icon=icons.DEMO):
        return
    run = demo_run(served)
    if run is None:
        st.info(NO_DEMO_RUN)
        return
    st.session_state["sweep_folder"] = "\n".join(DEMO_DRAFTS)
    st.session_state["sweep_target"] = DEMO_TARGET
    st.session_state["sweep_run"] = run.run.id
    st.session_state["sweep_steps"] = run.steps


def start_form(store: Store) -> str | None:
    """'Start a sweep': a training run folder or checkpoints one per line (checked as they are
    typed: the checkpoints and the trainer's best listed), a served run whose capture to evaluate
    them on, its target (the run's by default) and draft steps; the sweep's id once queued."""
    served = {s.run.id: s for s in served_runs(store)}
    demo_offer(list(served.values()))
    given = st.text_area(
        CHECKPOINTS, placeholder="/data/runs/eagle3-llama", key="sweep_folder", height=110
    )
    paths = [line.strip() for line in given.splitlines() if line.strip()]
    checkpoints = None
    if paths:
        checkpoints = widgets.guard(
            lambda: checkpoints_given([inside_roots(p, "Checkpoints") for p in paths])
        )
        if checkpoints:
            st.caption(md_escape(found_text(checkpoints)))
    if not served:
        st.info(NO_SERVED_RUN)
        return None
    picked = st.selectbox(
        SERVED_RUN, list(served), format_func=lambda i: served_label(served[i]), key="sweep_run"
    )
    run = served[picked] if picked is not None else None
    typed = st.text_input(
        TARGET,
        key="sweep_target",
        placeholder=(run.target if run is not None else None) or "/models/llama-3-8b",
        help="Empty: the served run's own target, when it had one.",
    )
    target = typed.strip() or (run.target if run is not None else None)
    target_ok = not typed.strip() or widgets.guard(check_option_path, "target", typed.strip())
    if typed.strip() and target_ok:
        st.caption(target_ok)
    # the served run's steps at first; a value of its own would clash with the demo's fill-in
    st.session_state.setdefault("sweep_steps", run.steps if run is not None else DEFAULT_STEPS)
    steps = st.number_input(
        "Draft steps evaluated",
        min_value=1,
        max_value=64,
        help="Draft tokens per chain; the served run's own steps by default (the server's), "
        "which its simulated serving used.",
        key="sweep_steps",
    )
    if run is not None:
        planned = SweepSetup(run.capture, int(steps), target, run.run.endpoint_url, run.run.id)
        st.caption(md_escape(setup_text(planned)))
    ready = bool(checkpoints and run and target_ok)
    if not st.button("Start the sweep", disabled=not ready, key="sweep_start"):
        return None
    assert checkpoints and run is not None  # the button is disabled otherwise
    demo = tuple(c.path for c in checkpoints) == DEMO_DRAFTS
    return widgets.guard(
        submit_sweep,
        store,
        checkpoints,
        run.capture,
        run.run.endpoint_url,
        int(steps),
        target=target,
        name="demo-drafts" if demo else None,
        served_run=run.run.id,
    )


def results(entries: Sequence[SweepEntry], setup: SweepSetup | None) -> None:
    """A sweep's verdict, why any checkpoint failed, what it evaluated on, its chart and ranked
    table, as far as its evaluations got."""
    st.markdown(md_escape(verdict(entries)))
    for line in failures(entries):
        st.error(md_escape(line), icon=icons.REFUSED)
    if setup is not None:
        st.caption(md_escape(setup_text(setup)))
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
