"""The demo's deployments served on this machine by the SGLang API double (a test and demo double
that answers like SGLang, not a serving engine), and the diagnosis options that fit them.

Each double runs in a process of its own (`python -m eagle3dash.demo.serve NAME`, forked from a
server that imported torch and transformers once, `preloaded.py`), never on a thread of the app,
the worker or the seed: the double's modelled cost is a floor per forward, and
a process of its own keeps a page rerun or a diagnosis's compute (and the GIL) out of its clock.
A double stops with its parent (it watches the parent's pid), so a killed app leaves none behind.

`start_demo(name)` is New run's "Try it on the demo": one demo deployment with hidden states on,
and the same target without speculation as the baseline. `demo seed` serves three of them the
same way.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from eagle3dash.demo import (
    CONCURRENCY,
    DELAY_S,
    DRAFT_STEP_S,
    FIXTURES,
    MAX_NEW_TOKENS,
    NUM_PROMPTS,
    NUM_STEPS,
    Deployment,
    deployments,
)
from eagle3dash.diagnosis.options import DiagnoseOptions
from eagle3dash.errors import InputError
from eagle3dash.preloaded import HEAVY, Child, pid_alive, start_module

PROMPTS = FIXTURES / "prompts.jsonl"
# New run's choice, in this order; the vllm- ones on the vLLM double (demo/vllm.py)
DEMO_NAMES = ("mismatched", "correct", "fixed", "format", "vllm-v1", "vllm-dual-key")
START_TIMEOUT_S = 120.0  # loading torch and the tiny models; slow only on a loaded machine
STOP_TIMEOUT_S = 10.0
URL_PREFIX = "serving "  # the child's first stdout line: "serving http://127.0.0.1:PORT"


def fixed_draft(home: Path, ids: tuple[int, ...], fixtures: Path = FIXTURES) -> Path:
    """Draft A with `eagle_config.eagle_aux_hidden_state_layer_ids = ids`: the fix, applied
    (kept as it is when an earlier call wrote the same ids, so a run reading it is not raced)."""
    out = home / "demo" / "draft-a-fixed"
    config_path = out / "config.json"
    if config_path.is_file():
        config = json.loads(config_path.read_text())
        if config.get("eagle_config", {}).get("eagle_aux_hidden_state_layer_ids") == list(ids):
            return out
        shutil.rmtree(out)
    shutil.copytree(fixtures / "draft-a", out)
    config = json.loads(config_path.read_text())
    config["eagle_config"]["eagle_aux_hidden_state_layer_ids"] = list(ids)
    config_path.write_text(json.dumps(config, indent=2) + "\n")
    return out


@dataclass
class ServedDouble:
    """A demo double serving in a child process: its URL, and stop() to end it."""

    process: Child
    url: str
    output_path: Path = field(repr=False)

    def alive(self) -> bool:
        """Whether the process still serves."""
        return self.process.wait(0) is None

    def stop(self) -> None:
        """End the process (SIGTERM, then SIGKILL) and release its port (idempotent)."""
        if self.process.wait(0) is None:
            self.process.signal_group(signal.SIGTERM)
            if self.process.wait(STOP_TIMEOUT_S) is None:
                self.process.signal_group(signal.SIGKILL)
                self.process.wait(None)
        self.process.close()
        self.output_path.unlink(missing_ok=True)

    def __enter__(self) -> ServedDouble:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _spawn(name: str, draft_path: Path | None, baseline: bool) -> tuple[Child, Path]:
    """Start `python -m eagle3dash.demo.serve` for one double, forked warm (torch and
    transformers imported once, `preloaded.py`); its output goes to a temp file."""
    args = [name, "--parent", str(os.getpid())]
    if draft_path is not None:
        args += ["--draft", str(draft_path)]
    if baseline:
        args.append("--baseline")
    fd, output_name = tempfile.mkstemp(prefix="eagle3dash-double-", suffix=".log")
    os.close(fd)
    process = start_module(
        "eagle3dash.demo.serve",
        args,
        env=os.environ,
        cwd=os.getcwd(),
        output=output_name,
        preload=HEAVY,
    )
    return process, Path(output_name)


def _wait_started(process: Child, output_path: Path) -> ServedDouble:
    """The child's URL once it serves; InputError with its last words if it exits first or
    takes longer than START_TIMEOUT_S."""
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        said = output_path.read_text(errors="replace").splitlines()
        url = next((line for line in said if line.startswith(URL_PREFIX)), None)
        if url is not None:  # printed once it is bound
            return ServedDouble(process, url[len(URL_PREFIX) :].strip(), output_path)
        if process.wait(0.05) is not None:
            break
    else:
        ServedDouble(process, "", output_path).stop()
        raise InputError(f"a demo double did not start within {START_TIMEOUT_S:.0f} s")
    said = output_path.read_text(errors="replace").strip().splitlines()
    output_path.unlink(missing_ok=True)
    raise InputError(
        "a demo double did not start (exit status "
        f"{process.wait(0)}): {said[-1] if said else 'no message'}"
    )


def serve_doubles(*wanted: tuple[str, Path | None, bool]) -> list[ServedDouble]:
    """Start the doubles (deployment name, draft path or None, baseline?) at once, each in a
    process of its own on a free port of 127.0.0.1; all of them, or none (InputError)."""
    spawned = [_spawn(name, draft, baseline) for name, draft, baseline in wanted]
    started: list[ServedDouble] = []
    try:
        for process, output_path in spawned:
            started.append(_wait_started(process, output_path))
    except BaseException:
        for served in started:
            served.stop()
        for process, output_path in spawned[len(started) :]:
            ServedDouble(process, "", output_path).stop()
        raise
    return started


def serve_deployment(plan: Deployment, draft_path: Path | None = None) -> ServedDouble:
    """A demo deployment in a process of its own: its draft (or `draft_path`, whose config says
    it all), hidden states returned, the demo's cost model."""
    return serve_doubles((plan.name, draft_path, False))[0]


