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


_ONCE_SCRIPT = """
import sys
from eagle3dash.jobs import lifecycle
from eagle3dash.jobs.worker import run_worker
from tests.job_kinds_for_tests import ALL_KINDS, fill_disk
if len(sys.argv) > 2:  # fill the disk just before the worker's next lifecycle.<write>, once
    write, path = sys.argv[2], sys.argv[3]
    real = getattr(lifecycle, write)
    def filled_first(*args, **kwargs):
        setattr(lifecycle, write, real)
        fill_disk(path)
        return real(*args, **kwargs)
    setattr(lifecycle, write, filled_first)
run_worker(sys.argv[1], ALL_KINDS, poll_interval=0.05, once=True)
"""


def run_worker_once(
    home: Path, timeout: float, fill_before: tuple[str, Path] | None = None
) -> subprocess.CompletedProcess:
    """`worker --once` over the test kinds in its own process; with `fill_before` (a
    `lifecycle` function's name, a file on the home's disk), another program fills that disk
    just before the worker's next call of that function."""
    fill = [] if fill_before is None else [fill_before[0], str(fill_before[1])]
    return subprocess.run(
        [sys.executable, "-c", _ONCE_SCRIPT, str(home), *fill],
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=timeout,
    )
