"""The Ray backend: the worker as a Ray driver, each claimed job a Ray task on the cluster.

`python -m eagle3dash worker` with `EAGLE3DASH_JOBS=ray` (`make run JOBS=ray`) serves the store
with `RayBackend` through `backend.serve`, which claims, heartbeats, cancels, settles and recovers
as for the local worker. The store stays single-writer on the driver's machine: the task writes
nothing to it, and a run's diagnosis comes back as its result (a `lifecycle.Recordable`, pickled
by Ray) for the driver to record. This module adds where a job runs:
- `launch` submits `_execute` as a streaming-generator task with the job's resources (one GPU when
  the job needs one, one CPU otherwise, and the custom resources of `ray_resources` in its params)
  and no retry unless its params ask for one (`ray_retries`: Ray runs it again once on a lost
  worker or node); the task first checks that the paths its params name are readable on its
  node (one line naming node and path if not), then runs the job kind in a thread and yields
  batches of events: where it runs (node, host, GPU, pid), progress, its output lines, its end;
- `wait` takes what the task yielded: progress goes to `lifecycle.report_progress`, output to the
  job's log, the end to `lifecycle.settle_job`; a task that dies (its worker or node lost, out of
  memory) ends with Ray's own reason, which `serve` settles the job and its run with;
- an uploaded checkpoint (in the home's `checkpoints/`) is shipped through Ray's object store and
  unpacked by a node that cannot read the home (refused, with its size, over `SHIP_LIMIT`);
- `interrupt` is `ray.cancel` (KeyboardInterrupt in the task, which stops the job at its next
  progress call), `force` kills the task's worker;
- a driver that dies takes its tasks with it (Ray ends the tasks of a dead owner); the next
  instance fails its jobs by their dead driver pid (on this host) or stale heartbeat, and a
  frozen driver's task on this host is killed by its pid.

Only this module imports Ray; `cli.py worker` imports it when `EAGLE3DASH_JOBS=ray`. Ray finds
its cluster as `ray.init` does: `RAY_ADDRESS` (an address, `auto`, or `ray://...`), else a
local one started for the driver.
"""

from __future__ import annotations

import contextlib
import io
import logging
import os
import queue
import signal
import socket
import sqlite3
import threading
import time
import traceback
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import ray
import ray.exceptions

from eagle3dash.jobs import lifecycle
from eagle3dash.jobs.backend import JobBackend, LaunchError, import_function
from eagle3dash.jobs.lifecycle import Status
from eagle3dash.jobs.queue import JobCancelled, append_log, log_rel
from eagle3dash.jobs.worker import QUIET_LOGGERS, pid_alive
from eagle3dash.store import Store, now_iso

log = logging.getLogger(__name__)

NAMESPACE = "eagle3dash"
BATCH_S = 0.2  # the task yields what its job said at most this often
SHIP_LIMIT = 2 << 30  # an upload larger than this is refused rather than shipped to a node
# The params (and a diagnosis's options) that name files the job reads.
PATH_PARAMS = (
    "checkpoint",
    "capture",
    "draft",
    "draft_config",
    "target",
    "train_states",
    "prompts",
)

Event = tuple[Any, ...]


# --- the task (runs on a node of the cluster) --------------------------------------------------


def placement() -> dict[str, Any]:
    """Where this process runs: Ray node id, host name, GPU ids Ray gave it, pid."""
    ctx = ray.get_runtime_context()
    return {
        "node": ctx.get_node_id(),
        "host": socket.gethostname(),
        "gpu": [str(g) for g in ray.get_gpu_ids()],
        "pid": os.getpid(),
    }


def _options(params: dict[str, Any]) -> dict[str, Any]:
    given = params.get("options")
    return given if isinstance(given, dict) else {}


def param_paths(params: dict[str, Any]) -> list[str]:
    """The files a job's params (`PATH_PARAMS`, a diagnosis's options, `checkpoints`) name."""
    options = _options(params)
    values = [v for k in PATH_PARAMS for v in (params.get(k), options.get(k))]
    paths = [v for v in values if isinstance(v, str) and os.sep in v]  # not a prompt set's name
    return paths + [p for p in params.get("checkpoints") or () if isinstance(p, str)]


def unreadable_paths(params: dict[str, Any]) -> list[str]:
    """The paths a job's params name that are not readable here."""
    return [p for p in param_paths(params) if not os.access(p, os.R_OK)]


def without_home(params: dict[str, Any], home: str) -> tuple[dict[str, Any], str | None]:
    """A run's params for a node that cannot write the home: its serving capture, which a sweep
    reuses, is not kept (not written to this node's own disk); the line that says so."""
    options = _options(params)
    capture_dir = options.get("capture_dir")
    if not capture_dir or os.access(home, os.W_OK):
        return params, None
    line = f"the serving capture is not kept in {capture_dir}: the home {home} is not on this node"
    return {**params, "options": {**options, "capture_dir": None}}, line


