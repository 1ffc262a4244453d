"""SGLang's facts, by version and target architecture: which taps a server feeds an EAGLE-3 draft.

Every rule cites the SGLang source file (inside the `sglang` package) and the release it was read
in; the releases read are KNOWN_SGLANG_VERSIONS. The one fix search, `find_fix`, answers "which
eagle_config ids make SGLang V feed these taps, or why none do, and which version would", for the
findings and the layout detective alike.
"""

from __future__ import annotations

import itertools
import re
from dataclasses import dataclass, field, replace

from eagle3dash.layout import (
    Layout,
    LayoutResult,
    Tap,
    bracketed,
    default_layout,
    ids_text,
)
from eagle3dash.spec import DraftSpec

Version = tuple[int, int, int]

# Releases read for the rules below (sglang wheels 0.5.4 .. 0.5.23); the fix search looks for
# upgrades among them. DEFAULT_SGLANG_VERSION is assumed when a server does not say.
KNOWN_SGLANG_VERSIONS = (
    "0.5.4",
    "0.5.5",
    "0.5.6",
    "0.5.8",
    "0.5.9",
    "0.5.10",
    "0.5.11",
    "0.5.12",
    "0.5.13",
    "0.5.14",
    "0.5.15",
    "0.5.16",
    "0.5.20",
    "0.5.21",
    "0.5.22",
    "0.5.23",
)
DEFAULT_SGLANG_VERSION = KNOWN_SGLANG_VERSIONS[-1]

# ---------------------------------------------------------------------------------------------
# Versions and architectures.

FIRST_KNOWN_SGLANG: Version = (0, 5, 4)
LAST_KNOWN_SGLANG: Version = (0, 5, 23)  # the newest release read
_VERSION_RE = re.compile(r"v?(\d+)\.(\d+)\.(\d+)(?:\.?(?:post|rc|dev|a|b)\d*)?(?:\+[\w.]+)?")


def parse_version(text: str) -> Version:
    """'0.5.21', '0.5.15.post1', 'v0.5.4' -> (0, 5, 21); ValueError when unparseable or too old."""
    m = _VERSION_RE.fullmatch(text.strip())
    if m is None:
        raise ValueError(f"unparseable SGLang version {text!r} (expected e.g. '0.5.21')")
    version = (int(m[1]), int(m[2]), int(m[3]))
    if version < FIRST_KNOWN_SGLANG:
        raise ValueError(
            f"unknown SGLang version {text!r}: capture rules are known from "
            f"{KNOWN_SGLANG_VERSIONS[0]} to {DEFAULT_SGLANG_VERSION}"
        )
    return version


def version_text(version: Version) -> str:
    """(0, 5, 21) -> '0.5.21'."""
    return ".".join(map(str, version))


def try_parse_version(text: str | None) -> Version | None:
    """The parsed version, None when missing or unparseable."""
    if not text:
        return None
    try:
        return parse_version(text)
    except ValueError:
        return None


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
# fc_norm / norm_output (post-norm feedback) read by models/llama_eagle3.py from 0.5.12.
EAGLE31_SINCE = (0, 5, 12)
# eagle_config.norm_before_fc read by models/llama_eagle3.py from 0.5.20.
NORM_BEFORE_FC_SINCE = (0, 5, 20)
# --speculative-draft-model-quantization exists from 0.5.8 (server_args.py); before, the draft is
# quantized like the target.
DRAFT_QUANT_FLAG_SINCE = (0, 5, 8)
# Per-accepted-token hidden-state rows under speculative decoding (sglang issue #26163): from 0.5.14
# managers/scheduler_components/batch_result_processor.py extends req.hidden_states with one row
# per emitted token of a verify round (0.5.13 appended one row per request and round); the prefill
# block is right in every version.
HIDDEN_STATES_FIX = (0, 5, 14)
# models/deepseek_v2.py first-id rule (PR #25454).
FIRST_ID_RULE_SINCE = (0, 5, 13)


def _id_rule(family: str, version: tuple[int, int, int]) -> IdRule:
    return next(
        r
        for r in SGLANG_ID_RULES
        if r.family == family and r.since <= version and (r.until is None or version < r.until)
    )


def nested_ids(spec: DraftSpec) -> tuple[int, ...] | None:
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
            f"{ids_text(sorted(indices))}), so the slots are reordered."
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


