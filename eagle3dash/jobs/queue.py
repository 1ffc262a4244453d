"""The job queue: what pages and the CLI use to queue work and follow it.

The interface is small and backend-neutral: `submit_job`, `job_status` (progress, message,
result), `list_jobs`, `job_log`, `wait_for_job` (cancelling is a transition: `lifecycle`). The
store is the single source of truth; a backend (`eagle3dash.jobs.backend`, the local worker its
first) claims these rows and writes the same columns through `lifecycle`. Nothing here imports a
backend or any job kind, so pages stay light.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from eagle3dash.errors import InputError
from eagle3dash.jobs.lifecycle import FINISHED, Recordable, Status
from eagle3dash.store import Store, decode_row, insert_row, now_iso, to_json

ProgressFn = Callable[[float, str], None]  # progress(fraction 0..1, message)
# a job kind: fn(params, progress) -> its result, or a Recordable the store's writer records
JobFn = Callable[[dict, ProgressFn], dict | Recordable | None]

LOG_TAIL_BYTES = 64 * 1024


class JobCancelled(BaseException):
    """Raised inside a job (by `progress` or SIGTERM) when the job is to stop."""


def submit_job(
    store: Store,
    kind: str,
    params: dict | None = None,
    run_id: int | None = None,
    needs_gpu: bool = False,
    servers: Sequence[str] = (),
) -> int:
    """Queue a job; return its id. A `needs_gpu` job waits while another GPU job runs, and a job
    waits while a running one measures any of its `servers` (`http_client.server_key`s)."""
    with store.transaction() as db:
        job_id = insert_row(
            db,
            "jobs",
            {
                "run_id": run_id,
                "kind": kind,
                "status": Status.QUEUED,
                "params_json": to_json(params or {}),
                "progress": 0.0,
                "message": "queued",
                "created_at": now_iso(),
                "needs_gpu": int(bool(needs_gpu)),
                "servers_json": to_json(sorted(set(servers))),
            },
        )
        db.execute("UPDATE jobs SET log_path = ? WHERE id = ?", (log_rel(job_id), job_id))
    return job_id


def job_status(store: Store, job_id: int) -> dict | None:
    """A job row: status, progress 0..1, message, `params`, `result`, error, times (or None)."""
    rows = list(store.db.query("SELECT * FROM jobs WHERE id = ?", (job_id,)))
    return decode_row(rows[0]) if rows else None


def job_result(store: Store, job_id: int) -> dict | None:
    """The result dict of a succeeded job, else None."""
    job = job_status(store, job_id)
    return job["result"] if job and job["status"] == Status.SUCCEEDED else None


def list_jobs(store: Store, run_id: int | None = None, status: str | None = None) -> list[dict]:
    """Jobs (of one run, and/or in one status), oldest first."""
    clauses: list[str] = []
    params: list[Any] = []
    if run_id is not None:
        clauses.append("run_id = ?")
        params.append(run_id)
    if status is not None:
        clauses.append("status = ?")
        params.append(status)
    where = (" WHERE " + " AND ".join(clauses)) if clauses else ""
    return [decode_row(r) for r in store.db.query(f"SELECT * FROM jobs{where} ORDER BY id", params)]


@dataclass(frozen=True)
class JobRow:
    """A job as the pages read it (`read_jobs`), typed from its stored row."""

    id: int
    kind: str
    status: str
    progress: float  # 0..1
    message: str | None
    error: str | None
    started_at: str | None
    cancel_requested: bool
    result: Any  # the kind's result JSON (a detect job's: diagnosis/stored.py StoredDetection)
    placement: Mapping[str, Any] | None  # the Ray node that ran it (jobs/ray_backend.py)

    @classmethod
    def from_row(cls, row: Mapping[str, Any]) -> JobRow:
        """From a decoded jobs row (store.decode_row); a column it lacks takes a new job's value."""
        return cls(
            id=int(row["id"]),
            kind=str(row.get("kind") or ""),
            status=str(row.get("status") or Status.QUEUED),
            progress=float(row.get("progress") or 0.0),
            message=row.get("message"),
            error=row.get("error"),
            started_at=row.get("started_at"),
            cancel_requested=bool(row.get("cancel_requested")),
            result=row.get("result"),
            placement=row.get("placement") or None,
        )


def read_jobs(store: Store, run_id: int) -> list[JobRow]:
    """A run's jobs, oldest first, typed for the pages."""
    return [JobRow.from_row(row) for row in list_jobs(store, run_id)]


@dataclass(frozen=True)
class BusyServer:
    """A server a queued job waits for (its `http_client.server_key`), and the running job (of
    which run) that measures it."""

    server: str
    job_id: int
    run_id: int | None


def busy_servers(store: Store, job_id: int) -> list[BusyServer]:
    """The servers of a queued job that running jobs measure now: why it has not started (no
    server is measured by two jobs at once, `lifecycle.claim_job`)."""
    rows = store.db.execute(
        "SELECT busy.value, r.id, r.run_id FROM jobs AS q, json_each(q.servers_json) AS wanted, "
        "jobs AS r, json_each(r.servers_json) AS busy "
        "WHERE q.id = ? AND q.status = 'queued' AND r.status = 'running' "
        "AND busy.value = wanted.value ORDER BY r.id, busy.value",
        (job_id,),
    ).fetchall()
    return [BusyServer(server, busy_job, run_id) for server, busy_job, run_id in rows]


def job_log(store: Store, job_id: int, tail_bytes: int = LOG_TAIL_BYTES) -> str:
    """The last `tail_bytes` of a job's log ('' when there is none yet)."""
    job = job_status(store, job_id)
    if job is None or not job.get("log_path"):
        return ""
    return tail(store.path(job["log_path"]), tail_bytes)


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


def append_log(store: Store, job: Mapping[str, Any], text: str) -> None:
    """Append text to a job's log (quietly skipped when the log cannot be written)."""
    path = store.path(job.get("log_path") or log_rel(job["id"]))
    with contextlib.suppress(OSError), open(path, "a") as f:
        f.write(text)


def log_rel(job_id: int) -> str:
    """A job's log path, relative to the home folder."""
    return f"logs/{int(job_id)}.log"


def tail(path: Path, tail_bytes: int) -> str:
    """The last `tail_bytes` of a text file from a whole line on ('' when it is missing)."""
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
