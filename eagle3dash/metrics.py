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

from .layout import Layout, Tap, layout_from_json

__all__ = [
    "DraftEval",
    "accept_length",
    "build_eval",
    "leading_correct",
    "served_histogram",
    "served_rounds",
    "summarize",
]


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


def _replay(leading: Tensor, rows: Tensor, steps: int, budget: int | None) -> list[int]:
    """The tokens each replayed serving round emits (see served_rounds)."""
    at = {int(r): int(n) for r, n in zip(rows.tolist(), leading.tolist(), strict=True)}
    if not at:
        return []
    emitted, tokens, t = [], 1, min(at)
    while t in at and (budget is None or tokens < budget):
        accepted = 1 + min(at[t], steps)
        if budget is not None:
            accepted = min(accepted, budget - tokens)
        emitted.append(accepted)
        tokens += accepted
        t += accepted
    return emitted


def served_rounds(
    leading: Tensor, rows: Tensor, steps: int, budget: int | None = None
) -> tuple[int, int]:
    """(tokens, rounds) of greedy chain serving replayed over one sequence's counted rows.

    Serving does not draft at every position: the first round drafts at the first counted row,
    each round emits 1 + its leading correct steps (at most `steps`) and the next round drafts
    that many rows later. Like SGLang's completion_tokens, tokens include the one sampled at
    prefill, so tokens / rounds is comparable to Σcompletion_tokens / Σspec_verify_ct. A
    per-position mean over-weights the rows right after a failure, where drafting is hardest.
    With a `budget` (max_new_tokens of the measured requests) the replay stops there and the
    last round is cut short, as the server's is.
    """
    emitted = _replay(leading, rows, steps, budget)
    return (1 + sum(emitted), len(emitted)) if emitted else (0, 0)


def served_histogram(
    leading: Tensor, rows: Tensor, steps: int, budget: int | None = None
) -> list[int]:
    """The replayed rounds by drafts accepted, entry k counting the rounds that accepted k of
    `steps` (length steps + 1): SGLang's spec_correct_drafts_histogram, simulated."""
    histogram = [0] * (steps + 1)
    for emitted in _replay(leading, rows, steps, budget):
        histogram[emitted - 1] += 1
    return histogram


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

    layout: Layout  # the taps fed to the fc slots
    steps: int  # S, draft tokens per chain
    num_positions: int  # chains counted, all sequences together
    accuracy: list[float]  # per step
    acceptance: list[float]  # per step, cumulative (steps 0..k all correct)
    accept_length: float  # 1 + mean leading correct steps, at most S + 1
    accept_length_per_sequence: list[float] = field(default_factory=list)  # NaN: no rows
    # Serving rounds replayed over the sequences (see served_rounds): comparable to a measured
    # accept length. None when no sequence has counted rows.
    served_accept_length: float | None = None
    # Per sequence, in the capture's order (rows, leading correct steps), to replay rounds at
    # fewer steps or over some sequences; not saved.
    chains: list[tuple[Tensor, Tensor]] = field(default_factory=list, repr=False, compare=False)
    budget: int | None = field(default=None, repr=False, compare=False)  # tokens per request

    def accept_length_at(self, steps: int) -> float:
        """The per-position mean accept length of chains cut to `steps` <= S draft tokens."""
        return accept_length(self.acceptance, steps)

    def simulated_accept_length(self, steps: int | None = None) -> float:
        """What serving with `steps` draft tokens per round would measure: the replayed rounds
        when the capture allows, else the per-position mean."""
        steps = self.steps if steps is None else min(steps, self.steps)
        served = self.served_accept_length_at(steps)
        return served if served is not None else self.accept_length_at(steps)

    def served_accept_length_at(
        self, steps: int, sequences: Iterable[int] | None = None
    ) -> float | None:
        """The replayed serving accept length with `steps` <= S draft tokens per round, over
        every sequence or over the given sequence indices."""
        if not self.chains:
            return self.served_accept_length if steps >= self.steps and sequences is None else None
        picked = range(len(self.chains)) if sequences is None else sequences
        totals = [
            served_rounds(self.chains[i][1], self.chains[i][0], steps, self.budget) for i in picked
        ]
        rounds = sum(r for _, r in totals)
        return sum(t for t, _ in totals) / rounds if rounds else None

    def served_histogram_at(self, steps: int) -> list[int] | None:
        """The replayed rounds at `steps` <= S draft tokens, by drafts accepted, over every
        sequence; None without the per-row chains."""
        if not self.chains:
            return None
        total = [0] * (steps + 1)
        for rows, leading in self.chains:
            for k, count in enumerate(served_histogram(leading, rows, steps, self.budget)):
                total[k] += count
        return total

    def simulated_accept_length_over(self, sequences: Iterable[int], steps: int) -> float | None:
        """The replayed serving accept length over some sequences (a prompt category's)."""
        return self.served_accept_length_at(min(steps, self.steps), sequences)

    def to_dict(self) -> dict:
        """JSON-ready dict (NaN per-sequence values become None)."""
        d = asdict(self)
        del d["chains"], d["budget"]
        d["layout"] = [t.to_dict() for t in self.layout]
        d["accept_length_per_sequence"] = [
            None if math.isnan(x) else x for x in self.accept_length_per_sequence
        ]
        return d

    @classmethod
    def from_dict(cls, d: dict) -> DraftEval:
        """Inverse of to_dict (without the per-row chains)."""
        d = dict(d)
        d["layout"] = layout_from_json(d["layout"])
        d["accept_length_per_sequence"] = [
            float("nan") if x is None else x for x in d.get("accept_length_per_sequence", [])
        ]
        return cls(**d)


def build_eval(
    layout: Iterable[Tap],
    per_sequence: list[Tensor],
    steps: int,
    rows_per_sequence: list[Tensor] | None = None,
    budget: int | None = None,
) -> DraftEval:
    """A DraftEval from the [P_i, S] matches of each sequence (rows pooled over sequences).

    With the counted row indices of each sequence, serving rounds are replayed too (up to
    `budget` tokens per sequence when given).
    """
    taps = tuple(layout)
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
    result = DraftEval(
        layout=taps,
        steps=steps,
        num_positions=s["num_positions"],
        accuracy=s["accuracy"],
        acceptance=s["acceptance"],
        accept_length=s["accept_length"],
        accept_length_per_sequence=per_seq,
    )
    if rows_per_sequence is not None:
        result.chains = [
            (rows, leading_correct(m))
            for rows, m in zip(rows_per_sequence, per_sequence, strict=True)
        ]
        result.budget = budget
        result.served_accept_length = result.served_accept_length_at(steps)
    return result
