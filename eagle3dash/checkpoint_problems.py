"""What can be wrong with a draft checkpoint: a code plus its data, and the one sentence each says.

`checkpoint.py` finds the problems and the findings rules (`findings/checkpoint_rules.py`,
`findings/measurement_rules.py`) match them by code; their words are made here only, from the
data, so a reworded sentence changes no rule.
"""

from __future__ import annotations

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
    AUX_IDS_ORDER = "aux-ids-order"  # not strictly ascending
    SPECFORGE_IDS = "specforge-ids"  # not three distinct ids, which SpecForge requires
    AUX_CAPTURE_OFF = "aux-capture-off"  # eagle_config.use_aux_hidden_state false
    D2T_MISSING = "d2t-missing"  # a smaller draft vocabulary without its mapping
    EMBED_WIDTH = "embed-width"  # the target's embedding is of another width, none of its own
    NORM_BEFORE_RESIDUAL_MISSING = "norm-before-residual-missing"
    NOT_FINITE = "not-finite"  # NaN or Inf values (found by `load`, which reads the data)
    D2T_OUT_OF_RANGE = "d2t-out-of-range"
    D2T_ALL_ZERO = "d2t-all-zero"


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
        "aux layer ids {ids} are not strictly ascending: servers capture in layer order, so fc "
        "slots would receive the states in a different order than the ids say"
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
