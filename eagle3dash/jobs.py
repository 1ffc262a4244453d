"""Jobs: rows in the store, run by a worker, each in its own child process.

The interface the app uses is small and backend-neutral (DESIGN §6): `submit_job`, `job_status`
(progress, message, result), `cancel_job`, `list_jobs`, `job_log`. The store is the single source of
truth; the local worker below is one backend that consumes the queue, and another (a Ray job
submitter, say) could claim the same rows and write the same columns.

Local worker (`run_worker`, `python -m eagle3dash worker`):
- claims one queued job at a time in a single atomic UPDATE ... RETURNING; a GPU job (`needs_gpu`)
  is not claimed while another GPU job runs, anywhere; CPU jobs go past it;
- starts `python -m eagle3dash.jobs run-one JOB` in a new session with stdout and stderr appended to
  `logs/<job>.log`; the child imports the job kinds, runs the kind's function with a
  `progress(fraction, message)` callback that writes to the job row, and writes the result or the
  traceback itself;
- heartbeats the job while the child lives, kills the child's process group on cancel, and marks
  the job failed with the reason when the child dies without a result (a signal, an OOM kill, a
  nonzero exit);
- at start (and now and then) fails jobs left running by a dead worker: a stale heartbeat, or a
  worker pid on this host that no longer lives.

Job kinds are a registry, `JOB_KINDS`, filled by `register_job_kind`. The child process fills it by
importing `eagle3dash.pipeline` (if present) and every module named in `EAGLE3DASH_JOB_MODULES`
(comma-separated), so a kind must be registered at import time of one of those modules.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import importlib.util
import logging
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from eagle3dash.errors import InputError
from eagle3dash.store import Store, decode_row, now_iso, open_store, parse_time, to_json

log = logging.getLogger(__name__)

ProgressFn = Callable[[float, str], None]  # progress(fraction 0..1, message)
JobFn = Callable[[dict, ProgressFn], dict | None]

JOB_KINDS: dict[str, JobFn] = {}
JOB_KIND_NEEDS_GPU: dict[str, bool] = {}
JOB_MODULES_ENV = "EAGLE3DASH_JOB_MODULES"
PIPELINE_MODULE = "eagle3dash.job_kinds"

STATUSES = ("queued", "running", "succeeded", "failed", "cancelled")
FINISHED = frozenset({"succeeded", "failed", "cancelled"})

STALE_AFTER_S = 60.0  # a running job whose heartbeat is older than this has lost its worker
HEARTBEAT_S = 2.0
CANCEL_GRACE_S = 3.0  # SIGTERM, then SIGKILL after this long
LOG_TAIL_BYTES = 64 * 1024
_PACKAGE_PARENT = str(Path(__file__).resolve().parent.parent)


class JobCancelled(BaseException):
    """Raised inside a job (by `progress` or SIGTERM) when the job is to stop."""


class UnknownJobKind(InputError):
    """A job names a kind no imported module registered."""


# --- registry ----------------------------------------------------------------------------------


def register_job_kind(name: str, fn: JobFn, needs_gpu: bool = False) -> None:
    """Register `fn(params, progress) -> result dict` as job kind `name`."""
    JOB_KINDS[name] = fn
    JOB_KIND_NEEDS_GPU[name] = needs_gpu


def job_modules() -> list[str]:
    """Job-kind modules: those in $EAGLE3DASH_JOB_MODULES, then eagle3dash.pipeline if present."""
    extra = os.environ.get(JOB_MODULES_ENV, "")
    names = list(dict.fromkeys(m.strip() for m in extra.split(",") if m.strip()))
    if PIPELINE_MODULE not in names and importlib.util.find_spec(PIPELINE_MODULE) is not None:
        names.append(PIPELINE_MODULE)
    return names


def load_job_kinds() -> dict[str, JobFn]:
    """Import every job module (see `job_modules`) and return the registry."""
    for name in job_modules():
        importlib.import_module(name)
    return JOB_KINDS


def resolve_job_kind(kind: str) -> JobFn:
    """The function of a job kind, importing job modules in order until one registers it.

    Stops at the first module that registers the kind, so a job of a light kind does not pay
    for importing a heavy module after it (eagle3dash.pipeline imports torch).
    """
    modules = job_modules()
    for name in [None, *modules]:
        if name is not None:
            importlib.import_module(name)
        if kind in JOB_KINDS:
            return JOB_KINDS[kind]
    raise UnknownJobKind(
        f"unknown job kind {kind!r}; registered: {sorted(JOB_KINDS) or 'none'} "
        f"(modules: {modules or 'none'}; add yours to ${JOB_MODULES_ENV})"
    )


# --- the interface the app uses ----------------------------------------------------------------


def submit_job(
    store: Store,
    kind: str,
    params: dict | None = None,
    run_id: int | None = None,
    needs_gpu: bool | None = None,
) -> int:
    """Queue a job; return its id. needs_gpu=None takes the kind's registered default."""
    if needs_gpu is None:
        needs_gpu = JOB_KIND_NEEDS_GPU.get(kind, False)
    with store.transaction() as db:
        table = db["jobs"].insert(
            {
                "run_id": run_id,
                "kind": kind,
                "status": "queued",
                "params_json": to_json(params or {}),
                "progress": 0.0,
                "message": "queued",
                "created_at": now_iso(),
                "needs_gpu": int(bool(needs_gpu)),
            }
        )
        job_id = int(table.last_pk)
        db.execute("UPDATE jobs SET log_path = ? WHERE id = ?", (_log_rel(job_id), job_id))
    return job_id


