"""Rules over the draft checkpoint: what SGLang's loader and draft do with its tensors and config.

Sources: SGLang's models/llama_eagle3.py (load_weights, fc_norm / norm_output from 0.5.12,
eagle_config.norm_before_fc from 0.5.17), eagle_worker.py / eagle_worker_v2.py (lm_head, d2t).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING

from eagle3dash.checkpoint_formats import norm_output_feeds_back
from eagle3dash.checkpoint_problems import ProblemCode, problem_lines
from eagle3dash.engines.rules import rules_for
from eagle3dash.engines.serving import SGLANG
from eagle3dash.evidence_levels import LEVEL_ASSUMED
from eagle3dash.findings.core import Evidence, Finding
from eagle3dash.severity import Severity

if TYPE_CHECKING:
    from eagle3dash.checkpoint import InspectReport


def _sentence(text: str) -> str:
    """Upper-case the first letter (only) and end with a period."""
    return text[:1].upper() + text[1:] + ("" if text.endswith(".") else ".")


def _raw_config(report: InspectReport | None) -> dict:
    """The checkpoint's config.json, {} when unreadable (only for keys DraftSpec folds away)."""
    if report is None:
        return {}
    try:
        data = json.loads((Path(report.path) / "config.json").read_text())
    except (OSError, ValueError, RecursionError):
        return {}
    return data if isinstance(data, dict) else {}


def rule_weights_not_finite(e: Evidence) -> list[Finding]:
    """Draft tensors holding NaN or Inf (checkpoint.py `load`, which reads the tensor data): a
    server runs them as they are (llama_eagle3.py load_weights copies what it finds), so every
    draft token is garbage and nothing measured of this draft means anything."""
    if e.report is None or not e.report.nonfinite:
        return []
    names = e.report.nonfinite
    return [
        Finding(
            "weights-not-finite",
            Severity.CRITICAL,
            f"{len(names)} draft tensor{'s hold' if len(names) > 1 else ' holds'} NaN or Inf "
            "values: the checkpoint is broken, and every number measured with it is too.",
            "; ".join(p.text for p in e.report.problems if p.code is ProblemCode.NOT_FINITE) + ".",
            "Export the draft again from a checkpoint saved before training diverged (or redo the "
            "conversion that produced it), then run the diagnosis again.",
            {"tensors": list(names)},
        )
    ]


def rule_lm_head_missing(e: Evidence) -> list[Finding]:
    """The checkpoint has no lm_head.weight: SGLang leaves a random head (sglang #27908).

    eagle_worker.py (0.5.23 eagle_worker_v2.py init_lm_head) takes the head from the draft.
    """
    if e.report is None or "lm_head.weight" in e.report.tensors:
        return []
    raw = _raw_config(e.report)
    spec = e.report.spec
    shares_target_head = (  # load_lm_head_from_target: tied=false and no draft_vocab_size
        raw
        and spec.format != "speculators"
        and "draft_vocab_size" not in raw
        and raw.get("tie_word_embeddings") is False
    )
    if shares_target_head:
        return []
    return [
        Finding(
            "lm_head-missing",
            Severity.CRITICAL,
            "The draft checkpoint has no lm_head.weight, so SGLang leaves the draft's head at "
            "random init and accept length is 1.0.",
            f"no lm_head.weight in the checkpoint ({len(e.report.tensors)} tensors); "
            "draft_vocab_size "
            f"{spec.draft_vocab_size} (sglang issue #27908).",
            f"Export the trained head as lm_head.weight [{spec.draft_vocab_size}, "
            f"{spec.hidden_size}] into the draft's safetensors.",
        )
    ]


def rule_unknown_tensors(e: Evidence) -> list[Finding]:
    """Tensors with names the loader does not know are dropped silently: random weights.

    llama_eagle3.py load_weights (`if param_name in params_dict`), no warning.
    """
    if e.report is None:
        return []
    unknown = [p.text for p in e.report.problems if p.code is ProblemCode.UNKNOWN_TENSOR]
    if not unknown:
        return []
    shown = "; ".join(unknown[:5]) + (f"; and {len(unknown) - 5} more" if len(unknown) > 5 else "")
    return [
        Finding(
            "unknown-tensors",
            Severity.CRITICAL,
            f"{len(unknown)} tensor{'s' if len(unknown) > 1 else ''} in the checkpoint "
            f"{'have names' if len(unknown) > 1 else 'has a name'} SGLang does not load, so the "
            "server silently drops "
            f"{'them' if len(unknown) > 1 else 'it'} and runs those weights at random init.",
            shown + ".",
            "Rename the tensors to the names SGLang loads: fc.weight, midlayer.* (or "
            "layers.0.*) with self_attn.{q,k,v,o}_proj, mlp.{gate,up,down}_proj, "
            "input_layernorm, post_attention_layernorm, hidden_norm, then norm.weight, "
            "lm_head.weight, d2t.",
            {"count": len(unknown)},
        )
    ]


