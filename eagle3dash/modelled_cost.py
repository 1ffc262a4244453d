"""An API double's modelled cost, as its server info states it, and the speedup that cost allows.

eagle3dash's doubles (testing/sglang_double_engine.py, and the vLLM double over the same engine)
say in their server info what each forward costs at least: `eagle3dash_double_delay_s` a target
forward, `eagle3dash_double_draft_step_s` a draft step. A speculative round of s draft steps and
its verify then costs delay + s x step and yields the accept length's tokens, where a plain
double pays delay a token; so a double's speedup cannot exceed

    accept length x delay / (delay + s x step)

while both keep to their floors (the prefill, which both pay once a request, only lowers it). A
speedup above that, beyond its noise, means the baseline's double paid more than its floor: the
machine was too loaded for the cost model to hold, and the number is the machine's, not the
model's.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

DELAY_KEY = "eagle3dash_double_delay_s"
DRAFT_STEP_KEY = "eagle3dash_double_draft_step_s"


@dataclass(frozen=True)
class ModelledCost:
    """What a double's forwards cost at least (seconds)."""

    delay_s: float  # a target forward: a prefill, a plain decode, a verify
    draft_step_s: float  # a draft step

    @classmethod
    def read(cls, server_info: Mapping[str, Any] | None) -> ModelledCost | None:
        """The cost a double's server info states; None for a real server, or a double that
        models none (delay 0: its tok/s are its tiny models' compute)."""
        info = server_info or {}
        delay, step = info.get(DELAY_KEY), info.get(DRAFT_STEP_KEY)
        if not isinstance(delay, int | float) or not isinstance(step, int | float) or delay <= 0:
            return None
        return cls(float(delay), float(step))

    def speedup_ceiling(self, accept_length: float, num_steps: int) -> float:
        """The most a speculative double serving `accept_length` tokens a round at `num_steps`
        draft steps can gain over a plain one (the module docstring)."""
        return accept_length * self.delay_s / (self.delay_s + num_steps * self.draft_step_s)


def above_ceiling(
    server_info: Mapping[str, Any] | None,
    num_steps: int,
    accept_length: float | None,
    speedup: float | None,
    noise: float | None,
) -> str | None:
    """Why a double's measured speedup cannot be its model's, when its interval lies wholly
    above the speedup its modelled cost allows; None when it does not (or nothing is modelled)."""
    cost = ModelledCost.read(server_info)
    if cost is None or accept_length is None or speedup is None or num_steps < 1:
        return None
    ceiling = cost.speedup_ceiling(accept_length, num_steps)
    if speedup - (noise or 0.0) <= ceiling:
        return None
    return (
        f"the speedup {speedup:.2f}x (±{noise or 0.0:.2f}) is above the {ceiling:.2f}x the "
        f"doubles' modelled cost allows at accept length {accept_length:.2f} and {num_steps} "
        f"draft steps (a forward {cost.delay_s * 1000:g} ms, a draft step "
        f"{cost.draft_step_s * 1000:g} ms): the baseline's double paid more than its floor, as "
        "on a machine too loaded for the cost model to hold; measure again on a quieter one"
    )