def job_status(store: Store, job_id: int) -> dict | None:
    """A job row: status, progress 0..1, message, `params`, `result`, error, times (or None)."""
    rows = list(store.db.query("SELECT * FROM jobs WHERE id = ?", (job_id,)))
    return decode_row(rows[0]) if rows else None


def job_result(store: Store, job_id: int) -> dict | None:
    """The result dict of a succeeded job, else None."""
    job = job_status(store, job_id)
    return job["result"] if job and job["status"] == "succeeded" else None


def list_jobs(store: Store, run_id: int | None = None, status: str | None = None) -> list[dict]:
    """Jobs (of one run, and/or in one status), oldest first."""
    clauses, params = [], []
    if run_id is not None:
        clauses.append("run_id = ?")
        params.append(run_id)
    if status is not None:
        clauses.append("status = ?")
        params.append(status)
    where = (" WHERE " + " AND ".join(clauses)) if clauses else ""
    return [decode_row(r) for r in store.db.query(f"SELECT * FROM jobs{where} ORDER BY id", params)]


def cancel_job(store: Store, job_id: int) -> str | None:
    """Cancel a job: a queued one at once, a running one via its worker; return the new status."""
    with store.transaction() as db:
        row = db.execute("SELECT status FROM jobs WHERE id = ?", (job_id,)).fetchone()
        if row is None:
            return None
        status = row[0]
        if status == "queued":
            db.execute(
                "UPDATE jobs SET status = 'cancelled', cancel_requested = 1, finished_at = ?, "
                "message = 'cancelled before it started' WHERE id = ?",
                (now_iso(), job_id),
            )
            return "cancelled"
        if status == "running":
            db.execute(
                "UPDATE jobs SET cancel_requested = 1, message = 'cancelling' WHERE id = ?",
                (job_id,),
            )
        return status


def job_log(store: Store, job_id: int, tail_bytes: int = LOG_TAIL_BYTES) -> str:
    """The last `tail_bytes` of a job's log ('' when there is none yet)."""
    job = job_status(store, job_id)
    if job is None or not job.get("log_path"):
        return ""
    path = store.path(job["log_path"])
    return _tail(path, tail_bytes)


