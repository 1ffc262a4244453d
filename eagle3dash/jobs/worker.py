"""The local worker: runs queued jobs, each in its own child process.

`run_worker(home, kinds)` (what `python -m eagle3dash worker` runs with `eagle3dash.job_kinds`):
- claims one queued job at a time in a single atomic UPDATE ... RETURNING; a GPU job (`needs_gpu`)
  is not claimed while another GPU job runs, anywhere; CPU jobs go past it;
- starts `python -m eagle3dash.jobs.worker JOB --fn MODULE:FUNCTION` in a new session with stdout
  and stderr appended to `logs/<job>.log`; the kind's function is named by the table the worker
  was given, so the child imports that one function and nothing else, runs it with a
  `progress(fraction, message)` callback that writes to the job row, and writes the result or the
  traceback itself;
- heartbeats the job while the child lives, kills the child's process group on cancel, and marks
  the job failed with the reason when the child dies without a result (a signal, an OOM kill, a
  nonzero exit);
- at start (and now and then) fails jobs left running by a dead worker: a stale heartbeat, or a
  worker pid on this host that no longer lives.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import logging
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import traceback
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from eagle3dash.jobs import queue
from eagle3dash.jobs.queue import (
    CANCELLED_WHILE_RUNNING,
    JobCancelled,
    JobFn,
    job_status,
    list_jobs,
    log_rel,
    tail,
)
from eagle3dash.store import Store, decode_row, now_iso, open_store, parse_time, to_json

log = logging.getLogger(__name__)

STALE_AFTER_S = 60.0  # a running job whose heartbeat is older than this has lost its worker
HEARTBEAT_S = 2.0
CANCEL_GRACE_S = 3.0  # SIGTERM, then SIGKILL after this long
_PACKAGE_PARENT = str(Path(__file__).resolve().parents[2])
_CHILD_MODULE = "eagle3dash.jobs.worker"
QUIET_LOGGERS = ("httpx", "httpcore")


# --- job kinds by name -------------------------------------------------------------------------


def function_ref(fn: Callable[..., Any]) -> str:
    """`module:qualname` of a module-level function, the name a child process imports it by."""
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


# --- claiming and recovering -------------------------------------------------------------------

_CLAIM = """
UPDATE jobs SET status = 'running', worker_pid = ?, worker_host = ?, started_at = ?,
    heartbeat_at = ?, message = 'started', progress = 0
WHERE id = (
    SELECT id FROM jobs
    WHERE status = 'queued'
      AND (needs_gpu = 0 OR NOT EXISTS (
          SELECT 1 FROM jobs AS g WHERE g.status = 'running' AND g.needs_gpu = 1))
    ORDER BY id LIMIT 1)
  AND status = 'queued'
