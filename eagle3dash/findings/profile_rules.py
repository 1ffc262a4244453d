"""Rules over the acceptance profile: a weak prompt category, a prompt format the draft was not
trained on, and a faster --speculative-num-steps.

Their sources are the trackers where users hit these causes: domains (BaldEagle#15, SpecForge#310),
chat templates and raw prompts (SpecForge#296, sglang#4716, InferenceX#1737), the flag budget
(SafeAILab/EAGLE#132, sglang#13212).
"""

from __future__ import annotations

import statistics

from eagle3dash.findings.core import Evidence, Finding, _fmt

# A category or format this far below the others (absolute, and as a share of theirs).
FAR_BELOW = 0.5
FAR_BELOW_SHARE = 0.8
# A steps setting predicted at least this much faster than the served one.
STEPS_GAIN = 0.05


def _far_below(value: float, reference: float) -> bool:
    return reference - value >= FAR_BELOW and value <= FAR_BELOW_SHARE * reference


def rule_category_far_below(e: Evidence) -> list[Finding]:
    """A prompt category whose measured accept length (else the served states' simulated one)
    falls far below the median of the other categories: the draft's training data lacks it
    (BaldEagle#15, SpecForge#310)."""
    profile = e.profile
    if profile is None:
        return []
    values = {}
    for row in profile.per_category:
        value = row.measured_accept_length
        values[row.category] = value if value is not None else row.sim_accept_serving
    known = {c: v for c, v in values.items() if v is not None}
    if len(known) < 2:
        return []
    low = []
    for category, value in known.items():
        others = statistics.median(v for c, v in known.items() if c != category)
        if _far_below(value, others):
            low.append((category, value, others))
    if not low:
        return []
    names = ", ".join(c for c, _, _ in low)
    evidence = "; ".join(
        f"{c}: accept length {_fmt(v)} against {_fmt(o)} for the other categories (median)"
        for c, v, o in low
    )
    return [
        Finding(
            "category-far-below",
            "warning",
            f"The draft accepts far less on {names} prompts than on the others.",
            evidence,
            f"add {names} data to the draft's training set (SpecForge and speculators report "
            "acceptance per dataset), or measure with the prompts your traffic sends",
            {"categories": [c for c, _, _ in low]},
        )
    ]


def rule_prompt_format_gap(e: Evidence) -> list[Finding]:
    """The same prompts accept far less in one prompt format (raw, chat template, thinking on or
    off) than in another: the draft was trained on another format than it is served with
    (SpecForge#296, sglang#4716, InferenceX#1737)."""
    profile = e.profile
    if profile is None:
        return []
    rows = [r for r in profile.prompt_format if r.measured_accept_length is not None]
    if len(rows) < 2:
        return []
    best = max(rows, key=lambda r: r.measured_accept_length or 0.0)
    worst = min(rows, key=lambda r: r.measured_accept_length or 0.0)
    high, low = best.measured_accept_length or 0.0, worst.measured_accept_length or 0.0
    if not _far_below(low, high):
        return []
    numbers = "; ".join(
        f"{r.format}: measured {_fmt(r.measured_accept_length or 0.0)}"
        + (f", simulated {_fmt(r.sim_accept_serving)}" if r.sim_accept_serving is not None else "")
        for r in rows
    )
    return [
        Finding(
            "prompt-format-gap",
            "warning",
            "The draft was trained on another prompt format than it is served with: it accepts "
            f"{_fmt(high)} on {best.format} prompts but {_fmt(low)} on {worst.format} prompts.",
            f"accept length of the same prompts per format: {numbers}",
            f"serve the draft's requests in the {best.format} format, or train it on data "
            f"rendered the way your traffic arrives ({worst.format})",
            {"best": best.format, "worst": worst.format},
        )
    ]


def rule_num_steps_advice(e: Evidence) -> list[Finding]:
    """Another --speculative-num-steps is predicted faster than the served one, from the
    measured acceptance per position and the run's own verify and draft-step costs
    (SafeAILab/EAGLE#132, sglang#13212)."""
    profile = e.profile
    best = None if profile is None else profile.recommended
    if best is None or best.num_steps == best.current_num_steps:
        return []
    if not best.predicted_tok_s or not best.current_tok_s:
        return []
    gain = best.predicted_tok_s / best.current_tok_s - 1.0
    if gain < STEPS_GAIN:
        return []
    return [
        Finding(
            "num-steps-advice",
            "info",
            f"--speculative-num-steps {best.num_steps} is predicted {gain:.0%} faster than the "
            f"served {best.current_num_steps}.",
            f"predicted {best.predicted_tok_s:.1f} tok/s at {best.num_steps} steps (accept "
            f"length {_fmt(best.predicted_accept_length)}) against {best.current_tok_s:.1f} "
            f"tok/s measured at {best.current_num_steps}",
            best.flags,
            {"num_steps": best.num_steps, "gain": gain},
        )
    ]
