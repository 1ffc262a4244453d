"""The local worker: the first job backend (`backend.JobBackend`), a child process per job.

`run_worker(home, kinds)` (what `python -m eagle3dash worker` runs with `eagle3dash.job_kinds`)
serves the store with `LocalProcessBackend` through `backend.serve`, which claims, heartbeats,
cancels, settles and recovers (the contract every backend keeps). This module adds where a job
runs:
- `python -m eagle3dash.jobs.worker JOB --fn MODULE:FUNCTION` (`preloaded.start_module`: with
  `preload`, a fork of a server that imported torch and transformers once) in a new session,
  named `e3d-job-JOB`, with stdout and stderr appended to `logs/<job>.log` and EAGLE3DASH_HOME
  set to the store's home; the child imports that one function and nothing else, runs it with a
  `progress(fraction, message)` callback that writes to the job row, and settles the job itself
  (result, traceback, cancel, or one line for a store fault);
- a cancel is SIGTERM to the child's process group, then SIGKILL; a child that dies without
  settling is failed with how it died (a signal, an OOM kill, a nonzero exit);
- a job left running by a dead worker on this host is recognised by its worker pid, without
  waiting for its heartbeat to go stale, and its orphaned child is killed.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import signal
import socket
import sqlite3
import sys
import threading
import time
import traceback
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from eagle3dash.jobs import lifecycle
from eagle3dash.jobs.backend import (
    CANCEL_GRACE_S,
    HEARTBEAT_S,
    STALE_AFTER_S,
    JobBackend,
    LaunchError,
    ServeSettings,
    import_function,
    recover,
    serve,
)
from eagle3dash.jobs.lifecycle import CANCELLED_WHILE_RUNNING, Status
from eagle3dash.jobs.queue import JobCancelled, JobFn, job_status, log_rel, tail
from eagle3dash.preloaded import (
    NAME_LIMIT,
    Child,
    name_process,
    pid_alive,
    process_name,
    start_module,
    warm_up,
)
from eagle3dash.store import Store, now_iso, open_store
from eagle3dash.store_faults import classify

log = logging.getLogger(__name__)

_PACKAGE_PARENT = str(Path(__file__).resolve().parents[2])
_CHILD_MODULE = "eagle3dash.jobs.worker"
QUIET_LOGGERS = ("httpx", "httpcore")
# A child that could not record its own end (the store locked or full) exits with this code,
# its one-line reason the last line of its log.
STORE_FAULT_EXIT = 75


# --- the backend -------------------------------------------------------------------------------


@dataclass
class _Child:
    job: dict
    proc: Child
    log: IO[bytes]
    log_path: Path


def _name(job_id: int) -> str:
    """The name a job's child gives itself (a forked child's command line is the server's)."""
    return f"e3d-job-{job_id}"[:NAME_LIMIT]


def _is_our_child(pid: int, job_id: int) -> bool:
    """Whether `pid` is still the child of job `job_id` (not a reused pid)."""
    return process_name(pid) == _name(job_id)


def _exit_reason(rc: int, log_path: Path) -> str:
    if rc == STORE_FAULT_EXIT:
        lines = tail(log_path, 4096).strip().splitlines()
        if lines:
            return lines[-1]
    if rc < 0:
        try:
            name = signal.Signals(-rc).name
        except ValueError:
            name = f"signal {-rc}"
        hint = " (out of memory? the kernel's OOM killer sends SIGKILL)" if -rc == 9 else ""
        return f"the job process was killed by {name}{hint}"
    return f"the job process exited with code {rc} without a result"