RETURNING *
"""


def claim_job(store: Store, worker_pid: int | None = None) -> dict | None:
    """Atomically take the oldest startable queued job (GPU jobs one at a time); None if none."""
    pid = os.getpid() if worker_pid is None else worker_pid
    now = now_iso()
    with store.transaction() as db:
        cur = db.conn.execute(_CLAIM, (pid, socket.gethostname(), now, now))
        rows = cur.fetchall()
        keys = [d[0] for d in cur.description]
    return decode_row(dict(zip(keys, rows[0], strict=True))) if rows else None


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:  # a zombie has exited; only its parent has not reaped it
        stat = Path(f"/proc/{pid}/stat").read_text()
        return stat.rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return True


def _is_our_child(pid: int, job_id: int) -> bool:
    """Whether `pid` is still `python -m eagle3dash.jobs.worker JOB ...` (not a reused pid)."""
    try:
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return False
    return argv[1:4] == [b"-m", _CHILD_MODULE.encode(), str(job_id).encode()]


def recover_stale_jobs(store: Store, stale_after: float = STALE_AFTER_S) -> list[int]:
    """Fail the running jobs whose worker is gone (stale heartbeat, or dead pid on this host)."""
    host = socket.gethostname()
    now = time.time()
    failed = []
    for job in list_jobs(store, status="running"):
        local = job.get("worker_host") == host and job.get("worker_pid")
        if local and job["worker_pid"] == os.getpid():
            continue  # this worker's own job
        beat = parse_time(job.get("heartbeat_at") or job.get("started_at"))
        age = None if beat is None else now - beat.timestamp()
        if local and not _pid_alive(job["worker_pid"]):
            reason = f"its worker (pid {job['worker_pid']}) is gone"
        elif age is None or age > stale_after:
            reason = "no heartbeat" + ("" if age is None else f" for {age:.0f} s")
        else:
            continue
        error = f"abandoned: {reason}; the job did not finish"
        if _finish(store, job["id"], "failed", error=error, message="worker lost"):
            failed.append(job["id"])
            _append_log(store, job, f"[recover] job {job['id']} marked failed: {error}\n")
            child = job.get("child_pid")
            if job.get("worker_host") == host and child and _is_our_child(child, job["id"]):
                with contextlib.suppress(OSError):
                    os.killpg(child, signal.SIGKILL)
    return failed


def _append_log(store: Store, job: dict, text: str) -> None:
    path = store.path(job.get("log_path") or log_rel(job["id"]))
    with contextlib.suppress(OSError), open(path, "a") as f:
        f.write(text)


# --- the worker --------------------------------------------------------------------------------


@dataclass
class _Child:
    job: dict
    proc: subprocess.Popen
    log: IO[bytes]
    last_beat: float = field(default_factory=time.monotonic)
    term_sent: float | None = None
    stop_reason: str | None = None


def _start_child(store: Store, job: dict, refs: Mapping[str, str]) -> _Child | None:
    """Start the child process of a claimed job; on failure mark the job failed."""
    job_id = job["id"]
    ref = refs.get(job["kind"])
    if ref is None:
        known = ", ".join(sorted(refs)) or "none"
        _finish(
            store,
            job_id,
            "failed",
            error=f"unknown job kind {job['kind']!r}; this worker runs: {known}",
            message="unknown job kind",
        )
        return None
    rel = job.get("log_path") or log_rel(job_id)
    try:
        logf = open(store.path(rel), "ab")  # noqa: SIM115 - closed when the child is reaped
    except OSError as e:
        _finish(store, job_id, "failed", error=f"could not open the job log {rel}: {e}")
        return None
    head = f"[worker {os.getpid()}] {now_iso()} job {job_id} ({job['kind']}) started\n"
    logf.write(head.encode())
    logf.flush()
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(
        p for p in (_PACKAGE_PARENT, env.get("PYTHONPATH", "")) if p
    )
    env["PYTHONUNBUFFERED"] = "1"
    env["EAGLE3DASH_HOME"] = str(store.home)
    env["EAGLE3DASH_JOB_ID"] = str(job_id)
    cmd = [
        sys.executable,
        "-m",
        _CHILD_MODULE,
        str(job_id),
        "--fn",
        ref,
        "--home",
        str(store.home),
        "--parent-pid",
        str(os.getpid()),
    ]
    try:
        proc = subprocess.Popen(
            cmd,
            stdin=subprocess.DEVNULL,
            stdout=logf,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,
        )
    except OSError as e:
        logf.write(f"[worker] could not start the job process: {e}\n".encode())
        logf.close()
        _finish(store, job_id, "failed", error=f"could not start the job process: {e}")
        return None
    store.db.execute(
        "UPDATE jobs SET child_pid = ?, log_path = ? WHERE id = ?", (proc.pid, rel, job_id)
    )
    log.info("job %s (%s) started, pid %s", job_id, job["kind"], proc.pid)
    return _Child(job=job, proc=proc, log=logf)


_SETTLE_RUN = """
UPDATE runs SET status = ?, error = ?
WHERE id = (SELECT run_id FROM jobs WHERE id = ?) AND status IN ('queued', 'running')
"""


def _finish(
    store: Store,
    job_id: int,
    status: str,
    error: str | None = None,
    result: Any = None,
    message: str | None = None,
    reason: str | None = None,
) -> bool:
    """Move a running job to a final status (no-op if it already has one); True if it did.

    A job that fails or is cancelled takes its unfinished run with it (same status, `reason` or
    else `error` or `message` as the run's error), so no page shows a dead run as running.
    """
    fields: dict[str, Any] = {"status": status, "finished_at": now_iso(), "error": error}
    if message is not None:
        fields["message"] = message
    if status == "succeeded":
        fields["result_json"] = to_json(result if result is not None else {})
        fields["progress"] = 1.0
    sets = ", ".join(f"{k} = ?" for k in fields)
    with store.transaction() as db:
        cur = db.execute(
            f"UPDATE jobs SET {sets} WHERE id = ? AND status IN ('running', 'queued')",
            (*fields.values(), job_id),
        )
        done = cur.rowcount > 0
        if done and status != "succeeded":
            db.execute(_SETTLE_RUN, (status, reason or error or message, job_id))
    return done


def _exit_reason(rc: int) -> str:
    if rc < 0:
        try:
            name = signal.Signals(-rc).name
        except ValueError:
            name = f"signal {-rc}"
        hint = " (out of memory? the kernel's OOM killer sends SIGKILL)" if -rc == 9 else ""
        return f"the job process was killed by {name}{hint}"
    return f"the job process exited with code {rc} without a result"


def _reap(store: Store, child: _Child, rc: int) -> str:
    """Record how a child ended when it did not record it itself; return the final status."""
    job_id = child.job["id"]
    row = store.db.execute(
        "SELECT status, cancel_requested FROM jobs WHERE id = ?", (job_id,)
    ).fetchone()
    status = row[0] if row else "failed"
    if status == "running":
        if row[1]:
            status, error, message = "cancelled", None, CANCELLED_WHILE_RUNNING
        else:
            reason = child.stop_reason or _exit_reason(rc)
            end = tail(store.path(child.job.get("log_path") or log_rel(job_id)), 2000).strip()
            error = reason + (f"\n--- end of the job log ---\n{end}" if end else "")
            status, message = "failed", reason
        _finish(store, job_id, status, error=error, message=message, reason=message)
    with contextlib.suppress(OSError, ValueError):
        child.log.write(
            f"[worker {os.getpid()}] {now_iso()} job {job_id} {status} ({rc})\n".encode()
        )
        child.log.close()
    log.info("job %s %s (exit %s)", job_id, status, rc)
    return status


def _signal_group(proc: subprocess.Popen, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, sig)


def _stop_children(
    store: Store, children: dict[int, _Child], reason: str, grace: float = CANCEL_GRACE_S
) -> None:
    """Terminate running children (SIGTERM, then SIGKILL) and fail their jobs with `reason`."""
    for child in children.values():
        child.stop_reason = reason
        _signal_group(child.proc, signal.SIGTERM)
    deadline = time.monotonic() + grace
    for child in children.values():
        try:
            child.proc.wait(max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            _signal_group(child.proc, signal.SIGKILL)
            child.proc.wait()
        _reap(store, child, child.proc.returncode)
    children.clear()


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
) -> int:
    """Run queued jobs, `slots` at a time, each in a child process; return how many finished.

    `kinds` maps each job kind this worker runs to its function (module-level, so that the child
    imports it by name); a job of another kind fails at once with the kinds it could have been.
    `once`: return when no job is running and none can be claimed (drain the queue); otherwise
    run until `stop_event` is set, SIGTERM (in the main thread) or KeyboardInterrupt. Running
    children of a stopping worker are terminated and their jobs failed.
    """
    refs = {kind: function_ref(fn) for kind, fn in kinds.items()}
    store = open_store(store_home)
    stop = stop_event if stop_event is not None else threading.Event()
    in_main = threading.current_thread() is threading.main_thread()
    old_term: Any = None
    children: dict[int, _Child] = {}
    finished = 0
    try:
        if in_main:  # SIGTERM stops the worker cleanly
            old_term = signal.signal(signal.SIGTERM, lambda signum, frame: stop.set())
        recovered = recover_stale_jobs(store, stale_after)
        if recovered:
            log.warning("failed %d job(s) left by a dead worker: %s", len(recovered), recovered)
        last_recover = time.monotonic()
        log.info("worker %s on %s, %d slot(s)", os.getpid(), store.home, slots)
        while not stop.is_set():
            now = time.monotonic()
            for job_id, child in list(children.items()):
                rc = child.proc.poll()
                if rc is not None:
                    _reap(store, child, rc)
                    del children[job_id]
                    finished += 1
            if children:
                _watch_children(store, children, now, heartbeat_interval, cancel_grace)
            started = False
            while len(children) < slots:
                job = claim_job(store)
                if job is None:
                    break
                new = _start_child(store, job, refs)
                if new is None:
                    finished += 1
                    continue
                children[job["id"]] = new
                started = True
            if once and not children and not started:
                break
            if now - last_recover > stale_after / 2:
                recover_stale_jobs(store, stale_after)
                last_recover = now
            stop.wait(poll_interval)
    finally:
        if children:
            _stop_children(store, children, "the worker stopped while the job ran", cancel_grace)
        store.close()
        if in_main:
            signal.signal(signal.SIGTERM, old_term if old_term is not None else signal.SIG_DFL)
    return finished


def _watch_children(
    store: Store,
    children: dict[int, _Child],
    now: float,
    heartbeat_interval: float,
    cancel_grace: float,
) -> None:
    """Heartbeat live children and act on cancel requests (SIGTERM, then SIGKILL)."""
    ids = list(children)
    marks = ",".join("?" * len(ids))
    rows = store.db.execute(
        f"SELECT id FROM jobs WHERE id IN ({marks}) AND cancel_requested = 1", ids
    ).fetchall()
    for (job_id,) in rows:
        child = children[job_id]
        if child.term_sent is None:
            log.info("cancelling job %s", job_id)
            _signal_group(child.proc, signal.SIGTERM)
            child.term_sent = now
        elif now - child.term_sent > cancel_grace:
            _signal_group(child.proc, signal.SIGKILL)
    due = [i for i, c in children.items() if now - c.last_beat >= heartbeat_interval]
    if due:
        marks = ",".join("?" * len(due))
        store.db.execute(
            f"UPDATE jobs SET heartbeat_at = ? WHERE id IN ({marks}) AND status = 'running'",
            (now_iso(), *due),
        )
        for i in due:
            children[i].last_beat = now


# --- the child process -------------------------------------------------------------------------


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
        row = self.store.db.execute(
            "UPDATE jobs SET progress = ?, message = ? WHERE id = ? AND status = 'running' "
            "RETURNING cancel_requested",
            (f, message, self.job_id),
        ).fetchall()
        if row and row[0][0]:
            raise JobCancelled("cancel requested")


def _watch_parent(store: Store, job_id: int, parent_pid: int) -> None:
    """Thread of a child: if the worker dies, fail the job and kill this process group."""
    while True:
        time.sleep(0.5)
        if os.getppid() != parent_pid:
            reason = f"abandoned: the worker (pid {parent_pid}) exited while the job ran"
            # stderr is the job's log: it ends with why the job stopped
            print(f"[job {job_id}] {now_iso()} {reason}; stopping", file=sys.stderr, flush=True)
            with contextlib.suppress(Exception):
                _finish(store, job_id, "failed", error=reason)
            if os.getpgrp() == os.getpid():
                os.killpg(os.getpid(), signal.SIGKILL)
            os._exit(70)


def _on_sigterm(signum: int, frame: Any) -> None:
    raise JobCancelled("terminated (SIGTERM)")


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
    if job is None or job["status"] != "running":
        print(f"job {job_id} is not running ({job and job['status']}); nothing to do")
        return 2
    queue._current_job = {
        "id": job_id,
        "run_id": job["run_id"],
        "kind": job["kind"],
        "home": store.home,
    }
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
            print(f"job {job_id} {CANCELLED_WHILE_RUNNING}", file=sys.stderr)
            _finish(store, job_id, "cancelled", message=CANCELLED_WHILE_RUNNING)
            return 0
        # Terminated by someone else (the worker stopping, the system): die by the signal so the
        # worker records why, as for any other kill.
        print(f"job {job_id} stopped: {e}", file=sys.stderr)
        sys.stderr.flush()
        store.close()
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGTERM)
        return 143
    except BaseException as e:
        tb = traceback.format_exc()
        sys.stderr.write(tb)
        summary = f"{type(e).__name__}: {e}"[:500]
        _finish(store, job_id, "failed", error=tb, message=summary, reason=summary)
        return 1
    else:
        _finish(store, job_id, "succeeded", result=result, message="done")
        return 0
    finally:
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
    return run_one(args.home, args.job_id, args.fn, args.parent_pid)


if __name__ == "__main__":
    sys.exit(main())
