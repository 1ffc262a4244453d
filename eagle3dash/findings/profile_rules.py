"""Rules over the acceptance profile: a weak prompt category, a prompt format the draft was not
trained on, and a faster --speculative-num-steps.

Their sources are the trackers where users hit these causes: domains (BaldEagle#15, SpecForge#310),
chat templates and raw prompts (SpecForge#296, sglang#4716, InferenceX#1737), the flag budget
(SafeAILab/EAGLE#132, sglang#13212).
"""

from __future__ import annotations

import math
import statistics

from eagle3dash.findings.core import Evidence, Finding, _fmt, critical_ids
from eagle3dash.prompt_format import RAW
from eagle3dash.severity import Severity

# A category or format this far below the others (absolute, and as a share of theirs).
FAR_BELOW = 0.5
FAR_BELOW_SHARE = 0.8


def _far_below(value: float, reference: float) -> bool:
    return reference - value >= FAR_BELOW and value <= FAR_BELOW_SHARE * reference


# Findings while which the categories say nothing: on a broken layout or another draft every
# category is flattened.
FLATTENS_CATEGORIES = (
    "layout-mismatch",
    "capture-error",
    "server-feeds-other-taps",
    "detected-layout",
    "aux-ids-not-read",
    "capture-rule-version",
    "draft-differs",
    "measured-above-simulated",
    "training-serving-gap",
)


def _far_below_others(values: dict[str, float]) -> dict[str, float]:
    """The categories far below the median of the others: {category: that median}."""
    low = {}
    for category, value in values.items():
        others = statistics.median(v for c, v in values.items() if c != category)
        if _far_below(value, others):
            low[category] = others
    return low


def rule_category_far_below(e: Evidence, found: list[Finding]) -> list[Finding]:
    """A prompt category whose serving-side accept length (measured, else the served states'
    simulated one) falls far below the other categories'. Weak on the training side too (its own
    simulation there): the draft is weak on these prompts (BaldEagle#15, SpecForge#310), an info
    note; weak only in serving: a warning. Not raised while a critical layout or identity
    finding stands: those flatten every category."""
    profile = e.profile
    if profile is None or critical_ids(found, FLATTENS_CATEGORIES):
        return []
    serving = {}
    training = {}
    prompts = {}
    for row in profile.per_category:
        value = row.measured_accept_length
        value = value if value is not None else row.sim_accept_serving
        if value is not None:
            serving[row.category] = value
            prompts[row.category] = row.prompts
        if row.sim_accept_training is not None:
            training[row.category] = row.sim_accept_training
    if len(serving) < 2:
        return []
    low = _far_below_others(serving)
    if not low:
        return []
    weak_in_training = _far_below_others(training) if len(training) >= 2 else {}
    out = []
    for group in ("both", "serving", "unknown"):
        names = [
            c
            for c in low
            if group
            == ("unknown" if c not in training else "both" if c in weak_in_training else "serving")
        ]
        if names:
            out.append(_category_finding(group, names, serving, training, low, prompts))
    return out


def _category_finding(
    group: str,
    names: list[str],
    serving: dict[str, float],
    training: dict[str, float],
    low: dict[str, float],
    prompts: dict[str, int],
) -> Finding:
    """One category-far-below finding for the categories weak on both sides ('both'), only in
    serving ('serving'), or whose training side was not measured ('unknown')."""
    listed = ", ".join(names)
    evidence = "; ".join(
        f"{c} ({prompts[c]} prompt{'s' if prompts[c] != 1 else ''}): serving accept length "
        f"{_fmt(serving[c])} against {_fmt(low[c])} for the other categories (median)"
        + (
            f"; training side simulated {_fmt(training[c])}"
            if c in training
            else "; training side not measured"
        )
        for c in names
    )
    data = {"categories": names, "weak_in_training": {"both": True, "serving": False}.get(group)}
    where = f"The {listed} prompts are the ones labelled so in the prompt set"
    if group == "both":
        return Finding(
            "category-far-below",
            Severity.INFO,
            f"The draft is weak on {listed} prompts, on the training side as in serving.",
            evidence + ": the draft itself accepts less there, not the deployment.",
            f"Nothing to fix in serving. {where}; if your traffic looks like them, train the "
            "draft on more text like them, else weigh this category as your traffic does.",
            data,
        )
    if group == "serving":
        title = (
            f"The draft accepts far less on {listed} prompts in serving than the other "
            "categories, where its training side does not."
        )
        fix = (
            f"{where}: compare how they reach the server with how training saw such text "
            "(prompt format, sampling, truncation); measure with the prompts your traffic sends."
        )
    else:
        title = (
            f"The draft accepts far less on {listed} prompts than on the other categories; "
            "whether the draft itself is weak there was not measured."
        )
        fix = (
            f"{where}. Give a local copy of the target to simulate the training side per "
            "category: weak there too means the draft, not the deployment."
        )
    return Finding("category-far-below", Severity.WARNING, title, evidence + ".", fix, data)


