"""Pages that keep up with the worker: the Runs table every POLL_S while a run is queued or
running (or while there are none yet, so the demo's runs appear as `demo seed` queues them), and
every IDLE_POLL_S otherwise, so a run queued elsewhere (the CLI, another tab) shows up; Compare
while either of its runs is unfinished. Each is a Streamlit fragment with `run_every`: only the
fragment redraws, no full-page flicker; the page reruns once when the waiting starts or stops,
so the polling follows."""

from __future__ import annotations

from collections.abc import Callable, Mapping

import streamlit as st

from eagle3dash import store as db
from eagle3dash.diagnosis.stored_run import StoredRun, read_run
from eagle3dash.ui.fmt import md_escape, status_label
from eagle3dash.ui.home import store_faults_shown
from eagle3dash.ui.progress import ACTIVE, POLL_S, load_progress

IDLE_POLL_S = 10.0  # the Runs page with nothing unfinished: new runs still show up


def runs_waiting(store: db.Store) -> bool:
    """Whether the Runs page has something to wait for: a queued or running run, or no runs at
    all yet (`make run` queues the demo's a few seconds after the app starts)."""
    if db.count_runs(store) == 0:
        return True
    return any(db.count_runs(store, status=status) for status in ACTIVE)


def poll_every(waiting: bool, idle: float | None = None) -> float | None:
    """The fragment's run_every: POLL_S while waiting, else `idle` (None: no polling)."""
    return POLL_S if waiting else idle


def live_section(
    store: db.Store,
    waiting: Callable[[db.Store], bool],
    draw: Callable[[], None],
    idle: float | None = None,
) -> None:
    """Draw `draw` in a fragment that redraws every POLL_S while `waiting(store)` holds, every
    `idle` seconds (or never) otherwise; when it stops holding (or starts to), the page reruns
    so the polling follows."""
    polling = waiting(store)

    @st.fragment(run_every=poll_every(polling, idle))
    def section() -> None:
        # A fragment's rerun keeps its own exceptions: the page's handler never sees them.
        with store_faults_shown():
            if waiting(store) != polling:
                st.rerun()
            draw()

    section()


def runs_unfinished(runs: Mapping[str, StoredRun | None]) -> list[str]:
    """The keys of the runs (Compare's "A", "B") still queued or running."""
    return [key for key, run in runs.items() if run is not None and run.status in ACTIVE]


def compare_watch(store: db.Store, run_ids: Mapping[str, int]) -> None:
    """Compare's live line: each unfinished run's status and progress, redrawn every POLL_S;
    the page reruns when a run finishes, so its results appear without a reload."""

    def waiting(store: db.Store) -> bool:
        runs = {key: read_run(store, run_id) for key, run_id in run_ids.items()}
        return bool(runs_unfinished(runs))

    def draw() -> None:
        for key, run_id in run_ids.items():
            view = load_progress(store, run_id)
            if view is None or not view.active:
                continue
            st.progress(
                view.percent,
                text=f"Run {key} #{run_id}: {status_label(view.status)} · "
                + (md_escape(view.message) or ""),
            )
            st.caption(
                "This page updates itself until the run finishes; its numbers below are what "
                "is stored so far."
            )

    live_section(store, waiting, draw)
