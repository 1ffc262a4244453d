"""vLLM's facts, by release and model runner: which taps a vLLM server feeds an EAGLE-3 draft.

Read in the released wheel vllm 0.33.0 (files inside the `vllm` package):

- Numbering: model_executor/models/interfaces.py `EagleModelMixin._maybe_add_hidden_state`, called
  by models/llama.py `LlamaModel.forward` before layer 0 (id 0 = the embedding output) and after
  each block (id k = the state after k blocks; id N = the last block's output, before the final
  norm). So vLLM id k is Tap(k), and SGLang's Llama id i (the output of layer i) is vLLM's i + 1.
  `_set_aux_hidden_state_layers` keeps `sorted(set(ids))`; ids outside 0..N are never captured.
- Defaults: interfaces.py `SupportsEagle3.get_eagle3_default_aux_hidden_state_layers`
  (2, N//2, N-3); deepseek_v2.py, qwen3_5.py and transformers/base.py write the same.
- DeepSeek family (deepseek_v2.py `DeepseekV2Model.forward`, which Kimi-K2.5's language model
  runs): captures `hidden_states + residual` before layer idx, with residual None before layer 0
  (id 0 fails), and the last block's output (id N) after the loop.
- Which key is read: V1 runner v1/worker/gpu_model_runner.py `_get_eagle3_aux_layers_from_config`;
  V2 runner v1/worker/gpu/spec_decode/eagle/eagle3_utils.py `get_eagle3_aux_layers_from_config`
  (V2 never reads eagle_config.eagle_aux_hidden_state_layer_ids). No ids read: the defaults.
- The runner: config/vllm.py `VllmConfig.use_v2_model_runner` (V2 unless
  VLLM_USE_V2_MODEL_RUNNER=0, envs.py, or Triton or a feature is missing).
- fc width: models/llama_eagle3.py: `num_aux_hidden_states`, else the length of
  eagle_config.eagle_aux_hidden_state_layer_ids, else 3 (top-level ids do not size fc).
- transformers_utils/configs/speculators/algos.py `update_eagle3`: norm_before_residual True when
  a speculators config leaves it out.
- eagle3_utils.py `requires_aux_hidden_states`: eagle_config.use_aux_hidden_state false turns the
  capture off.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field, replace

from eagle3dash.layout import Layout, LayoutResult, Tap, default_aux_indices, ids_text
from eagle3dash.spec import DraftSpec

Version = tuple[int, int, int]

KNOWN_VLLM_VERSIONS = ("0.33.0",)  # the releases read for the rules below
DEFAULT_VLLM_VERSION = KNOWN_VLLM_VERSIONS[-1]
RUNNERS = ("v1", "v2")
DEFAULT_RUNNER = "v2"  # config/vllm.py use_v2_model_runner, 0.33.0
RUNNER_ENV = "VLLM_USE_V2_MODEL_RUNNER"
TOP_LEVEL_KEY = "eagle_aux_hidden_state_layer_ids"
NESTED_KEY = "eagle_config.eagle_aux_hidden_state_layer_ids"
FAMILIES = ("llama", "deepseek")
# deepseek_v2.py's registered architectures (models/registry.py) and Kimi-K2.5, whose
# kimi_k25.py builds a DeepseekV2ForCausalLM language model; short names taken as given.
_DEEPSEEK_ARCHS = frozenset(
    {
        "deepseekforcausallm",
        "deepseekv2forcausallm",
        "deepseekv3forcausallm",
        "kimik25forconditionalgeneration",
        "deepseek",
        "kimi",
    }
)
_VERSION_RE = re.compile(r"v?(\d+)\.(\d+)\.(\d+)(?:\.?(?:post|rc|dev|a|b)\d*)?(?:\+[\w.]+)?")


def top_level_json(ids: list[int] | tuple[int, ...]) -> str:
    """The config.json entry both vLLM runners read the ids from first, to copy:
    '"eagle_aux_hidden_state_layer_ids": [1, 2, 3]'."""
    return f'"{TOP_LEVEL_KEY}": {json.dumps(list(ids))}'


def parse_version(text: str) -> Version:
    """'0.33.0', 'v0.33.0', '0.33.0rc1+cu128' -> (0, 33, 0); ValueError when unparseable."""
    m = _VERSION_RE.fullmatch(text.strip())
    if m is None:
        raise ValueError(f"unparseable vLLM version {text!r} (expected e.g. '0.33.0')")
    return (int(m[1]), int(m[2]), int(m[3]))


def runner_from_env(value: str | None) -> str:
    """The runner vLLM 0.33 picks for a VLLM_USE_V2_MODEL_RUNNER value: '0' -> 'v1', unset or
    '1' -> 'v2' (envs.py reads it as bool(int(value))); ValueError for anything else."""
    if value is None or not value.strip():
        return DEFAULT_RUNNER
    if not re.fullmatch(r"-?\d+", value.strip()):
        raise ValueError(f"{RUNNER_ENV}={value!r}: vLLM reads it as a whole number (0 or 1)")
    return "v2" if int(value) else "v1"


def check_runner(runner: str) -> str:
    """The runner name, lower-cased; ValueError unless one of RUNNERS."""
    name = runner.strip().lower()
    if name not in RUNNERS:
        raise ValueError(f"unknown vLLM model runner {runner!r}: use one of {', '.join(RUNNERS)}")
    return name


def family(arch: str) -> str:
    """The capture family of a target architecture in vLLM 0.33: 'deepseek' or 'llama' (every
    other EAGLE-3 target runs EagleModelMixin's capture)."""
    return "deepseek" if re.sub(r"[-_.\s]", "", arch.lower()) in _DEEPSEEK_ARCHS else "llama"


def default_ids(num_layers: int) -> tuple[int, ...]:
    """vLLM's default ids, (2, N//2, N-3); id k = Tap(k)."""
    return default_aux_indices(num_layers)


def default_capture(num_layers: int) -> Layout:
    """The taps vLLM feeds a draft whose config names no ids it reads."""
    return tuple(Tap(i) for i in default_ids(num_layers))


# ---------------------------------------------------------------------------------------------
# Which config key each runner reads.


@dataclass(frozen=True)
class ConfigIds:
    """The ids a runner takes from a draft config, in vLLM numbering, and where from."""

    ids: tuple[int, ...] | None  # None: no key it reads is set, so the model's defaults
    key: str | None  # the config key read
    stored: tuple[int, ...] | None  # the ids as the key stores them
    plus_one: bool  # the runner adds 1 to the stored ids (DFlash/DSpark semantics)


def top_level_ids(spec: DraftSpec) -> tuple[int, ...] | None:
    """The config's top-level eagle_aux_hidden_state_layer_ids (alone, or beside nested ids)."""
    if spec.aux_ids_location == "top-level":
        return spec.aux_layer_ids
    return spec.dual_top_level_ids


def _nested(spec: DraftSpec) -> tuple[int, ...] | None:
    return spec.aux_layer_ids if spec.aux_ids_location == "eagle_config" else None


def _other(spec: DraftSpec, key: str) -> tuple[int, ...] | None:
    return next((ids for k, ids in spec.other_id_keys if k == key), None)


def config_ids(spec: DraftSpec, runner: str = DEFAULT_RUNNER) -> ConfigIds:
    """The ids this runner reads from the draft's config (an empty list counts as unset).

    V1 (gpu_model_runner.py): top-level eagle_aux_hidden_state_layer_ids, else
    dflash_config.target_layer_ids + 1, else eagle_config.eagle_aux_hidden_state_layer_ids as
    stored. V2 (eagle3_utils.py): top-level, dflash_config.target_layer_ids + 1,
    dspark_target_layer_ids + 1, target_layer_ids + 1, then the `layer_ids` of dflash_config and
    eagle_config as stored; never eagle_config.eagle_aux_hidden_state_layer_ids.
    """
    runner = check_runner(runner)
    plus_one = ["dflash_config.target_layer_ids"]
    if runner == "v1":
        # V1 reads the DFlash ids, then lets eagle_config's list replace them (an eagle_config
        # object without that list would clear them: a case not modelled here).
        order = [TOP_LEVEL_KEY, NESTED_KEY, "dflash_config.target_layer_ids"]
    else:
        plus_one += ["dspark_target_layer_ids", "target_layer_ids"]
        order = [
            TOP_LEVEL_KEY,
            "dflash_config.target_layer_ids",
            "dspark_target_layer_ids",
            "target_layer_ids",
            "dflash_config.layer_ids",
            "eagle_config.layer_ids",
        ]
    values = {TOP_LEVEL_KEY: top_level_ids(spec), NESTED_KEY: _nested(spec)}
    for key in order:
        stored = values[key] if key in values else _other(spec, key)
        if stored:
            add = 1 if key in plus_one else 0
            return ConfigIds(tuple(i + add for i in stored), key, stored, key in plus_one)
    return ConfigIds(None, None, None, False)


def fc_width(spec: DraftSpec) -> int:
    """The fc slots vLLM builds for this draft (llama_eagle3.py): num_aux_hidden_states, else the
    length of the nested eagle_config ids, else 3."""
    if spec.num_aux_hidden_states is not None:
        return spec.num_aux_hidden_states
    nested = _nested(spec)
    return len(nested) if nested else 3


def runs_norm_before_residual(spec: DraftSpec) -> bool:
    """Whether vLLM runs the draft with norm_before_residual: the config's value, and True for a
    speculators config without the key (speculators/algos.py update_eagle3)."""
    if spec.format == "speculators" and spec.norm_before_residual_key is None:
        return True
    return spec.norm_before_residual


# ---------------------------------------------------------------------------------------------
# Serving.


def _capture(
    ids: tuple[int, ...], num_layers: int, fam: str
) -> tuple[Layout, list[str], str | None]:
    """The taps vLLM captures for these ids (sorted, each once), with notes and any error."""
    notes, errors = [], []
    kept = tuple(sorted(set(ids)))
    if list(ids) != sorted(ids):
        notes.append(
            f"ids {ids_text(ids)} are not ascending: vLLM keeps sorted(set(ids)) "
            f"({ids_text(kept)}), so the slots are fed in layer order."
        )
    if len(kept) < len(ids):
        errors.append("duplicate ids: each layer is captured once, so fc gets fewer states")
    taps = []
    for i in kept:
        if not 0 <= i <= num_layers:
            errors.append(f"id {i} lies outside 0..{num_layers}: never captured")
        elif i == 0 and fam == "deepseek":
            errors.append(
                "id 0 (the embedding output) fails on DeepSeek-family targets: deepseek_v2.py "
                "adds a residual that is None before layer 0"
            )
            taps.append(Tap(0))
        else:
            taps.append(Tap(i))
    return tuple(taps), notes, "; ".join(errors) or None


def _key_phrase(read: ConfigIds) -> str:
    if read.plus_one:
        return f"{read.key} {ids_text(read.stored or ())} + 1"
    return f"{read.key} {ids_text(read.stored or ())}"


def serving_layout(
    spec: DraftSpec,
    num_layers: int,
    version: str = DEFAULT_VLLM_VERSION,
    runner: str = DEFAULT_RUNNER,
    arch: str = "llama",
) -> LayoutResult:
    """The taps a vLLM server of this release and model runner feeds the draft for a target of
    N layers."""
    runner = check_runner(runner)
    parse_version(version)
    where = f"vLLM {version} {runner.upper()} runner"
    notes = []
    if version not in KNOWN_VLLM_VERSIONS:
        notes.append(
            f"vLLM {version} was not read; the rules of {DEFAULT_VLLM_VERSION} are assumed."
        )
    if not spec.use_aux_hidden_state:
        return LayoutResult(
            (),
            f"{where}: eagle_config.use_aux_hidden_state is false, so aux capture is off "
            "(v1/worker/gpu/spec_decode/eagle/eagle3_utils.py requires_aux_hidden_states).",
            notes,
            error="capture off: the draft gets the last hidden state (width H) and fc is skipped",
        )
    fam = family(arch)
    read = config_ids(spec, runner)
    source = (
        "v1/worker/gpu_model_runner.py" if runner == "v1" else "spec_decode/eagle/eagle3_utils.py"
    )
    if read.ids is None:
        ids = default_ids(num_layers)
        text = (
            f"{where}: no layer-id key it reads is set, so the target captures its defaults "
            f"(2, N//2, N-3) = {ids_text(ids)} (models/interfaces.py; keys read per {source})."
        )
    else:
        ids = read.ids
        text = (
            f"{where}: reads {_key_phrase(read)}; vLLM id k is the state after k blocks "
            f"(models/interfaces.py _maybe_add_hidden_state; keys read per {source})."
        )
    nested = _nested(spec)
    if runner == "v2" and nested is not None and read.ids is None:
        notes.append(
            f"eagle_config.eagle_aux_hidden_state_layer_ids {ids_text(nested)} is never "
            "read by the V2 runner, so the target captures its defaults."
        )
    if runner == "v1" and read.key == NESTED_KEY:
        notes.append(
            f"the V1 runner takes the nested ids {ids_text(nested or ())} as vLLM ids (id k = "
            "the state after k blocks), where SGLang's Llama rule reads id i as the state "
            "after i + 1 blocks."
        )
    layout, more, error = _capture(ids, num_layers, fam)
    notes += more
    width = fc_width(spec)
    if layout and len(layout) != width:
        notes.append(
            f"vLLM captures {len(layout)} states but builds fc for {width} "
            "(num_aux_hidden_states, else the nested ids, else 3; llama_eagle3.py): shape "
            "mismatch at fc."
        )
    if runs_norm_before_residual(spec) and spec.norm_before_residual_key is None:
        notes.append(
            "norm_before_residual is not in this speculators config: vLLM runs the draft with "
            "norm_before_residual=true (speculators/algos.py)."
        )
    return LayoutResult(layout, text, notes, error=error)


# ---------------------------------------------------------------------------------------------
# Fix: the top-level ids that make vLLM feed a wanted layout.


def config_ids_for(
    layout: Layout,
    spec: DraftSpec,
    num_layers: int,
    version: str = DEFAULT_VLLM_VERSION,
    runner: str = DEFAULT_RUNNER,
    arch: str = "llama",
) -> list[int] | None:
    """The top-level eagle_aux_hidden_state_layer_ids under which this vLLM release and runner
    feed the draft exactly `layout` (both runners read that key first; id k = Tap(k)); None
    when no ids can (post-norm taps, slots out of layer order, taps outside 0..N, the
    embedding on DeepSeek-family targets)."""
    target = tuple(layout)
    if not target or any(t.post_norm for t in target):
        return None  # vLLM captures pre-norm residual streams only
    ids = tuple(t.depth for t in target)
    candidate = replace(spec, dual_top_level_ids=ids, use_aux_hidden_state=True)
    if candidate.aux_ids_location == "top-level":
        candidate = replace(candidate, aux_layer_ids=ids, dual_top_level_ids=None)
    result = serving_layout(candidate, num_layers, version, runner, arch)
    if result.error is not None or result.layout != target:
        return None
    return list(ids)


def why_not_capturable(target: Layout, num_layers: int, arch: str) -> str:
    """Why no ids make vLLM feed `target` (one clause)."""
    if not target:
        return "there are no taps to feed"
    if any(t.post_norm for t in target):
        return "vLLM captures pre-norm residual streams only, never the final-normed output"
    if list(target) != sorted(set(target)):
        return "vLLM captures sorted(set(ids)) in layer order, and these slots are not"
    if any(not 0 <= t.depth <= num_layers for t in target):
        return f"vLLM captures only the states 0..{num_layers} (embedding to last block)"
    if Tap(0) in target and family(arch) == "deepseek":
        return "vLLM cannot capture the embedding output of a DeepSeek-family target"
    return "no ids make vLLM capture exactly these taps"


@dataclass
class LayoutFix:
    """How to make a vLLM server feed a wanted layout: top-level ids (both runners read that key
    first), or why none do."""

    target: Layout
    version: str
    runner: str
    ids: list[int] | None  # top-level eagle_aux_hidden_state_layer_ids
    why_not: str | None = None
    notes: list[str] = field(default_factory=list)

    @property
    def key(self) -> str:
        """The config key the ids go in."""
        return TOP_LEVEL_KEY


def find_fix(
    target: Layout,
    spec: DraftSpec,
    num_layers: int,
    version: str | None = None,
    runner: str = DEFAULT_RUNNER,
    arch: str = "llama",
) -> LayoutFix:
    """The fix search for vLLM: the top-level ids that make this release and runner feed
    `target`, else why none do."""
    v = version or DEFAULT_VLLM_VERSION
    ids = config_ids_for(target, spec, num_layers, v, runner, arch)
    fix = LayoutFix(tuple(target), v, check_runner(runner), ids)
    if ids is None:
        fix.why_not = why_not_capturable(tuple(target), num_layers, arch)
    if ids is not None and fc_width(spec) != len(ids):
        fix.notes.append(
            f"vLLM builds fc for {fc_width(spec)} states: also set num_aux_hidden_states to "
            f"{len(ids)} (llama_eagle3.py)."
        )
    return fix