class LocalProcessBackend(JobBackend):
    """Each job in a child process of this worker, on this machine; started warm (forked from a
    server that imported `preload` once, `preloaded.py`) when `preload` names modules."""

    name = "local"

    def __init__(self, preload: Sequence[str] = ()) -> None:
        self.preload = tuple(preload)

    def launch(self, store: Store, job: dict, fn_ref: str) -> _Child:
        """Start the child process of a claimed job, its output appended to the job's log."""
        job_id = job["id"]
        rel = job.get("log_path") or log_rel(job_id)
        path = store.path(rel)
        try:
            logf = open(path, "ab")  # noqa: SIM115 - closed in `release`
        except OSError as e:
            raise LaunchError(f"could not open the job log {rel}: {e}") from None
        head = f"[worker {os.getpid()}] {now_iso()} job {job_id} ({job['kind']}) started\n"
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(
            p for p in (_PACKAGE_PARENT, env.get("PYTHONPATH", "")) if p
        )
        env["PYTHONUNBUFFERED"] = "1"
        env["EAGLE3DASH_HOME"] = str(store.home)
        env["EAGLE3DASH_JOB_ID"] = str(job_id)
        args = [str(job_id), "--fn", fn_ref, "--home", str(store.home)]
        args += ["--parent-pid", str(os.getpid())]
        try:
            logf.write(head.encode())
            logf.flush()
            proc = start_module(
                _CHILD_MODULE, args, env=env, cwd=os.getcwd(), output=path, preload=self.preload
            )
        except (OSError, EOFError, ConnectionError) as e:
            with contextlib.suppress(OSError):
                logf.write(f"[worker] could not start the job process: {e}\n".encode())
                logf.close()
            raise LaunchError(f"could not start the job process: {e}") from None
        child = _Child(job=job, proc=proc, log=logf, log_path=path)
        try:
            lifecycle.record_child(store, job_id, proc.pid, rel)
        except BaseException:  # the store refused: the job fails (`serve`) and never runs
            self.interrupt(child, force=True)
            proc.wait(None)
            self.release(child, Status.FAILED)
            raise
        log.info("job %s (%s) started, pid %s", job_id, job["kind"], proc.pid)
        return child

    def wait(self, handle: _Child, timeout: float | None) -> str | None:
        """None while the child runs; else how it ended."""
        rc = handle.proc.wait(timeout)
        return None if rc is None else _exit_reason(rc, handle.log_path)

    def interrupt(self, handle: _Child, force: bool) -> None:
        """SIGTERM (the child raises JobCancelled), or SIGKILL, to the child's process group."""
        handle.proc.signal_group(signal.SIGKILL if force else signal.SIGTERM)

    def release(self, handle: _Child, status: Status) -> None:
        """End the job's log with its status and the child's exit code, and close it."""
        end = f"[worker {os.getpid()}] {now_iso()} job {handle.job['id']} {status}"
        with contextlib.suppress(OSError, ValueError):
            handle.log.write(f"{end} ({handle.proc.wait(0)})\n".encode())
            handle.log.close()
        handle.proc.close()

    def lost(self, job: dict) -> str | None:
        """A job of a worker on this host whose pid no longer lives."""
        pid = job.get("worker_pid")
        if job.get("worker_host") == socket.gethostname() and pid and not pid_alive(pid):
            return f"its worker (pid {pid}) is gone"
        return None

    def reap_orphan(self, job: dict) -> None:
        """Kill the process group of a lost job's child, if it is still that child."""
        child = job.get("child_pid")
        here = job.get("worker_host") == socket.gethostname()
        if here and child and _is_our_child(child, job["id"]):
            with contextlib.suppress(OSError):
                os.killpg(child, signal.SIGKILL)


def recover_stale_jobs(store: Store, stale_after: float = STALE_AFTER_S) -> list[int]:
    """Fail the running jobs whose worker is gone (stale heartbeat, or dead pid on this host)."""
    return recover(store, LocalProcessBackend(), stale_after)


def run_worker(
    store_home: str | os.PathLike[str] | None,
    kinds: Mapping[str, JobFn],
    poll_interval: float = 0.5,
    once: bool = False,
    stop_event: threading.Event | None = None,
    slots: int = 1,
    stale_after: float = STALE_AFTER_S,
    heartbeat_interval: float = HEARTBEAT_S,
    cancel_grace: float = CANCEL_GRACE_S,
    preload: Sequence[str] = (),
) -> int:
    """Run queued jobs, `slots` at a time, each in a child process; return how many finished.

    See `backend.serve`: `once` drains the queue; otherwise until `stop_event`, SIGTERM or
    KeyboardInterrupt. Running children of a stopping worker are terminated and their jobs failed.
    With `preload` (`preloaded.HEAVY` for `job_kinds`), children are forked from a server that
    imported those modules once, started now.
    """
    if preload:
        warm_up(preload)
    settings = ServeSettings(
        poll_interval=poll_interval,
        slots=slots,
        stale_after=stale_after,
        heartbeat_interval=heartbeat_interval,
        cancel_grace=cancel_grace,
    )
    return serve(LocalProcessBackend(preload), store_home, kinds, settings, once, stop_event)


# --- the child process -------------------------------------------------------------------------


class _StoreFaultInJob(BaseException):
    """Raised by `progress` when the store refuses it (locked past the wait, disk full); a
    BaseException, so that a job's own `except Exception` cannot swallow it."""


class _Progress:
    """The progress callback of a child: writes fraction and message to the job row."""

    def __init__(self, store: Store, job_id: int, min_interval: float = 0.2) -> None:
        self.store, self.job_id, self.min_interval = store, job_id, min_interval
        self.last_write = 0.0
        self.last_message: str | None = None
        self.logger = logging.getLogger("eagle3dash.job")

    def __call__(self, fraction: float, message: str = "") -> None:
        """Record progress (0..1) and a message; raise JobCancelled if a cancel was asked."""
        f = float(fraction)
        f = 0.0 if f != f else min(1.0, max(0.0, f))
        now = time.monotonic()
        changed = message != self.last_message
        if not changed and f < 1.0 and now - self.last_write < self.min_interval:
            return
        self.last_write, self.last_message = now, message
        if changed and message:
            self.logger.info("%3.0f%% %s", f * 100, message)
        try:
            cancel = lifecycle.report_progress(self.store, self.job_id, f, message)
        except (sqlite3.Error, OSError) as e:
            fault = classify(e, self.store.db_path)
            if fault is None:
                raise
            raise _StoreFaultInJob(str(fault)) from None
        if cancel:
            raise JobCancelled("cancel requested")