def rule_d2t_missing(e: Evidence) -> list[Finding]:
    """draft_vocab_size < vocab_size without d2t: draft ids are read as target ids, on either
    engine.

    SGLang eagle_worker.py: `hot_token_id` stays None without a loaded d2t. vLLM 0.32.0
    model_executor/models/llama_eagle3.py: `draft_id_to_target_id` starts as zeros and stays so.
    """
    spec = e.spec
    if spec is None or spec.draft_vocab_size >= spec.vocab_size or spec.has_d2t:
        return []
    if e.engine == "vllm":
        why = (
            "vLLM's draft_id_to_target_id starts as zeros and stays so without a d2t "
            "(llama_eagle3.py), so target id = draft id."
        )
    else:
        why = "SGLang applies hot_token_id only when d2t is loaded (llama_eagle3.py)."
    return [
        Finding(
            "d2t-missing",
            Severity.CRITICAL,
            f"The draft predicts over {spec.draft_vocab_size} tokens but has no d2t mapping, so "
            f"{e.engine_label()} reads draft id i as target id i (the first "
            f"{spec.draft_vocab_size} target ids) and almost no draft token is accepted.",
            f"draft_vocab_size={spec.draft_vocab_size}, vocab_size={spec.vocab_size}, no d2t "
            f"tensor; {why}",
            f"Add the training vocab mapping to the safetensors as d2t (int64 "
            f"[{spec.draft_vocab_size}], target id = draft id + d2t[draft id]).",
        )
    ]


def rule_norm_before_residual(e: Evidence) -> list[Finding]:
    """norm_before_residual true: SGLang implements only False.

    llama_eagle3.py takes the residual before hidden_norm; speculators trains with True.
    vLLM implements both (its llama_eagle3.py), but runs a speculators config that leaves the key
    out with True (vllm 0.33 transformers_utils/configs/speculators/algos.py).
    """
    spec = e.spec
    if spec is None or e.rules().runs_norm_before_residual(spec) == spec.norm_before_residual:
        return []
    if e.engine == "vllm":
        return [
            Finding(
                "norm-before-residual",
                Severity.WARNING,
                "vLLM runs this speculators draft with norm_before_residual=true because its "
                "config leaves the key out; if it was trained with false, its draft layer "
                "computes a different residual at every position.",
                "config has no norm_before_residual (format speculators); vLLM's "
                "speculators/algos.py update_eagle3 defaults it to true.",
                "Write the value the draft was trained with into config.json "
                '("norm_before_residual": false for a draft trained without it).',
                basis=LEVEL_ASSUMED,
            )
        ]
    return [
        Finding(
            "norm-before-residual",
            Severity.CRITICAL,
            "The draft was trained with norm_before_residual=true, which SGLang does not "
            "implement, so its draft layer computes a different residual at every position.",
            f"config norm_before_residual=true (format {spec.format}); SGLang's llama_eagle3.py "
            "always takes the residual before hidden_norm (the False behaviour).",
            "There is no SGLang flag for it: serve the draft with vLLM (which implements "
            "norm_before_residual), or retrain it with norm_before_residual=false.",
        )
    ]


