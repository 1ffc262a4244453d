"""The demo's deployments served on this machine by the SGLang API double (a test and demo double
that answers like SGLang, not a serving engine), and the diagnosis options that fit them.

`start_demo()` is New run's "Try it on the demo": draft A's mismatched deployment with hidden
states on, and the same target without speculation as the baseline. `demo seed` serves all three
deployments the same way.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from eagle3dash.demo import (
    CONCURRENCY,
    DELAY_S,
    FIXTURES,
    MAX_NEW_TOKENS,
    NUM_PROMPTS,
    NUM_STEPS,
    Deployment,
    deployments,
)
from eagle3dash.diagnosis.options import DiagnoseOptions
from eagle3dash.testing.sglang_double import RunningDouble, start_double

PROMPTS = FIXTURES / "prompts.jsonl"


def serve_deployment(plan: Deployment, draft_path: Path | None = None) -> RunningDouble:
    """A demo deployment on a free port of 127.0.0.1: its draft (or `draft_path`, whose config
    says it all), hidden states returned, the demo's cost model."""
    overrides: dict = {"enable_return_hidden_states": True, "delay_s": DELAY_S}
    if draft_path is not None:
        overrides |= {"draft_path": draft_path, "aux_layer_ids_override": None}
    return start_double(plan.double_config(**overrides))


def serve_baseline(plan: Deployment) -> RunningDouble:
    """The demo's target without speculation, for the speedup."""
    return start_double(
        plan.double_config(draft_path=None, speculative_algorithm=None, delay_s=DELAY_S)
    )


def demo_options(
    draft: Path,
    endpoint: str,
    baseline: str | None,
    num_prompts: int = NUM_PROMPTS,
    max_new_tokens: int = MAX_NEW_TOKENS,
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
        steps=NUM_STEPS,
    )


@dataclass
class DemoEndpoints:
    """Draft A's mismatched deployment and its baseline, served here by the SGLang API double."""

    endpoint: RunningDouble
    baseline: RunningDouble
    draft: Path  # draft A as shipped

    def options(self) -> DiagnoseOptions:
        """The diagnosis that reproduces the seeded mismatched run."""
        return demo_options(self.draft, self.endpoint.url, self.baseline.url)

    def alive(self) -> bool:
        """Whether both doubles still serve."""
        return self.endpoint.thread.is_alive() and self.baseline.thread.is_alive()

    def stop(self) -> None:
        """Stop both doubles and release their ports."""
        self.endpoint.stop()
        self.baseline.stop()


def start_demo() -> DemoEndpoints:
    """Start the mismatched deployment of draft A and a baseline on free local ports."""
    plan = deployments()["mismatched"]
    baseline = serve_baseline(plan)
    try:
        endpoint = serve_deployment(plan)
    except BaseException:
        baseline.stop()
        raise
    return DemoEndpoints(endpoint, baseline, plan.draft_path)