def wait_for_job(store: Store, job_id: int, timeout: float = 60.0, poll: float = 0.05) -> dict:
    """Poll until the job is finished; its row. Raises TimeoutError after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        job = job_status(store, job_id)
        if job is None:
            raise InputError(f"no job {job_id}")
        if job["status"] in FINISHED:
            return job
        if time.monotonic() > deadline:
            raise TimeoutError(f"job {job_id} still {job['status']} after {timeout:.0f} s")
        time.sleep(poll)


def _log_rel(job_id: int) -> str:
    return f"logs/{int(job_id)}.log"


def _tail(path: Path, tail_bytes: int) -> str:
    try:
        with open(path, "rb") as f:
            size = f.seek(0, os.SEEK_END)
            start = max(0, size - tail_bytes)
            f.seek(start)
            data = f.read()
    except FileNotFoundError:
        return ""
    if start > 0:  # drop the cut first line
        cut = data.find(b"\n")
        data = data[cut + 1 :] if cut >= 0 else data
    return data.decode("utf-8", errors="replace")


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
    """Whether `pid` is still `python -m eagle3dash.jobs run-one JOB` (not a reused pid)."""
    try:
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return False
    return b"eagle3dash.jobs" in argv and b"run-one" in argv and str(job_id).encode() in argv


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
        cur = store.db.execute(
            "UPDATE jobs SET status = 'failed', error = ?, message = 'worker lost', "
            "finished_at = ? WHERE id = ? AND status = 'running'",
            (error, now_iso(), job["id"]),
        )
        if cur.rowcount:
            failed.append(job["id"])
            _append_log(store, job, f"[recover] job {job['id']} marked failed: {error}\n")
            child = job.get("child_pid")
            if job.get("worker_host") == host and child and _is_our_child(child, job["id"]):
                with contextlib.suppress(OSError):
                    os.killpg(child, signal.SIGKILL)
    return failed


def _append_log(store: Store, job: dict, text: str) -> None:
    path = store.path(job.get("log_path") or _log_rel(job["id"]))
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


def _start_child(store: Store, job: dict) -> _Child | None:
    """Start the child process of a claimed job; on failure mark the job failed."""
    job_id = job["id"]
    rel = job.get("log_path") or _log_rel(job_id)
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
        "eagle3dash.jobs",
        "run-one",
        str(job_id),
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


def _finish(
    store: Store,
    job_id: int,
    status: str,
    error: str | None = None,
    result: Any = None,
    message: str | None = None,
) -> bool:
    """Move a running job to a final status (no-op if it already has one); True if it did."""
    fields = {"status": status, "finished_at": now_iso(), "error": error}
    if message is not None:
        fields["message"] = message
    if status == "succeeded":
        fields["result_json"] = to_json(result if result is not None else {})
        fields["progress"] = 1.0
    sets = ", ".join(f"{k} = ?" for k in fields)
    cur = store.db.execute(
        f"UPDATE jobs SET {sets} WHERE id = ? AND status IN ('running', 'queued')",
        (*fields.values(), job_id),
    )
    return cur.rowcount > 0


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
            status, error, message = "cancelled", None, "cancelled"
        else:
            reason = child.stop_reason or _exit_reason(rc)
            tail = _tail(store.path(child.job.get("log_path") or _log_rel(job_id)), 2000).strip()
            error = reason + (f"\n--- end of the job log ---\n{tail}" if tail else "")
            status, message = "failed", reason
        _finish(store, job_id, status, error=error, message=message)
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
    store_home: str | os.PathLike[str] | None = None,
    poll_interval: float = 0.5,
    once: bool = False,
    stop_event: threading.Event | None = None,
    slots: int = 1,
    stale_after: float = STALE_AFTER_S,
    heartbeat_interval: float = HEARTBEAT_S,
    cancel_grace: float = CANCEL_GRACE_S,
) -> int:
    """Run queued jobs, `slots` at a time, each in a child process; return how many finished.

    `once`: return when no job is running and none can be claimed (drain the queue); otherwise
    run until `stop_event` is set, SIGTERM (in the main thread) or KeyboardInterrupt. Running
    children of a stopping worker are terminated and their jobs failed.
    """
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
                child = _start_child(store, job)
                if child is None:
                    finished += 1
                    continue
                children[job["id"]] = child
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

_current_job: dict | None = None


def current_job() -> dict | None:
    """Inside a job's child process: {'id', 'run_id', 'kind', 'home'} of the job; else None."""
    return _current_job


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
            with contextlib.suppress(Exception):
                _finish(store, job_id, "failed", error="abandoned: the worker exited")
            if os.getpgrp() == os.getpid():
                os.killpg(os.getpid(), signal.SIGKILL)
            os._exit(70)