def with_paths(params: dict[str, Any], moved: dict[str, str]) -> dict[str, Any]:
    """The params with each path of `moved` replaced by where it is now (options included)."""
    out = {k: moved.get(v, v) if isinstance(v, str) else v for k, v in params.items()}
    if "options" in out and isinstance(out["options"], dict):
        out["options"] = with_paths(out["options"], moved)
    if isinstance(out.get("checkpoints"), list):
        out["checkpoints"] = [moved.get(p, p) for p in out["checkpoints"]]
    return out


def pack_folder(path: str) -> dict[str, bytes]:
    """A file or folder's files by relative path ('' for a single file), to ship to a node."""
    root = Path(path)
    if root.is_file():
        return {"": root.read_bytes()}
    return {
        str(f.relative_to(root)): f.read_bytes() for f in sorted(root.rglob("*")) if f.is_file()
    }


def unpack_folder(files: dict[str, bytes], dest: Path) -> str:
    """Write shipped files under `dest`; the path that stands for the original."""
    if set(files) == {""}:
        dest.parent.mkdir(parents=True, exist_ok=True)
        dest.write_bytes(files[""])
        return str(dest)
    for rel, data in files.items():
        out = dest / rel
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_bytes(data)
    return str(dest)


def _receive(shipped: dict[str, Any], params: dict[str, Any]) -> dict[str, Any]:
    """Unpack the shipped uploads this node cannot read at their path; the params pointing at
    the copies (kept for the worker process's life, which is this one job's)."""
    import tempfile

    moved = {}
    for i, (path, ref) in enumerate(shipped.items()):
        if not os.access(path, os.R_OK):
            dest = Path(tempfile.mkdtemp(prefix="eagle3dash-shipped-")) / f"{i}-{Path(path).name}"
            moved[path] = unpack_folder(ray.get(ref), dest)
    return with_paths(params, moved) if moved else params


class _Lines(io.TextIOBase):
    """A text stream whose whole lines become log events."""

    def __init__(self, events: queue.Queue[Event]) -> None:
        self.events, self.buf = events, ""

    def write(self, text: str) -> int:
        self.buf += text
        if "\n" in self.buf:
            done, _, self.buf = self.buf.rpartition("\n")
            self.events.put(("log", done + "\n"))
        return len(text)


class _QueueHandler(logging.Handler):
    def __init__(self, events: queue.Queue[Event]) -> None:
        super().__init__(logging.INFO)
        self.events = events
        self.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))

    def emit(self, record: logging.LogRecord) -> None:
        self.events.put(("log", self.format(record) + "\n"))


def _run_job(
    fn_ref: str, params: dict, events: queue.Queue[Event], cancel: threading.Event
) -> None:
    """The job kind's function in this thread; its end as the last event."""

    said = [""]
    job_log = logging.getLogger("eagle3dash.job")

    def progress(fraction: float, message: str = "") -> None:
        f = float(fraction)
        f = 0.0 if f != f else min(1.0, max(0.0, f))
        if message and message != said[0]:  # the log tells the job's steps, as locally
            said[0] = message
            job_log.info("%3.0f%% %s", f * 100, message)
        events.put(("progress", f, message))
        if cancel.is_set():
            raise JobCancelled("cancel requested")

    try:
        result = import_function(fn_ref)(params, progress)
    except JobCancelled:
        events.put(("stopped",))
    except BaseException as e:
        tb = traceback.format_exc()
        events.put(("log", tb))
        events.put(("failed", tb, f"{type(e).__name__}: {e}"[:500]))
    else:
        events.put(("result", result))


def _execute(
    job_id: int, fn_ref: str, params: dict, home: str, shipped: dict[str, Any]
) -> Iterator[list[Event]]:
    """A job as a Ray task: where it runs, its shipped uploads unpacked when this node cannot
    read them, a refusal for unreadable inputs, then batches of the job's events until its end
    (its result, a run's diagnosis too, pickled back to the driver, which records it). It never
    opens the store: the node need not see the home."""
    where = placement()
    yield [("where", where)]
    params = _receive(shipped, params)
    missing = unreadable_paths(params)
    if missing:
        line = f"not readable on node {where['host']} ({where['node'][:12]}): {missing[0]}"
        yield [("log", line + "\n"), ("failed", line, line)]
        return
    params, not_kept = without_home(params, home)
    if not_kept:
        yield [("log", not_kept + "\n")]
    os.environ["EAGLE3DASH_JOB_ID"] = str(job_id)
    events: queue.Queue[Event] = queue.Queue()
    cancel = threading.Event()
    handler = _QueueHandler(events)
    root = logging.getLogger()
    root.addHandler(handler)
    root.setLevel(logging.INFO)
    for name in QUIET_LOGGERS:  # one INFO line per HTTP request would bury the job's own lines
        logging.getLogger(name).setLevel(logging.WARNING)
    lines = _Lines(events)
    thread = threading.Thread(target=_run_job, args=(fn_ref, params, events, cancel), daemon=True)
    try:
        with contextlib.redirect_stdout(lines), contextlib.redirect_stderr(lines):
            thread.start()
            ended = False
            while not ended:
                batch = _drain(events, BATCH_S)
                ended = any(e[0] in ("result", "failed", "stopped") for e in batch)
                if batch:
                    yield batch
    except KeyboardInterrupt:  # ray.cancel: the job stops at its next progress call
        cancel.set()
        thread.join(5)
        raise
    finally:
        root.removeHandler(handler)


