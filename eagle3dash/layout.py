"""Taps, layouts, the id conventions of each framework, and layout diffs.

A Tap is a point of the target's residual stream: Tap(d) is the state after d decoder blocks
(Tap(0) the embedding output, Tap(N) the last block's raw output); post_norm marks the final-normed
state (Hugging Face's last `hidden_states` entry). Framework ids are turned into taps at the edge.
"""

from __future__ import annotations

import itertools
import re
from dataclasses import dataclass, field, replace

from eagle3dash.spec import DraftSpec


@dataclass(frozen=True, order=True)
class Tap:
    """A point of the target's residual stream: after `depth` decoder blocks."""

    depth: int
    post_norm: bool = False

    def __str__(self) -> str:
        return f"Tap({self.depth}{', post_norm' if self.post_norm else ''})"

    def key(self) -> str:
        """Stable string key, used for tensor names in captures: 'tap3', 'tap61n'."""
        return f"tap{self.depth}{'n' if self.post_norm else ''}"

    def to_dict(self) -> dict:
        """JSON form: {"depth": d, "post_norm": b}."""
        return {"depth": self.depth, "post_norm": self.post_norm}


Layout = tuple[Tap, ...]  # the taps feeding the fc slots, in slot order


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
        if not digits.isdigit():
            raise ValueError(f"not a tap: {part!r} (use depths like '0,3,31'; '61n' = post-norm)")
        taps.append(Tap(int(digits), post_norm))
    if not taps:
        raise ValueError(f"empty layout: {text!r}")
    return tuple(taps)


def format_layout(layout: Layout) -> str:
    """Inverse of parse_layout: '0,3,31'."""
    return ",".join(f"{t.depth}{'n' if t.post_norm else ''}" for t in layout)


