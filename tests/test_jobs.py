"""The job queue and worker on a real SQLite file, with real child processes."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from eagle3dash.diagnosis.options import DiagnoseOptions
from eagle3dash.jobs import (
    BusyServer,
    busy_servers,
    cancel_job,
    job_log,
    job_result,
    job_status,
    list_jobs,
    submit_job,
    wait_for_job,
)
from eagle3dash.jobs.lifecycle import claim_job
from eagle3dash.jobs.worker import pid_alive, recover_stale_jobs, run_worker
from eagle3dash.store import Store, create_run, get_run, list_runs, now_iso, open_store, update_run
from eagle3dash.submit import submit_diagnosis
from tests.job_kinds_for_tests import JOB_KINDS
from tests.jobkit import POLL, start_worker, wait_until


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    s = open_store(tmp_path / "home")
    yield s
    s.close()


@contextlib.contextmanager
def worker_thread(store: Store, **kwargs) -> Iterator[threading.Thread]:
    """A worker looping in a thread of this process until the block ends."""
    stop = threading.Event()
    kw = {"poll_interval": POLL, "stop_event": stop, **kwargs}
    t = threading.Thread(target=run_worker, args=(store.home, JOB_KINDS), kwargs=kw, daemon=True)
    t.start()
    try:
        yield t
    finally:
        stop.set()
        t.join(15)
        assert not t.is_alive()


def test_job_succeeds_with_result_progress_and_log(store: Store) -> None:
    run_id = create_run(store, None, "http://127.0.0.1:1")
    job_id = submit_job(store, "test-echo", {"x": 1}, run_id=run_id)
    queued = job_status(store, job_id)
    assert queued["status"] == "queued"
    assert queued["params"] == {"x": 1} and queued["needs_gpu"] is False

    assert run_worker(store.home, JOB_KINDS, poll_interval=POLL, once=True) == 1

    job = job_status(store, job_id)
    assert job["status"] == "succeeded", job["error"]
    assert job["progress"] == 1.0
    assert job["result"]["echo"] == {"x": 1}
    assert job_result(store, job_id) == job["result"]
    assert job["result"]["pid"] != os.getpid()  # it ran in a child process
    assert job["started_at"] and job["finished_at"] and job["heartbeat_at"]
    assert job["log_path"] == f"logs/{job_id}.log"
    assert (store.home / "logs" / f"{job_id}.log").is_file()
    text = job_log(store, job_id)
    for line in ("hello on stdout", "hello on stderr", "hello through logging", "halfway"):
        assert line in text
    assert "HTTP Request" not in text  # httpx's INFO lines stay out of job logs
    assert [j["id"] for j in list_jobs(store, run_id)] == [job_id]
    assert job_log(store, job_id, tail_bytes=40) in text


def test_raising_job_fails_with_traceback(store: Store) -> None:
    run_id = create_run(store, None, None)
    job_id = submit_job(store, "test-fail", {}, run_id=run_id)
    run_worker(store.home, JOB_KINDS, poll_interval=POLL, once=True)
    job = job_status(store, job_id)
    assert job["status"] == "failed"
    assert "Traceback (most recent call last)" in job["error"]
    assert "ValueError: boom from a test job" in job["error"]
    assert job["message"].startswith("ValueError")
    assert job_result(store, job_id) is None
    assert "ValueError: boom from a test job" in job_log(store, job_id)
    run = get_run(store, run_id)
    assert (run["status"], run["error"]) == ("failed", "ValueError: boom from a test job")


def test_a_finished_run_keeps_its_status_when_a_later_job_fails(store: Store) -> None:
    run_id = create_run(store, None, None)
    update_run(store, run_id, status="succeeded")
    submit_job(store, "test-fail", {}, run_id=run_id)
    run_worker(store.home, JOB_KINDS, poll_interval=POLL, once=True)
    run = get_run(store, run_id)
    assert (run["status"], run["error"]) == ("succeeded", None)


def test_killed_child_fails_and_the_worker_goes_on(store: Store) -> None:
    killed = submit_job(store, "test-suicide", {})
    raising = submit_job(store, "test-fail", {})
    fine = submit_job(store, "test-echo", {"after": "failures"})
    assert run_worker(store.home, JOB_KINDS, poll_interval=POLL, once=True) == 3

    job = job_status(store, killed)
    assert job["status"] == "failed"
    assert "SIGKILL" in job["error"] and "out of memory" in job["error"]
    assert "about to be killed" in job["error"]  # the end of the log comes with it
    assert job_status(store, raising)["status"] == "failed"
    assert job_status(store, fine)["status"] == "succeeded"
    assert job_status(store, fine)["result"]["echo"] == {"after": "failures"}


def test_unknown_kind_fails_with_a_clear_message(store: Store) -> None:
    job_id = submit_job(store, "no-such-kind", {})
    run_worker(store.home, JOB_KINDS, poll_interval=POLL, once=True)
    job = job_status(store, job_id)
    assert job["status"] == "failed"
    assert job["error"] == (
        "unknown job kind 'no-such-kind'; this worker runs: test-echo, test-fail, "
        "test-gpu-interval, test-interval, test-sleepy, test-stages, test-stubborn, test-suicide"
    )
    assert job["child_pid"] is None  # no process was started for it


def test_pipeline_stages_report_progress_messages(store: Store) -> None:
    job_id = submit_job(store, "test-stages", {})
    run_worker(store.home, JOB_KINDS, poll_interval=POLL, once=True)
    assert job_status(store, job_id)["result"]["stages"][-1] == "draft-eval"
    text = job_log(store, job_id)
    for n, name in enumerate(["inspect", "probe", "capture", "draft-eval"], 1):
        assert f"stage {n}/4: {name}" in text


def test_cancel_queued_job(store: Store) -> None:
    job_id = submit_job(store, "test-echo", {})
    assert cancel_job(store, job_id) == "cancelled"
    assert run_worker(store.home, JOB_KINDS, poll_interval=POLL, once=True) == 0
    job = job_status(store, job_id)
    assert job["status"] == "cancelled" and job["started_at"] is None
    assert job["message"] == "cancelled before it started"
    assert cancel_job(store, job_id) == "cancelled"  # idempotent
    assert cancel_job(store, 999) is None


def test_cancel_running_job(store: Store) -> None:
    run_id = create_run(store, None, None)
    job_id = submit_job(store, "test-sleepy", {"steps": 500, "dt": 0.02}, run_id=run_id)
    with worker_thread(store):
        job = wait_until(
            lambda: (j := job_status(store, job_id))["progress"] > 0 and j,
            what="the job to report progress",
        )
        assert job["status"] == "running"
        assert job["message"].startswith("step ")
        assert cancel_job(store, job_id) == "running"  # flagged; the worker stops it
        t0 = time.monotonic()
        job = wait_for_job(store, job_id, timeout=10)
        assert time.monotonic() - t0 < 5
    assert job["status"] == "cancelled"
    assert job["progress"] < 1.0
    assert not pid_alive(job["child_pid"])
    run = get_run(store, run_id)
    assert (run["status"], run["error"]) == ("cancelled", "cancelled while it ran")
    assert job["message"] == "cancelled while it ran" and job["error"] is None


def test_cancel_kills_a_job_that_ignores_sigterm(store: Store) -> None:
    job_id = submit_job(store, "test-stubborn", {"seconds": 30})
    after = submit_job(store, "test-echo", {})
    with worker_thread(store, cancel_grace=0.3):
        wait_until(lambda: job_status(store, job_id)["progress"] > 0, what="the job to start")
        cancel_job(store, job_id)
        assert wait_for_job(store, job_id, timeout=10)["status"] == "cancelled"
        assert wait_for_job(store, after, timeout=10)["status"] == "succeeded"
    assert not pid_alive(job_status(store, job_id)["child_pid"])


def test_stopping_the_worker_fails_its_running_job(store: Store) -> None:
    job_id = submit_job(store, "test-sleepy", {"steps": 500, "dt": 0.02})
    with worker_thread(store):
        wait_until(lambda: job_status(store, job_id)["progress"] > 0, what="the job to start")
    job = job_status(store, job_id)
    assert job["status"] == "failed"
    assert "the worker stopped" in job["error"]


def _set_running(store: Store, job_id: int, pid: int, host: str, beat: datetime) -> None:
    stamp = beat.strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    store.db.execute(
        "UPDATE jobs SET status = 'running', worker_pid = ?, worker_host = ?, started_at = ?, "
        "heartbeat_at = ? WHERE id = ?",
        (pid, host, stamp, stamp, job_id),
    )


def test_recover_fails_jobs_of_dead_workers(store: Store) -> None:
    here = socket.gethostname()
    now = datetime.now(UTC)
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()  # exited and reaped: its pid is free
    alive = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        dead_pid = submit_job(store, "test-echo", {})
        _set_running(store, dead_pid, dead.pid, here, now)
        stale_elsewhere = submit_job(store, "test-echo", {})
        _set_running(store, stale_elsewhere, 1234, "other-box", now - timedelta(minutes=10))
        fresh_elsewhere = submit_job(store, "test-echo", {})
        _set_running(store, fresh_elsewhere, 1234, "other-box", now)
        live_here = submit_job(store, "test-echo", {})
        _set_running(store, live_here, alive.pid, here, now)

        assert sorted(recover_stale_jobs(store, stale_after=60)) == [dead_pid, stale_elsewhere]
        assert "is gone" in job_status(store, dead_pid)["error"]
        assert "no heartbeat for 600 s" in job_status(store, stale_elsewhere)["error"]
        assert job_status(store, fresh_elsewhere)["status"] == "running"
        assert job_status(store, live_here)["status"] == "running"
        assert recover_stale_jobs(store, stale_after=60) == []
    finally:
        alive.kill()
        alive.wait()
    # a worker starting up recovers too, then runs the queue
    queued = submit_job(store, "test-echo", {})
    run_worker(store.home, JOB_KINDS, poll_interval=POLL, once=True)
    assert job_status(store, live_here)["status"] == "failed"
    assert job_status(store, queued)["status"] == "succeeded"


def test_child_fails_its_job_when_the_worker_is_killed(store: Store) -> None:
    run_id = create_run(store, None, None)
    job_id = submit_job(store, "test-sleepy", {"steps": 1000, "dt": 0.02}, run_id=run_id)
    worker = start_worker(store.home)
    try:
        job = wait_until(
            lambda: (j := job_status(store, job_id))["progress"] > 0 and j,
            what="the job to start",
        )
        assert job["worker_pid"] == worker.pid
        worker.kill()  # SIGKILL: no cleanup in the worker
        worker.wait()
        job = wait_for_job(store, job_id, timeout=10)
    finally:
        if worker.poll() is None:
            worker.kill()
            worker.wait()
    reason = f"abandoned: the worker (pid {worker.pid}) exited while the job ran"
    assert (job["status"], job["error"]) == ("failed", reason)
    wait_until(lambda: not pid_alive(job["child_pid"]), what="the orphaned child to exit")
    run = get_run(store, run_id)
    assert (run["status"], run["error"]) == ("failed", reason)
    # The job's log ends with why it stopped.
    assert job_log(store, job_id).rstrip().endswith(f"{reason}; stopping")


def _running_job(store: Store, run_id: int) -> dict:
    """Queue a long job of the run; once its child reports progress, return the job's row (the
    claim started the run with it)."""
    job_id = submit_job(store, "test-sleepy", {"steps": 1000, "dt": 0.02}, run_id=run_id)
    job = wait_until(
        lambda: (j := job_status(store, job_id))["progress"] > 0 and j,
        what="the job to start",
    )
    assert get_run(store, run_id)["status"] == "running"
    return job


def test_kill_9_of_the_child_fails_its_run(store: Store) -> None:
    run_id = create_run(store, None, "http://127.0.0.1:1")
    with worker_thread(store):
        job = _running_job(store, run_id)
        os.kill(job["child_pid"], signal.SIGKILL)
        job = wait_for_job(store, job["id"], timeout=10)
    reason = (
        "the job process was killed by SIGKILL "
        "(out of memory? the kernel's OOM killer sends SIGKILL)"
    )
    assert job["status"] == "failed" and job["error"].startswith(reason)
    run = get_run(store, run_id)
    assert (run["status"], run["error"]) == ("failed", reason)
    assert [(r["id"], r["status"]) for r in list_runs(store)] == [(run_id, "failed")]


def test_kill_9_of_worker_and_child_fails_the_run_at_recovery(store: Store) -> None:
    run_id = create_run(store, None, "http://127.0.0.1:1")
    worker = start_worker(store.home)
    try:
        job = _running_job(store, run_id)
        # Stopped first so that it cannot reap the child: both die without a word, as in a
        # `kill -9` of the whole worker, and only recovery can tell.
        os.kill(worker.pid, signal.SIGSTOP)
        os.killpg(job["child_pid"], signal.SIGKILL)
        wait_until(lambda: not pid_alive(job["child_pid"]), what="the child to die")
        worker.kill()
        worker.wait()
    finally:
        if worker.poll() is None:
            worker.kill()
            worker.wait()
    assert job_status(store, job["id"])["status"] == "running"  # nobody recorded it
    assert get_run(store, run_id)["status"] == "running"
    assert run_worker(store.home, JOB_KINDS, poll_interval=POLL, once=True) == 0  # recovers
    error = f"abandoned: its worker (pid {worker.pid}) is gone; the job did not finish"
    assert job_status(store, job["id"])["error"] == error
    run = get_run(store, run_id)
    assert (run["status"], run["error"]) == ("failed", error)
    assert [(r["id"], r["status"]) for r in list_runs(store)] == [(run_id, "failed")]


def test_claim_runs_one_gpu_job_at_a_time(store: Store) -> None:
    gpu1 = submit_job(store, "test-gpu-interval", {}, needs_gpu=True)
    gpu2 = submit_job(store, "test-gpu-interval", {}, needs_gpu=True)
    cpu = submit_job(store, "test-interval", {})
    assert job_status(store, gpu1)["needs_gpu"] is True
    assert job_status(store, cpu)["needs_gpu"] is False
    assert claim_job(store, os.getpid())["id"] == gpu1
    assert (
        claim_job(store, os.getpid())["id"] == cpu
    )  # the second GPU job waits, CPU jobs go past it
    assert claim_job(store, os.getpid()) is None
    store.db.execute("UPDATE jobs SET status = 'succeeded' WHERE id = ?", (gpu1,))
    assert claim_job(store, os.getpid())["id"] == gpu2


def test_two_gpu_jobs_never_overlap_with_two_slots(store: Store) -> None:
    gpu = [
        submit_job(store, "test-gpu-interval", {"seconds": 0.2, "name": f"g{i}"}, needs_gpu=True)
        for i in (1, 2)
    ]
    submit_job(store, "test-interval", {"seconds": 0.2, "name": "c"})  # a CPU job beside them
    assert run_worker(store.home, JOB_KINDS, poll_interval=POLL, once=True, slots=2) == 3
    g1, g2 = (job_status(store, i)["result"] for i in gpu)
    assert g1["end"] <= g2["start"]  # the second GPU job started after the first ended


def test_a_cpu_job_goes_past_a_gpu_job_that_waits_for_the_gpu(store: Store) -> None:
    # the scheduling claim itself, without the clock: what claim_job hands out, in order
    g1, g2 = (submit_job(store, "test-interval", {}, needs_gpu=True) for _ in range(2))
    cpu = submit_job(store, "test-interval", {})
    assert claim_job(store, os.getpid())["id"] == g1
    assert claim_job(store, os.getpid())["id"] == cpu  # g2 waits for the GPU; the CPU job not
    assert claim_job(store, os.getpid()) is None
    store.db.execute("UPDATE jobs SET status = 'succeeded' WHERE id = ?", (g1,))
    assert claim_job(store, os.getpid())["id"] == g2


def test_no_server_is_measured_by_two_jobs_at_once(store: Store) -> None:
    endpoint, baseline, other = (f"http://127.0.0.1:{port}" for port in (30000, 30001, 30002))
    first = submit_job(store, "test-interval", {}, servers=[endpoint, baseline])
    shares_baseline = submit_job(store, "test-interval", {}, servers=[baseline])
    elsewhere = submit_job(store, "test-interval", {}, servers=[other])
    no_server = submit_job(store, "test-interval", {})
    assert job_status(store, first)["servers"] == [endpoint, baseline]
    assert claim_job(store, os.getpid())["id"] == first
    assert busy_servers(store, shares_baseline) == [BusyServer(baseline, first, None)]
    assert busy_servers(store, elsewhere) == []
    # the second waits for the baseline; jobs on other servers, or none, go past it
    assert claim_job(store, os.getpid())["id"] == elsewhere
    assert claim_job(store, os.getpid())["id"] == no_server
    assert claim_job(store, os.getpid()) is None
    store.db.execute("UPDATE jobs SET status = 'failed' WHERE id = ?", (first,))
    assert claim_job(store, os.getpid())["id"] == shares_baseline


def test_two_jobs_on_one_server_never_overlap_with_two_slots(store: Store) -> None:
    server = "http://127.0.0.1:30000"
    params = {"seconds": 0.2}
    one, two = (submit_job(store, "test-interval", params, servers=[server]) for _ in range(2))
    apart = submit_job(store, "test-interval", params, servers=["http://127.0.0.1:30009"])
    assert run_worker(store.home, JOB_KINDS, poll_interval=POLL, once=True, slots=2) == 3
    a, b = (job_status(store, i)["result"] for i in (one, two))
    assert a["end"] <= b["start"]  # the second started after the first ended
    # that the other server's job goes past the waiting one: the claims in the test above
    assert job_status(store, apart)["status"] == "succeeded"


def test_a_diagnosis_names_its_endpoint_and_baseline_as_the_servers_it_measures(
    store: Store, tmp_path: Path
) -> None:
    endpoint, baseline = "http://localhost:30000", "http://127.0.0.1:30001"
    with_baseline = DiagnoseOptions(draft=str(tmp_path), endpoint=endpoint, baseline=baseline)
    without = DiagnoseOptions(draft=str(tmp_path), endpoint="http://gpubox:30000")
    runs = [submit_diagnosis(store, None, o) for o in (with_baseline, without)]
    # by host, port and path: localhost and 127.0.0.1 are one machine
    assert [list_jobs(store, r)[0]["servers"] for r in runs] == [
        ["127.0.0.1:30000", "127.0.0.1:30001"],
        ["gpubox:30000"],
    ]


def test_submit_and_status_need_no_worker(store: Store) -> None:
    ids = [submit_job(store, "test-echo", {"i": i}) for i in range(3)]
    assert [j["id"] for j in list_jobs(store)] == ids
    assert [j["id"] for j in list_jobs(store, status="queued")] == ids
    assert job_status(store, 12345) is None
    assert job_log(store, ids[0]) == ""  # nothing ran yet
    assert submit_job(store, "test-echo", {}, needs_gpu=True) > ids[-1]
    now = now_iso()
    assert now.endswith("Z")


def noop(params: dict, progress) -> dict:
    """A module-level function: a child process can import it by name."""
    return {}


def test_a_kind_must_be_importable_by_name(store: Store) -> None:
    with pytest.raises(ValueError, match="importable by name"):
        run_worker(store.home, {"inline": lambda params, progress: {}}, once=True)
    assert run_worker(store.home, {"noop": noop}, once=True) == 0  # nothing queued