def rule_prompt_format_gap(e: Evidence) -> list[Finding]:
    """The same prompts accept far less in one prompt format (raw, chat template, thinking on or
    off) than in another, beyond the noise of either row's requests: the draft was trained on
    another format than it is served with (SpecForge#296, sglang#4716, InferenceX#1737).
    Critical when the worse format is the benchmark's own (raw): the gap, at least FAR_BELOW (a
    material one, noise.MATERIAL_ACCEPT_LENGTH), then holds down what the run measured, its
    speedup included."""
    profile = e.profile
    if profile is None:
        return []
    rows = [r for r in profile.prompt_format if r.measured_accept_length is not None]
    if len(rows) < 2:
        return []
    best = max(rows, key=lambda r: r.measured_accept_length or 0.0)
    worst = min(rows, key=lambda r: r.measured_accept_length or 0.0)
    high, low = best.measured_accept_length or 0.0, worst.measured_accept_length or 0.0
    spread = math.hypot(best.accept_length_noise or 0.0, worst.accept_length_noise or 0.0)
    if not _far_below(low, high) or high - low <= spread:  # within the requests' noise
        return []
    numbers = "; ".join(
        f"{r.format}: measured {_fmt(r.measured_accept_length or 0.0)}"
        + (f", simulated {_fmt(r.sim_accept_serving)}" if r.sim_accept_serving is not None else "")
        for r in rows
    )
    return [
        Finding(
            "prompt-format-gap",
            Severity.CRITICAL if worst.format == RAW else Severity.WARNING,
            "The draft was trained on another prompt format than it is served with: it accepts "
            f"{_fmt(high)} on {best.format} prompts but {_fmt(low)} on {worst.format} prompts.",
            f"accept length of the same prompts per format: {numbers}",
            f"serve the draft's requests in the {best.format} format, or train it on data "
            f"rendered the way your traffic arrives ({worst.format})",
            {"best": best.format, "worst": worst.format},
        )
    ]


def rule_num_steps_advice(e: Evidence, found: list[Finding]) -> list[Finding]:
    """Another number of draft steps is predicted faster than the served one beyond the
    per-request noise, from the measured acceptance per position and the run's own verify and
    draft-step costs (SafeAILab/EAGLE#132, sglang#13212). Withheld while a critical finding
    stands: the acceptance it rests on changes once that is fixed."""
    profile = e.profile
    best = None if profile is None else profile.recommended
    if best is None or not best.changes or critical_ids(found):
        return []
    if not best.predicted_tok_s or not best.current_tok_s or best.gain is None:
        return []
    interval = (
        ""
        if best.gain_low is None or best.gain_high is None
        else f" ({best.gain_low:+.0%} to {best.gain_high:+.0%} with the per-request noise)"
    )
    return [
        Finding(
            "num-steps-advice",
            Severity.INFO,
            f"{e.words().STEPS_KNOB} {best.num_steps} is predicted {best.gain:.0%} faster than "
            f"the served {best.current_num_steps}{interval}.",
            f"predicted {best.predicted_tok_s:.1f} tok/s at {best.num_steps} steps (accept "
            f"length {_fmt(best.predicted_accept_length)}) against {best.current_tok_s:.1f} "
            f"tok/s measured at {best.current_num_steps}",
            best.flags,
            {"num_steps": best.num_steps, "gain": best.gain},
        )
    ]