def default_layout(num_layers: int) -> Layout:
    """Every framework's default: the streams entering layers 2, N//2 and N-3."""
    # SGLang models/llama.py set_eagle3_layers_to_capture (None -> [2, N//2, N-3], no +1);
    # SafeAILab EAGLE modeling_llama_kv.py:1137; vLLM get_eagle3_aux_hidden_state_layers;
    # speculators models/utils.py:52 (datagen appends N for its loss only); SpecForge writes the
    # same taps as output-of [1, N//2-1, N-4] (eagle3_target_model.py).
    return (Tap(2), Tap(num_layers // 2), Tap(num_layers - 3))


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
        # last entry is taken after model.norm (draft-checkpoints-and-layouts.md §4.2 caveat).
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

    def to_dict(self) -> dict:
        """JSON form, taps as {"depth", "post_norm"}."""
        return {
            "layout": [t.to_dict() for t in self.layout],
            "rule": self.rule,
            "notes": list(self.notes),
            "decode_layout": (
                [t.to_dict() for t in self.decode_layout]
                if self.decode_layout is not None
                else None
            ),
            "error": self.error,
        }


def _ids_str(ids: tuple[int, ...] | list[int]) -> str:
    return "[" + ", ".join(str(i) for i in ids) + "]"


def _layout_str(layout: Layout) -> str:
    return "[" + format_layout(layout) + "]" if layout else "[]"


def _check_depths(layout: Layout, num_layers: int) -> tuple[Layout, str | None]:
    """Drop taps outside 0..N; say which ids were out of range."""
    bad = [t for t in layout if not 0 <= t.depth <= num_layers]
    if not bad:
        return layout, None
    kept = tuple(t for t in layout if 0 <= t.depth <= num_layers)
    depths = ", ".join(str(t.depth) for t in bad)
    return kept, f"depth {depths} lies outside the target's blocks 0..{num_layers}"


# ---------------------------------------------------------------------------------------------
# SGLang versions and architectures.

FIRST_KNOWN_SGLANG = (0, 5, 4)  # oldest release read for research/sglang-eagle3.md
LAST_KNOWN_SGLANG = (0, 5, 23)  # newest release read
_VERSION_RE = re.compile(r"v?(\d+)\.(\d+)\.(\d+)(?:\.?(?:post|rc|dev|a|b)\d*)?(?:\+[\w.]+)?")


def parse_version(text: str) -> tuple[int, int, int]:
    """'0.5.23', '0.5.15.post1', 'v0.5.4' -> (0, 5, 23); ValueError when unparseable or too old."""
    m = _VERSION_RE.fullmatch(text.strip())
    if m is None:
        raise ValueError(f"unparseable SGLang version {text!r} (expected e.g. '0.5.23')")
    version = (int(m[1]), int(m[2]), int(m[3]))
    if version < FIRST_KNOWN_SGLANG:
        raise ValueError(
            f"unknown SGLang version {text!r}: capture rules are known from 0.5.4 to 0.5.23"
        )
    return version


# Substrings of a normalized architecture name (lowercase, no '-', '_', '.') -> family.
# Anything else follows the Llama pattern (sglang-eagle3.md §1.1: llama, qwen2, qwen3,
# qwen3_moe, glm4_moe, minimax, apertus, ...).
_ARCH_FAMILY = (
    ("deepseek", "deepseek"),  # DeepseekV2/V3/V32ForCausalLM: models/deepseek_v2.py
    ("kimi", "deepseek"),  # Kimi-K2 (DeepseekV3 arch), K2.5/K2.6: kimi_k25.py forwards to it
    ("glm4moelite", "deepseek"),  # Glm4MoeLiteForCausalLM: glm4_moe_lite.py, same heuristic
    ("gptoss", "gpt-oss"),  # GptOssForCausalLM: models/gpt_oss.py
)


def arch_family(name: str) -> str:
    """Map an HF architecture string or short name to 'llama', 'deepseek' or 'gpt-oss'."""
    key = re.sub(r"[-_.\s]", "", name.lower())
    for needle, family in _ARCH_FAMILY:
        if needle in key:
            return family
    return "llama"


@dataclass(frozen=True)
class IdRule:
    """How one SGLang target family turns explicit config ids into capture indices."""

    family: str
    since: tuple[int, int, int]
    until: tuple[int, int, int] | None  # first version no longer covered, None = still current
    mode: str  # "plus-one" | "first-id" | "boundary" | "unsupported"
    source: str


SGLANG_ID_RULES = (
    # models/llama.py set_eagle3_layers_to_capture: identical text 0.5.4 (l.730) .. 0.5.23 (l.929)
    IdRule("llama", (0, 0, 0), None, "plus-one", "models/llama.py, every version"),
    # deepseek_v2.py has no set_eagle3_layers_to_capture in 0.5.4; PR #12319 ships in 0.5.5
    IdRule("deepseek", (0, 0, 0), (0, 5, 5), "unsupported", "deepseek_v2.py, PR #12319"),
    # deepseek_v2.py 0.5.5 l.3822-3834: same as Llama
    IdRule("deepseek", (0, 5, 5), (0, 5, 13), "plus-one", "deepseek_v2.py 0.5.5-0.5.12"),
    # deepseek_v2.py:3458-3473 (0.5.23), glm4_moe_lite.py:817: +1 only if ids[0] == 1, PR #25454
    IdRule("deepseek", (0, 5, 13), None, "first-id", "deepseek_v2.py 0.5.13+, PR #25454"),
    # gpt_oss.py before PR #32334: the generic +1
    IdRule("gpt-oss", (0, 0, 0), (0, 5, 20), "plus-one", "gpt_oss.py before 0.5.20"),
    # gpt_oss.py 0.5.20+: ids kept when max(ids) == N ("final hidden-state boundary"), PR #32334
    IdRule("gpt-oss", (0, 5, 20), None, "boundary", "gpt_oss.py 0.5.20+, PR #32334"),
)

# First version where capture index 0 yields the embedding output instead of `hidden_states +
# None` (TypeError). Llama: layer_boundary/stage.py refactor in 0.5.22. DeepSeek: communicator
# prepare_attn sets residual = hidden_states in 0.5.16 (layers/communicator.py:494-522).
# gpt-oss: not read; assumed to follow the Llama loop [inferred].
EMBEDDING_CAPTURE_SINCE = {"llama": (0, 5, 22), "deepseek": (0, 5, 16), "gpt-oss": (0, 5, 22)}
# gpt_oss.py 0.5.20+ captures the final boundary (index N), PR #32334 / issue #32226; other
# families never do: nothing follows the last layer (logits_processor._check_aux_hidden_states).
BOUNDARY_CAPTURE_SINCE = {"gpt-oss": (0, 5, 20)}
# cuda_graph_runner.py called set_eagle3_layers_to_capture() with no ids before the config ids
# were set, 0.5.4-0.5.10; fixed in 0.5.11 by PR #22836.
CUDA_GRAPH_FIX = (0, 5, 11)
# eagle_config.use_aux_hidden_state: false turns capture off from 0.5.8 (spec_aux_hidden_state.py).
USE_AUX_FLAG_SINCE = (0, 5, 8)


def _id_rule(family: str, version: tuple[int, int, int]) -> IdRule:
    return next(
        r
        for r in SGLANG_ID_RULES
        if r.family == family and r.since <= version and (r.until is None or version < r.until)
    )


def _nested_ids(spec: DraftSpec) -> tuple[int, ...] | None:
    """The ids SGLang and SpecForge read: eagle_config.eagle_aux_hidden_state_layer_ids only."""
    return spec.aux_layer_ids if spec.aux_ids_location == "eagle_config" else None


def _sglang_capture(
    ids: tuple[int, ...], num_layers: int, rule: IdRule, version_text: str
) -> tuple[list[int], str]:
    """Capture indices (before layer i = Tap(i)) for explicit ids, and the rule sentence."""
    where = f"SGLang {version_text}, {rule.family} family ({rule.source})"
    if rule.mode == "first-id" and ids and ids[0] != 1:
        return list(ids), f"{where}: the first id is {ids[0]}, not 1, so ids are used verbatim."
    if rule.mode == "boundary" and max(ids, default=None) == num_layers:
        return list(ids), f"{where}: the largest id is N={num_layers}, so ids are used verbatim."
    return [i + 1 for i in ids], f"{where}: id i captures the output of layer i (+1)."


def _validate_capture(
    indices: list[int], num_layers: int, family: str, version: tuple[int, int, int]
) -> tuple[Layout, list[str], str | None]:
    """Taps SGLang captures for these indices, in layer order, with notes and any error."""
    notes, errors = [], []
    if not indices:
        errors.append("the config lists no ids: nothing is captured")
    if indices != sorted(indices):
        # logits_processor.py concatenates aux states in forward (layer) order
        notes.append(
            "ids are not ascending: SGLang captures in layer order (before layers "
            f"{_ids_str(sorted(indices))}), so the slots are reordered."
        )
    if len(set(indices)) < len(indices):
        # `if i in self.layers_to_capture` fires once per layer [inferred]
        errors.append(
            "duplicate capture indices: each layer is captured once, so fc gets fewer states"
        )
    boundary_ok = family in BOUNDARY_CAPTURE_SINCE and version >= BOUNDARY_CAPTURE_SINCE[family]
    taps = []
    for i in sorted(set(indices)):
        if i == 0 and version < EMBEDDING_CAPTURE_SINCE[family]:
            since = ".".join(map(str, EMBEDDING_CAPTURE_SINCE[family]))
            errors.append(
                f"capture index 0 (the embedding) crashes before {since} "
                "(`hidden_states + None` at layer 0)"
            )
            taps.append(Tap(0))
        elif i == num_layers and boundary_ok:
            taps.append(Tap(num_layers))
        elif i == num_layers:
            errors.append(f"index {i} is the last block's output, which SGLang never captures")
        elif not 0 <= i < num_layers:
            errors.append(f"index {i} lies outside layers 0..{num_layers - 1}: never captured")
        else:
            taps.append(Tap(i))
    return tuple(taps), notes, "; ".join(errors) or None


def _sglang_result(
    num_layers: int,
    ids: tuple[int, ...] | None,
    version_text: str,
    arch: str,
) -> LayoutResult:
    """The prefill (eager) capture of SGLang for explicit ids, or its defaults when ids is None."""
    version = parse_version(version_text)
    family = arch_family(arch)
    rule = _id_rule(family, version)
    notes = []
    if version > LAST_KNOWN_SGLANG:
        notes.append(
            f"SGLang {version_text} is newer than 0.5.23, the newest read; its rules assumed."
        )
    if rule.mode == "unsupported":
        return LayoutResult(
            (),
            f"SGLang {version_text}, {family} family: no EAGLE-3 capture ({rule.source}).",
            notes,
            error=f"SGLang {version_text} has no EAGLE-3 for {family}-family targets (from 0.5.5)",
        )
    if ids is None:
        indices = [2, num_layers // 2, num_layers - 3]
        text = (
            f"SGLang {version_text}: no eagle_config ids, so the target captures its defaults "
            "before layers [2, N//2, N-3] (models/llama.py set_eagle3_layers_to_capture)."
        )
    else:
        indices, text = _sglang_capture(ids, num_layers, rule, version_text)
    layout, more, error = _validate_capture(indices, num_layers, family, version)
    return LayoutResult(layout, text, notes + more, error=error)


# ---------------------------------------------------------------------------------------------
# Serving.


def serving_layout(
    spec: DraftSpec,
    num_layers: int,
    sglang_version: str = "0.5.23",
    arch: str = "llama",
    cuda_graph: bool = True,
) -> LayoutResult:
    """The taps an SGLang server of this version feeds the draft for a target of N layers."""
    version = parse_version(sglang_version)
    ids = _nested_ids(spec)
    if not spec.use_aux_hidden_state and version >= USE_AUX_FLAG_SINCE:
        return LayoutResult(
            (),
            f"SGLang {sglang_version}: eagle_config.use_aux_hidden_state is false, so aux capture "
            "is off (spec_aux_hidden_state.py, 0.5.8+).",
            error="capture off: the draft gets the last hidden state (width H) and fc is skipped",
        )
    result = _sglang_result(num_layers, ids, sglang_version, arch)
    if not spec.use_aux_hidden_state:
        result.notes.append("eagle_config.use_aux_hidden_state=false is ignored before 0.5.8.")
    if spec.aux_ids_location == "top-level":
        # model_runner.py (0.5.4-0.5.10) / spec_aux_hidden_state.py (0.5.23) read only the
        # nested key; top-level ids only size fc on the draft side (eagle_utils.py:272-274).
        result.notes.append(
            f"ids {_ids_str(spec.aux_layer_ids or ())} are stored top-level: SGLang reads only "
            "eagle_config.eagle_aux_hidden_state_layer_ids, so the target uses its defaults."
        )
    if result.layout and len(result.layout) != spec.num_aux:
        result.notes.append(
            f"SGLang captures {len(result.layout)} states but the draft's fc takes "
            f"{spec.num_aux} slots: shape mismatch at fc."
        )
    defaults = default_layout(num_layers)
    if cuda_graph and version < CUDA_GRAPH_FIX and ids is not None and result.layout != defaults:
        result.decode_layout = defaults
        result.notes.append(
            "prefill and decode differ: CUDA-graph replays (decode/verify) capture the default "
            f"taps {_layout_str(defaults)} while eager runs use the config ids; fixed in 0.5.11 "
            "(PR #22836)."
        )
    return result


# ---------------------------------------------------------------------------------------------
# Training.


@dataclass(frozen=True)
class Trainer:
    """Which ids a trainer reads and how it turns them into training features."""

    name: str
    reads: str | None  # "eagle_config" | "top-level" | "any" | None (ids ignored)
    convention: str  # a CONVENTIONS key, or "sglang" (follows the SGLang version's rule)
    ascending: bool  # features are concatenated in layer order (else in list order)
    source: str


_SPECFORGE_HF = Trainer(
    "specforge",
    "eagle_config",
    "output-of",
    False,
    # eagle3_target_model.py: forward hook on layers[idx] keeps output[0], list order;
    # scripts/train_eagle3.py reads eagle_config ids, default [1, N//2-1, N-4]
    "SpecForge HF backend (hook on layers[id], eagle3_target_model.py)",
)
_SPECULATORS = Trainer(
    "speculators",
    "top-level",
    "input-of",
    True,
    # speculators launch_vllm.py -> vLLM extract_hidden_states; vLLM sorts ids (PR #50514)
    "speculators/vLLM top-level ids (vLLM _maybe_add_hidden_state)",
)
TRAINERS: dict[str, Trainer] = {
    "specforge": _SPECFORGE_HF,
    "specforge-hf": _SPECFORGE_HF,
    # SpecForge SGLang backend calls set_eagle3_layers_to_capture(ids) (research §7.3)
    "specforge-sglang": Trainer(
        "specforge-sglang", "eagle_config", "sglang", True, "SpecForge SGLang backend"
    ),
    "speculators": _SPECULATORS,
    "vllm": _SPECULATORS,
    # SafeAILab EAGLE modeling_llama_kv.py:1137-1139: hard-coded capture before 2, N//2, N-3
    "eagle": Trainer("eagle", None, "input-of", True, "SafeAILab EAGLE modeling_llama_kv.py"),
    # a trainer indexing HF output_hidden_states with the ids (e.g. BaldEagle)
    "hf-index": Trainer("hf-index", "any", "hf-index", False, "HF output_hidden_states[ids]"),
}
DEFAULT_TRAINER = {
    "speculators": "speculators",
    "specforge": "specforge",
    "eagle": "eagle",
    "export": "specforge",
}


def training_layout(
    spec: DraftSpec,
    num_layers: int,
    trainer: str | None = None,
    *,
    layout: Layout | None = None,
    sglang_version: str = "0.5.23",
    arch: str = "llama",
) -> LayoutResult:
    """The taps the training data fed the fc slots, per the trainer's convention (or `layout`)."""
    if layout is not None:
        return LayoutResult(tuple(layout), "Training layout given by the user.")
    name = trainer or DEFAULT_TRAINER[spec.format]
    if name not in TRAINERS:
        raise ValueError(f"unknown trainer {name!r} (one of {', '.join(TRAINERS)})")
    t = TRAINERS[name]
    notes: list[str] = []
    ids = spec.aux_layer_ids
    if t.reads in ("eagle_config", "top-level") and spec.aux_ids_location != t.reads:
        if ids is not None:
            notes.append(
                f"{t.name} reads only {t.reads} ids; the ids {_ids_str(ids)} stored "
                f"{spec.aux_ids_location} are ignored, so it used its defaults."
            )
        ids = None
    if t.reads is None:
        if ids is not None and convert(ids, "input-of", num_layers) != default_layout(num_layers):
            notes.append(f"SafeAILab EAGLE ignores the configured ids {_ids_str(ids)}.")
        ids = None

    if t.name.startswith("specforge"):
        if ids is None:
            ids = (1, num_layers // 2 - 1, num_layers - 4)  # eagle3_target_model.py default
            notes.append(f"no eagle_config ids: SpecForge's default {_ids_str(ids)} applies.")
        # resolve_eagle_capture_layers (algorithms/model_providers.py:187-210): 3 ints >= 0
        if len(ids) != 3 or min(ids) < 0:
            error = f"SpecForge requires exactly 3 non-negative ids, got {_ids_str(ids)}"
            return LayoutResult(convert(ids, "output-of", num_layers), t.source, notes, error=error)
    if t.convention == "sglang":
        result = _sglang_result(num_layers, ids, sglang_version, arch)
        result.rule = f"SpecForge SGLang backend follows {result.rule}"
        result.notes[:0] = notes
        return result

    if ids is None:
        return LayoutResult(
            default_layout(num_layers),
            f"{t.source}: no ids, so the default taps 2, N//2, N-3.",
            notes,
        )
    conv = CONVENTIONS[t.convention]
    taps = convert(ids, t.convention, num_layers)
    if t.ascending and list(taps) != sorted(taps):
        notes.append(f"ids {_ids_str(ids)} are not ascending: features are in layer order.")
        taps = tuple(sorted(taps))
    elif not t.ascending and list(taps) != sorted(taps):
        notes.append(
            f"ids {_ids_str(ids)} are not ascending: features are in list order, while SGLang "
            "captures in layer order."
        )
    taps, error = _check_depths(taps, num_layers)
    return LayoutResult(taps, f"{t.source}: {conv.meaning}.", notes, error=error)


# ---------------------------------------------------------------------------------------------
# Diff.


def describe_tap(tap: Tap, num_layers: int) -> str:
    """Human words for a tap: 'embedding output', 'after block 3', "last block's output"."""
    if tap.post_norm:
        return "final-normed output"
    if tap.depth == 0:
        return "embedding output"
    if tap.depth == num_layers:
        return "last block's output"
    if not 0 < tap.depth < num_layers:
        return f"depth {tap.depth} (outside the target's {num_layers} blocks)"
    return f"after block {tap.depth}"


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
        """JSON form; taps in slots as format_layout strings ('3', '61n') or None."""

        def one(tap: Tap | None) -> str | None:
            return format_layout((tap,)) if tap is not None else None

        return {
            "training": [t.to_dict() for t in self.training],
            "serving": [t.to_dict() for t in self.serving],
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
            f"Serving uses the default taps {_layout_str(default)} instead of the configured ones"
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


def compare(
    spec: DraftSpec,
    num_layers: int,
    trainer: str | None = None,
    sglang_version: str = "0.5.23",
    arch: str = "llama",
    cuda_graph: bool = True,
    training_override: Layout | None = None,
    training_sglang_version: str | None = None,
) -> dict:
    """Training and serving layouts of a draft and their diff (and the decode diff, if any)."""
    training = training_layout(
        spec,
        num_layers,
        trainer,
        layout=training_override,
        sglang_version=training_sglang_version or sglang_version,
        arch=arch,
    )
    serving = serving_layout(spec, num_layers, sglang_version, arch, cuda_graph)
    defaults = default_layout(num_layers)
    fell_back = _nested_ids(spec) is None
    decode = serving.decode_layout
    return {
        "training": training,
        "serving": serving,
        "diff": diff(training.layout, serving.layout, defaults if fell_back else None),
        "decode_diff": diff(training.layout, decode, defaults) if decode is not None else None,
    }


# ---------------------------------------------------------------------------------------------
# Fix: the config ids that make a given SGLang version capture a wanted layout.


def config_ids_for(
    layout: Layout,
    spec: DraftSpec,
    num_layers: int,
    sglang_version: str,
    arch: str,
    cuda_graph: bool = True,
) -> list[int] | None:
    """The eagle_config ids under which this SGLang version feeds the draft exactly `layout`.

    Searches, per slot, each tap's depth - 1 (the "output of layer i" reading, +1) and depth
    (ids used verbatim: DeepSeek/Kimi first-id rule from 0.5.13, gpt-oss boundary rule), and
    returns the first candidate whose `serving_layout` equals `layout` without an error; with
    `cuda_graph`, the CUDA-graph decode capture (up to 0.5.10) must match too. None when no
    ids can do it (a tap SGLang never captures, the embedding before the version that can,
    post-norm taps, slots not in layer order, ...).
    """
    target = tuple(layout)
    if not target or any(t.post_norm for t in target):
        return None  # SGLang captures pre-norm residual streams only
    for ids in itertools.product(*[(t.depth - 1, t.depth) for t in target]):
        candidate = replace(spec, aux_layer_ids=tuple(ids), aux_ids_location="eagle_config")
        result = serving_layout(candidate, num_layers, sglang_version, arch, cuda_graph)
        if result.error is not None or result.layout != target:
            continue
        if result.decode_layout is not None and result.decode_layout != target:
            continue
        return list(ids)
    return None