def _on_sigterm(signum: int, frame: Any) -> None:
    raise JobCancelled("terminated (SIGTERM)")


def run_one(home: str | os.PathLike[str], job_id: int, parent_pid: int | None = None) -> int:
    """Run one claimed job in this process (the child side); return the exit code."""
    global _current_job
    import faulthandler

    faulthandler.enable()
    logging.basicConfig(
        level=logging.INFO,
        stream=sys.stderr,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        force=True,
    )
    store = open_store(home)
    job = job_status(store, job_id)
    if job is None or job["status"] != "running":
        print(f"job {job_id} is not running ({job and job['status']}); nothing to do")
        return 2
    _current_job = {"id": job_id, "run_id": job["run_id"], "kind": job["kind"], "home": store.home}
    if parent_pid:
        threading.Thread(
            target=_watch_parent, args=(store, job_id, parent_pid), daemon=True
        ).start()
    signal.signal(signal.SIGTERM, _on_sigterm)
    try:
        fn = resolve_job_kind(job["kind"])
        progress = _Progress(store, job_id)
        result = fn(job["params"] or {}, progress)
    except JobCancelled as e:
        cancel = store.db.execute(
            "SELECT cancel_requested FROM jobs WHERE id = ?", (job_id,)
        ).fetchone()
        if cancel and cancel[0]:
            print(f"job {job_id} cancelled", file=sys.stderr)
            _finish(store, job_id, "cancelled", message="cancelled")
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
        _finish(store, job_id, "failed", error=tb, message=f"{type(e).__name__}: {e}"[:500])
        return 1
    else:
        _finish(store, job_id, "succeeded", result=result, message="done")
        return 0
    finally:
        sys.stderr.flush()
        sys.stdout.flush()
        store.close()


def main(argv: list[str] | None = None) -> int:
    """`python -m eagle3dash.jobs run-one JOB --home H` (the child) or `... worker` (a worker)."""
    parser = argparse.ArgumentParser(prog="python -m eagle3dash.jobs")
    sub = parser.add_subparsers(dest="command", required=True)
    one = sub.add_parser("run-one", help="run one claimed job (started by the worker)")
    one.add_argument("job_id", type=int)
    one.add_argument("--home", default=None)
    one.add_argument("--parent-pid", type=int, default=None)
    work = sub.add_parser("worker", help="run queued jobs until interrupted")
    work.add_argument("--home", default=None)
    work.add_argument("--once", action="store_true", help="drain the queue, then exit")
    work.add_argument("--slots", type=int, default=1)
    work.add_argument("--poll", type=float, default=0.5)
    args = parser.parse_args(argv)
    if args.command == "run-one":
        home = args.home or os.environ.get("EAGLE3DASH_HOME")
        return run_one(home, args.job_id, args.parent_pid)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")
    try:
        run_worker(args.home, poll_interval=args.poll, once=args.once, slots=args.slots)
    except KeyboardInterrupt:
        return 130
    return 0


if __name__ == "__main__":
    # Run the imported module's main, not this __main__ copy: job modules register their kinds
    # into `eagle3dash.jobs.JOB_KINDS`, which must be the registry run_one reads.
    from eagle3dash.jobs import main as _main

    sys.exit(_main())
