"""What a prompt set's token ids say about it: whether it is random tokens.

A benchmark of random token ids (SGLang's and vLLM's `random` datasets) measures no draft: the
ids carry no co-occurrence a draft could have learned, so acceptance collapses towards one token
a round whatever the draft (sglang PR #25359: accept rate 0.755 on GSM8K, 0.13-0.27 on
`random 1024/1024`; InferenceX PR #1737: raw prompts "collapse acceptance to ~1"). Such ids are
spread evenly over the vocabulary and rarely repeat; text is neither (noise.py's thresholds).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from eagle3dash.noise import RANDOM_DISTINCT_SHARE, RANDOM_MIN_TOKENS, RANDOM_UNIFORM_DISTANCE


@dataclass(frozen=True)
class TokenSpread:
    """How a prompt set's ids spread over a vocabulary of `vocab_size` ids."""

    tokens: int  # the ids looked at, every prompt's
    vocab_size: int
    uniform_distance: float  # Kolmogorov-Smirnov distance of the ids to uniform over the vocab
    distinct_share: float  # distinct ids over those as many uniform draws would give

    @property
    def random(self) -> bool:
        """Whether the set reads as random tokens (enough ids, uniform and rarely repeated)."""
        return (
            self.tokens >= RANDOM_MIN_TOKENS
            and self.uniform_distance <= RANDOM_UNIFORM_DISTANCE
            and self.distinct_share >= RANDOM_DISTINCT_SHARE
        )


def token_spread(prompts: Sequence[Sequence[int]], vocab_size: int) -> TokenSpread | None:
    """The spread of these prompts' ids over [0, vocab_size); None without ids or vocabulary."""
    ids = sorted(i for prompt in prompts for i in prompt)
    if not ids or vocab_size < 2:
        return None
    n = len(ids)
    # KS distance of the empirical CDF of (id + 0.5) / V to U(0, 1): the largest gap on either
    # side of each step.
    distance = max(
        max((k + 1) / n - (i + 0.5) / vocab_size, (i + 0.5) / vocab_size - k / n)
        for k, i in enumerate(ids)
    )
    expected = vocab_size * (1 - (1 - 1 / vocab_size) ** n)
    return TokenSpread(n, vocab_size, distance, len(set(ids)) / expected)
