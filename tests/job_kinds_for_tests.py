"""Job kinds for the job tests: JOB_KINDS is the table a test passes to `run_worker`;
ALL_KINDS adds those of the backend conformance suite (`once`, `gated`) and the store-fault
cases (`fill`, `fill-then`).

The worker's child process imports each kind's function by name, as it does for
eagle3dash.job_kinds.
"""

from __future__ import annotations

import logging
import os
import signal
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from eagle3dash.jobs import JobFn, ProgressFn
from eagle3dash.jobs.backend import JobBackend
from eagle3dash.store import Store, to_json, update_run

log = logging.getLogger("tests.job_kinds")


def echo(params: dict, progress: ProgressFn) -> dict:
    """Report progress, write to stdout, stderr and logging (and an HTTP client's request line,
    which the job process keeps out of its log), return the params."""
    progress(0.5, "halfway")
    print("hello on stdout")
    print("hello on stderr", file=sys.stderr)
    log.info("hello through logging")
    logging.getLogger("httpx").info("HTTP Request: GET http://gpubox:30000/health")
    return {"echo": params, "pid": os.getpid()}


def fail(params: dict, progress: ProgressFn) -> dict:
    """Raise after some progress."""
    progress(0.3, "about to fail")
    raise ValueError("boom from a test job")


def suicide(params: dict, progress: ProgressFn) -> dict:
    """Die by SIGKILL, as the OOM killer would kill it."""
    progress(0.1, "about to be killed")
    os.kill(os.getpid(), signal.SIGKILL)
    time.sleep(30)
    return {}


def sleepy(params: dict, progress: ProgressFn) -> dict:
    """Sleep in small steps, reporting progress at each."""
    steps, dt = int(params.get("steps", 100)), float(params.get("dt", 0.05))
    for i in range(steps):
        progress(i / steps, f"step {i} of {steps}")
        time.sleep(dt)
    return {"steps": steps}


def stubborn(params: dict, progress: ProgressFn) -> dict:
    """Ignore SIGTERM and never report progress: only SIGKILL stops it."""
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    progress(0.1, "ignoring SIGTERM")
    time.sleep(float(params.get("seconds", 30)))
    return {}


def interval(params: dict, progress: ProgressFn) -> dict:
    """Hold the (pretend) device for a while; return when it held it."""
    start = time.time()
    progress(0.5, "holding the device")
    time.sleep(float(params.get("seconds", 0.5)))
    return {"start": start, "end": time.time(), "name": params.get("name")}


def stages(params: dict, progress: ProgressFn) -> dict:
    """A pipeline-like job: stages inside one child, progress per stage."""
    names = ["inspect", "probe", "capture", "draft-eval"]
    for i, name in enumerate(names):
        progress(i / len(names), f"stage {i + 1}/{len(names)}: {name}")
    return {"stages": names}


JOB_KINDS: dict[str, JobFn] = {
    "test-echo": echo,
    "test-fail": fail,
    "test-suicide": suicide,
    "test-sleepy": sleepy,
    "test-stubborn": stubborn,
    "test-interval": interval,
    "test-gpu-interval": interval,  # submitted with needs_gpu=True
    "test-stages": stages,
}


def once(params: dict, progress: ProgressFn) -> dict:
    """Create `params["marker"]`, which must not exist: a job run twice fails the second time."""
    with open(params["marker"], "x") as f:
        f.write(str(os.getpid()))
    progress(0.5, "marked")
    time.sleep(float(params.get("seconds", 0.05)))
    return {"pid": os.getpid()}


def gated(params: dict, progress: ProgressFn) -> dict:
    """Stages 1..n, each marked on entry (`entered-<i>` in `params["dir"]`) and held until the
    test opens its gate (`gate-<i>`): a test can act while the job is in a stage it chose."""
    folder, n = Path(params["dir"]), int(params.get("stages", 4))
    for i in range(1, n + 1):
        (folder / f"entered-{i}").touch()
        while not (folder / f"gate-{i}").exists():
            progress((i - 1) / n, f"stage {i}/{n}")
            time.sleep(0.02)
    return {"stages": n}


def fill(params: dict, progress: ProgressFn) -> dict:
    """Write `params["path"]` until the disk is full, as a capture that outgrows its disk."""
    progress(0.1, "filling the disk")
    chunk = b"\0" * (64 << 10)
    with open(params["path"], "wb") as f:
        while True:
            f.write(chunk)
            f.flush()


def fill_disk(path: str | os.PathLike[str]) -> None:
    """Write `path` until its disk has no byte left (ever smaller writes after the first
    ENOSPC), as another program filling the disk would: the next write anyone makes there that
    needs room fails."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        size = 64 << 10
        while size:
            try:
                os.write(fd, b"\0" * size)
            except OSError:
                size //= 2
    finally:
        os.close(fd)


@dataclass(frozen=True)
class RunNote:
    """A job's result that writes onto its run when recorded (as a run's diagnosis does)."""

    run_id: int

    def record(self, store: Store) -> dict:
        """Write a note onto the run; the job's result."""
        update_run(store, self.run_id, diagnosis_json=to_json({"note": "recorded"}))
        return {"run_id": self.run_id}


def fill_then(params: dict, progress: ProgressFn) -> dict | RunNote:
    """Fill the disk (`params["path"]`), then make the job's next write: `params["then"]` is
    "progress" (a progress report), "result" (a result recorded onto the run) or "settle" (a
    plain result, written as the job settles)."""
    progress(0.1, "about to fill the disk")
    fill_disk(params["path"])
    then = params["then"]
    if then == "progress":
        progress(0.5, "the disk is full")
        return {}
    if then == "result":
        return RunNote(int(params["run_id"]))
    return {"filled": params["path"]}


def dies_once(params: dict, progress: ProgressFn) -> dict:
    """Die by SIGKILL the first time (its marker missing), succeed the next: a retried job."""
    marker = Path(params["marker"])
    progress(0.1, "starting")
    if not marker.exists():
        marker.touch()
        os.kill(os.getpid(), signal.SIGKILL)
    return {"second": True}


def opens_store(params: dict, progress: ProgressFn) -> dict:
    """Open the store at `params["home"]`: what a node without the store cannot do."""
    from eagle3dash.store import open_store

    open_store(params["home"]).close()
    return {"opened": True}


ALL_KINDS: dict[str, JobFn] = {
    **JOB_KINDS,
    "test-dies-once": dies_once,
    "test-once": once,
    "test-gated": gated,
    "test-fill": fill,
    "test-fill-then": fill_then,
    "test-opens-store": opens_store,
}


def warm_local_backend() -> JobBackend:
    """The local worker as `python -m eagle3dash worker` runs it: children forked from a server
    that imported torch and transformers once."""
    from eagle3dash.jobs.worker import LocalProcessBackend
    from eagle3dash.preloaded import HEAVY

    return LocalProcessBackend(preload=HEAVY)
