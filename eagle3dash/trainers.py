"""Trainers: which ids each training framework reads and which taps its training data fed.

A trainer's convention turns the draft's configured ids into the taps its data generation
captured; SpecForge's SGLang backend follows the installed SGLang's rule (sglang_rules).
"""

from __future__ import annotations

from dataclasses import dataclass

from eagle3dash.layout import (
    CONVENTIONS,
    Layout,
    LayoutResult,
    check_depths,
    convert,
    default_layout,
    ids_text,
)
from eagle3dash.sglang_rules import DEFAULT_SGLANG_VERSION, capture_layout
from eagle3dash.spec import DraftSpec


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
    sglang_version: str = DEFAULT_SGLANG_VERSION,
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
                f"{t.name} reads only {t.reads} ids; the ids {ids_text(ids)} stored "
                f"{spec.aux_ids_location} are ignored, so it used its defaults."
            )
        ids = None
    if t.reads is None:
        if ids is not None and convert(ids, "input-of", num_layers) != default_layout(num_layers):
            notes.append(f"SafeAILab EAGLE ignores the configured ids {ids_text(ids)}.")
        ids = None

    if t.name.startswith("specforge"):
        if ids is None:
            ids = (1, num_layers // 2 - 1, num_layers - 4)  # eagle3_target_model.py default
            notes.append(f"no eagle_config ids: SpecForge's default {ids_text(ids)} applies.")
        # resolve_eagle_capture_layers (algorithms/model_providers.py:187-210): 3 ints >= 0
        if len(ids) != 3 or min(ids) < 0:
            problem = f"SpecForge requires exactly 3 non-negative ids, got {ids_text(ids)}"
            taps = convert(ids, "output-of", num_layers)
            return LayoutResult(taps, t.source, notes, error=problem)
    if t.convention == "sglang":
        result = capture_layout(num_layers, ids, sglang_version, arch)
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
        notes.append(f"ids {ids_text(ids)} are not ascending: features are in layer order.")
        taps = tuple(sorted(taps))
    elif not t.ascending and list(taps) != sorted(taps):
        notes.append(
            f"ids {ids_text(ids)} are not ascending: features are in list order, while SGLang "
            "captures in layer order."
        )
    taps, error = check_depths(taps, num_layers)
    return LayoutResult(taps, f"{t.source}: {conv.meaning}.", notes, error=error)
