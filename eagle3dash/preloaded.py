"""Child processes that can start warm: `python -m MODULE ARGS`, either a fresh interpreter or a
fork of a server process that imported the heavy modules (torch, transformers) once.

A diagnosis job's child needs torch and transformers' model code before its first line of work: a
fresh child that loads the demo target and runs one forward takes 6.05 s on a quiet 2-core box, a
fork of a process that already holds those imports 0.21 s (`bench/bench_job_start.py`). The server
is multiprocessing's forkserver (Python 3.11 `multiprocessing/forkserver.py`): one per process that
starts children, started on the first warm start (or by `warm_up`), single-threaded (torch makes no
threads until it computes, and it computes nothing there), and gone when that process goes. Its
preload list is fixed by its first start. A light child (nothing to preload) starts as a fresh
interpreter: a server's imports would cost it more than they save.

Either way the child is what `python -m MODULE ARGS` would be: its own session (a process group
to signal), the given environment, working directory and `sys.path` entries, stdout and stderr
appended to one file. A forked child's command line is the server's, so a child that must be
recognised later names itself (`name_process`, read back by `process_name`). A forked child
runs none of the starting process's `__main__` (multiprocessing would: a Streamlit page's, say),
and the preloaded modules were imported with the server's environment, so a variable torch or
transformers read at import (OMP_NUM_THREADS, HF_HOME) is the one of the first warm start.
"""

from __future__ import annotations

import contextlib
import ctypes
import io
import multiprocessing
import os
import runpy
import subprocess
import sys
import types
from collections.abc import Iterator, Mapping, Sequence
from multiprocessing.process import BaseProcess
from pathlib import Path

# What a diagnosis job's child spends its start on: torch, and transformers' model loading and
# Llama code (the demo's and the tests' targets; other architectures add their own module).
HEAVY = (
    "torch",
    "transformers.modeling_utils",
    "transformers.models.llama.modeling_llama",
    "safetensors.torch",
    "httpx",
    "orjson",
)
_PR_SET_NAME = 15  # prctl(2)
NAME_LIMIT = 15  # /proc/PID/comm holds 15 bytes


class Child:
    """A started child process: its pid, and how it ended."""

    def __init__(self, process: subprocess.Popen | BaseProcess):
        self._process = process
        assert process.pid is not None  # started
        self.pid: int = process.pid
        self._exit_code: int | None = None

    def wait(self, timeout: float | None) -> int | None:
        """Its exit code once it ended (negative: killed by that signal), None while it runs
        after `timeout` seconds (0: no wait, None: until it ends)."""
        if self._exit_code is None:
            process = self._process
            if isinstance(process, BaseProcess):
                process.join(timeout)
                self._exit_code = process.exitcode
            elif timeout == 0:
                self._exit_code = process.poll()
            else:
                with contextlib.suppress(subprocess.TimeoutExpired):
                    self._exit_code = process.wait(timeout)
        return self._exit_code

    def signal_group(self, sig: int) -> None:
        """Send `sig` to the child's process group (to the child alone in the moment after a
        fork, before it made its session); nothing when it is gone."""
        try:
            os.killpg(self.pid, sig)
        except ProcessLookupError:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(self.pid, sig)
        except PermissionError:
            pass

    def close(self) -> None:
        """Release the handle of a child that ended (no-op while it runs); `wait` still says
        how it ended."""
        if isinstance(self._process, BaseProcess) and self.wait(0) is not None:
            self._process.close()


def _forkserver(preload: Sequence[str]) -> multiprocessing.context.BaseContext:
    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload(list(preload))
    return context


def warm_up(preload: Sequence[str] = HEAVY) -> None:
    """Start this process's forkserver now (its imports run beside whatever comes next)."""
    from multiprocessing import forkserver

    _forkserver(preload)
    forkserver.ensure_running()


def start_module(
    module: str,
    args: Sequence[str],
    *,
    env: Mapping[str, str],
    cwd: str | os.PathLike[str],
    output: str | os.PathLike[str],
    preload: Sequence[str] = (),
) -> Child:
    """Start `python -m module *args` (see the module's docstring): a fork of the forkserver
    that imported `preload`, or a fresh interpreter when there is nothing to preload."""
    if not preload:
        with open(output, "ab") as log:
            process: subprocess.Popen | BaseProcess = subprocess.Popen(
                [sys.executable, "-m", module, *args],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=dict(env),
                cwd=cwd,
                start_new_session=True,
            )
        return Child(process)
    forked: BaseProcess = _forkserver(preload).Process(  # type: ignore[attr-defined]
        target=_run_module,
        args=(module, list(args), dict(env), str(cwd), str(output)),
        daemon=False,
    )
    with _main_withheld():
        forked.start()
    return Child(forked)


@contextlib.contextmanager
def _main_withheld() -> Iterator[None]:
    """The starting process's `__main__` out of sight while a child starts: the child becomes
    `python -m MODULE` and needs none of it, where multiprocessing would run it again there
    (`multiprocessing/spawn.py` get_preparation_data, by name or by path): a Streamlit page's
    module (its script runner names it __main__), whose every st call warns "missing
    ScriptRunContext" on the app's terminal."""
    main = sys.modules.get("__main__")
    sys.modules["__main__"] = types.ModuleType("__main__")  # no spec, no file: nothing to run
    try:
        yield
    finally:
        if main is None:
            del sys.modules["__main__"]
        else:
            sys.modules["__main__"] = main


def name_process(name: str) -> None:
    """Name this process (`/proc/PID/comm`, at most NAME_LIMIT bytes)."""
    if len(name.encode()) > NAME_LIMIT:
        raise ValueError(f"a process name holds {NAME_LIMIT} bytes: {name!r}")
    ctypes.CDLL(None).prctl(_PR_SET_NAME, name.encode(), 0, 0, 0)


def pid_alive(pid: int) -> bool:
    """Whether a process lives (a zombie does not): how a forked child, whose parent is the
    server, watches the process that started it."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:  # a zombie has exited; only its parent has not reaped it
        stat = Path(f"/proc/{pid}/stat").read_text()
        return stat.rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return True


def process_name(pid: int) -> str | None:
    """The name a process goes by (`/proc/PID/comm`), None when it is gone."""
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return None


def _text_stream(fd: int, unbuffered: bool) -> io.TextIOWrapper:
    """A text stream on `fd` as Python makes its stdio: line-buffered, or (as `python -u`,
    PYTHONUNBUFFERED) written through with no buffer below, so a partial line reaches the file."""
    if unbuffered:
        return io.TextIOWrapper(io.FileIO(fd, "w", closefd=False), write_through=True)
    return open(fd, "w", buffering=1, closefd=False)  # noqa: SIM115 - the process's own


def _run_module(module: str, args: list[str], env: dict[str, str], cwd: str, output: str) -> None:
    """The forked child: become `python -m module *args` with its own session, env, cwd and
    output."""
    os.setsid()
    os.chdir(cwd)
    os.environ.clear()
    os.environ.update(env)
    fd = os.open(output, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)
    unbuffered = bool(env.get("PYTHONUNBUFFERED"))
    sys.stdout, sys.stderr = _text_stream(1, unbuffered), _text_stream(2, unbuffered)
    # as `python -m` would: the working directory first, then PYTHONPATH, then the rest
    extra = [cwd, *(p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p)]
    sys.path[:0] = [p for p in extra if p not in sys.path]
    sys.argv = [module, *args]
    runpy.run_module(module, run_name="__main__", alter_sys=True)
