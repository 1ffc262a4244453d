"""A run's and its jobs' lifecycle in one place: queued -> running -> succeeded/failed/cancelled.

Every status change of a job or a run is made here, in one transaction with whatever it implies:
- `claim_job`: the oldest startable queued job becomes running, and its run with it;
- `report_progress`, `heartbeat`: a running job's fraction, message and liveness (no transition);
- `cancel_job` / `cancel_run`: a queued job is cancelled at once (its run too); a running one is
  flagged, and its backend stops it and settles it;
- `settle_job`: a job ends (succeeded, failed or cancelled) and its unfinished run ends with it;
  a `Recordable` result (a run's diagnosis) is recorded first, by the process that settles the job:
  the local worker's child, or the Ray driver for a task on another node (which writes nothing).

A full disk never leaves a job running: a claim or a settle that the disk refuses deletes the
home's reserve (`store_faults.RESERVE_NAME`) and fails the job and its run in that room, with the
one line naming the disk (a success's result may not fit there, so it is not recorded).

A transition only ever leaves an unfinished status: a finished job or run never changes again, so
a late writer (a child settling after recovery failed its job, a second backend) changes nothing.
The backends, the demo seed and the pages call these; a job kind writes no status (its backend
started its run with it and settles both), and no other module writes one.
"""

from __future__ import annotations

import enum
import socket
import sqlite3
from collections.abc import Iterable
from typing import Any, Protocol, runtime_checkable

from eagle3dash.store import Store, decode_row, now_iso, to_json
from eagle3dash.store_faults import classify, is_disk_full, release_reserve


class Status(enum.StrEnum):
    """The status of a job and of a run (the same five words, stored as text)."""

    QUEUED = "queued"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELLED = "cancelled"


STATUSES = tuple(Status)
UNFINISHED = frozenset({Status.QUEUED, Status.RUNNING})
FINISHED = frozenset(STATUSES) - UNFINISHED
# Why a job (and its run) was cancelled: a user asked, before or while it ran.
CANCELLED_BEFORE_START = "cancelled before it started"
CANCELLED_WHILE_RUNNING = "cancelled while it ran"


@runtime_checkable
class Recordable(Protocol):
    """A job's result that only the store's writer records (a run's diagnosis, its files): the
    job returns it, `settle_job` records it, and the job's stored result is what `record` says."""

    def record(self, store: Store) -> dict:
        """Write this result into the store and the home; the job's result to keep."""


class CancelOutcome(enum.Enum):
    """What a cancel did: nothing left to cancel, cancelled at once, or asked of a backend."""

    NOTHING = "nothing"
    CANCELLED = "cancelled"
    REQUESTED = "requested"


_UNFINISHED_SQL = "('queued', 'running')"

_CLAIM = """
UPDATE jobs SET status = 'running', worker_pid = ?, worker_host = ?, started_at = ?,
    heartbeat_at = ?, message = 'started', progress = 0
WHERE id = (
    SELECT q.id FROM jobs AS q
    WHERE q.status = 'queued'
      AND (q.needs_gpu = 0 OR NOT EXISTS (
          SELECT 1 FROM jobs AS g WHERE g.status = 'running' AND g.needs_gpu = 1))
      AND NOT EXISTS (
          SELECT 1 FROM jobs AS r, json_each(r.servers_json) AS busy,
              json_each(q.servers_json) AS wanted
          WHERE r.status = 'running' AND busy.value = wanted.value)
    ORDER BY q.id LIMIT 1)
  AND status = 'queued'
RETURNING *
"""

_SETTLE_RUN = f"""
UPDATE runs SET status = ?, error = ?
WHERE id = (SELECT run_id FROM jobs WHERE id = ?) AND status IN {_UNFINISHED_SQL}
"""


