"""The one place for what counts as material and what counts as noise (docs/evidence.md).

A difference between the sides is critical only when its cost is material (MATERIAL_ACCEPT_LENGTH
tokens per round, or MATERIAL_TOP1 of step-1 accuracy), a warning when smaller but beyond the
noise (NOISE_SE standard errors of the mean: over the sequences of the standalone draft's
evaluations, or over the benchmark's requests), an info note within it. Advice changes a served
setting only when its predicted gain is at least MATERIAL_GAIN and the gain's lower bound (the
gain minus NOISE_SE standard errors of the per-request tok/s, relative to their mean) is above 0.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

MATERIAL_ACCEPT_LENGTH = 0.5  # tokens per verify round
MATERIAL_TOP1 = 0.15  # step-1 accuracy, as a share
NOISE_SE = 2.0  # a difference within this many standard errors is noise
MATERIAL_GAIN = 0.05  # advice changes a served setting only for a gain at least this large
# A prompt set reads as random tokens (prompt_sets.py) when its ids, at least RANDOM_MIN_TOKENS of
# them, lie within RANDOM_UNIFORM_DISTANCE (the Kolmogorov-Smirnov distance) of uniform over the
# vocabulary, with at least RANDOM_DISTINCT_SHARE of the distinct ids uniform draws would give.
# Text in any language sits far from both: a few ids recur (Zipf), and BPE and SentencePiece give
# the frequent ones low ids. (KS's 99% bound for truly uniform ids is 1.63/sqrt(n): 0.072 at 512.)
RANDOM_MIN_TOKENS = 512
RANDOM_UNIFORM_DISTANCE = 0.1
RANDOM_DISTINCT_SHARE = 0.9


def standard_error(values: Sequence[float | None]) -> float | None:
    """The standard error of the mean of the finite values; None with fewer than two."""
    xs = [float(v) for v in values if v is not None and not math.isnan(float(v))]
    if len(xs) < 2:
        return None
    mean = sum(xs) / len(xs)
    return math.sqrt(sum((x - mean) ** 2 for x in xs) / (len(xs) - 1) / len(xs))


def noise(values: Sequence[float | None]) -> float:
    """NOISE_SE standard errors of the mean of these values (0 with fewer than two)."""
    se = standard_error(values)
    return 0.0 if se is None else NOISE_SE * se


def hides_material_gap(a: Sequence[float | None], b: Sequence[float | None]) -> bool:
    """Whether the noise of two sets of per-request accept lengths, together (added in
    quadrature, as the prompt-format rule reads two rows), could hide a material gap between their
    means; True while either has fewer than two values."""
    se_a, se_b = standard_error(a), standard_error(b)
    if se_a is None or se_b is None:
        return True
    return NOISE_SE * math.hypot(se_a, se_b) >= MATERIAL_ACCEPT_LENGTH


def ratio_noise(ratio: float, over: Sequence[float | None], under: Sequence[float | None]) -> float:
    """The noise of a ratio of two means (a speedup: the endpoint's tok/s over the baseline's):
    the ratio times both means' relative noise, in quadrature (0 for a side with fewer than two
    values)."""
    return ratio * math.hypot(relative_noise(over) or 0.0, relative_noise(under) or 0.0)


def relative_noise(values: Sequence[float | None]) -> float | None:
    """noise() over the mean of the values: the share by which a scaled prediction is uncertain;
    None with fewer than two values or a mean of 0."""
    xs = [float(v) for v in values if v is not None and not math.isnan(float(v))]
    if len(xs) < 2 or not sum(xs):
        return None
    return noise(xs) / (sum(xs) / len(xs))
