"""Jobs: rows in the store (`queue`, what pages and the CLI use) run by a worker (`worker`).

Importing this package loads only the queue; the worker and the job kinds stay out of pages.
"""

from eagle3dash.jobs.queue import (
    CANCELLED_BEFORE_START,
    CANCELLED_WHILE_RUNNING,
    FINISHED,
    STATUSES,
    JobCancelled,
    JobFn,
    ProgressFn,
    cancel_job,
    current_job,
    job_log,
    job_result,
    job_status,
    list_jobs,
    submit_job,
    wait_for_job,
)

__all__ = [
    "CANCELLED_BEFORE_START",
    "CANCELLED_WHILE_RUNNING",
    "FINISHED",
    "STATUSES",
    "JobCancelled",
    "JobFn",
    "ProgressFn",
    "cancel_job",
    "current_job",
    "job_log",
    "job_result",
    "job_status",
    "list_jobs",
    "submit_job",
    "wait_for_job",
]
