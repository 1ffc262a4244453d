"""The layout detective: find which taps a draft was really trained on, from tensors alone.

Configs lie (ids stored where a server does not read them, data made with other ids, conventions
one apart), so three independent pieces of evidence are gathered here:

1. `sweep`: the standalone draft over candidate layouts, all evaluated on ONE capture that holds
   every tap (no further target forward): the best layout is the one the draft was trained on.
2. `slot_matching`: each slot of a training dump or serving capture against every tap of a target
   capture of the same sequences, by content (cosine) and scale (RMS ratio).
3. `fc_fingerprint`: per-slot statistics of fc.weight; a slot fed the tiny-RMS embedding output
   tends to learn large weights. A hint only (see `FINGERPRINT_LIMITS`).

And where no served state can be captured (a vLLM server, an SGLang server without hidden
states), `match_acceptance` infers the served layout from what the server measured: the
candidate whose simulated acceptance per draft position, on the served completions, matches the
measured one.
"""

from __future__ import annotations

import contextlib
import math
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from eagle3dash.checkpoint import InspectReport, inspect
from eagle3dash.engines.facts import FALLBACK_ARCH
from eagle3dash.engines.rules import rules_for, serving_layout
from eagle3dash.engines.serving import SGLANG, ServingEngine
from eagle3dash.errors import InputError
from eagle3dash.layout import (
    CONVENTIONS,
    Layout,
    Tap,
    bracketed,
    convert,
    default_layout,
    describe_layout,
    describe_tap,
    diff,
    layout_from_json,
    layout_to_json,
)
from eagle3dash.run_record import recorded_training
from eagle3dash.spec import DraftSpec
from eagle3dash.trainers import TRAINERS, training_layout

if TYPE_CHECKING:
    from torch import Tensor

    from eagle3dash.capture import Capture
    from eagle3dash.draft import Draft

Progress = Callable[[float, str], None]

FINGERPRINT_LIMITS = (
    "A hint, not proof: large fc weights on a slot suggest it was fed small-RMS inputs (the "
    "embedding output), but weight decay, initialisation and per-slot norms (fc_norm, "
    "norm_before_fc) can hide or fake the pattern; trust the sweep and slot matching first."
)


SCALE_PENALTY = 0.5  # score = cosine - 0.5 |log10 RMS ratio|: content first, then scale
FINGERPRINT_RATIO = 4.0
# The best layout counts as found only when it beats another by this much.
DECISIVE_ACCEPT = 0.1  # simulated accept length, tokens per round
DECISIVE_TOP1 = (
    0.05  # step-1 accuracy  # demo: 5.6x on draft A's embedding slot, 2.3x on draft B's L1 slot
)
TIED_BELOW = 0.01  # a slot whose best tap scores less than this above the next is undecided


def _no_progress(fraction: float, message: str) -> None:
    pass


# ---------------------------------------------------------------------------------------------
# Candidates


def _valid(layout: Layout, num_layers: int, width: int) -> bool:
    return len(layout) == width and all(0 <= t.depth <= num_layers for t in layout)


