"""Trainers: which ids each training framework reads and which taps its training data fed.

A trainer's convention turns the draft's configured ids into the taps its data generation
captured. Trainers by release, read from their wheels:

- `specforge` (SpecForge >= 0.2): trains only through SGLang (config/schema.py allows
  `target_backend: "sglang"` only; offline_capture/sglang_backend/capture.py calls the target's
  `set_eagle3_layers_to_capture` with the draft's ids) and pins `sglang==0.5.14` (the wheel's
  METADATA), so its taps follow SGLang's rule at the training SGLang version (sglang_rules).
- `specforge-hf`: a git install before 0.2 with the HF backend, a hook on `layers[id]`.
- `specforge-0.1`: SpecForge 0.1.0 indexes HF `output_hidden_states` at the hard-coded
  [2, N//2, N-3] and ignores the config's ids (its core/eagle3.py).
- `speculators`: vLLM numbering (id k = the stream entering layer k).
- `nemo-automodel` (NeMo AutoModel 0.7.0): a hook on `layers[id]` (eagle/target.py
  HFEagle3TargetModel, the colocated default), id i = output of layer i, concatenated in list
  order; its ids live in the run's config.yaml (`recipe_args.aux_layer_ids`), never in the
  exported config.json, else `[1, N//2-1, N-4]` (default_eagle3_aux_layer_ids).

A run's record of the ids its capture used (`recorded_ids`: SpecForge 0.2's training state,
speculators' run.yaml, NeMo's config.yaml) stands for the config's ids, read the trainer's way.

A draft's files rarely say which SpecForge made it: `training_readings` gives every plausible
reading with its source and the hints that favour it, and the findings take the side from evidence.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from eagle3dash.engines.facts import FALLBACK_ARCH
from eagle3dash.engines.sglang.rules import arch_family, capture_layout, nested_ids
from eagle3dash.layout import (
    CONVENTIONS,
    Layout,
    LayoutResult,
    Tap,
    check_depths,
    convert,
    default_layout,
    default_output_of_ids,
    ids_text,
)
from eagle3dash.spec import DraftSpec

DECLARED_RULE = "Training layout given by the user."
# The SGLang release SpecForge 0.2.0 pins (specforge-0.2.0.dist-info/METADATA: sglang==0.5.14).
SPECFORGE_SGLANG_VERSION = "0.5.14"


@dataclass(frozen=True)
class Trainer:
    """Which ids a trainer reads and how it turns them into training features."""

    name: str
    reads: str | None  # "eagle_config" | "top-level" | "any" | None (ids ignored)
    convention: str  # a CONVENTIONS key, or "sglang" (follows the SGLang version's rule)
    ascending: bool  # features are concatenated in layer order (else in list order)
    source: str
    release: str = ""  # which releases of the framework follow this convention
    output_of_default: bool = False  # no ids: its default [1, N//2-1, N-4] (id i = output of i)
    # where config.json would hold ids in this trainer's numbering, when it reads none there
    ids_key: str | None = None
    # the run file that can hold the ids a run captured with and no exported config.json
    # carries: without it (or a record of the capture) the trainer's default is a guess
    run_ids: str | None = None

    @property
    def config_key(self) -> str | None:
        """Where config.json holds ids in this trainer's numbering ("eagle_config" |
        "top-level"), None when nowhere."""
        return self.reads if self.reads in ("eagle_config", "top-level") else self.ids_key


_SPECFORGE_HF = Trainer(
    "specforge-hf",
    "eagle_config",
    "output-of",
    False,
    # eagle3_target_model.py: forward hook on layers[idx] keeps output[0], list order;
    # scripts/train_eagle3.py reads eagle_config ids, default [1, N//2-1, N-4]
    "SpecForge HF backend (hook on layers[id], eagle3_target_model.py)",
    "a git install before 0.2 with the HF backend",
    output_of_default=True,
)
_SPECFORGE = Trainer(
    "specforge",
    "eagle_config",
    "sglang",
    True,
    # algorithms/model_providers.py resolve_eagle_capture_layers: run override
    # model.aux_hidden_state_layer_ids, else eagle_config ids, else [1, N//2-1, N-4];
    # offline_capture/sglang_backend/capture.py: set_eagle3_layers_to_capture(ids)
    "SpecForge >= 0.2 SGLang capture (offline_capture/sglang_backend/capture.py)",
    "0.2 and later (trains through SGLang only)",
    output_of_default=True,
    run_ids="the run yaml's model.aux_hidden_state_layer_ids",
)
# NeMo AutoModel 0.7.0 eagle/target.py: register_forward_hook on layers[id] keeps the block
# output, concatenated in the list's order; validate_eagle3_aux_layer_ids: 3 distinct ids < N
_NEMO = Trainer(
    "nemo-automodel",
    None,
    "output-of",
    False,
    "NeMo AutoModel hook on layers[id] (eagle/target.py HFEagle3TargetModel)",
    "0.7.0",
    output_of_default=True,
    ids_key="eagle_config",  # its ids number as SGLang's nested ones: id i = output of layer i
    run_ids="the run's config.yaml recipe_args.aux_layer_ids",
)
_SPECULATORS = Trainer(
    "speculators",
    "top-level",
    "input-of",
    True,
    # speculators launch_vllm.py -> vLLM extract_hidden_states; vLLM sorts ids (PR #50514)
    "speculators/vLLM top-level ids (vLLM _maybe_add_hidden_state)",
    "0.9",
)
# gpt-oss drafts whose largest id is N list hidden-state boundaries (id k = the state after k
# blocks, N = the last block's output before the final norm), as SGLang's gpt_oss.py reads them
# from 0.5.17 (PR #32334) and nvidia/gpt-oss-120b-Eagle3-v3 lists [24, 30, 36] for N = 36.
_GPT_OSS_BOUNDARY = Trainer(
    "gpt-oss-boundary",
    "eagle_config",
    "input-of",
    True,
    "gpt-oss hidden-state boundary ids (SGLang gpt_oss.py 0.5.17+, PR #32334)",
    "gpt-oss drafts whose largest id is N (nvidia's Eagle3 drafts)",
)
TRAINERS: dict[str, Trainer] = {
    "specforge": _SPECFORGE,
    "gpt-oss-boundary": _GPT_OSS_BOUNDARY,
    "specforge-hf": _SPECFORGE_HF,
    # SpecForge 0.1.0 core/eagle3.py: output_hidden_states[2], [N//2], [N-3], ids ignored
    "specforge-0.1": Trainer(
        "specforge-0.1",
        None,
        "hf-index",
        True,
        "SpecForge 0.1.0 HF output_hidden_states[2, N//2, N-3] (core/eagle3.py)",
        "0.1.0",
    ),
    "specforge-sglang": _SPECFORGE,  # the earlier name of `specforge`, kept for stored runs
    "speculators": _SPECULATORS,
    "vllm": _SPECULATORS,
    # SafeAILab EAGLE modeling_llama_kv.py:1137-1139: hard-coded capture before 2, N//2, N-3
    "eagle": Trainer("eagle", None, "input-of", True, "SafeAILab EAGLE modeling_llama_kv.py"),
    # a trainer indexing HF output_hidden_states with the ids (e.g. BaldEagle)
    "hf-index": Trainer("hf-index", "any", "hf-index", False, "HF output_hidden_states[ids]"),
    "nemo-automodel": _NEMO,
}
DEFAULT_TRAINER = {
    "speculators": "speculators",
    "specforge": "specforge",
    "eagle": "eagle",
    "export": "specforge",
    "nemo-automodel": "nemo-automodel",
}
# The trainers a draft of each format may come from, when its files do not say which.
PLAUSIBLE_TRAINERS = {
    "speculators": ("speculators",),
    "specforge": ("specforge", "specforge-hf"),
    "eagle": ("eagle",),
    "export": ("specforge", "specforge-hf"),
    "nemo-automodel": ("nemo-automodel",),
}


def boundary_ids(spec: DraftSpec, num_layers: int, arch: str) -> bool:
    """Whether the draft's nested ids read as gpt-oss hidden-state boundaries: a gpt-oss target
    and the largest id N (SGLang gpt_oss.py 0.5.17+, PR #32334)."""
    ids = nested_ids(spec)
    return bool(ids) and arch_family(arch) == "gpt-oss" and max(ids or ()) == num_layers


def default_trainer(spec: DraftSpec, num_layers: int, arch: str = FALLBACK_ARCH) -> str:
    """The reading taken when no trainer is given: gpt-oss boundary ids when the ids say so,
    else the format's usual trainer."""
    if boundary_ids(spec, num_layers, arch):
        return _GPT_OSS_BOUNDARY.name
    return DEFAULT_TRAINER[spec.format]


def _fc_slots(result: LayoutResult, spec: DraftSpec, num_layers: int) -> LayoutResult:
    """The taps fc was trained on when the config lists one more id than fc has slots and the
    last is the final state N: training_hub before its commit e7c34cc9 (2026-06-11) and
    speculators #1065 wrote the final state, the training target, as a last id."""
    taps, slots = result.layout, spec.num_aux
    if result.error is not None or len(taps) != slots + 1 or taps[-1] != Tap(num_layers):
        return result
    note = (
        f"the config lists {len(taps)} ids for an fc of {slots} slots, the last the final state "
        f"N={num_layers}: that one is the training target (training_hub before 2026-06-11 wrote "
        f"it as a last id), so fc was trained on the first {slots}."
    )
    return replace(result, layout=taps[:slots], notes=[*result.notes, note])


def training_layout(
    spec: DraftSpec,
    num_layers: int,
    trainer: str | None = None,
    *,
    layout: Layout | None = None,
    sglang_version: str | None = None,
    arch: str = FALLBACK_ARCH,
    recorded_ids: tuple[int, ...] | None = None,
) -> LayoutResult:
    """The taps the training data fed the fc slots, per the trainer's convention (or `layout`);
    `sglang_version` is the training SGLang release (SpecForge >= 0.2: default 0.5.14);
    `recorded_ids`: the ids the run's record says its capture used, in place of the config's."""
    if layout is not None:
        return LayoutResult(tuple(layout), DECLARED_RULE)
    result = _trainer_layout(spec, num_layers, trainer, sglang_version, arch, recorded_ids)
    return _fc_slots(result, spec, num_layers)


def _trainer_layout(
    spec: DraftSpec,
    num_layers: int,
    trainer: str | None,
    sglang_version: str | None,
    arch: str,
    recorded_ids: tuple[int, ...] | None,
) -> LayoutResult:
    name = trainer or default_trainer(spec, num_layers, arch)
    if name not in TRAINERS:
        raise ValueError(f"unknown trainer {name!r} (one of {', '.join(TRAINERS)})")
    t = TRAINERS[name]
    notes: list[str] = []
    ids = spec.aux_layer_ids
    if recorded_ids is not None:
        ids = tuple(recorded_ids)
    elif t.reads in ("eagle_config", "top-level") and spec.aux_ids_location != t.reads:
        if ids is not None:
            notes.append(
                f"{t.name} reads only {t.reads} ids; the ids {ids_text(ids)} stored "
                f"{spec.aux_ids_location} are ignored, so it used its defaults."
            )
        ids = None
    elif t.reads is None:
        if ids is not None and convert(ids, "input-of", num_layers) != default_layout(num_layers):
            notes.append(f"{t.source} ignores the configured ids {ids_text(ids)}.")
        ids = None

    assumed = None
    if t.output_of_default and ids is None:
        ids = default_output_of_ids(num_layers)  # eagle3_target_model.py, eagle/target.py
        notes.append(
            f"no {t.reads or 'recorded'} ids: the trainer's default {ids_text(ids)} applies "
            "(assumed)."
        )
        if t.run_ids is not None:
            assumed = unknown_training_ids(t, ids)
    # resolve_eagle_capture_layers (algorithms/model_providers.py:187-210): 3 ints >= 0
    specforge = t.name in ("specforge", "specforge-hf")
    if specforge and ids is not None and (len(ids) != 3 or min(ids) < 0):
        problem = f"SpecForge requires exactly 3 non-negative ids, got {ids_text(ids)}"
        taps = convert(ids, "output-of", num_layers)
        return LayoutResult(taps, t.source, notes, error=problem, assumed=assumed)
    if t.convention == "sglang":
        result = capture_layout(num_layers, ids, sglang_version or SPECFORGE_SGLANG_VERSION, arch)
        result.rule = f"SpecForge >= 0.2 trained through SGLang: {result.rule}"
        result.notes[:0] = notes
        result.assumed = assumed
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
    return LayoutResult(taps, f"{t.source}: {conv.meaning}.", notes, error=error, assumed=assumed)


def unknown_training_ids(trainer: Trainer, default: tuple[int, ...]) -> str:
    """Why a training side read from a trainer's default is unknown, and what would settle it."""
    return (
        f"no file read names the ids training captured: {trainer.name}'s default "
        f"{ids_text(default)} applies only to a run that set none in {trainer.run_ids}, which "
        "the draft's config.json never carries; read them there and give the taps they name "
        "as --training-layout (id i names the output of layer i: tap i+1)"
    )


@dataclass(frozen=True)
class Reading:
    """One plausible reading of the training side: a trainer, its taps and why it is plausible."""

    trainer: str  # a TRAINERS key
    result: LayoutResult
    hints: tuple[str, ...]  # what in the draft's files favours this reading; () when nothing

    @property
    def layout(self) -> Layout:
        """The taps this reading says training fed."""
        return self.result.layout


def _major(version: object) -> int | None:
    """The major number of a version text such as '5.8.1'."""
    head = str(version).split(".")[0] if version else ""
    return int(head) if head.isdigit() else None


def trainer_hints(spec: DraftSpec) -> dict[str, tuple[str, ...]]:
    """What the draft's config.json says about which trainer wrote it, per trainer.

    SpecForge 0.2.0 requires transformers==5.8.1 (its METADATA), whose configs carry
    `transformers_version` 5.x, `dtype` instead of `torch_dtype` and `rope_parameters`
    (export/checkpoint_io.py apply_legacy_rope_scaling mirrors them for older readers); a 4.x
    `transformers_version` predates SpecForge 0.2. Hints order the readings; they settle nothing.
    """
    extra = spec.extra
    version = extra.get("transformers_version")
    keys = set(extra.get("config_keys") or ())
    new: list[str] = []
    old: list[str] = []
    major = _major(version)
    if major is not None and major >= 5:
        new.append(f"transformers_version {version} (SpecForge 0.2 requires transformers 5)")
    elif major is not None:
        old.append(
            f"transformers_version {version} (before transformers 5, so before SpecForge 0.2)"
        )
    if "dtype" in keys and "torch_dtype" not in keys:
        new.append("a `dtype` key, as transformers 5 writes (4.x wrote `torch_dtype`)")
    if "rope_parameters" in keys:
        new.append("a `rope_parameters` key, as transformers 5 writes")
    return {"specforge": tuple(new), "specforge-hf": tuple(old)}


def training_readings(
    spec: DraftSpec,
    num_layers: int,
    arch: str = FALLBACK_ARCH,
    training_sglang_version: str | None = None,
) -> list[Reading]:
    """Every plausible training-side reading of this draft, the best-hinted first."""
    hints = trainer_hints(spec)
    names = PLAUSIBLE_TRAINERS[spec.format]
    if boundary_ids(spec, num_layers, arch):
        names = (_GPT_OSS_BOUNDARY.name, *names)
        hints[_GPT_OSS_BOUNDARY.name] = (
            f"the largest id is N={num_layers}, the final hidden-state boundary (SGLang reads "
            "gpt-oss ids so from 0.5.17, PR #32334)",
        )
    readings = []
    for name in names:
        try:
            result = training_layout(
                spec, num_layers, name, sglang_version=training_sglang_version, arch=arch
            )
        except ValueError:
            continue
        readings.append(Reading(name, result, hints.get(name, ())))
    # a reading whose own capture fails is not how the draft was trained
    return sorted(readings, key=lambda r: (r.result.error is not None, -len(r.hints)))


def config_ids(spec: DraftSpec, trainer: str) -> tuple[int, ...] | None:
    """The ids config.json holds in this trainer's numbering (`Trainer.config_key`)."""
    key = TRAINERS[trainer].config_key
    if key == "eagle_config":
        return spec.aux_layer_ids if spec.aux_ids_location == "eagle_config" else None
    if key == "top-level":
        top = spec.aux_ids_location == "top-level"
        return spec.aux_layer_ids if top else spec.dual_top_level_ids
    return None