def _watch_parent(store: Store, job_id: int, parent_pid: int) -> None:
    """Thread of a child: if the worker dies, fail the job and kill this process group."""
    while True:
        time.sleep(0.5)
        if not pid_alive(parent_pid):
            reason = f"abandoned: the worker (pid {parent_pid}) exited while the job ran"
            with contextlib.suppress(Exception):
                lifecycle.settle_job(store, job_id, Status.FAILED, error=reason)
            # stderr is the job's log: it ends with why the job stopped (said last, just before
            # the kill, so that the job's own progress lines cannot follow it)
            _say(f"[job {job_id}] {now_iso()} {reason}; stopping")
            if os.getpgrp() == os.getpid():
                os.killpg(os.getpid(), signal.SIGKILL)
            os._exit(70)


def _on_sigterm(signum: int, frame: Any) -> None:
    raise JobCancelled("terminated (SIGTERM)")


def _say(line: object) -> None:
    """A line on stderr, the job's log (which a full disk may refuse: the store says it then)."""
    with contextlib.suppress(OSError):
        print(line, file=sys.stderr, flush=True)


def _end(store: Store, job_id: int, status: Status, rc: int, **fields: Any) -> int:
    """Settle this child's job and return `rc`; when the store refuses (a lock, a full disk),
    print why as the log's last line and return STORE_FAULT_EXIT, for the worker to settle."""
    try:
        lifecycle.settle_job(store, job_id, status, **fields)
    except (sqlite3.Error, OSError) as e:
        fault = classify(e, store.db_path)
        if fault is None:
            raise
        _say(fault)
        return STORE_FAULT_EXIT
    return rc


def run_one(
    home: str | os.PathLike[str] | None, job_id: int, fn_ref: str, parent_pid: int | None = None
) -> int:
    """Run one claimed job in this process (the child side) with `fn_ref`'s function."""
    import faulthandler

    faulthandler.enable()
    logging.basicConfig(
        level=logging.INFO,
        stream=sys.stderr,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        force=True,
    )
    for name in QUIET_LOGGERS:  # one INFO line per HTTP request would bury the job's own lines
        logging.getLogger(name).setLevel(logging.WARNING)
    store = open_store(home)
    job = job_status(store, job_id)
    if job is None or job["status"] != Status.RUNNING:
        print(f"job {job_id} is not running ({job and job['status']}); nothing to do")
        return 2
    if parent_pid:
        threading.Thread(
            target=_watch_parent, args=(store, job_id, parent_pid), daemon=True
        ).start()
    signal.signal(signal.SIGTERM, _on_sigterm)
    try:
        fn = import_function(fn_ref)
        progress = _Progress(store, job_id)
        result = fn(job["params"] or {}, progress)
    except JobCancelled as e:
        cancel = store.db.execute(
            "SELECT cancel_requested FROM jobs WHERE id = ?", (job_id,)
        ).fetchone()
        if cancel and cancel[0]:
            _say(f"job {job_id} {CANCELLED_WHILE_RUNNING}")
            return _end(store, job_id, Status.CANCELLED, 0, message=CANCELLED_WHILE_RUNNING)
        # Terminated by someone else (the worker stopping, the system): die by the signal so the
        # worker records why, as for any other kill.
        _say(f"job {job_id} stopped: {e}")
        store.close()
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGTERM)
        return 143
    except BaseException as e:
        fault = classify(e, store.db_path) if isinstance(e, sqlite3.Error | OSError) else None
        if isinstance(e, _StoreFaultInJob) or fault is not None:
            line = str(fault or e)  # a store fault is its one line, without a traceback
            _say(line)
            return _end(store, job_id, Status.FAILED, 1, error=line, message=line)
        tb = traceback.format_exc()
        _say(tb.rstrip())
        summary = f"{type(e).__name__}: {e}"[:500]
        return _end(store, job_id, Status.FAILED, 1, error=tb, message=summary, reason=summary)
    else:
        return _end(store, job_id, Status.SUCCEEDED, 0, result=result, message="done")
    finally:
        with contextlib.suppress(OSError):
            sys.stderr.flush()
            sys.stdout.flush()
        store.close()


def main(argv: list[str] | None = None) -> int:
    """`python -m eagle3dash.jobs.worker JOB --fn MODULE:FUNCTION`: the child the worker starts."""
    parser = argparse.ArgumentParser(prog=f"python -m {_CHILD_MODULE}")
    parser.add_argument("job_id", type=int, help="a job this worker claimed")
    parser.add_argument("--fn", required=True, help="the job kind's function, module:qualname")
    parser.add_argument("--home", default=None)
    parser.add_argument("--parent-pid", type=int, default=None)
    args = parser.parse_args(argv)
    name_process(_name(args.job_id))  # how a later worker tells this child from a reused pid
    return run_one(args.home, args.job_id, args.fn, args.parent_pid)


if __name__ == "__main__":
    sys.exit(main())