def serve_baseline(plan: Deployment) -> ServedDouble:
    """The demo's target without speculation, for the speedup, in a process of its own."""
    return serve_doubles((plan.name, None, True))[0]


def double_config(plan: Deployment, draft_path: Path | None, baseline: bool):
    """The `DoubleConfig` a demo double serves: the deployment (or its baseline without
    speculation), hidden states returned, the demo's cost model."""
    if baseline:
        return plan.double_config(draft_path=None, speculative_algorithm=None, delay_s=DELAY_S)
    overrides: dict = {
        "enable_return_hidden_states": True,
        "delay_s": DELAY_S,
        "draft_step_s": DRAFT_STEP_S,
    }
    if draft_path is not None:
        overrides |= {"draft_path": draft_path, "aux_layer_ids_override": None}
    return plan.double_config(**overrides)


def demo_options(
    draft: Path,
    endpoint: str,
    baseline: str | None,
    num_prompts: int = NUM_PROMPTS,
    max_new_tokens: int = MAX_NEW_TOKENS,
    steps: int = NUM_STEPS,
) -> DiagnoseOptions:
    """The diagnosis of a demo deployment. The training side comes from the tensors (the layout
    detective, with the target at hand), as it would for a user who knows nothing of how the
    draft was trained."""
    return DiagnoseOptions(
        draft=str(draft),
        endpoint=endpoint,
        baseline=baseline,
        prompts=str(PROMPTS),
        num_prompts=num_prompts,
        max_new_tokens=max_new_tokens,
        concurrency=CONCURRENCY,
        target=str(FIXTURES / "target"),
        steps=steps,
    )