def claim_job(store: Store, worker_pid: int, worker_host: str | None = None) -> dict | None:
    """Atomically take the oldest startable queued job (GPU jobs one at a time, and no server
    measured by two jobs at once) and start its run; the job's row, or None when nothing can
    start. On a full disk that job fails at once with its run (one line naming the disk, in the
    room the home's reserve makes), and None."""
    now = now_iso()
    host = socket.gethostname() if worker_host is None else worker_host
    try:
        return _claim(store, worker_pid, host, now)
    except sqlite3.Error as e:
        line = _room_for_failure(store, e)
        with store.transaction():  # claimed and failed in one commit: it never runs
            job = _claim(store, worker_pid, host, now)
            if job is not None:
                _settle(store, job["id"], _failed(line), line)
        return None


def _claim(store: Store, worker_pid: int, host: str, now: str) -> dict | None:
    with store.transaction() as db:
        cur = db.conn.execute(_CLAIM, (worker_pid, host, now, now))
        rows = cur.fetchall()
        if not rows:
            return None
        keys = [d[0] for d in cur.description]
        job = decode_row(dict(zip(keys, rows[0], strict=True)))
        if job["run_id"] is not None:
            db.execute(
                "UPDATE runs SET status = 'running' WHERE id = ? AND status = 'queued'",
                (job["run_id"],),
            )
    return job


def record_child(store: Store, job_id: int, child_pid: int | None, log_path: str) -> None:
    """Record the process (or task) that runs a claimed job and where its log goes."""
    store.db.execute(
        "UPDATE jobs SET child_pid = ?, log_path = ? WHERE id = ?", (child_pid, log_path, job_id)
    )


def record_placement(store: Store, job_id: int, placement: dict[str, Any]) -> None:
    """Record where a job runs (node, host, GPU, pid); its pid is the job's child pid."""
    store.db.execute(
        "UPDATE jobs SET placement_json = ?, child_pid = ? WHERE id = ?",
        (to_json(placement), placement.get("pid"), job_id),
    )


def report_progress(store: Store, job_id: int, fraction: float, message: str) -> bool:
    """Record a running job's progress (0..1) and message; True if a cancel was asked."""
    rows = store.db.execute(
        "UPDATE jobs SET progress = ?, message = ? WHERE id = ? AND status = 'running' "
        "RETURNING cancel_requested",
        (fraction, message, job_id),
    ).fetchall()
    return bool(rows and rows[0][0])


def heartbeat(store: Store, job_ids: Iterable[int]) -> None:
    """Say that the backend running these jobs is alive."""
    ids = list(job_ids)
    if not ids:
        return
    marks = ",".join("?" * len(ids))
    store.db.execute(
        f"UPDATE jobs SET heartbeat_at = ? WHERE id IN ({marks}) AND status = 'running'",
        (now_iso(), *ids),
    )


def cancel_requested(store: Store, job_ids: Iterable[int]) -> set[int]:
    """Which of these jobs a user asked to cancel."""
    ids = list(job_ids)
    if not ids:
        return set()
    marks = ",".join("?" * len(ids))
    rows = store.db.execute(
        f"SELECT id FROM jobs WHERE id IN ({marks}) AND cancel_requested = 1", ids
    ).fetchall()
    return {int(r[0]) for r in rows}


def running_jobs(store: Store) -> list[dict]:
    """Every running job's row, oldest first (what recovery looks at)."""
    rows = store.db.query("SELECT * FROM jobs WHERE status = 'running' ORDER BY id")
    return [decode_row(r) for r in rows]


def cancel_job(store: Store, job_id: int, reason: str = CANCELLED_BEFORE_START) -> str | None:
    """Cancel a job: a queued one at once (its unfinished run too, with `reason`), a running one
    by a flag its backend acts on; the job's status after it (None: no such job)."""
    with store.transaction() as db:
        row = db.execute("SELECT status FROM jobs WHERE id = ?", (job_id,)).fetchone()
        if row is None:
            return None
        status = Status(row[0])
        if status == Status.QUEUED:
            db.execute(
                "UPDATE jobs SET status = 'cancelled', cancel_requested = 1, finished_at = ?, "
                "message = ? WHERE id = ?",
                (now_iso(), reason, job_id),
            )
            db.execute(_SETTLE_RUN, (Status.CANCELLED, reason, job_id))
            return Status.CANCELLED
        if status == Status.RUNNING:
            db.execute(
                "UPDATE jobs SET cancel_requested = 1, message = 'cancelling' WHERE id = ?",
                (job_id,),
            )
        return status


