"""Taps, layouts, the id conventions of each framework, and layout diffs.

A Tap is a point of the target's residual stream: Tap(d) is the state after d decoder blocks
(Tap(0) the embedding output, Tap(N) the last block's raw output); post_norm marks the final-normed
state (Hugging Face's last `hidden_states` entry). Framework ids are turned into taps at the edge.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from eagle3dash.text import ascii_int


@dataclass(frozen=True, order=True)
class Tap:
    """A point of the target's residual stream: after `depth` decoder blocks."""

    depth: int
    post_norm: bool = False

    def __str__(self) -> str:
        """The tap in plain words ('embedding output', 'after block 3'): what messages show."""
        return describe_tap(self)

    def key(self) -> str:
        """Stable string key, used for tensor names in captures: 'tap3', 'tap61n'."""
        return f"tap{self.depth}{'n' if self.post_norm else ''}"

    def to_dict(self) -> dict:
        """The one JSON form of a tap: {"depth": d, "post_norm": b}."""
        return {"depth": self.depth, "post_norm": self.post_norm}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Tap:
        """Inverse of to_dict (a missing post_norm is False)."""
        return cls(int(d["depth"]), bool(d.get("post_norm", False)))


Layout = tuple[Tap, ...]  # the taps feeding the fc slots, in slot order


def layout_to_json(layout: Layout) -> list[dict]:
    """A layout's JSON form: its taps' dicts, in slot order."""
    return [t.to_dict() for t in layout]


def layout_from_json(items: Iterable[Mapping[str, Any]]) -> Layout:
    """Inverse of layout_to_json."""
    return tuple(Tap.from_dict(t) for t in items)


def parse_layout(text: str) -> Layout:
    """Parse '0,3,31' (or 'emb,3,31n'; a trailing 'n' marks post_norm) into a Layout."""
    taps = []
    for part in text.replace(" ", "").split(","):
        if not part:
            continue
        if part.lower() in ("emb", "embed", "embedding"):
            taps.append(Tap(0))
            continue
        post_norm = part.endswith("n")
        digits = part[:-1] if post_norm else part
        if ascii_int(digits, max_digits=6) is None:
            raise ValueError(f"not a tap: {part!r} (use depths like '0,3,31'; '61n' = post-norm)")
        taps.append(Tap(int(digits), post_norm))
    if not taps:
        raise ValueError(f"empty layout: {text!r}")
    return tuple(taps)


def format_layout(layout: Layout) -> str:
    """Inverse of parse_layout: '0,3,31'."""
    return ",".join(f"{t.depth}{'n' if t.post_norm else ''}" for t in layout)


