"""Severity by impact: what a difference between the sides costs, against the measurement's noise
(the thresholds: eagle3dash/noise.py). A difference whose cost was not measured keeps the
severity of what it predicts, and says it rests on a prediction (its `basis`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

from eagle3dash.findings.core import Evidence, _fmt
from eagle3dash.noise import MATERIAL_ACCEPT_LENGTH, MATERIAL_TOP1, noise
from eagle3dash.severity import Severity

if TYPE_CHECKING:
    from eagle3dash.metrics import DraftEval


def _per_sequence(ev: DraftEval) -> list[float]:
    return list(ev.accept_length_per_sequence)


@dataclass(frozen=True)
class Cost:
    """What serving loses against training: accept length per round and step-1 accuracy, and the
    noise of that accept-length difference."""

    accept_length: float  # training's minus serving's (simulated, or measured when not)
    top1: float | None  # training's minus serving's step-1 accuracy, when both were evaluated
    noise: float  # NOISE_SE standard errors of the accept-length difference
    how: str  # what was compared, for the evidence line

    def severity(self) -> Severity:
        """critical when material, warning when beyond the noise, info within it."""
        top1 = self.top1 or 0.0
        if self.accept_length >= MATERIAL_ACCEPT_LENGTH or top1 >= MATERIAL_TOP1:
            return Severity.CRITICAL
        if self.accept_length > self.noise:
            return Severity.WARNING
        return Severity.INFO

    def text(self) -> str:
        """The cost in one clause, with its noise."""
        top1 = "" if self.top1 is None else f", step-1 accuracy {100 * self.top1:+.1f} points"
        return (
            f"cost {self.how}: {_fmt(self.accept_length)} tokens per round (noise "
            f"±{_fmt(self.noise)}){top1}"
        )


def _at_steps(ev: DraftEval, steps: int | None) -> float:
    return ev.simulated_accept_length(ev.steps if steps is None else min(steps, ev.steps))


def _top1(ev: DraftEval) -> float | None:
    return ev.accuracy[0] if ev.accuracy else None


def layout_cost(e: Evidence) -> Cost | None:
    """What the sides' difference costs: the training side's simulated accept length (at the
    server's steps) minus the serving side's, paired over the same sequences when both were
    evaluated on them; else minus the endpoint's measured accept length; None when neither
    was measured, or when the draft accepts too little even on the training side's states for
    any cost to show (under MATERIAL_ACCEPT_LENGTH drafts per round: an untrained draft)."""
    t_ev, s_ev = e.training_eval, e.serving_eval
    if t_ev is None:
        return None
    steps = e.simulation_steps()
    t_len = _at_steps(t_ev, steps)
    if t_len - 1.0 < MATERIAL_ACCEPT_LENGTH:
        return None
    a = _per_sequence(t_ev)
    if s_ev is not None:
        b = _per_sequence(s_ev)
        if a and len(a) == len(b):
            spread = noise([x - y for x, y in zip(a, b, strict=True)])
        else:
            spread = math.hypot(noise(a), noise(b))
        t1, s1 = _top1(t_ev), _top1(s_ev)
        top1 = None if t1 is None or s1 is None else t1 - s1
        return Cost(
            t_len - _at_steps(s_ev, steps),
            top1,
            spread,
            "simulated, training side minus serving side",
        )
    m = e.measured
    measured = getattr(m, "accept_length", None)
    if m is None or measured is None:
        return None
    spread = math.hypot(noise(a), noise(m.accept_length_per_request))
    return Cost(t_len - measured, None, spread, "training side simulated minus measured")