def candidate_layouts(
    spec: DraftSpec,
    num_layers: int,
    extra: Mapping[str, Layout] | list[Layout] | tuple = (),
    engine: ServingEngine = SGLANG,
    arch: str = FALLBACK_ARCH,
) -> dict[str, Layout]:
    """Candidate layouts by origin (config ids under each convention, +-1, with/without the
    embedding, framework defaults, trainers, what `engine` serves, the user's); deduped, taps
    within 0..N."""
    width, n = spec.num_aux, num_layers
    out: dict[str, Layout] = {}

    def add(name: str, layout: Layout) -> None:
        layout = tuple(layout)
        if not _valid(layout, n, width):
            return
        same = next((k for k, v in out.items() if v == layout), None)
        if same is None:
            out[name] = layout
        elif name not in same.split(" / "):  # the same layout by another origin: an alias
            items = [(f"{k} / {name}" if k == same else k, v) for k, v in out.items()]
            out.clear()
            out.update(items)

    extras = extra.items() if isinstance(extra, Mapping) else enumerate(extra)
    for key, layout in extras:
        add(key if isinstance(key, str) else f"user layout {bracketed(tuple(layout))}", layout)
    base: dict[str, Layout] = {}
    ids = spec.aux_layer_ids
    if ids:
        for conv in CONVENTIONS:
            base[f"config ids as {conv}"] = convert(ids, conv, n)
    for name, layout in base.items():
        add(name, layout)
    for name, layout in base.items():
        for delta in (-1, 1):
            shifted = tuple(Tap(t.depth + delta) for t in layout)
            add(f"{name}, shift {delta:+d}", shifted)
    for reading in engine.readings():  # each runner, when a vLLM server does not say its own
        with contextlib.suppress(ValueError):
            served = serving_layout(reading, spec, n, arch)
            if served.error is None:
                add(f"{reading.label()} serving", served.layout)
    # SpecForge follows SGLang's rules (at the served release, when SGLang serves the draft)
    trained_on = engine.rules_version() if engine.name == "sglang" else None
    for trainer in dict.fromkeys(t.name for t in TRAINERS.values()):
        with contextlib.suppress(ValueError):
            result = training_layout(spec, n, trainer, sglang_version=trained_on, arch=arch)
            if result.error is None:
                add(f"trained by {trainer}", result.layout)
    add("framework defaults [2, N//2, N-3]", default_layout(n))
    for names, layout in list(out.items()):
        name = names.split(" / ")[0]
        if not layout or layout[0].post_norm:
            continue
        if Tap(0) in layout:
            rest = tuple(t for t in layout if t != Tap(0))
            add(f"{name}, without embedding", rest + (Tap(max(t.depth for t in layout) + 1),))
        else:
            add(f"{name}, with embedding", (Tap(0),) + layout[:-1])
    return out


# ---------------------------------------------------------------------------------------------
# 2. Layout sweep


@dataclass
class SweepRow:
    """One candidate layout's standalone evaluation on the shared capture."""

    name: str
    layout: Layout
    top1: float
    sim_accept_length: float
    seconds: float
    accuracy: list[float] = field(default_factory=list)
    # Serving rounds replayed at the sweep's steps: entry k-1 the share that accepted at least k
    # drafts, and how many rounds were replayed (the simulation's sample size).
    shares: list[float] = field(default_factory=list)
    rounds: int = 0

    def to_dict(self) -> dict:
        """JSON form; the layout as Tap dicts (eagle3dash/layout.py layout_to_json)."""
        return {
            "name": self.name,
            "layout": layout_to_json(self.layout),
            "top1": self.top1,
            "sim_accept_length": self.sim_accept_length,
            "seconds": self.seconds,
            "accuracy": list(self.accuracy),
            "shares": list(self.shares),
            "rounds": self.rounds,
        }


def sweep(
    draft: Draft | str | Path,
    capture: Capture,
    candidates: Mapping[str, Layout],
    steps: int = 4,
    embed_weight: Tensor | None = None,
    device: str = "cpu",
    progress: Progress | None = None,
) -> list[SweepRow]:
    """Evaluate the draft (built, or a checkpoint path) under every candidate on one capture;
    best first (sim accept, top-1)."""
    from eagle3dash.draft import Draft, evaluate_capture, load_draft
    from eagle3dash.servebench import shares_at_least

    progress = progress or _no_progress
    embed = embed_weight if embed_weight is not None else capture.embed_weight
    if not isinstance(draft, Draft):
        draft = load_draft(draft, device, target_embedding=embed)
    have = set(capture.taps)
    usable = {k: v for k, v in candidates.items() if set(v) <= have}
    if not usable:
        raise InputError(
            f"the capture holds taps {bracketed(capture.taps)}: no candidate layout fits in it"
        )
    rows = []
    for i, (name, layout) in enumerate(usable.items()):
        progress(i / len(usable), f"evaluating {name} {bracketed(layout)}")
        start = time.perf_counter()
        ev = evaluate_capture(draft, capture, layout, steps=steps, embed_weight=embed)
        rounds = ev.served_histogram_at(steps) or []
        rows.append(
            SweepRow(
                name,
                tuple(layout),
                ev.accuracy[0],
                ev.simulated_accept_length(steps),
                time.perf_counter() - start,
                list(ev.accuracy),
                shares_at_least(rounds),
                sum(rounds),
            )
        )
    progress(1.0, "sweep done")
    return sorted(rows, key=lambda r: (-r.sim_accept_length, -r.top1))


# ---------------------------------------------------------------------------------------------
# The served layout from the measured acceptance

