"""The job-backend contract, as every backend must keep it: progress, result and logs reach the
store; a job is claimed once; a backend killed mid-job leaves no job or run running; a cancel while
queued or in each stage of a job ends it cancelled; a backend whose heartbeat stops has its job
failed by the next one to look.

Parametrised over `BACKENDS`: each entry names a factory of a `JobBackend` by `module:attr`, so
that a backend instance can also run in its own process (to be killed or frozen). A new backend
(the Ray backend, `eagle3dash.jobs.ray_backend:RayBackend`, with `ray_cluster` started for it)
is one more entry. Real SQLite files, real processes; nothing is timed.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from eagle3dash.jobs import cancel_job, job_log, job_status, list_jobs, submit_job, wait_for_job
from eagle3dash.jobs.backend import JobBackend, ServeSettings, import_function, serve
from eagle3dash.jobs.lifecycle import CANCELLED_BEFORE_START, CANCELLED_WHILE_RUNNING, claim_job
from eagle3dash.store import Store, create_run, get_run, open_store
from tests.job_kinds_for_tests import ALL_KINDS
from tests.jobkit import ROOT, wait_until

BACKENDS = [
    "eagle3dash.jobs.worker:LocalProcessBackend",
    "tests.job_kinds_for_tests:warm_local_backend",  # children forked warm, as the CLI's worker
    "eagle3dash.jobs.ray_backend:RayBackend",  # on the `ray_cluster` fixture's local cluster
]
FAST = {"poll_interval": 0.02, "heartbeat_interval": 0.2, "cancel_grace": 1.0}
LONG = {"steps": 5000, "dt": 0.02}  # a job that runs until it is stopped
# A guard against a hang, not a timing: under `make test` the other worker may be running the real
# vLLM servers, and a Ray worker's first start then took over 30 s (CI, 2026-12-05).
DEADLINE = 120


@pytest.fixture(params=BACKENDS)
def backend(request) -> str:
    """The factory (`module:attr`) of the backend under test (Ray's: with its cluster up)."""
    if "ray_backend" in request.param:
        request.getfixturevalue("ray_cluster")
    return request.param


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    s = open_store(tmp_path / "home")
    yield s
    s.close()


def make(factory: str) -> JobBackend:
    return import_function(factory)()  # type: ignore[call-arg]


@contextlib.contextmanager
def instance(factory: str, store: Store, **settings) -> Iterator[threading.Thread]:
    """A backend instance serving the store in a thread of this process until the block ends."""
    stop = threading.Event()
    args = (make(factory), store.home, ALL_KINDS, ServeSettings(**{**FAST, **settings}))
    t = threading.Thread(target=serve, args=args, kwargs={"stop_event": stop}, daemon=True)
    t.start()
    try:
        yield t
    finally:
        stop.set()
        t.join(30)
        assert not t.is_alive()


_PROCESS = """
import sys
from eagle3dash.jobs.backend import ServeSettings, import_function, serve
from tests.job_kinds_for_tests import ALL_KINDS
settings = ServeSettings(**{k: float(v) for k, v in (a.split("=") for a in sys.argv[3:])})
serve(import_function(sys.argv[1])(), sys.argv[2], ALL_KINDS, settings)
"""


@contextlib.contextmanager
def instance_process(factory: str, store: Store, **settings) -> Iterator[subprocess.Popen]:
    """A backend instance in its own process (to kill or freeze); killed when the block ends."""
    args = [f"{k}={v}" for k, v in {**FAST, **settings}.items()]
    proc = subprocess.Popen(
        [sys.executable, "-c", _PROCESS, factory, str(store.home), *args],
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        yield proc
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(proc.pid, signal.SIGCONT)
            proc.kill()
        proc.wait()


def started(store: Store, job_id: int) -> dict:
    """The job's row once its function has reported progress."""
    return wait_until(
        lambda: (j := job_status(store, job_id))["progress"] > 0 and j,
        DEADLINE,  # a backend instance in a process of its own imports and connects first
        what="the job to start",
    )


def freeze(proc: subprocess.Popen, store: Store) -> None:
    """Stop `proc` (SIGSTOP) at a moment it holds no write lock on the store.

    A process stopped inside a write (a heartbeat's UPDATE takes about a millisecond) would
    hold SQLite's lock for as long as it stays stopped, and every other backend would wait on
    that lock instead of finding the heartbeat stale: a different test. So: stop it, take the
    lock once from here to show it is free, else let it finish its write and try again."""
    for _ in range(100):
        os.kill(proc.pid, signal.SIGSTOP)
        probe = sqlite3.connect(store.db_path, timeout=2.0, isolation_level=None)
        try:
            probe.execute("BEGIN IMMEDIATE")
            probe.execute("ROLLBACK")
            return
        except sqlite3.OperationalError:  # it holds the lock: let it finish
            os.kill(proc.pid, signal.SIGCONT)
            time.sleep(0.01)
        finally:
            probe.close()
    raise AssertionError("the backend kept the store's write lock through 100 tries")


def pid_gone(pid: int) -> bool:
    """Whether a process has exited (a zombie counts as gone)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True
    return stat.rsplit(")", 1)[1].split()[0] in ("Z", "X")


# --- progress, result and logs ----------------------------------------------------------------


def test_a_job_reports_progress_returns_its_result_and_logs(backend, store) -> None:
    run_id = create_run(store, None, None)
    job_id = submit_job(store, "test-echo", {"x": 1}, run_id=run_id)
    with instance(backend, store):
        job = wait_for_job(store, job_id, timeout=DEADLINE)
    assert job["status"] == "succeeded", job["error"]
    assert (job["progress"], job["result"]["echo"]) == (1.0, {"x": 1})
    text = job_log(store, job_id)
    for line in ("halfway", "hello on stdout", "hello on stderr", "hello through logging"):
        assert line in text
    assert get_run(store, run_id)["status"] == "succeeded" and job["heartbeat_at"] is not None


# --- a job claimed twice -----------------------------------------------------------------------


def test_racing_claims_take_each_job_once(store: Store) -> None:
    """Two connections claiming from one queue, in turns as a race would interleave them."""
    ids = [submit_job(store, "test-echo", {"i": i}) for i in range(6)]
    other = open_store(store.home)
    try:
        claimed = []
        while (job := claim_job(store, 1) or claim_job(other, 2)) is not None:
            claimed.append((job["id"], job["worker_pid"]))
    finally:
        other.close()
    assert sorted(i for i, _ in claimed) == ids
    assert claim_job(store, 1) is None


def test_two_instances_run_each_job_exactly_once(backend, store, tmp_path) -> None:
    markers = tmp_path / "markers"
    markers.mkdir()
    run_ids = [create_run(store, None, None) for _ in range(8)]
    ids = [
        submit_job(store, "test-once", {"marker": str(markers / str(i))}, run_id=run)
        for i, run in enumerate(run_ids)
    ]
    with instance_process(backend, store) as first, instance(backend, store):
        jobs = [wait_for_job(store, i, timeout=DEADLINE) for i in ids]
        assert first.poll() is None
    # A second execution of a job would find its marker and fail.
    assert [j["status"] for j in jobs] == ["succeeded"] * 8, [j["error"] for j in jobs]
    assert sorted(p.name for p in markers.iterdir()) == sorted(str(i) for i in range(8))
    assert [get_run(store, r)["status"] for r in run_ids] == ["succeeded"] * 8


# --- a backend killed mid-job ------------------------------------------------------------------


def test_a_backend_killed_mid_job_leaves_nothing_running(backend, store) -> None:
    run_id = create_run(store, None, None)
    job_id = submit_job(store, "test-sleepy", LONG, run_id=run_id)
    with instance_process(backend, store) as proc:
        started(store, job_id)
        assert get_run(store, run_id)["status"] == "running"
        proc.kill()  # SIGKILL: no cleanup
        proc.wait()
    after = submit_job(store, "test-echo", {})
    with instance(backend, store, stale_after=1.0):  # the next instance finds what was left
        job = wait_for_job(store, job_id, timeout=DEADLINE)
        assert wait_for_job(store, after, timeout=DEADLINE)["status"] == "succeeded"
    assert job["status"] == "failed" and job["error"].startswith("abandoned: "), job["error"]
    run = get_run(store, run_id)
    assert run["status"] == "failed" and run["error"].startswith("abandoned: ")


# --- a cancel in each stage of a job's life ----------------------------------------------------


def test_a_cancel_while_queued_never_starts_the_job(backend, store) -> None:
    run_id = create_run(store, None, None)
    job_id = submit_job(store, "test-echo", {}, run_id=run_id)
    assert cancel_job(store, job_id) == "cancelled"
    after = submit_job(store, "test-echo", {})
    with instance(backend, store):
        assert wait_for_job(store, after, timeout=DEADLINE)["status"] == "succeeded"
    job = job_status(store, job_id)
    assert (job["status"], job["started_at"], job["message"]) == (
        "cancelled",
        None,
        CANCELLED_BEFORE_START,
    )
    run = get_run(store, run_id)
    assert (run["status"], run["error"]) == ("cancelled", CANCELLED_BEFORE_START)


@pytest.mark.parametrize("stage", [1, 2, 3, 4])
def test_a_cancel_in_each_stage_stops_the_job_there(backend, store, tmp_path, stage) -> None:
    gates = tmp_path / "gates"
    gates.mkdir()
    for i in range(1, stage):  # the stages before this one pass
        (gates / f"gate-{i}").touch()
    run_id = create_run(store, None, None)
    job_id = submit_job(store, "test-gated", {"dir": str(gates), "stages": 4}, run_id=run_id)
    after = submit_job(store, "test-echo", {})
    with instance(backend, store):
        wait_until(
            lambda: job_status(store, job_id)["message"] == f"stage {stage}/4",
            DEADLINE,
            what=f"stage {stage}",
        )
        assert cancel_job(store, job_id) == "running"  # flagged; the backend stops it
        job = wait_for_job(store, job_id, timeout=DEADLINE)
        assert wait_for_job(store, after, timeout=DEADLINE)["status"] == "succeeded"
    assert (job["status"], job["message"], job["error"]) == (
        "cancelled",
        CANCELLED_WHILE_RUNNING,
        None,
    )
    entered = sorted(p.name for p in gates.glob("entered-*"))
    assert entered == [f"entered-{i}" for i in range(1, stage + 1)]  # no later stage began
    run = get_run(store, run_id)
    assert (run["status"], run["error"]) == ("cancelled", CANCELLED_WHILE_RUNNING)


# --- a heartbeat lost --------------------------------------------------------------------------


def test_a_lost_heartbeat_fails_the_job_once(backend, store) -> None:
    run_id = create_run(store, None, None)
    job_id = submit_job(store, "test-sleepy", LONG, run_id=run_id)
    with instance_process(backend, store) as frozen:
        job = started(store, job_id)
        freeze(frozen, store)  # alive, but it heartbeats no more
        with instance(backend, store, stale_after=1.5):
            failed = wait_for_job(store, job_id, timeout=DEADLINE)
        os.kill(frozen.pid, signal.SIGCONT)  # it wakes up to a job that is over
        wait_until(
            lambda: pid_gone(job["child_pid"]), DEADLINE, what="the lost job's executor to stop"
        )
        after = submit_job(store, "test-echo", {})
        assert (
            wait_for_job(store, after, timeout=DEADLINE)["status"] == "succeeded"
        )  # the woken one
        assert frozen.poll() is None
    assert failed["status"] == "failed"
    assert failed["error"].startswith("abandoned: no heartbeat for "), failed["error"]
    assert job_status(store, job_id)["error"] == failed["error"]  # nobody settled it again
    run = get_run(store, run_id)
    assert (run["status"], run["error"]) == ("failed", failed["error"])
    assert [j["status"] for j in list_jobs(store, run_id)] == ["failed"]
