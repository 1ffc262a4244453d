"""The job-backend seam: where claimed jobs execute, and the contract every backend keeps.

The contract with the store is the same for every backend, and `serve` keeps it, so that no
backend copies it:
- claim: the oldest startable queued job becomes running, with its run (`lifecycle.claim_job`,
  one UPDATE ... RETURNING: a job is claimed once, by one backend instance);
- heartbeat: every `heartbeat_interval` while a job executes; a running job whose heartbeat is
  older than `stale_after`, or whose executor its backend knows is gone (`JobBackend.lost`), is
  failed by whichever backend instance looks next (`recover`);
- progress: the job's `progress(fraction, message)` reaches `lifecycle.report_progress`, whose
  answer says that a cancel was asked (the job then raises `JobCancelled`);
- cancel: a cancel of a running job is a flag; `serve` interrupts its executor (softly, then by
  force after `cancel_grace`) and the job settles as cancelled;
- settle: a job ends once (`lifecycle.settle_job`) with its result, its one-line reason, or,
  when it could not say (killed, lost), the backend's reason with the end of its log;
- logs: a job's output goes to `logs/<job>.log` in the home (`queue.job_log` reads it);
- store faults: a lock held past the busy timeout or a full disk ends no backend; `serve` logs
  one line, backs off and tries again (`store_faults`). A full disk at a job's own write (its
  claim, the record of its executor, its progress, its result, its settle) fails that job and
  its run in one line naming the disk, written in the room the home's reserve makes.

A backend supplies only where a job executes: `launch`, `wait`, `interrupt`, `release`, and what
it knows of executors that another instance left behind (`lost`, `reap_orphan`). The local worker
(`worker.LocalProcessBackend`: a child process per job on this machine) is the first. A Ray
backend is the second: a module `jobs/ray_backend.py` whose `launch` submits a task (resources
from the job's options), `wait` checks its object ref, `interrupt` is `ray.cancel`, and whose
driver relays the task's progress and log lines to `lifecycle.report_progress` and the job's log;
nothing else imports Ray. tests/test_backend_conformance.py is the suite every backend passes.
"""

from __future__ import annotations

import abc
import importlib
import logging
import os
import signal
import sqlite3
import threading
import time
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar

from eagle3dash.jobs import lifecycle
from eagle3dash.jobs.lifecycle import CANCELLED_WHILE_RUNNING, Status
from eagle3dash.jobs.queue import JobFn, append_log, log_rel, tail
from eagle3dash.store import Store, open_store, parse_time
from eagle3dash.store_faults import StoreFault, classify, keep_reserve

log = logging.getLogger(__name__)

STALE_AFTER_S = 60.0  # a running job whose heartbeat is older than this has lost its backend
HEARTBEAT_S = 2.0
CANCEL_GRACE_S = 3.0  # a soft interrupt, then a forced one after this long
FAULT_BACKOFF_MAX_S = 5.0  # after a store fault, wait twice as long each time, up to this
LOG_END_CHARS = 2000  # how much of a job's log a failure it could not record itself quotes


@dataclass(frozen=True)
class ServeSettings:
    """How a backend instance serves: slots, polling, heartbeat, recovery and cancel timing."""

    poll_interval: float = 0.5
    slots: int = 1
    stale_after: float = STALE_AFTER_S
    heartbeat_interval: float = HEARTBEAT_S
    cancel_grace: float = CANCEL_GRACE_S


class LaunchError(Exception):
    """A claimed job could not be started; the message says why (the job fails with it)."""


@dataclass
class Execution:
    """A claimed job as `serve` follows it: its row, its backend handle, heartbeat and cancel."""

    job: dict
    handle: Any
    last_beat: float = field(default_factory=time.monotonic)
    interrupted_at: float | None = None
    stop_reason: str | None = None  # why `serve` stopped it (the worker stopping)


class JobBackend(abc.ABC):
    """Where claimed jobs execute; `serve` keeps the store's contract around these methods."""

    name: ClassVar[str]

    @abc.abstractmethod
    def launch(self, store: Store, job: dict, fn_ref: str) -> Any:
        """Start a claimed job running `fn_ref`'s function; its handle (LaunchError: it failed)."""

    @abc.abstractmethod
    def wait(self, handle: Any, timeout: float | None) -> str | None:
        """Wait up to `timeout` s (None: until it ends) for a job to end: None while it runs,
        else how it ended, in words (used when the job did not settle itself)."""

    @abc.abstractmethod
    def interrupt(self, handle: Any, force: bool) -> None:
        """Ask a job to stop (it settles as cancelled); `force`: stop it now."""

    @abc.abstractmethod
    def release(self, handle: Any, status: Status) -> None:
        """Let go of an ended job's resources (its log, its process) once it has settled."""

    def lost(self, job: dict) -> str | None:
        """Why another instance's running job has no executor any more, if this backend can
        tell without waiting for its heartbeat to go stale (None: it cannot tell)."""
        return None

    def reap_orphan(self, job: dict) -> None:  # noqa: B027 - a backend may have nothing to stop
        """Stop what may still execute a job that recovery failed."""


