"""`eagle3dash app`: the dashboard, the worker that runs its queued diagnoses and, on the first
start, the demo's seed, each a child process of this one and stopped with it (what `make run`
starts).

The app serves at once; the worker runs two jobs at a time on this machine (two jobs never
measure one server at once), or is a Ray driver (`jobs="ray"`); `demo seed` queues the demo's runs
and serves their endpoints until the worker has run them, and does nothing once they exist.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from types import FrameType

from eagle3dash.dashboard import SERVE_SCRIPT
from eagle3dash.roots import ROOTS_ENV
from eagle3dash.store import HOME_ENV

LOCAL_SLOTS = 2  # the local worker's jobs at a time
STOP_S = 10.0  # how long a child may take to stop before it is killed


@dataclass(frozen=True)
class AppSettings:
    """Where the app listens, where its jobs run, and whether the demo is seeded."""

    bind: str = "127.0.0.1"  # a network address asks every browser for EAGLE3DASH_TOKEN
    port: int | None = None  # None: .streamlit/config.toml's (8501)
    jobs: str = "local"  # or "ray": Ray tasks on the cluster RAY_ADDRESS names
    slots: int | None = None  # None: LOCAL_SLOTS here, the cluster's CPUs on Ray
    demo: bool = True  # seed the demo's runs on the first start
    home: str | None = None  # None: EAGLE3DASH_HOME, else ./.eagle3dash
    data_roots: tuple[str, ...] = ()  # more folders the app's path boxes accept


def environment(settings: AppSettings) -> dict[str, str]:
    """This process's environment with the home and the added data roots, for every child."""
    env = dict(os.environ)
    if settings.home:
        env[HOME_ENV] = str(Path(settings.home).expanduser().resolve())
    if settings.data_roots:
        listed = [p for p in env.get(ROOTS_ENV, "").split(os.pathsep) if p.strip()]
        added = [str(Path(p).expanduser().resolve()) for p in settings.data_roots]
        env[ROOTS_ENV] = os.pathsep.join([*listed, *added])
    return env


def commands(settings: AppSettings) -> dict[str, list[str]]:
    """The processes to start, by name, in their order: the worker, the demo's seed, the app."""
    here = [sys.executable, "-m", "eagle3dash"]
    worker = [*here, "worker", "--jobs", settings.jobs]
    slots = settings.slots or (LOCAL_SLOTS if settings.jobs == "local" else None)
    if slots is not None:
        worker += ["--slots", str(slots)]
    app = [sys.executable, "-m", "streamlit", "run", str(SERVE_SCRIPT)]
    app += ["--server.address", settings.bind]
    if settings.port is not None:
        app += ["--server.port", str(settings.port)]
    started = {"worker": worker}
    if settings.demo:
        started["demo seed"] = [*here, "demo", "seed"]
    started["app"] = app
    return started


class _Stopped(Exception):
    """SIGTERM reached this process."""


def _on_sigterm(signum: int, frame: FrameType | None) -> None:
    raise _Stopped


def run_app(settings: AppSettings) -> int:
    """Start the processes and wait for the app; its exit status (130 on Ctrl-C, 143 on
    SIGTERM). Whatever still runs when it ends is stopped: SIGTERM, then SIGKILL."""
    started: list[subprocess.Popen] = []
    env = environment(settings)
    previous = signal.signal(signal.SIGTERM, _on_sigterm)
    try:
        for command in commands(settings).values():
            started.append(subprocess.Popen(command, env=env))
        return started[-1].wait()
    except KeyboardInterrupt:  # Ctrl-C reached the children too: they stop on their own
        return 130
    except _Stopped:
        return 143
    finally:
        signal.signal(signal.SIGTERM, previous)
        for child in reversed(started):
            _stop(child)


def _stop(child: subprocess.Popen) -> None:
    if child.poll() is not None:
        return
    child.terminate()
    try:
        child.wait(timeout=STOP_S)
    except subprocess.TimeoutExpired:
        child.kill()
        child.wait()