# Two standard errors: a candidate within this of the measurement fits it, and two candidates
# closer than this to each other's distance are not told apart.
MATCH_SE = 2.0
# The least distance that counts as noise (a simulation is not the server's exact numerics).
MATCH_FLOOR = 0.03


@dataclass(frozen=True)
class AcceptanceRow:
    """One candidate layout's simulated acceptance per draft position against the measured."""

    name: str
    layout: Layout
    shares: tuple[float, ...]  # k-1: simulated rounds that accepted at least k drafts
    distance: float  # root mean square of simulated - measured over the positions
    reading: str | None = None  # the engine reading that predicts this layout, if one does

    def to_dict(self) -> dict:
        """JSON form."""
        return {
            "name": self.name,
            "layout": layout_to_json(self.layout),
            "shares": list(self.shares),
            "distance": self.distance,
            "reading": self.reading,
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> AcceptanceRow:
        """Inverse of to_dict."""
        return cls(
            str(d["name"]),
            layout_from_json(d["layout"]),
            tuple(float(x) for x in d["shares"]),
            float(d["distance"]),
            d.get("reading"),
        )


@dataclass(frozen=True)
class AcceptanceMatch:
    """Which candidate layout the measured acceptance per draft position matches, nearest
    first; `best` is None when none fits within the noise."""

    measured: tuple[float, ...]  # k-1: measured rounds that accepted at least k drafts
    rounds: int  # measured rounds
    noise: float  # the distance within which a candidate fits, and two are not told apart
    rows: tuple[AcceptanceRow, ...]
    best: AcceptanceRow | None
    tied: tuple[AcceptanceRow, ...]  # other candidates that fit as well as the best

    def to_dict(self) -> dict:
        """JSON form."""
        return {
            "measured": list(self.measured),
            "rounds": self.rounds,
            "noise": self.noise,
            "rows": [r.to_dict() for r in self.rows],
            "best": None if self.best is None else self.best.to_dict(),
            "tied": [r.to_dict() for r in self.tied],
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> AcceptanceMatch:
        """Inverse of to_dict (a stored diagnosis's serving side)."""
        best = d.get("best")
        return cls(
            tuple(float(x) for x in d["measured"]),
            int(d["rounds"]),
            float(d["noise"]),
            tuple(AcceptanceRow.from_dict(r) for r in d["rows"]),
            None if best is None else AcceptanceRow.from_dict(best),
            tuple(AcceptanceRow.from_dict(r) for r in d.get("tied") or []),
        )


def _share_variance(p: float, n: int) -> float:
    return p * (1.0 - p) / max(n, 1)


def match_acceptance(
    rows: list[SweepRow],
    measured: list[float],
    rounds: int,
    readings: Mapping[str, Layout] | None = None,
) -> AcceptanceMatch | None:
    """The served layout inferred from the measured acceptance: each sweep row's simulated
    acceptance per draft position (replayed rounds on the served completions) against the
    measured one (`measured[k-1]`: the server's rounds that accepted at least k drafts, over
    `rounds` rounds). A candidate fits when its distance is within MATCH_SE standard errors of
    both samples (at least MATCH_FLOOR); among those that fit as well as the nearest, one that
    an engine reading predicts (`readings`: label -> layout) is preferred, and the rest are
    `tied`. None when no row was replayed or nothing was measured."""
    usable = [r for r in rows if r.shares and r.rounds]
    if not usable or not rounds or not measured:
        return None
    k = min(len(usable[0].shares), max(len(r.shares) for r in usable))
    got = tuple((list(measured) + [0.0] * k)[:k])  # SGLang's histogram stops at the largest k
    by_layout = {tuple(v): name for name, v in (readings or {}).items()}

    def distance(r: SweepRow) -> float:
        return math.sqrt(sum((s - m) ** 2 for s, m in zip(r.shares[:k], got, strict=True)) / k)

    table = sorted(
        (
            AcceptanceRow(
                r.name, r.layout, tuple(r.shares[:k]), distance(r), by_layout.get(r.layout)
            )
            for r in usable
        ),
        key=lambda r: r.distance,
    )
    nearest = next(r for r in usable if r.layout == table[0].layout)
    variance = sum(
        _share_variance(m, rounds) + _share_variance(s, nearest.rounds)
        for m, s in zip(got, nearest.shares[:k], strict=True)
    )
    noise = max(MATCH_SE * math.sqrt(variance / k), MATCH_FLOOR)
    fits = [r for r in table if r.distance <= noise and r.distance - table[0].distance < noise]
    if not fits:
        return AcceptanceMatch(got, rounds, noise, tuple(table), None, ())
    best = next((r for r in fits if r.reading is not None), fits[0])
    tied = tuple(r for r in fits if r is not best)
    return AcceptanceMatch(got, rounds, noise, tuple(table), best, tied)


# ---------------------------------------------------------------------------------------------
# 1. Slot matching


@dataclass
class SlotScore:
    """One slot of one side against every tap of the reference capture."""

    side: str
    slot: int
    rms: float
    best: Tap
    confidence: float  # score margin between the best and the second-best tap
    scores: list[dict]  # per tap: tap, cosine, rel_error, rms_ratio, profile_corr, score
    profile: list[float]  # RMS per position, averaged over sequences

    def to_dict(self) -> dict:
        """JSON form."""
        return {
            "side": self.side,
            "slot": self.slot,
            "rms": self.rms,
            "best": self.best.to_dict(),
            "confidence": self.confidence,
            "scores": self.scores,
            "profile": self.profile,
        }


@dataclass
class SlotMatch:
    """Slot-to-tap matching of each side against a reference capture at every tap."""

    taps: Layout
    tap_rms: dict[Tap, float]
    sides: dict[str, list[SlotScore]]

    def best(self, side: str) -> Layout:
        """The most likely tap of each slot of `side`."""
        return tuple(s.best for s in self.sides[side])

    def correspondence(self, a: str, b: str) -> dict[int, int | None]:
        """Slot i of side a -> the slot of side b holding the same tap (None: no slot does)."""
        b_taps = self.best(b)
        return {i: (b_taps.index(t) if t in b_taps else None) for i, t in enumerate(self.best(a))}

    def heatmap(self) -> list[dict]:
        """Long rows (side, slot, tap, cosine, rel_error, rms_ratio, score) for altair."""
        return [
            {"side": s.side, "slot": s.slot, **row}
            for slots in self.sides.values()
            for s in slots
            for row in s.scores
        ]

    def summary(self, num_layers: int) -> list[str]:
        """One sentence per side, plus the shift between the first two sides."""
        lines = []
        for side, slots in self.sides.items():
            parts = ", ".join(
                f"slot {s.slot}: {describe_tap(s.best, num_layers)} "
                + (
                    f"(its score {s.confidence:.2f} above the next tap's)"
                    if s.confidence >= TIED_BELOW
                    else "(undecided: another tap matches as well)"
                )
                for s in slots
            )
            lines.append(f"{side} carries {bracketed(self.best(side))}: {parts}.")
        names = list(self.sides)
        if len(names) >= 2:
            a, b = names[0], names[1]
            pairs = [f"{a} slot {i} = {b} slot {j}" for i, j in self.correspondence(a, b).items()]
            d = diff(self.best(a), self.best(b))
            lines.append(
                f"{a} vs {b}: {d.summary} ({'; '.join(pairs) or 'no shared taps'})."
                if d.kind != "identical"
                else f"{a} and {b} carry the same taps."
            )
        return lines

    def to_dict(self) -> dict:
        """JSON form."""
        return {
            "taps": layout_to_json(self.taps),
            "tap_rms": [{"tap": t.to_dict(), "rms": rms} for t, rms in self.tap_rms.items()],
            "sides": {k: [s.to_dict() for s in v] for k, v in self.sides.items()},
            "best": {k: layout_to_json(self.best(k)) for k in self.sides},
            "heatmap": self.heatmap(),
        }


def side_states(capture: Capture, layout: Layout | None = None) -> list[Tensor]:
    """A side for slot_matching: each sequence's fc input [L, A*Ht] (the capture's taps)."""
    layout = tuple(layout or capture.taps)
    return [capture.aux(i, layout) for i in range(len(capture.sequences))]


def _align(side_ids: list[Tensor] | None, n_side: int, reference: Capture) -> list[int | None]:
    """Reference sequence index for each side sequence (same tokens), else by position."""
    if side_ids is None:
        return [i if i < len(reference.sequences) else None for i in range(n_side)]
    index = {tuple(s.input_ids.tolist()): i for i, s in enumerate(reference.sequences)}
    out: list[int | None] = []
    for ids in side_ids:
        key = tuple(ids.tolist())
        hit = index.get(key)
        if hit is None:  # a prefix of each other (a dump cut at another length)
            hit = next(
                (
                    i
                    for i, s in enumerate(reference.sequences)
                    if s.input_ids[: len(ids)].tolist() == list(key[: len(s.input_ids)])
                ),
                None,
            )
        out.append(hit)
    return out


def _profile(chunks: list[Tensor], length: int) -> Tensor:
    """RMS per position (first `length` positions), averaged over sequences."""
    import torch

    rows = torch.stack([c[:length].float().pow(2).mean(-1).sqrt() for c in chunks])
    return rows.mean(0)


def slot_matching(
    sides: Mapping[str, list[Tensor]],
    reference: Capture,
    side_ids: Mapping[str, list[Tensor]] | None = None,
    profile_points: int = 64,
) -> SlotMatch:
    """Match each slot of each side ([L, A*Ht] per sequence) to the reference capture's taps.

    Per slot and tap: mean cosine over positions (content), relative error ||x-y||/||y||, the RMS
    ratio r (scale) and the correlation of the per-position RMS profiles. The score is cosine
    minus 0.5 |log10 r|: content decides (a rescaled state keeps its tap), a tenfold scale gap
    costs half a cosine; confidence is the margin between the best and second-best score.
    Sequences pair up by equal tokens when `side_ids` is given, else by index.
    """
    import torch

    ht = reference.hidden_size
    taps = tuple(reference.taps)
    tap_rms: dict[Tap, float] = {}
    result: dict[str, list[SlotScore]] = {}
    for side, seqs in sides.items():
        pairs = _align(side_ids.get(side) if side_ids else None, len(seqs), reference)
        used = [
            (x, reference.sequences[j]) for x, j in zip(seqs, pairs, strict=True) if j is not None
        ]
        if not used:
            raise InputError(f"side {side!r} shares no token sequence with the reference capture")
        width = used[0][0].shape[-1]
        if width % ht:
            raise InputError(f"side {side!r} is {width} wide, not a multiple of Ht={ht}")
        lengths = [min(x.shape[0], len(ref)) for x, ref in used]
        plen = min(min(lengths), profile_points)
        tap_rows = {
            t: torch.cat(
                [ref.states[t][:n].float() for (_, ref), n in zip(used, lengths, strict=True)]
            )
            for t in taps
        }
        tap_prof = {t: _profile([ref.states[t].float() for _, ref in used], plen) for t in taps}
        for t in taps:
            tap_rms.setdefault(t, float(tap_rows[t].pow(2).mean().sqrt()))
        slots = []
        for k in range(width // ht):
            x = torch.cat(
                [
                    xs[:n, k * ht : (k + 1) * ht].float()
                    for (xs, _), n in zip(used, lengths, strict=True)
                ]
            )
            x_rms = float(x.pow(2).mean().sqrt())
            x_prof = _profile([xs[:, k * ht : (k + 1) * ht].float() for xs, _ in used], plen)
            scores: list[dict[str, Any]] = []
            for t in taps:
                y = tap_rows[t]
                cos = float(torch.nn.functional.cosine_similarity(x, y, dim=-1).mean())
                rel = float((x - y).norm() / y.norm().clamp_min(1e-12))
                y_rms = float(y.pow(2).mean().sqrt())
                ratio = x_rms / max(y_rms, 1e-12)
                corr = _corr(x_prof, tap_prof[t])
                penalty = SCALE_PENALTY * abs(math.log10(ratio)) if ratio > 0 else 1.0
                scores.append(
                    {
                        "tap": t.to_dict(),
                        "cosine": cos,
                        "rel_error": rel,
                        "rms_ratio": ratio,
                        "profile_corr": corr,
                        "score": cos - penalty,
                    }
                )
            ranked = sorted(range(len(taps)), key=lambda i: -scores[i]["score"])
            second = scores[ranked[1]]["score"] if len(ranked) > 1 else 0.0
            slots.append(
                SlotScore(
                    side,
                    k,
                    x_rms,
                    taps[ranked[0]],
                    scores[ranked[0]]["score"] - second,
                    scores,
                    [float(v) for v in x_prof],
                )
            )
        result[side] = slots
    return SlotMatch(taps, tap_rms, result)


def _corr(a: Tensor, b: Tensor) -> float:
    """Pearson correlation of two profiles (0 when either is flat)."""
    a, b = a - a.mean(), b - b.mean()
    den = float(a.norm() * b.norm())
    return float((a * b).sum()) / den if den > 1e-12 else 0.0


# ---------------------------------------------------------------------------------------------
# 3. Weight fingerprint


def fc_fingerprint(spec: DraftSpec, fc_weight: Tensor) -> list[dict]:
    """Per slot of fc.weight [H, A*Ht]: Frobenius norm, mean column norm, top-3 singular values,
    and a hint naming the slot most likely fed the small-scale embedding output."""
    import torch

    w = fc_weight.detach().float().cpu()
    ht = spec.target_hidden_size
    rows: list[dict[str, Any]] = []
    for k in range(spec.num_aux):
        block = w[:, k * ht : (k + 1) * ht]
        sv = torch.linalg.svdvals(block)[:3]
        rows.append(
            {
                "slot": k,
                "frobenius": float(block.norm()),
                "mean_col_norm": float(block.norm(dim=0).mean()),
                "top_singular_values": [float(s) for s in sv],
                "hint": "",
            }
        )
    norms = [r["mean_col_norm"] for r in rows]
    if len(norms) > 1:
        k = max(range(len(norms)), key=norms.__getitem__)
        others = sorted(n for i, n in enumerate(norms) if i != k)
        median = others[len(others) // 2]
        ratio = norms[k] / max(median, 1e-12)
        for r in rows:
            r["ratio_to_median"] = r["mean_col_norm"] / max(median, 1e-12)
        if spec.norm_before_fc or spec.fc_norm:
            rows[k]["hint"] = "inputs are normalised before fc: weight scale says nothing"
        elif ratio >= FINGERPRINT_RATIO:
            rows[k]["hint"] = (
                f"weights {ratio:.1f}x the other slots': likely fed the small-RMS embedding output"
            )
    return rows


# ---------------------------------------------------------------------------------------------
# Detection


@dataclass
class Detection:
    """The detective's case: sweep ranking, slot matching, fingerprint, and the verdict."""

    draft: str
    num_layers: int
    rows: list[SweepRow]
    best: Layout
    serving: Layout | None
    engine: ServingEngine  # whose rules give `serving` and `fix_ids`
    fix_ids: list[int] | None
    verdict: list[str]
    slot_match: SlotMatch | None = None
    fingerprint: list[dict] = field(default_factory=list)
    capture_seconds: float | None = None
    num_sequences: int = 0
    steps: int = 4

    def row(self, layout: Layout) -> SweepRow | None:
        """The sweep's evaluation of one layout, if it was a candidate."""
        return next((r for r in self.rows if r.layout == tuple(layout)), None)

    def outperforms(self, layout: Layout) -> bool:
        """Whether the best layout beats `layout` clearly (DECISIVE_ACCEPT or DECISIVE_TOP1):
        a near tie (a draft that predicts nothing on any layout, say) decides nothing."""
        if tuple(layout) == self.best:
            return False
        other, top = self.row(layout), self.rows[0]
        if other is None:
            return top.top1 >= DECISIVE_TOP1
        return (
            top.sim_accept_length - other.sim_accept_length >= DECISIVE_ACCEPT
            or top.top1 - other.top1 >= DECISIVE_TOP1
        )

    def to_dict(self) -> dict:
        """The --json contract (also the detect job's result)."""
        top = self.rows[0]
        return {
            "draft": self.draft,
            "num_target_layers": self.num_layers,
            "best": layout_to_json(self.best),
            "best_words": describe_layout(self.best, self.num_layers),
            "serving": layout_to_json(self.serving) if self.serving is not None else None,
            "engine": self.engine.label(),
            "sglang_version": self.engine.rules_version() if self.engine.name == "sglang" else None,
            "fix_ids": self.fix_ids,
            "verdict": self.verdict,
            "steps": self.steps,
            "rows": [
                {
                    **r.to_dict(),
                    "gap_top1": top.top1 - r.top1,
                    "gap_sim_accept_length": top.sim_accept_length - r.sim_accept_length,
                }
                for r in self.rows
            ],
            "slot_match": self.slot_match.to_dict() if self.slot_match else None,
            "fingerprint": self.fingerprint,
            "fingerprint_limits": FINGERPRINT_LIMITS,
            "capture_seconds": self.capture_seconds,
            "num_sequences": self.num_sequences,
        }


def _verdict(
    rows: list[SweepRow],
    n: int,
    serving: Layout | None,
    engine: ServingEngine,
    fix_ids: list[int] | None,
) -> list[str]:
    top = rows[0]
    lines = [
        f"This draft performs best with {bracketed(top.layout)} "
        f"({describe_layout(top.layout, n)}): top-1 {top.top1:.1%}, simulated accept length "
        f"{top.sim_accept_length:.2f}."
    ]
    runner = next((r for r in rows[1:] if r.layout != top.layout), None)
    if runner is not None:
        lines.append(
            f"Runner-up {bracketed(runner.layout)} ({runner.name.split(' / ')[0]}): "
            f"top-1 {runner.top1:.1%} ({100 * (runner.top1 - top.top1):+.1f} points), simulated "
            f"accept length {runner.sim_accept_length:.2f} "
            f"({runner.sim_accept_length - top.sim_accept_length:+.2f})."
        )
    if serving is not None:
        row = next((r for r in rows if r.layout == serving), None)
        d = diff(top.layout, serving)
        if d.kind == "identical":
            lines.append(
                f"{engine.label()} feeds {bracketed(serving)}: the layout it performs best with."
            )
        else:
            cost = (
                f" (top-1 {row.top1:.1%}, accept length {row.sim_accept_length:.2f})"
                if row is not None
                else ""
            )
            lines.append(
                f"{engine.label()} feeds {bracketed(serving)}{cost}: "
                + (d.summary[0].lower() + d.summary[1:]).replace("training", "the best layout")
            )
            if fix_ids is not None:
                entry = rules_for(engine).config_entry(fix_ids)
                lines.append(
                    f"Fix: set {entry} in the draft's config.json so "
                    f"{engine.label()} feeds {bracketed(top.layout)}."
                )
    return lines


def capture_all_taps(
    target: str | Path, token_sequences: list[list[int]], device: str = "cpu"
) -> Capture:
    """One target forward per batch, keeping every tap 0..N (and the final-normed state)."""
    from eagle3dash.capture import capture_with_transformers, num_target_layers

    n = num_target_layers(target)
    taps = tuple(Tap(d) for d in range(n + 1)) + (Tap(n, True),)
    return capture_with_transformers(target, token_sequences, taps, device=device)


def _recorded(report: InspectReport, num_layers: int, arch: str) -> dict[str, Layout]:
    """The layout the draft's run folder records training on, as a candidate (always one: a
    recorded training side is only outranked by a layout tested against it)."""
    trainer, ids = recorded_training(report.provenance)
    if ids is None or report.provenance is None:
        return {}
    with contextlib.suppress(ValueError):
        result = training_layout(report.spec, num_layers, trainer, arch=arch, recorded_ids=ids)
        if result.error is None:
            return {f"recorded in the run's {report.provenance.capture_record}": result.layout}
    return {}


def detect(
    draft_path: str | Path,
    capture: Capture | None = None,
    target: str | Path | None = None,
    prompts: list[list[int]] | None = None,
    extra_layouts: Mapping[str, Layout] | list[Layout] | tuple = (),
    steps: int = 4,
    sides: Mapping[str, Capture] | None = None,
    num_layers: int | None = None,
    engine: ServingEngine = SGLANG,
    arch: str = FALLBACK_ARCH,
    device: str = "cpu",
    progress: Progress | None = None,
    draft: Draft | None = None,
) -> Detection:
    """Sweep, slot matching (when `sides` are given) and fingerprint for one draft.

    The sweep runs on `capture`, else on every tap of `target` captured once over `prompts` and
    the sides' sequences; with none of these it raises InputError.
    `draft`: the checkpoint at `draft_path` already built (`draft.load_draft`), to build it once.
    """
    from eagle3dash.draft import load_draft

    progress = progress or _no_progress
    report = inspect(draft_path)
    spec = report.spec
    capture_seconds = None
    if capture is None:
        if target is None:
            raise InputError("detect needs a capture holding every tap, or a local target")
        seqs = [list(map(int, p)) for p in (prompts or [])]
        for cap in (sides or {}).values():
            seqs += [s.input_ids.tolist() for s in cap.sequences]
        if not seqs:
            raise InputError(
                f"detect needs token sequences to capture {target} on: pass prompts (token ids) "
                "or sides whose sequences to reuse, or a capture holding every tap"
            )
        seqs = [list(s) for s in dict.fromkeys(tuple(s) for s in seqs)]
        progress(0.0, f"capturing every tap of {target} on {len(seqs)} sequences")
        start = time.perf_counter()
        capture = capture_all_taps(target, seqs, device)
        capture_seconds = time.perf_counter() - start
    n = num_layers or capture.meta.get("num_hidden_layers") or max(t.depth for t in capture.taps)
    n = int(n)
    candidates = candidate_layouts(spec, n, extra_layouts, engine, arch)
    for name, layout in _recorded(report, n, arch).items():  # first, under its own name too
        same = [k for k, v in candidates.items() if v == layout]
        rest = {k: v for k, v in candidates.items() if k not in same}
        candidates = {" / ".join([name, *same]): layout, **rest}
    if draft is None:
        draft = load_draft(draft_path, device, target_embedding=capture.embed_weight)
    rows = sweep(
        draft,
        capture,
        candidates,
        steps,
        device=device,
        progress=lambda f, m: progress(0.1 + 0.8 * f, m),
    )
    serving = None
    fix = None
    with contextlib.suppress(ValueError):
        served = serving_layout(engine, spec, n, arch)
        serving = served.layout if served.error is None else None
        if serving != rows[0].layout:
            fix = rules_for(engine).find_fix(rows[0].layout, spec, n, arch).ids
    verdict = _verdict(rows, n, serving, engine, fix)
    match = None
    if sides:
        progress(0.9, "matching slots to taps")
        match = slot_matching(
            {k: side_states(c) for k, c in sides.items()},
            capture,
            {k: [s.input_ids for s in c.sequences] for k, c in sides.items()},
        )
        verdict += match.summary(n)
    fingerprint = fc_fingerprint(spec, draft.fc.weight.detach().float().cpu())
    hinted = [r for r in fingerprint if r["hint"]]
    if hinted:
        verdict.append(f"fc.weight hint: slot {hinted[0]['slot']}: {hinted[0]['hint']}.")
    progress(1.0, "done")
    return Detection(
        str(draft_path),
        n,
        rows,
        rows[0].layout,
        serving,
        engine,
        fix,
        verdict,
        match,
        fingerprint,
        capture_seconds,
        len(capture.sequences),
        steps,
    )


def read_side(spec_text: str, num_layers: int | None = None) -> tuple[str, Capture]:
    """'NAME=PATH' or 'NAME=PATH@0,1,2' (the layout a dump claims) -> (name, capture)."""
    from eagle3dash.capture import read_capture
    from eagle3dash.layout import parse_layout

    name, sep, rest = spec_text.partition("=")
    if not sep or not name or not rest:
        raise InputError(f"--side wants NAME=PATH[@LAYOUT], got {spec_text!r}")
    path, _, claimed = rest.partition("@")
    layout = parse_layout(claimed) if claimed else None
    if not Path(path).exists():
        raise InputError(f"--side {name}: {path}: no such file or directory")
    return name, read_capture(path, layout=layout, num_target_layers=num_layers)


def sweep_table(rows: list[SweepRow]) -> list[dict[str, Any]]:
    """Plain rows for printing: rank, layout, name, top-1, accept length, gaps."""
    top = rows[0]
    return [
        {
            "rank": i + 1,
            "layout": bracketed(r.layout),
            "candidate": r.name,
            "top1": r.top1,
            "sim_accept_length": r.sim_accept_length,
            "gap": top.sim_accept_length - r.sim_accept_length,
            "seconds": r.seconds,
        }
        for i, r in enumerate(rows)
    ]


__all__ = [
    "FINGERPRINT_LIMITS",
    "Detection",
    "SlotMatch",
    "SlotScore",
    "SweepRow",
    "candidate_layouts",
    "capture_all_taps",
    "detect",
    "fc_fingerprint",
    "read_side",
    "side_states",
    "slot_matching",
    "sweep",
    "sweep_table",
]