def _drain(events: queue.Queue[Event], within: float) -> list[Event]:
    """What was queued within `within` s (progress: only the latest of a run of them)."""
    out: list[Event] = []
    deadline = time.monotonic() + within
    while True:
        left = deadline - time.monotonic()
        try:
            e = events.get(timeout=max(0.0, min(left, 0.05))) if left > 0 else events.get_nowait()
        except queue.Empty:
            if left <= 0:
                return out
            continue
        if e[0] == "progress" and out and out[-1][0] == "progress":
            out[-1] = e
        else:
            out.append(e)
        if e[0] in ("result", "failed", "stopped"):
            return out


# max_calls=1: a fresh worker process per job, as the local worker's child (a cancelled job's
# thread, a job's sys.path or environment never reach the next job)
_remote_execute = ray.remote(max_calls=1)(_execute)


# --- the driver --------------------------------------------------------------------------------


@dataclass
class _Task:
    job: dict
    store: Store
    gen: Any  # ray.ObjectRefGenerator
    ended: str | None = None
    where: dict | None = None


def _ray_reason(e: BaseException) -> str:
    """Ray's reason for a task that did not end by itself, in one line."""
    kinds = {
        ray.exceptions.NodeDiedError: "its node died",
        ray.exceptions.OutOfMemoryError: "out of memory (Ray's memory monitor killed it)",
        ray.exceptions.WorkerCrashedError: "its Ray worker crashed",
        ray.exceptions.TaskCancelledError: "cancelled (ray.cancel)",
        ray.exceptions.OwnerDiedError: "its driver died",
    }
    what = next((w for k, w in kinds.items() if isinstance(e, k)), type(e).__name__)
    first = next((ln.strip() for ln in str(e).splitlines() if ln.strip()), "")
    return f"Ray: {what}" + (f" ({first[:300]})" if first else "")


def init_ray(address: str | None = None) -> None:
    """Connect this process to its Ray cluster once (`RAY_ADDRESS` when `address` is None)."""
    if not ray.is_initialized():
        ray.init(address=address, namespace=NAMESPACE, log_to_driver=False)


def cluster_slots() -> int:
    """How many jobs to run at once on the connected cluster: its CPUs (at least one)."""
    return max(1, int(ray.cluster_resources().get("CPU", 1)))


