"""Jobs: rows in the store (`queue`, what pages and the CLI use) moved through their lifecycle
(`lifecycle`) and run by a backend (`backend`; the local worker, `worker`, is the first).

Importing this package loads only the queue and the lifecycle; backends and job kinds stay out
of pages.
"""

from eagle3dash.jobs.lifecycle import (
    CANCELLED_BEFORE_START,
    CANCELLED_WHILE_RUNNING,
    FINISHED,
    STATUSES,
    CancelOutcome,
    Status,
    cancel_job,
    cancel_run,
)
from eagle3dash.jobs.queue import (
    BusyServer,
    JobCancelled,
    JobFn,
    JobRow,
    ProgressFn,
    busy_servers,
    job_log,
    job_result,
    job_status,
    list_jobs,
    read_jobs,
    submit_job,
    wait_for_job,
)

__all__ = [
    "BusyServer",
    "CANCELLED_BEFORE_START",
    "CANCELLED_WHILE_RUNNING",
    "FINISHED",
    "STATUSES",
    "CancelOutcome",
    "JobCancelled",
    "JobFn",
    "JobRow",
    "ProgressFn",
    "Status",
    "busy_servers",
    "cancel_job",
    "cancel_run",
    "job_log",
    "job_result",
    "job_status",
    "list_jobs",
    "read_jobs",
    "submit_job",
    "wait_for_job",
]