def default_aux_indices(num_layers: int) -> tuple[int, int, int]:
    """The default capture's layer indices [2, N//2, N-3]: SGLang's and vLLM's, the streams
    entering those layers (vLLM id i = Tap(i))."""
    # SGLang models/llama.py set_eagle3_layers_to_capture (None -> [2, N//2, N-3], no +1);
    # SafeAILab EAGLE modeling_llama_kv.py:1137; vLLM get_eagle3_aux_hidden_state_layers;
    # speculators models/utils.py:52 (datagen appends N for its loss only); SpecForge writes the
    # same taps as output-of [1, N//2-1, N-4] (eagle3_target_model.py).
    return (2, num_layers // 2, num_layers - 3)


def default_layout(num_layers: int) -> Layout:
    """Every framework's default: the streams entering layers 2, N//2 and N-3."""
    return tuple(Tap(i) for i in default_aux_indices(num_layers))


def default_output_of_ids(num_layers: int) -> tuple[int, ...]:
    """The default taps as output-of ids [1, N//2-1, N-4] (SpecForge's eagle3_target_model.py)."""
    return tuple(i - CONVENTIONS["output-of"].offset for i in default_aux_indices(num_layers))


# ---------------------------------------------------------------------------------------------
# Conventions: how one framework's integer ids become taps.


@dataclass(frozen=True)
class Convention:
    """How a framework's integer layer ids map to taps: depth = id + offset."""

    name: str
    offset: int
    post_norm_at_end: bool  # an id landing on depth N means the final-normed state
    meaning: str

    def tap(self, layer_id: int, num_layers: int) -> Tap:
        """The tap an id names for a target of `num_layers` decoder blocks."""
        depth = layer_id + self.offset
        return Tap(depth, self.post_norm_at_end and depth == num_layers)


CONVENTIONS: dict[str, Convention] = {
    c.name: c
    for c in (
        # transformers 5 LlamaModel: hidden_states[0] = embeddings, [k] = after k blocks, and the
        # last entry is taken after model.norm (transformers 5.24 utils/output_capturing.py).
        Convention(
            "hf-index",
            0,
            True,
            "HF output_hidden_states index c (c = N is after the final norm)",
        ),
        # SpecForge HF hook on layers[id] keeps output[0] (eagle3_target_model.py); SGLang's
        # explicit ids get +1 (models/llama.py set_eagle3_layers_to_capture); id -1 = embedding.
        Convention(
            "output-of",
            1,
            False,
            "id i = output of decoder layer i (0-indexed)",
        ),
        # vLLM _maybe_add_hidden_state (id 0 = embedding, id N = last block pre-norm),
        # speculators top-level ids, SafeAILab EAGLE capture before layer idx.
        Convention(
            "input-of",
            0,
            False,
            "id k = residual stream entering decoder layer k (k = N: last block's output)",
        ),
    )
}


def convert(ids: tuple[int, ...] | list[int], convention: str, num_layers: int) -> Layout:
    """Turn integer ids into taps under a named convention, keeping their order."""
    conv = CONVENTIONS[convention]
    return tuple(conv.tap(i, num_layers) for i in ids)


# ---------------------------------------------------------------------------------------------
# Results.


@dataclass
class LayoutResult:
    """The taps one side feeds the fc slots, which rule decided, and what can go wrong."""

    layout: Layout  # taps fed to the slots (or attempted, when `error` is set)
    rule: str  # one sentence: which rule applied, with its source
    notes: list[str] = field(default_factory=list)
    decode_layout: Layout | None = None  # CUDA-graph replays, when they differ from prefill
    error: str | None = None  # the capture or training would fail
    # Other readings of the rules and what each feeds (a vLLM server whose runner is not known):
    # the layout above is one reading among these, not the rules' one answer.
    alternatives: tuple[tuple[str, Layout], ...] = ()
    # Why these taps are a guess (no file read names the ids) and what would settle it; None
    # when the ids were read (config, record) or given
    assumed: str | None = None

    def to_dict(self) -> dict:
        """JSON form, taps as {"depth", "post_norm"}."""
        return {
            "layout": layout_to_json(self.layout),
            "rule": self.rule,
            "notes": list(self.notes),
            "decode_layout": (
                layout_to_json(self.decode_layout) if self.decode_layout is not None else None
            ),
            "error": self.error,
            "alternatives": [
                {"label": label, "layout": layout_to_json(layout)}
                for label, layout in self.alternatives
            ],
            "assumed": self.assumed,
        }


def ids_text(ids: tuple[int, ...] | list[int]) -> str:
    return "[" + ", ".join(str(i) for i in ids) + "]"


def bracketed(layout: Layout) -> str:
    """format_layout in brackets: '[0,3,31]'."""
    return "[" + format_layout(layout) + "]" if layout else "[]"


def check_depths(layout: Layout, num_layers: int) -> tuple[Layout, str | None]:
    """Drop taps outside 0..N; say which ids were out of range."""
    bad = [t for t in layout if not 0 <= t.depth <= num_layers]
    if not bad:
        return layout, None
    kept = tuple(t for t in layout if 0 <= t.depth <= num_layers)
    depths = ", ".join(str(t.depth) for t in bad)
    return kept, f"depth {depths} lies outside the target's blocks 0..{num_layers}"


# ---------------------------------------------------------------------------------------------
# Diff.


def describe_tap(tap: Tap, num_layers: int | None = None) -> str:
    """Human words for a tap: 'embedding output', 'after block 3', "last block's output" (that
    one needs the target's depth N; without it the last block is 'after block N' too)."""
    if tap.post_norm:
        return "after the final norm"
    if tap.depth == 0:
        return "embedding output"
    if tap.depth == num_layers:
        return "last block's output"
    if tap.depth < 0 or (num_layers is not None and tap.depth > num_layers):
        blocks = "" if num_layers is None else f"'s {num_layers} blocks"
        return f"depth {tap.depth} (outside the target{blocks})"
    return f"after block {tap.depth}"


def describe_layout(layout: Layout, num_layers: int | None = None) -> str:
    """Each slot's tap in words: 'embedding output, after block 1, after block 2'."""
    return ", ".join(describe_tap(t, num_layers) for t in layout)


def join_words(words: list[str]) -> str:
    """'a', 'a and b', 'a, b and c'."""
    if len(words) <= 1:
        return "".join(words)
    return ", ".join(words[:-1]) + " and " + words[-1]


def taps_phrase(layout: Layout, num_layers: int | None) -> str:
    """'the embedding output and the layers after 3 and 31 blocks'."""
    if not layout:
        return "nothing"
    parts, middle = [], []
    tail = []
    for tap in layout:
        if tap.post_norm:
            tail.append("the final-normed output")
        elif tap.depth == 0:
            parts.append("the embedding output")
        elif num_layers is not None and tap.depth == num_layers:
            tail.append("the last block's output")
        else:
            middle.append(tap.depth)
    if middle:
        noun = "layer" if len(middle) == 1 else "layers"
        blocks = "block" if middle == [1] else "blocks"
        parts.append(f"the {noun} after {join_words([str(d) for d in middle])} {blocks}")
    return join_words(parts + tail)


Slot = tuple[int, Tap | None, Tap | None, bool]  # slot index, training tap, serving tap, same


@dataclass
class LayoutDiff:
    """Slot-by-slot comparison of a training and a serving layout, classified."""

    training: Layout
    serving: Layout
    slots: list[Slot]
    kind: str  # identical | off-by-one | shifted-slot | post-norm | defaults-used
    #            | different-width | other
    embedding_only_in: str | None  # "training" | "serving" | None
    summary: str

    def to_dict(self) -> dict:
        """JSON form; every tap (a slot's too) as Tap.to_dict, a missing one as None."""

        def one(tap: Tap | None) -> dict | None:
            return tap.to_dict() if tap is not None else None

        return {
            "training": layout_to_json(self.training),
            "serving": layout_to_json(self.serving),
            "slots": [
                {"slot": i, "training": one(a), "serving": one(b), "same": same}
                for i, a, b, same in self.slots
            ],
            "kind": self.kind,
            "embedding_only_in": self.embedding_only_in,
            "summary": self.summary,
        }


def _shifted(a: Layout, b: Layout) -> bool:
    """b[i] == a[i+1] for every overlapping slot (b is a moved one slot to the left)."""
    return len(a) > 1 and all(b[i] == a[i + 1] for i in range(len(a) - 1))


def _classify(training: Layout, serving: Layout, default: Layout | None) -> tuple[str, str]:
    """(kind, summary sentence without the embedding clause)."""
    if training == serving:
        return "identical", "Training and serving feed the same taps to every slot"
    if default is not None and serving == default:
        return "defaults-used", (
            f"Serving uses the default taps {bracketed(default)} instead of the configured ones"
        )
    if len(training) != len(serving):
        return "different-width", (
            f"Training fed {len(training)} slots and serving feeds {len(serving)}"
        )
    pairs = list(zip(training, serving, strict=True))
    if all(a.depth == b.depth for a, b in pairs):
        slots = ", ".join(str(i) for i, (a, b) in enumerate(pairs) if a != b)
        return "post-norm", f"Same depths, but the final norm differs in slot(s) {slots}"
    deltas = {b.depth - a.depth for a, b in pairs}
    if deltas in ({1}, {-1}):
        word = "later" if deltas == {1} else "earlier"
        return "off-by-one", f"Serving feeds every slot one block {word} than training"
    if _shifted(training, serving) or _shifted(serving, training):
        return "shifted-slot", "Serving's taps are training's shifted by one slot"
    differing = ", ".join(str(i) for i, (a, b) in enumerate(pairs) if a != b)
    return "other", f"Training and serving differ in slot(s) {differing}"


def diff(training: Layout, serving: Layout, default: Layout | None = None) -> LayoutDiff:
    """Compare two layouts slot by slot; pass `default` when serving fell back to its defaults."""
    training, serving = tuple(training), tuple(serving)
    slots = [(i, a, b, a == b) for i, (a, b) in enumerate(itertools.zip_longest(training, serving))]
    kind, summary = _classify(training, serving, default)
    emb_t, emb_s = Tap(0) in training, Tap(0) in serving
    embedding_only_in = (
        "training" if emb_t and not emb_s else "serving" if emb_s and not emb_t else None
    )
    if embedding_only_in:
        summary += f"; embedding output only in {embedding_only_in}"
    return LayoutDiff(training, serving, slots, kind, embedding_only_in, summary + ".")


def slots_mismatch(taps: int, slots: int) -> str:
    """Why a layout of `taps` taps has no config ids for an fc of `slots` slots (one clause):
    every engine captures one state per id, and fc takes exactly `slots`."""
    return (
        f"the wanted layout has {taps} taps but the draft's fc takes {slots}: no ids of another "
        "count fit it"
    )
