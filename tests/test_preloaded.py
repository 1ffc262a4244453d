"""preloaded.start_module: a forked child (warm) is what `python -m` (cold) would be, with torch
already imported. (Every warm start in the suite preloads HEAVY: a process has one forkserver,
and its preload list is fixed by its first start.)"""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path

import pytest

from eagle3dash.preloaded import HEAVY, name_process, process_name, start_module
from tests.jobkit import ROOT, wait_until


@pytest.mark.parametrize("preload", [(), HEAVY], ids=["cold", "warm"])
def test_a_child_sees_its_env_cwd_args_session_and_output(tmp_path: Path, preload) -> None:
    out = tmp_path / "out.log"
    out.write_text("before\n")  # appended to, not replaced
    env = {**os.environ, "PYTHONPATH": str(ROOT), "PROBE_ENV": "from-the-parent"}
    child = start_module(
        "tests.preload_probe", ["3"], env=env, cwd=tmp_path, output=out, preload=preload
    )
    assert child.wait(60) == 3
    child.close()
    first, facts, err = out.read_text().splitlines()
    assert (first, err) == ("before", "to stderr")
    assert json.loads(facts) == {
        "argv": ["3"],
        "cwd": str(tmp_path),
        "probe_env": "from-the-parent",
        "own_session": True,
        "stdin_empty": True,
        "torch_loaded": bool(preload),  # forked from the server that imported it, or not
    }


@pytest.mark.parametrize("preload", [(), HEAVY], ids=["cold", "warm"])
def test_a_signal_to_the_childs_group_is_its_negative_exit_code(tmp_path: Path, preload) -> None:
    out = tmp_path / "out.log"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    child = start_module(
        "tests.preload_probe", ["wait"], env=env, cwd=tmp_path, output=out, preload=preload
    )
    wait_until(lambda: out.exists() and "to stderr" in out.read_text(), what="the child to start")
    assert child.wait(0) is None  # still running
    os.killpg(child.pid, signal.SIGTERM)
    assert child.wait(30) == -signal.SIGTERM


def test_a_process_names_itself() -> None:
    before = process_name(os.getpid())
    try:
        name_process("e3d-job-12345")
        assert process_name(os.getpid()) == "e3d-job-12345"
        with pytest.raises(ValueError, match="15 bytes"):
            name_process("e3d-job-1234567890")
    finally:
        name_process(before or "python")
    assert process_name(2**22 + 1) is None  # no such process


@pytest.mark.parametrize("preload", [(), HEAVY], ids=["cold", "warm"])
def test_a_closed_child_still_says_how_it_ended(tmp_path: Path, preload) -> None:
    # A stopped demo double is asked whether it is alive after its handle was closed.
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    out = tmp_path / "out.log"
    child = start_module(
        "tests.preload_probe", ["5"], env=env, cwd=tmp_path, output=out, preload=preload
    )
    child.close()  # still running, or not: either way a no-op until it ended
    assert child.wait(60) == 5
    child.close()
    child.close()
    assert child.wait(0) == 5


@pytest.mark.parametrize("preload", [(), HEAVY], ids=["cold", "warm"])
def test_an_unbuffered_childs_partial_line_reaches_its_output(tmp_path: Path, preload) -> None:
    # The worker starts its children with PYTHONUNBUFFERED=1, so that the job's log shows what
    # a child wrote while it runs; a forked child must honour it as `python -u` does.
    out = tmp_path / "out.log"
    env = {**os.environ, "PYTHONPATH": str(ROOT), "PYTHONUNBUFFERED": "1"}
    child = start_module(
        "tests.preload_probe", ["partial"], env=env, cwd=tmp_path, output=out, preload=preload
    )
    try:
        wait_until(
            lambda: out.exists() and out.read_text().endswith("a partial line"),
            what="the partial line in the output file",
        )
        assert child.wait(0) is None  # written while the child still runs
    finally:
        child.signal_group(signal.SIGKILL)
        child.wait(30)


def test_a_warm_child_runs_none_of_the_starting_scripts_code(tmp_path: Path, monkeypatch) -> None:
    """Streamlit runs a page as a module named __main__ with the page's file (its script
    runner): a warm child must not run that page again (multiprocessing would, by path), where
    each st call logs 'missing ScriptRunContext' to the app's terminal (issue 42)."""
    import sys
    import types

    ran = tmp_path / "the page ran"
    page = tmp_path / "page.py"
    page.write_text(f"from pathlib import Path\nPath({str(ran)!r}).write_text('again')\n")
    script = types.ModuleType("__main__")
    script.__file__ = str(page)
    monkeypatch.setitem(sys.modules, "__main__", script)
    out = tmp_path / "out.log"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    child = start_module(
        "tests.preload_probe", ["0"], env=env, cwd=tmp_path, output=out, preload=HEAVY
    )
    assert child.wait(60) == 0
    child.close()
    assert not ran.exists()