def capture_layout(
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
            f"SGLang {version_text} is newer than {DEFAULT_SGLANG_VERSION}, the newest read; its "
            "rules assumed."
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
    sglang_version: str = DEFAULT_SGLANG_VERSION,
    arch: str = "llama",
    cuda_graph: bool = True,
) -> LayoutResult:
    """The taps an SGLang server of this version feeds the draft for a target of N layers."""
    version = parse_version(sglang_version)
    ids = nested_ids(spec)
    if not spec.use_aux_hidden_state and version >= USE_AUX_FLAG_SINCE:
        return LayoutResult(
            (),
            f"SGLang {sglang_version}: eagle_config.use_aux_hidden_state is false, so aux capture "
            "is off (spec_aux_hidden_state.py, 0.5.8+).",
            error="capture off: the draft gets the last hidden state (width H) and fc is skipped",
        )
    result = capture_layout(num_layers, ids, sglang_version, arch)
    if not spec.use_aux_hidden_state:
        result.notes.append("eagle_config.use_aux_hidden_state=false is ignored before 0.5.8.")
    if spec.aux_ids_location == "top-level":
        # model_runner.py (0.5.4-0.5.10) / spec_aux_hidden_state.py (0.5.23) read only the
        # nested key; top-level ids only size fc on the draft side (eagle_utils.py:272-274).
        result.notes.append(
            f"ids {ids_text(spec.aux_layer_ids or ())} are stored top-level: SGLang reads only "
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
            f"taps {bracketed(defaults)} while eager runs use the config ids; fixed in 0.5.11 "
            "(PR #22836)."
        )
    return result


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


@dataclass
class LayoutFix:
    """How to make SGLang feed a wanted layout: ids on this version, or why not and what would."""

    target: Layout
    version: Version  # the serving version searched (the newest known when unknown)
    version_assumed: bool  # the server did not say its version
    ids: list[int] | None  # eagle_config ids that work on `version`
    why_not: str | None = None  # one clause, when `ids` is None
    upgrade_version: str | None = None  # the first known later version where ids exist
    upgrade_ids: list[int] | None = None
    newest_ids: list[int] | None = None  # the ids on the newest known version
    eager_ids: list[int] | None = None  # ids under --disable-cuda-graph (CUDA-graph bug versions)
    notes: list[str] = field(default_factory=list)


def why_not_capturable(
    target: Layout, num_layers: int, version: Version, arch: str, cuda_graph: bool
) -> str:
    """Why no config ids make this SGLang version capture `target` (best effort, one clause)."""
    family = arch_family(arch)
    v = version_text(version)
    if any(t.post_norm for t in target):
        return "SGLang captures pre-norm residual streams only, never the final-normed output"
    if any(t.depth >= num_layers for t in target) and family not in BOUNDARY_CAPTURE_SINCE:
        return "SGLang never captures the last block's output (nothing follows the last layer)"
    if list(target) != sorted(target):
        return "SGLang captures in layer order, and these slots are not"
    since = EMBEDDING_CAPTURE_SINCE[family]
    if Tap(0) in target and version < since:
        return (
            f"SGLang {v} cannot capture the embedding output for {family}-family targets "
            f"(it crashes on `hidden_states + None`; capturable from {version_text(since)})"
        )
    if cuda_graph and version < CUDA_GRAPH_FIX and tuple(target) != default_layout(num_layers):
        return (
            f"on SGLang {v} CUDA-graph decode steps capture the default layers whatever the ids "
            "(PR #22836, fixed in 0.5.11)"
        )
    if family == "deepseek" and version >= FIRST_ID_RULE_SINCE and target and target[0].depth == 1:
        return (
            f"SGLang {v} (first-id rule, PR #25454) reads a first id of 1 as 'output of layer 1' "
            "and 0 as the embedding, so the state after block 1 cannot lead the list"
        )
    return f"no eagle_config ids make SGLang {v} capture exactly these taps"


def find_fix(
    target: Layout,
    spec: DraftSpec,
    num_layers: int,
    version: Version | None,
    arch: str,
    cuda_graph: bool = True,
) -> LayoutFix:
    """The eagle_config ids that make SGLang feed `target`; if none on this version, why not,
    the first known version that can (and its ids), and the eager-mode ids on CUDA-graph-bug
    versions."""
    assumed = version is None
    v = LAST_KNOWN_SGLANG if version is None else version
    spec = replace(spec, use_aux_hidden_state=True)
    ids = config_ids_for(target, spec, num_layers, version_text(v), arch, cuda_graph)
    fix = LayoutFix(tuple(target), v, assumed, ids)
    if ids is not None:
        return fix
    fix.why_not = why_not_capturable(target, num_layers, v, arch, cuda_graph)
    if cuda_graph and v < CUDA_GRAPH_FIX:
        fix.eager_ids = config_ids_for(
            target, spec, num_layers, version_text(v), arch, cuda_graph=False
        )
    for text in KNOWN_SGLANG_VERSIONS:
        if parse_version(text) <= v:
            continue
        up = config_ids_for(target, spec, num_layers, text, arch, True)
        if up is not None:
            fix.upgrade_version, fix.upgrade_ids = text, up
            fix.newest_ids = config_ids_for(
                target, spec, num_layers, DEFAULT_SGLANG_VERSION, arch, True
            )
            break
    return fix
