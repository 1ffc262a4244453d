"""The run and job lifecycle on a real SQLite file: each transition, and the ones refused."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from eagle3dash.jobs import job_status, submit_job
from eagle3dash.jobs.lifecycle import (
    CancelOutcome,
    Status,
    cancel_job,
    cancel_run,
    claim_job,
    report_progress,
    settle_job,
)
from eagle3dash.store import Store, create_run, get_run, open_store, update_run


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    s = open_store(tmp_path / "home")
    yield s
    s.close()


def run_and_job(store: Store) -> tuple[int, int]:
    run_id = create_run(store, None, None)
    return run_id, submit_job(store, "k", {}, run_id=run_id)


def statuses(store: Store, run_id: int, job_id: int) -> tuple[str, str]:
    return get_run(store, run_id)["status"], job_status(store, job_id)["status"]


def test_a_claim_starts_the_job_and_its_run(store: Store) -> None:
    run_id, job_id = run_and_job(store)
    job = claim_job(store, 4242, "box")
    assert (job["id"], job["worker_pid"], job["worker_host"]) == (job_id, 4242, "box")
    assert statuses(store, run_id, job_id) == ("running", "running")
    assert claim_job(store, 4242, "box") is None


def test_a_claim_leaves_a_finished_run_alone(store: Store) -> None:
    run_id, job_id = run_and_job(store)
    update_run(store, run_id, status="succeeded")
    claim_job(store, 1)
    assert statuses(store, run_id, job_id) == ("succeeded", "running")


@pytest.mark.parametrize(
    ("status", "fields", "run_error"),
    [
        (Status.SUCCEEDED, {"result": {"n": 1}}, None),
        (Status.FAILED, {"error": "tb", "message": "m", "reason": "r"}, "r"),
        (Status.FAILED, {"error": "tb", "message": "m"}, "tb"),
        (Status.FAILED, {"message": "m"}, "m"),
        (Status.CANCELLED, {"message": "cancelled while it ran"}, "cancelled while it ran"),
    ],
)
def test_a_settle_ends_the_run_with_its_job(store: Store, status, fields, run_error) -> None:
    run_id, job_id = run_and_job(store)
    claim_job(store, 1)
    assert settle_job(store, job_id, status, **fields) is True
    run, job = get_run(store, run_id), job_status(store, job_id)
    assert (run["status"], run["error"], job["status"]) == (status, run_error, status)
    assert job["result"] == ({"n": 1} if status == Status.SUCCEEDED else None)


def test_a_finished_job_and_run_never_change_again(store: Store) -> None:
    run_id, job_id = run_and_job(store)
    claim_job(store, 1)
    settle_job(store, job_id, Status.FAILED, error="first")
    assert settle_job(store, job_id, Status.SUCCEEDED, result={}) is False  # a late writer
    assert report_progress(store, job_id, 0.5, "late") is False
    run, job = get_run(store, run_id), job_status(store, job_id)
    assert (run["status"], run["error"]) == ("failed", "first")
    assert (job["status"], job["error"], job["message"]) == ("failed", "first", "started")


def test_a_job_settles_only_as_a_final_status(store: Store) -> None:
    _, job_id = run_and_job(store)
    with pytest.raises(ValueError, match="one of cancelled, failed, succeeded, not 'running'"):
        settle_job(store, job_id, Status.RUNNING)


def test_cancel_queued_running_and_finished(store: Store) -> None:
    queued_run, queued = run_and_job(store)
    assert cancel_job(store, queued, reason="its endpoint is gone") == "cancelled"
    run = get_run(store, queued_run)
    assert (run["status"], run["error"]) == ("cancelled", "its endpoint is gone")
    running_run, running = run_and_job(store)
    claim_job(store, 1)
    assert cancel_job(store, running) == "running"  # a flag for its backend
    assert report_progress(store, running, 0.1, "step") is True  # the job hears it
    assert statuses(store, running_run, running) == ("running", "running")
    assert cancel_job(store, queued) == "cancelled"  # finished: unchanged
    assert cancel_job(store, 999) is None


def test_cancel_run_says_what_it_did(store: Store) -> None:
    running_run, _ = run_and_job(store)
    queued_run, queued = run_and_job(store)
    claim_job(store, 1)  # takes the oldest: the first run's job
    assert cancel_run(store, queued_run) is CancelOutcome.CANCELLED
    assert cancel_run(store, running_run) is CancelOutcome.REQUESTED
    assert cancel_run(store, queued_run) is CancelOutcome.NOTHING
    assert get_run(store, queued_run)["error"] == "cancelled before it started"
    assert job_status(store, queued)["started_at"] is None


class _Note:
    """A Recordable result: writes how often it was recorded onto its run (its speedup column)."""

    def __init__(self, run_id: int) -> None:
        self.run_id, self.records = run_id, 0

    def record(self, store: Store) -> dict:
        self.records += 1
        update_run(store, self.run_id, speedup=float(self.records))
        return {"noted": self.run_id}


def test_a_recordable_result_is_recorded_once_by_the_settler_unless_the_job_ended(
    store: Store,
) -> None:
    """What `settle_job` does with a run's diagnosis returned by its job: records it, then keeps
    what `record` said as the job's result; a job already ended (cancelled) records nothing."""
    run_id, job_id = run_and_job(store)
    claim_job(store, 1)
    note = _Note(run_id)
    assert settle_job(store, job_id, Status.SUCCEEDED, result=note) is True
    assert note.records == 1 and job_status(store, job_id)["result"] == {"noted": run_id}
    assert get_run(store, run_id)["speedup"] == 1.0
    assert settle_job(store, job_id, Status.SUCCEEDED, result=note) is False
    assert note.records == 1  # a late second settle records nothing

    other_run, other_job = run_and_job(store)
    claim_job(store, 1)
    cancel_job(store, other_job)
    settle_job(store, other_job, Status.CANCELLED)
    late = _Note(other_run)
    assert settle_job(store, other_job, Status.SUCCEEDED, result=late) is False
    assert late.records == 0 and get_run(store, other_run)["status"] == "cancelled"