# --- job kinds by name -------------------------------------------------------------------------


def function_ref(fn: Callable[..., Any]) -> str:
    """`module:qualname` of a module-level function, the name an executor imports it by."""
    module = getattr(fn, "__module__", None)
    qualname = getattr(fn, "__qualname__", None)
    if not module or not qualname or module == "__main__" or "<" in qualname:
        raise ValueError(
            f"a job kind must be a function importable by name from a module, not {fn!r}"
        )
    return f"{module}:{qualname}"


def import_function(ref: str) -> JobFn:
    """The function named `module:qualname` (see `function_ref`)."""
    module, _, qualname = ref.partition(":")
    obj: Any = importlib.import_module(module)
    for part in qualname.split("."):
        obj = getattr(obj, part)
    return obj


# --- recovery ----------------------------------------------------------------------------------


def recover(
    store: Store,
    backend: JobBackend,
    stale_after: float = STALE_AFTER_S,
    mine: Collection[int] = (),
) -> list[int]:
    """Fail the running jobs (other than `mine`) whose executor is gone: the backend says so, or
    their heartbeat is older than `stale_after` s; their ids."""
    now = time.time()
    failed = []
    for job in lifecycle.running_jobs(store):
        if job["id"] in mine:
            continue
        reason = backend.lost(job)
        if reason is None:
            beat = parse_time(job.get("heartbeat_at") or job.get("started_at"))
            age = None if beat is None else now - beat.timestamp()
            if age is not None and age <= stale_after:
                continue
            reason = "no heartbeat" + ("" if age is None else f" for {age:.0f} s")
        error = f"abandoned: {reason}; the job did not finish"
        if lifecycle.settle_job(
            store, job["id"], Status.FAILED, error=error, message="worker lost"
        ):
            failed.append(job["id"])
            append_log(store, job, f"[recover] job {job['id']} marked failed: {error}\n")
            backend.reap_orphan(job)
    return failed


# --- the loop ----------------------------------------------------------------------------------


def serve(
    backend: JobBackend,
    store_home: str | os.PathLike[str] | None,
    kinds: Mapping[str, JobFn],
    settings: ServeSettings | None = None,
    once: bool = False,
    stop_event: threading.Event | None = None,
) -> int:
    """Run queued jobs on `backend`, `settings.slots` at a time; return how many finished.

    `kinds` maps each job kind to its function (module-level: executors import it by name); a
    job of another kind fails at once, naming the kinds this instance runs. `once`: return when
    nothing runs and nothing can be claimed; otherwise serve until `stop_event` is set, SIGTERM
    (in the main thread) or KeyboardInterrupt. The jobs still running then are stopped and fail.
    """
    refs = {kind: function_ref(fn) for kind, fn in kinds.items()}
    store = open_store(store_home)
    stop = stop_event if stop_event is not None else threading.Event()
    in_main = threading.current_thread() is threading.main_thread()
    old_term: Any = None
    loop = _Loop(backend, store, refs, settings or ServeSettings())
    try:
        if in_main:  # SIGTERM stops the instance cleanly
            old_term = signal.signal(signal.SIGTERM, lambda signum, frame: stop.set())
        log.info("%s backend %s on %s", backend.name, os.getpid(), store.home)
        while not stop.is_set():
            idle = loop.tick()
            if once and idle:
                break
            stop.wait(loop.delay())
    finally:
        loop.stop_all("the worker stopped while the job ran")
        store.close()
        if in_main:
            signal.signal(signal.SIGTERM, old_term if old_term is not None else signal.SIG_DFL)
    return loop.finished


