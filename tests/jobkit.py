"""What the job and backend tests share: polling for a condition, a worker in its own process."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

ROOT = Path(__file__).resolve().parent.parent
POLL = 0.02

T = TypeVar("T")


def wait_until(predicate: Callable[[], T], timeout: float = 10.0, what: str = "condition") -> T:
    """Poll `predicate` until it returns something truthy; fail after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(POLL)
    raise AssertionError(f"timed out waiting for {what}")


_WORKER_SCRIPT = """
import sys
from eagle3dash.jobs.worker import run_worker
from tests.job_kinds_for_tests import ALL_KINDS
run_worker(sys.argv[1], ALL_KINDS, poll_interval=0.05)
"""


def start_worker(home: Path, env: dict[str, str] | None = None) -> subprocess.Popen:
    """A worker over the test kinds in its own process (so that it can be killed), with `env`
    added to this process's environment."""
    return subprocess.Popen(
        [sys.executable, "-c", _WORKER_SCRIPT, str(home)],
        env={**os.environ, "PYTHONPATH": str(ROOT), **(env or {})},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