@dataclass
class DemoEndpoints:
    """One demo deployment and its baseline, each served by the SGLang API double in a process of
    its own."""

    name: str  # one of DEMO_NAMES
    endpoint: ServedDouble
    baseline: ServedDouble
    draft: Path  # the draft the deployment serves (draft A with the fix, for "fixed")

    def options(self) -> DiagnoseOptions:
        """The diagnosis that reproduces this deployment's demo run."""
        return demo_options(self.draft, self.endpoint.url, self.baseline.url)

    def alive(self) -> bool:
        """Whether both doubles still serve."""
        return self.endpoint.alive() and self.baseline.alive()

    def stop(self) -> None:
        """Stop both doubles and release their ports."""
        self.endpoint.stop()
        self.baseline.stop()


def demo_description(name: str) -> str:
    """What a demo deployment (DEMO_NAMES) serves, in one or two sentences."""
    from eagle3dash.demo.vllm import VLLM_DESCRIPTIONS

    return VLLM_DESCRIPTIONS.get(name) or deployments()[name].description


def demo_draft(name: str, home: Path) -> Path:
    """The draft a demo deployment serves: its fixture, or for "fixed" draft A with the fix
    written into a copy under `home` (the dual-key copy of draft B for "vllm-dual-key")."""
    from eagle3dash.demo.vllm import VLLM_DEMO_NAMES, vllm_demo_draft

    if name in VLLM_DEMO_NAMES:
        return vllm_demo_draft(name, home)
    plan = deployments()[name]
    if name == "fixed":
        assert plan.aux_layer_ids_override is not None  # the fixed deployment names the fix
        return fixed_draft(home, plan.aux_layer_ids_override)
    return plan.draft_path


def start_demo(name: str = "mismatched", home: Path | None = None) -> DemoEndpoints:
    """Start a demo deployment (DEMO_NAMES) and a baseline on free local ports, each in a process
    of its own; `home` holds the fixed draft's copy (default: a temporary folder)."""
    if name not in DEMO_NAMES:
        raise InputError(f"no demo deployment {name!r}: choose one of {', '.join(DEMO_NAMES)}")
    draft = demo_draft(name, home or Path(tempfile.gettempdir()) / "eagle3dash-demo")
    endpoint, baseline = serve_doubles((name, draft, False), (name, None, True))
    return DemoEndpoints(name, endpoint, baseline, draft)


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def main(argv: list[str] | None = None) -> int:
    """`python -m eagle3dash.demo.serve NAME [--draft DIR] [--baseline]`: serve one demo double,
    print "serving URL" once bound, stop on SIGTERM or when the parent process is gone."""
    from eagle3dash.demo.vllm import VLLM_DEMO_NAMES, vllm_double_config
    from eagle3dash.testing.sglang_double import RunningDouble, start_double
    from eagle3dash.testing.sglang_double_engine import serve_threads
    from eagle3dash.testing.vllm_double import RunningVLLMDouble, start_vllm_double

    parser = argparse.ArgumentParser(prog="python -m eagle3dash.demo.serve", description=__doc__)
    parser.add_argument("name", choices=DEMO_NAMES)
    parser.add_argument("--draft", type=Path, help="serve this draft instead (its config rules)")
    parser.add_argument("--baseline", action="store_true", help="the target without speculation")
    parser.add_argument("--parent", type=int, help="stop when this process is gone")
    args = parser.parse_args(argv)
    signal.signal(signal.SIGTERM, _interrupt)
    serve_threads()  # beside the other doubles and the diagnosis on a small machine
    try:
        if args.name in VLLM_DEMO_NAMES:
            config = vllm_double_config(args.name, args.draft, args.baseline)
            running: RunningDouble | RunningVLLMDouble = start_vllm_double(config)
        else:
            plan = deployments()[args.name]
            running = start_double(double_config(plan, args.draft, args.baseline))
    except (InputError, OSError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(f"{URL_PREFIX}{running.url}", flush=True)
    try:
        while running.thread.is_alive() and (args.parent is None or pid_alive(args.parent)):
            time.sleep(1.0)
    except KeyboardInterrupt:
        pass
    finally:
        running.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