def rule_eagle31_ignored(e: Evidence) -> list[Finding]:
    """Eagle 3.1 options the serving SGLang ignores, and the `norm_output` meaning clash.

    llama_eagle3.py reads fc_norm / norm_output from 0.5.12 and eagle_config.norm_before_fc from
    0.5.17; SpecForge's `norm_output` = final norm before lm_head, SGLang's = post-norm feedback.
    """
    spec = e.spec
    if spec is None:
        return []
    rules = e.rules()
    v = e.version() or "(version unknown)"
    raw = _raw_config(e.report)
    nested = raw.get("eagle_config")
    nested = nested if isinstance(nested, dict) else {}
    nested_nbf = bool(nested.get("norm_before_fc"))
    # what SGLang reads, whichever engine serves (this rule is about SGLang's draft)
    nbf_since = rules_for(SGLANG).first_release("norm_before_fc")
    ignored, fixes = [], []
    if rules.has("eagle31") is False:
        if spec.fc_norm:
            ignored.append(f"fc_norm (per-aux RMSNorm) is read only from 0.5.12, not by {v}")
        if spec.feedback_post_norm:
            ignored.append(f"norm_output (post-norm feedback) is read only from 0.5.12, not by {v}")
        if spec.fc_norm or spec.feedback_post_norm:
            fixes.append("upgrade SGLang to 0.5.12 or later")
    if e.engine == "sglang" and spec.norm_before_fc and not nested_nbf:
        # SGLang's key only: vLLM 0.32's llama_eagle3.py reads eagle_config's, else the top level
        ignored.append(
            "norm_before_fc is set at the top level of config.json, which SGLang never reads "
            f"(it reads eagle_config.norm_before_fc, from {nbf_since})"
        )
        fixes.append(
            'add "eagle_config": {"norm_before_fc": true} to config.json and serve with SGLang '
            f"{nbf_since} or later"
        )
    elif nested_nbf and rules.has("norm_before_fc") is False:
        ignored.append(f"eagle_config.norm_before_fc is read only from {nbf_since}, not by {v}")
        fixes.append(f"upgrade SGLang to {nbf_since} or later")
    out: list[Finding] = []
    if ignored:
        out.append(
            Finding(
                "eagle31-ignored",
                Severity.WARNING,
                f"SGLang {v} ignores "
                f"{'Eagle 3.1 options' if len(ignored) > 1 else 'an Eagle 3.1 option'} this "
                "draft was trained with, so the served draft computes something else.",
                "; ".join(ignored) + ".",
                _sentence("; ".join(dict.fromkeys(fixes))),
                {"ignored": ignored},
            )
        )
    if (
        not norm_output_feeds_back(spec.format)
        and spec.norm_output_key is True
        and rules.has("eagle31")
    ):
        out.append(
            Finding(
                "norm-output-clash",
                Severity.WARNING,
                f"config.json sets norm_output: true in SpecForge's meaning (final norm before "
                f"lm_head), which SGLang {v} reads as 'feed the post-norm state back', so every "
                "draft token after the first diverges from training.",
                f"format {spec.format}, norm_output=true; SGLang >= 0.5.12 llama_eagle3.py feeds "
                "back the normed hidden state when norm_output is set, while SpecForge trained "
                "with pre-norm feedback.",
                "Remove norm_output from the draft's config.json for SGLang (SpecForge's meaning "
                "is SGLang's default behaviour).",
            )
        )
    return out


# The problems a rule of their own reports: rule_unknown_tensors, rule_lm_head_missing,
# rule_weights_not_finite, rule_d2t_missing, training_rules.rule_record_ids_differ.
_DEDICATED_PROBLEMS = (
    ProblemCode.UNKNOWN_TENSOR,
    ProblemCode.LM_HEAD_MISSING,
    ProblemCode.NOT_FINITE,
    ProblemCode.D2T_MISSING,
    ProblemCode.RECORD_IDS_DIFFER,
)


def rule_checkpoint_problems(e: Evidence) -> list[Finding]:
    """Other problems `checkpoint.inspect` found (shapes, missing tensors, ids).

    Each problem line names what SGLang does with it: model_runner.py (ids), llama_eagle3.py
    (architectures, shapes, names), eagle_worker.py (vocab mapping).
    """
    if e.report is None:
        return []
    rest = problem_lines([p for p in e.report.problems if p.code not in _DEDICATED_PROBLEMS])
    if not rest:
        return []
    return [
        Finding(
            "checkpoint-problems",
            Severity.WARNING,
            f"The checkpoint has {len(rest)} other problem{'s' if len(rest) > 1 else ''} a "
            "server would get wrong or silently ignore.",
            "; ".join(rest) + ".",
            "Fix each in the checkpoint as its line says (config.json keys or tensors), then "
            "restart the server.",
            {"problems": rest},
        )
    ]