class RayBackend(JobBackend):
    """Each job a Ray task on the cluster; this process its driver and the store's one writer."""

    name = "ray"

    def __init__(self, address: str | None = None, ship_limit: int = SHIP_LIMIT) -> None:
        init_ray(address)
        self.ship_limit = ship_limit

    def launch(self, store: Store, job: dict, fn_ref: str) -> _Task:
        """Submit a claimed job as a Ray task with the resources it needs."""
        job_id = job["id"]
        rel = job.get("log_path") or log_rel(job_id)
        params = job["params"] or {}
        resources: dict[str, Any] = {"num_gpus": 1} if job.get("needs_gpu") else {"num_cpus": 1}
        if params.get("ray_resources"):  # custom resources: a node label, a machine class
            resources["resources"] = dict(params["ray_resources"])
        append_log(
            store,
            {**job, "log_path": rel},
            f"[ray driver {os.getpid()}] {now_iso()} job {job_id} ({job['kind']}) submitted\n",
        )
        shipped = self._ship(store, params)
        try:
            gen = _remote_execute.options(
                num_returns="streaming",
                max_retries=int(params.get("ray_retries", 0)),
                retry_exceptions=False,
                name=f"eagle3dash-job-{job_id}",
                **resources,
            ).remote(job_id, fn_ref, params, str(store.home), shipped)
        except Exception as e:  # noqa: BLE001 - Ray refused the task: the job fails with why
            raise LaunchError(f"Ray refused the job's task: {e}") from None
        try:
            lifecycle.record_child(store, job_id, None, rel)
        except BaseException:  # the store refused: the job fails (`serve`) and never runs
            with contextlib.suppress(Exception):
                ray.cancel(gen, force=True)
            raise
        return _Task(job={**job, "log_path": rel}, store=store, gen=gen)

    def _ship(self, store: Store, params: dict[str, Any]) -> dict[str, Any]:
        """The uploads in the home a job reads, put in Ray's object store (path -> ref) for a
        node that cannot read the home; LaunchError naming one too large to ship."""
        uploads = store.home / "checkpoints"
        shipped = {}
        for path in param_paths(params):
            p = Path(path)
            if not p.is_relative_to(uploads) or not p.exists():
                continue
            files = [p] if p.is_file() else [f for f in p.rglob("*") if f.is_file()]
            size = sum(f.stat().st_size for f in files)
            if size > self.ship_limit:
                raise LaunchError(
                    f"the uploaded checkpoint {path} is {size / 2**20:.1f} MiB, over the "
                    f"{self.ship_limit / 2**20:.1f} MiB shipped through Ray's object store; "
                    "register it by a path every node can read"
                )
            shipped[path] = ray.put(pack_folder(path))
        return shipped

    def wait(self, handle: _Task, timeout: float | None) -> str | None:
        """Relay what the task yielded; None while it runs, else how it ended."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while handle.ended is None:
            if handle.gen.is_finished():
                handle.ended = "the Ray task ended without a result"
            elif handle.gen.next_ready():
                try:
                    events = ray.get(next(handle.gen))
                except StopIteration:
                    continue
                except (ray.exceptions.RayError, KeyboardInterrupt) as e:
                    handle.ended = _ray_reason(e)
                else:
                    self._relay(handle, events)
            elif deadline is not None and time.monotonic() >= deadline:
                return None
            else:
                time.sleep(0.02)
        return handle.ended

    def _relay(self, handle: _Task, events: list[Event]) -> None:
        store, job_id = handle.store, handle.job["id"]
        for event in events:
            kind = event[0]
            if kind == "where":
                handle.where = event[1]
                lifecycle.record_placement(store, job_id, event[1])
                w = event[1]
                gpu = ",".join(w["gpu"]) or "none"
                append_log(
                    store,
                    handle.job,
                    f"[ray] on node {w['node']} host {w['host']} gpu {gpu} pid {w['pid']}\n",
                )
            elif kind == "progress":
                lifecycle.report_progress(store, job_id, event[1], event[2])
            elif kind == "log":
                append_log(store, handle.job, event[1])
            elif kind == "result":
                self._succeed(handle, event[1])
            elif kind == "failed":
                lifecycle.settle_job(
                    store, job_id, Status.FAILED, error=event[1], message=event[2], reason=event[2]
                )

    def _succeed(self, handle: _Task, result: Any) -> None:
        """Settle the job with its result, recording a run's diagnosis here; a result that fails
        to record (other than a store fault, which `serve` waits out) fails the job."""
        store, job_id = handle.store, handle.job["id"]
        try:
            lifecycle.settle_job(store, job_id, Status.SUCCEEDED, result=result, message="done")
        except (sqlite3.Error, OSError):
            raise
        except Exception as e:  # noqa: BLE001 - the job's result could not be recorded: it fails
            tb = traceback.format_exc()
            append_log(store, handle.job, tb)
            line = f"its result could not be recorded: {type(e).__name__}: {e}"[:500]
            lifecycle.settle_job(store, job_id, Status.FAILED, error=tb, message=line, reason=line)

    def interrupt(self, handle: _Task, force: bool) -> None:
        """`ray.cancel` the task (force: kill its worker)."""
        with contextlib.suppress(Exception):
            ray.cancel(handle.gen, force=force)

    def release(self, handle: _Task, status: Status) -> None:
        """End the job's log with its status."""
        append_log(
            handle.store,
            handle.job,
            f"[ray driver {os.getpid()}] {now_iso()} job {handle.job['id']} {status}\n",
        )

    def lost(self, job: dict) -> str | None:
        """A job of a driver on this host whose pid no longer lives (its tasks died with it)."""
        pid = job.get("worker_pid")
        if job.get("worker_host") == socket.gethostname() and pid and not pid_alive(pid):
            return f"its Ray driver (pid {pid}) is gone, and Ray ended its task"
        return None

    def reap_orphan(self, job: dict) -> None:
        """Kill a lost job's task on this host by its Ray worker's pid (a frozen driver's)."""
        pid = job.get("child_pid")
        where = (job.get("placement") or {}).get("host")
        if pid and where == socket.gethostname() and _is_ray_worker(pid):
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)


def _is_ray_worker(pid: int) -> bool:
    """Whether `pid` is a Ray worker process (its title starts `ray::`), not a reused pid."""
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().startswith(b"ray::")
    except OSError:
        return False
