"""What a run's page shows while its jobs run: a plain function over the run and its job rows.

The Run page polls with `st.fragment(run_every=POLL_S)`; AppTest never fires such a fragment, so
the logic lives here and is tested directly. The run row and its jobs can disagree for a moment
(a queued job cancelled before it started, a worker that died): the jobs win while they say more.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

from eagle3dash import jobs as jobq
from eagle3dash import store as db
from eagle3dash.diagnosis.stored_run import StoredRun, read_run
from eagle3dash.ui.fmt import duration

POLL_S = 2.0
ACTIVE = ("queued", "running")
# An estimate of the time left needs some progress and some time to extrapolate from.
ESTIMATE_AFTER_FRACTION = 0.05
ESTIMATE_AFTER_S = 5.0


@dataclass(frozen=True)
class ProgressView:
    """The progress panel of one run."""

    status: str  # the run's effective status
    active: bool  # a job is queued or running: keep polling
    fraction: float  # 0..1 of the job shown
    message: str
    job_id: int | None  # the job shown (the active one, else the last)
    job_status: str | None
    cancelling: bool  # cancel requested, the worker has not stopped it yet
    waiting_for_worker: bool  # queued: nothing runs it until a worker claims it
    error: str | None  # why the run failed or stopped
    elapsed_s: float | None = None  # since the shown job started (while it runs)
    # queued behind these: running jobs that measure one of its servers now
    waiting_behind: tuple[jobq.BusyServer, ...] = ()

    @property
    def poll_every(self) -> float | None:
        """Seconds between polls (None once nothing is left to wait for)."""
        return POLL_S if self.active else None

    @property
    def percent(self) -> int:
        """The fraction as a whole percentage for st.progress."""
        return max(0, min(100, round(self.fraction * 100)))

    def outdated(self, shown_status: str) -> bool:
        """Whether a page drawn when the run was `shown_status` must be drawn again: its status
        changed (queued -> running: the header would go stale) or nothing is left to wait for."""
        return not self.active or self.status != shown_status

    @property
    def remaining_s(self) -> float | None:
        """Seconds left if the rest goes at the pace so far (None until there is a pace)."""
        f, elapsed = self.fraction, self.elapsed_s
        if elapsed is None or f < ESTIMATE_AFTER_FRACTION or elapsed < ESTIMATE_AFTER_S:
            return None
        return elapsed * (1.0 - min(f, 1.0)) / f

    @property
    def timing(self) -> str | None:
        """'1 min 5 s elapsed · about 40 s left (estimated from the progress so far)'."""
        if self.elapsed_s is None:
            return None
        text = f"{duration(self.elapsed_s)} elapsed"
        left = self.remaining_s
        if left is not None:
            text += f" · about {duration(left)} left (estimated from the progress so far)"
        return text


def progress_view(
    run: StoredRun,
    jobs: Sequence[jobq.JobRow],
    now: datetime | None = None,
    busy: Sequence[jobq.BusyServer] = (),
) -> ProgressView:
    """The panel for a run and its jobs (jobs.read_jobs, oldest first), at `now` (default: now);
    `busy`: what its queued job waits for (jobs.busy_servers)."""
    running = [j for j in jobs if j.status == "running"]
    queued = [j for j in jobs if j.status == "queued"]
    active_jobs = running or queued
    shown = active_jobs[0] if active_jobs else (jobs[-1] if jobs else None)
    run_status = run.status
    if running:
        status = "running"
    elif queued:
        status = "queued"
    elif run_status in ACTIVE and shown is not None:
        status = shown.status  # the job ended but the run row was not updated
    else:
        status = run_status
    active = bool(running or queued)
    error = run.error or (shown.error if shown is not None else None)
    if status == "succeeded":
        error = None
    fraction = shown.progress if shown is not None else 0.0
    if status == "succeeded":
        fraction = 1.0
    if shown is None:
        message = "waiting for its job" if status in ACTIVE else status
    else:
        message = shown.message or shown.status
    started = db.parse_time(shown.started_at) if running and shown is not None else None
    elapsed = None
    if started is not None:
        elapsed = max(0.0, ((now or datetime.now(UTC)) - started).total_seconds())
    return ProgressView(
        status=status,
        active=active,
        fraction=fraction,
        message=message,
        job_id=None if shown is None else shown.id,
        job_status=None if shown is None else shown.status,
        cancelling=any(j.cancel_requested for j in running),
        waiting_for_worker=bool(queued and not running),
        error=None if not error else str(error),
        elapsed_s=elapsed,
        waiting_behind=tuple(busy) if queued and not running else (),
    )


def load_progress(store: db.Store, run_id: int) -> ProgressView | None:
    """The panel of a run read from the store (None when the run does not exist)."""
    run = read_run(store, run_id)
    if run is None:
        return None
    jobs = jobq.read_jobs(store, run_id)
    queued = [j.id for j in jobs if j.status == "queued"]
    busy = jobq.busy_servers(store, queued[0]) if queued else []
    return progress_view(run, jobs, busy=busy)


def cancel_run(store: db.Store, run_id: int) -> str:
    """Cancel every unfinished job of a run (`jobs.cancel_run`); say what happened, in words."""
    outcome = jobq.cancel_run(store, run_id)
    if outcome is jobq.CancelOutcome.REQUESTED:
        return "cancel requested: the worker stops the job within a few seconds"
    if outcome is jobq.CancelOutcome.CANCELLED:
        return jobq.CANCELLED_BEFORE_START
    return "nothing to cancel: the run's jobs have finished"