def cancel_run(store: Store, run_id: int, reason: str = CANCELLED_BEFORE_START) -> CancelOutcome:
    """Cancel every unfinished job of a run (see `cancel_job`)."""
    rows = store.db.execute(
        f"SELECT id FROM jobs WHERE run_id = ? AND status IN {_UNFINISHED_SQL} ORDER BY id",
        (run_id,),
    ).fetchall()
    outcomes = {cancel_job(store, int(r[0]), reason) for r in rows}
    if Status.RUNNING in outcomes:
        return CancelOutcome.REQUESTED
    if Status.CANCELLED in outcomes:
        return CancelOutcome.CANCELLED
    return CancelOutcome.NOTHING


def settle_job(
    store: Store,
    job_id: int,
    status: Status,
    error: str | None = None,
    result: Any = None,
    message: str | None = None,
    reason: str | None = None,
) -> bool:
    """End an unfinished job with a final status; True if it did (False: it had ended already).

    Its unfinished run ends with it: succeeded with the job, or failed / cancelled with `reason`
    (else `error`, else `message`) as the run's error, so no page shows a dead run as running.
    A `Recordable` result is recorded in the same commit, unless the job has ended already.
    On a full disk the home's reserve makes room for the end: a failure or a cancel as asked; a
    success (whose result may not fit that room) as a failure naming the disk.
    """
    if status not in FINISHED:
        final = ", ".join(sorted(FINISHED))
        raise ValueError(f"a job settles as one of {final}, not {str(status)!r}")
    fields: dict[str, Any] = {"status": status, "finished_at": now_iso(), "error": error}
    if message is not None:
        fields["message"] = message
    run_error = None if status == Status.SUCCEEDED else reason or error or message
    try:
        with store.transaction():
            if status == Status.SUCCEEDED:
                if isinstance(result, Recordable):
                    row = store.db.execute(
                        "SELECT status FROM jobs WHERE id = ?", (job_id,)
                    ).fetchone()
                    if row is None or Status(row[0]) in FINISHED:
                        return False
                    result = result.record(store)
                fields["result_json"] = to_json(result if result is not None else {})
                fields["progress"] = 1.0
            return _settle(store, job_id, fields, run_error)
    except (sqlite3.Error, OSError) as e:
        line = _room_for_failure(store, e)
        if status == Status.SUCCEEDED:
            fields, run_error = _failed(line), line
        return _settle(store, job_id, fields, run_error)


def _room_for_failure(store: Store, error: BaseException) -> str:
    """The one line of a full disk, once the home's reserve is deleted to record it; `error`
    re-raised when it is no full disk or there is no reserve to delete."""
    if not is_disk_full(error) or not release_reserve(store.home):
        raise error
    return str(classify(error, store.db_path))


def _failed(line: str) -> dict[str, Any]:
    """A job's fields when it fails with one line."""
    return {"status": Status.FAILED, "finished_at": now_iso(), "error": line, "message": line}


def _settle(store: Store, job_id: int, fields: dict[str, Any], run_error: str | None) -> bool:
    sets = ", ".join(f"{k} = ?" for k in fields)
    with store.transaction() as db:
        cur = db.execute(
            f"UPDATE jobs SET {sets} WHERE id = ? AND status IN {_UNFINISHED_SQL}",
            (*fields.values(), job_id),
        )
        done = cur.rowcount > 0
        if done:
            db.execute(_SETTLE_RUN, (fields["status"], run_error, job_id))
    return done
