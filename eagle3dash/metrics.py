"""Draft metrics from chain-drafting matches: accuracy and acceptance per step, accept length.

A matches tensor is [P, S] bool: row p is one position where a chain of S draft tokens was rooted,
column k whether the draft's step-k token equals the target's greedy token there. With greedy
verification the target accepts the leading run of correct tokens plus its own bonus token, so
the accept length of a chain is 1 + (number of leading True), at most S + 1.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field

import torch
from torch import Tensor

from .layout import Tap

__all__ = ["DraftEval", "accept_length", "build_eval", "leading_correct", "summarize"]


def leading_correct(matches: Tensor) -> Tensor:
    """[P, S] bool -> [P] int64: the number of leading correct steps of each chain."""
    return matches.to(torch.int64).cumprod(dim=1).sum(dim=1)


def accept_length(acceptance: list[float], steps: int | None = None) -> float:
    """1 + sum(acceptance[:steps]): the mean accept length of chains cut to `steps` draft tokens.

    `acceptance[k]` is the fraction of chains whose steps 0..k are all correct, so one run at S
    steps gives the accept length for every S' <= S.
    """
    cut = acceptance if steps is None else acceptance[:steps]
    return 1.0 + float(sum(cut))


def summarize(matches: Tensor) -> dict:
    """num_positions, accuracy [S], acceptance [S] and accept_length of a [P, S] matches tensor.

    accuracy[k]: fraction of rows whose step-k token is correct (whatever came before);
    acceptance[k]: fraction whose steps 0..k are all correct. With no rows, every fraction is 0.0
    and the accept length 1.0 (check num_positions).
    """
    if matches.dim() != 2:
        raise ValueError(f"matches must be [P, S], got shape {tuple(matches.shape)}")
    P, S = matches.shape
    if P == 0:
        return {
            "num_positions": 0,
            "accuracy": [0.0] * S,
            "acceptance": [0.0] * S,
            "accept_length": 1.0,
        }
    m = matches.to(torch.bool)
    accuracy = m.float().mean(dim=0).tolist()
    acceptance = m.to(torch.int64).cumprod(dim=1).float().mean(dim=0).tolist()
    return {
        "num_positions": P,
        "accuracy": accuracy,
        "acceptance": acceptance,
        "accept_length": accept_length(acceptance),
    }


@dataclass
class DraftEval:
    """The standalone draft forward over a capture under one layout."""

    layout: list[dict]  # the taps fed to the fc slots, as Tap.to_dict()
    steps: int  # S, draft tokens per chain
    num_positions: int  # chains counted, all sequences together
    accuracy: list[float]  # per step
    acceptance: list[float]  # per step, cumulative (steps 0..k all correct)
    accept_length: float  # 1 + mean leading correct steps, at most S + 1
    accept_length_per_sequence: list[float] = field(default_factory=list)  # NaN: no rows

    def accept_length_at(self, steps: int) -> float:
        """The accept length chains of `steps` <= S draft tokens would get."""
        return accept_length(self.acceptance, steps)

    def to_dict(self) -> dict:
        """JSON-ready dict (NaN per-sequence values become None)."""
        d = asdict(self)
        d["accept_length_per_sequence"] = [
            None if math.isnan(x) else x for x in self.accept_length_per_sequence
        ]
        return d

    @classmethod
    def from_dict(cls, d: dict) -> DraftEval:
        d = dict(d)
        d["accept_length_per_sequence"] = [
            float("nan") if x is None else x for x in d.get("accept_length_per_sequence", [])
        ]
        return cls(**d)


def build_eval(layout: Iterable[Tap | dict], per_sequence: list[Tensor], steps: int) -> DraftEval:
    """A DraftEval from the [P_i, S] matches of each sequence (rows pooled over sequences)."""
    taps = [t.to_dict() if isinstance(t, Tap) else dict(t) for t in layout]
    pooled = (
        torch.cat([m.to(torch.bool) for m in per_sequence], dim=0)
        if per_sequence
        else torch.zeros(0, steps, dtype=torch.bool)
    )
    s = summarize(pooled)
    per_seq = [
        1.0 + leading_correct(m).float().mean().item() if m.shape[0] else float("nan")
        for m in per_sequence
    ]
    return DraftEval(
        layout=taps,
        steps=steps,
        num_positions=s["num_positions"],
        accuracy=s["accuracy"],
        acceptance=s["acceptance"],
        accept_length=s["accept_length"],
        accept_length_per_sequence=per_seq,
    )
