"""The demo's doubles run as processes of their own (never threads of the app, the seed or the
worker) and end with the process that started them."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from eagle3dash.demo.serve import serve_doubles
from eagle3dash.errors import InputError

ROOT = Path(__file__).resolve().parent.parent
PARENT = """
import os, sys
from eagle3dash.demo import deployments
from eagle3dash.demo.serve import serve_deployment
double = serve_deployment(deployments()["mismatched"])
print(os.getpid(), double.process.pid, double.url, flush=True)
sys.stdin.readline()
os._exit(0)  # gone without stopping its double
"""


def _ended(pid: int) -> bool:
    """Whether a process has exited (gone, or a zombie nobody has reaped yet)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().split(") ", 1)[1][0]
    except (FileNotFoundError, IndexError):
        return True
    return state == "Z"


def test_a_demo_double_serves_from_its_own_process_and_ends_with_its_parent() -> None:
    # A double on a thread shares the app's GIL and reruns; a double that outlives a killed app
    # keeps a port and a core. Both would be bugs this catches.
    parent = subprocess.Popen(
        [sys.executable, "-c", PARENT],
        cwd=ROOT,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert parent.stdout is not None and parent.stdin is not None
        parent_pid, double_pid, url = parent.stdout.readline().split()
        assert int(double_pid) not in (int(parent_pid), os.getpid())
        info = httpx.get(f"{url}/server_info", timeout=30).json()
        assert info["eagle3dash_double"] is True
        assert (info["eagle3dash_double_delay_s"], info["eagle3dash_double_draft_step_s"]) == (
            0.01,
            0.002,
        )
        parent.stdin.write("\n")
        parent.stdin.flush()
        parent.wait(timeout=60)
        deadline = time.monotonic() + 60
        while not _ended(int(double_pid)) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert _ended(int(double_pid)), "the double outlived the process that started it"
    finally:
        parent.kill()


def test_a_double_that_cannot_start_says_why_in_one_line(tmp_path: Path) -> None:
    # Its child prints "error: ..." and exits 2 (eagle3dash/demo/serve.py main); the parent,
    # which waits for a URL line, must end the wait and pass that last line on.
    with pytest.raises(InputError) as caught:
        serve_doubles(("mismatched", tmp_path / "no-such-draft", False))
    said = str(caught.value)
    assert said.startswith("a demo double did not start (exit status 2): error: ")
    assert "no-such-draft" in said
    assert "\n" not in said