class _Loop:
    """One backend instance's state between ticks: its executions and its store-fault backoff."""

    def __init__(
        self, backend: JobBackend, store: Store, refs: dict[str, str], settings: ServeSettings
    ) -> None:
        self.backend, self.store, self.refs, self.settings = backend, store, refs, settings
        self.running: dict[int, Execution] = {}
        self.finished = 0
        self.last_recover: float | None = None
        self.fault: StoreFault | None = None
        self.fault_delay = 0.0

    def delay(self) -> float:
        """Seconds until the next tick: the poll interval, or the backoff after a store fault."""
        return self.fault_delay or self.settings.poll_interval

    def tick(self) -> bool:
        """Reap, watch, claim and now and then recover; True when nothing runs or was started.

        A store fault (a lock held past the busy timeout, a full disk) ends the tick: one log
        line, a longer wait, and the next tick takes up what this one left."""
        try:
            idle = self._tick()
        except (sqlite3.Error, OSError) as e:
            fault = classify(e, self.store.db_path)
            if fault is None:
                raise
            if self.fault is None or str(fault) != str(self.fault):
                log.warning("%s; retrying", fault)
            self.fault = fault
            base = self.fault_delay or self.settings.poll_interval
            self.fault_delay = min(FAULT_BACKOFF_MAX_S, 2 * base)
            return False
        if self.fault is not None:
            log.info("the store answers again")
            self.fault, self.fault_delay = None, 0.0
        return idle

    def _tick(self) -> bool:
        now = time.monotonic()
        if self.last_recover is None or now - self.last_recover > self.settings.stale_after / 2:
            keep_reserve(self.store.home)
            recovered = recover(self.store, self.backend, self.settings.stale_after, self.running)
            if recovered:
                log.warning(
                    "failed %d job(s) left by a lost backend: %s", len(recovered), recovered
                )
            self.last_recover = now
        for ex in list(self.running.values()):
            ended = self.backend.wait(ex.handle, 0)
            if ended is not None:
                self._reap(ex, ended)
        if self.running:
            self._watch(now)
        started = False
        while len(self.running) < self.settings.slots:
            job = lifecycle.claim_job(self.store, os.getpid())
            if job is None:
                break
            started = self._launch(job) or started
        return not self.running and not started

    def _launch(self, job: dict) -> bool:
        """Start a claimed job on the backend; False when it failed to start (and is settled)."""
        job_id = job["id"]
        ref = self.refs.get(job["kind"])
        if ref is None:
            known = ", ".join(sorted(self.refs)) or "none"
            error = f"unknown job kind {job['kind']!r}; this worker runs: {known}"
            lifecycle.settle_job(
                self.store, job_id, Status.FAILED, error=error, message="unknown job kind"
            )
            self.finished += 1
            return False
        try:
            handle = self.backend.launch(self.store, job, ref)
        except LaunchError as e:
            lifecycle.settle_job(self.store, job_id, Status.FAILED, error=str(e))
            self.finished += 1
            return False
        except (sqlite3.Error, OSError) as e:  # the store refused the launch's record
            fault = classify(e, self.store.db_path)
            if fault is None:
                raise
            line = str(fault)
            log.warning("job %s failed: %s", job_id, line)
            lifecycle.settle_job(self.store, job_id, Status.FAILED, error=line, message=line)
            self.finished += 1
            return False
        self.running[job_id] = Execution(job=job, handle=handle)
        return True

    def _watch(self, now: float) -> None:
        """Heartbeat the running jobs and act on cancels (interrupt, then force after grace)."""
        for job_id in lifecycle.cancel_requested(self.store, self.running):
            ex = self.running[job_id]
            if ex.interrupted_at is None:
                log.info("cancelling job %s", job_id)
                self.backend.interrupt(ex.handle, force=False)
                ex.interrupted_at = now
            elif now - ex.interrupted_at > self.settings.cancel_grace:
                self.backend.interrupt(ex.handle, force=True)
        due = [
            i
            for i, ex in self.running.items()
            if now - ex.last_beat >= self.settings.heartbeat_interval
        ]
        lifecycle.heartbeat(self.store, due)
        for i in due:
            self.running[i].last_beat = now

    def _reap(self, ex: Execution, ended: str) -> None:
        """Settle an ended job that did not settle itself, then release it."""
        job_id = ex.job["id"]
        row = self.store.db.execute(
            "SELECT status, cancel_requested FROM jobs WHERE id = ?", (job_id,)
        ).fetchone()
        status = Status(row[0]) if row else Status.FAILED
        if status == Status.RUNNING:
            if row[1]:
                status, error, message = Status.CANCELLED, None, CANCELLED_WHILE_RUNNING
            else:
                reason = ex.stop_reason or ended
                path = self.store.path(ex.job.get("log_path") or log_rel(job_id))
                end = tail(path, LOG_END_CHARS).strip()
                error = reason + (f"\n--- end of the job log ---\n{end}" if end else "")
                status, message = Status.FAILED, reason
            lifecycle.settle_job(
                self.store, job_id, status, error=error, message=message, reason=message
            )
        keep_reserve(self.store.home)  # put back what a full disk may have taken
        self.backend.release(ex.handle, status)
        del self.running[job_id]
        self.finished += 1
        log.info("job %s %s", job_id, status)

    def stop_all(self, reason: str) -> None:
        """Stop every running job (softly, then by force after the grace) and settle it."""
        if not self.running:
            return
        for ex in self.running.values():
            ex.stop_reason = reason
            self.backend.interrupt(ex.handle, force=False)
        deadline = time.monotonic() + self.settings.cancel_grace
        for ex in list(self.running.values()):
            ended = self.backend.wait(ex.handle, max(0.0, deadline - time.monotonic()))
            if ended is None:
                self.backend.interrupt(ex.handle, force=True)
                ended = self.backend.wait(ex.handle, None) or reason
            try:
                self._reap(ex, ended)
            except (sqlite3.Error, OSError) as e:  # the store is down: recovery settles it later
                fault = classify(e, self.store.db_path)
                if fault is None:
                    raise
                log.warning("job %s left running: %s", ex.job["id"], fault)
