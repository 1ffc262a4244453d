"""The sampling and verification maths of the API doubles (SGLang's and vLLM's): SGLang's
SamplingParams normalisation, the target's sampling distribution, and chain verification by
target-only speculative sampling. Sources: SGLang `srt/sampling/sampling_params.py`,
`sgl-kernel/csrc/speculative/speculative_sampling.cuh` (TreeSpeculativeSamplingTargetOnly) and
`eagle_info.py` / `eagle_utils.py::eagle_sample`, as the SGLang double's module docstring details
under "Sampling and verification". Pure functions over tensors: no HTTP, no models.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import Tensor

SAMPLING_EPS = 1e-6  # sampling_params.py: a temperature below this is greedy (top_k = 1)
TOP_K_ALL = 1 << 30  # sampling_params.py: top_k -1, the whole vocabulary
MIN_THRESHOLD_ACC = 1e-9  # speculative_sampling.cuh: threshold_acc is capped below at this


@dataclass(frozen=True)
class Sampling:
    """One request's sampling parameters, normalised as SGLang's SamplingParams does."""

    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = TOP_K_ALL
    seed: int | None = None  # sampling_seed

    @property
    def greedy(self) -> bool:
        """top_k <= 1: SGLang's is_all_greedy for a batch of this one request."""
        return self.top_k <= 1


GREEDY = Sampling(top_k=1)


def parse_sampling(params: dict) -> Sampling:
    """SamplingParams defaults, __post_init__ and verify() for temperature, top_p, top_k and
    sampling_seed; a bad value raises ValueError with SGLang's text."""

    def number(name: str, default: float) -> float:
        value = params.get(name)
        if value is None:
            return default
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise ValueError(f"{name} must be a number, got {value!r}.")
        return float(value)

    temperature = number("temperature", 1.0)
    top_p = number("top_p", 1.0)
    top_k_value = number("top_k", -1)
    if top_k_value != int(top_k_value):
        raise ValueError(f"top_k must be an integer, got {top_k_value}.")
    top_k = int(top_k_value)
    seed = params.get("sampling_seed")
    integer = isinstance(seed, int) and not isinstance(seed, bool)
    if seed is not None and (not integer or not 0 <= seed < 1 << 64):  # a torch seed
        raise ValueError(f"sampling_seed must be a non-negative integer, got {seed!r}.")
    if 0 <= temperature < SAMPLING_EPS:  # greedy: temperature 1, top_k 1
        temperature, top_k = 1.0, 1
    if top_k == -1:
        top_k = TOP_K_ALL
    if not math.isfinite(temperature) or temperature < 0:
        raise ValueError(f"temperature must be a non-negative finite number, got {temperature}.")
    if not 0.0 < top_p <= 1.0:
        raise ValueError(f"top_p must be in (0, 1], got {top_p}.")
    if top_k < 1:
        raise ValueError(f"top_k must be -1 (disable) or at least 1, got {top_k}.")
    return Sampling(temperature, top_p, top_k, seed)


def target_probs(logits: Tensor, s: Sampling) -> Tensor:
    """Rows of softmax(logits / temperature), then top-k and top-p renormalised, as eagle_info.py
    builds target_probs for verification (float64 here)."""
    probs = torch.softmax(logits.double() / s.temperature, dim=-1)
    if s.top_k < probs.shape[-1]:  # top_k_renorm_prob: keep the k largest, renormalise
        kth = probs.topk(s.top_k, dim=-1).values[..., -1:]
        probs = torch.where(probs >= kth, probs, 0.0)
        probs = probs / probs.sum(-1, keepdim=True)
    if s.top_p < 1.0:  # top_p_renorm_prob: the smallest top set reaching top_p, renormalised
        sorted_p, order = probs.sort(dim=-1, descending=True)
        drop = (sorted_p.cumsum(-1) - sorted_p) > s.top_p
        sorted_p = sorted_p.masked_fill(drop, 0.0)
        probs = torch.zeros_like(probs).scatter(-1, order, sorted_p)
        probs = probs / probs.sum(-1, keepdim=True)
    return probs


def sample_from(weights: Tensor, coin: float) -> int:
    """Inverse-CDF sampling of a 1-D non-negative weight vector with a uniform `coin`, as the
    kernel's final sampling: the first id whose running sum exceeds coin * total; when none does,
    the last id of positive weight (the last id if every weight is 0)."""
    w = weights.double().clamp(min=0)
    u = coin * float(w.sum())
    hit = ((w > 0) & (w.cumsum(0) > u)).nonzero()
    if len(hit):
        return int(hit[0, 0])
    positive = (w > 0).nonzero()
    return int(positive[-1, 0]) if len(positive) else len(w) - 1


def verify_chain(
    probs: Tensor,
    drafts: list[int],
    coins: list[float],
    final_coin: float,
    threshold_single: float = 1.0,
    threshold_acc: float = 1.0,
) -> tuple[int, int]:
    """TreeSpeculativeSamplingTargetOnly for a chain: (accepted drafts, the token after them).

    probs[j] is the target distribution after j accepted drafts (S + 1 rows for S drafts). Draft
    j is accepted when coins[j] <= p / max(threshold_acc, 1e-9) or p >= threshold_single, with p
    = probs[j][drafts[j]] (a chain has no siblings, so prob_acc is p alone). The first rejected
    draft's probability is zeroed ("target-only": the draft's own probabilities are zeros) and
    the next token is drawn from what remains of that row, renormalised, with final_coin; when
    every draft is accepted the bonus token is drawn from probs[S] unchanged.
    """
    acc = max(threshold_acc, MIN_THRESHOLD_ACC)
    accepted, rejected = 0, None
    for j, token in enumerate(drafts):
        p = float(probs[j, token])
        if coins[j] <= p / acc or p >= threshold_single:
            accepted += 1
        else:
            rejected = token
            break
    row = probs[accepted].clone()
    if rejected is not None:
        row[rejected] = 0.0  # relu(target - draft_probs), draft_probs[rejected] = target's
    return accepted, sample_from(row, final_coin)
