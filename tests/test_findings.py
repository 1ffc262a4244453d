"""Findings: one Evidence that fires each rule and one that must not, plus the seed case end to end.

The server, benchmark and eval objects are small stand-ins (tests/findingskit.py) with the
attribute names of `sglang.ServerReport` / `SpeculativeSettings`, `servebench.BenchResult` and
`metrics.DraftEval` (checked against the real dataclasses when those modules import), so these
tests stay fast and import no torch.
"""

from __future__ import annotations

import dataclasses
import json
import re
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path

import pytest

from eagle3dash.checkpoint_problems import CheckpointProblem, ProblemCode
from eagle3dash.engines.serving import ServingEngine
from eagle3dash.engines.sglang.rules import serving_layout
from eagle3dash.findings import RULES, SEVERITIES, SUMMARY_RULES, Evidence, Finding, diagnose
from eagle3dash.layout import Tap
from eagle3dash.prediction import predict_layouts
from tests.findingskit import GOOD, POOR, Bench, Server, Spec, draft, report


def test_stand_ins_match_the_real_dataclasses() -> None:
    """The attribute names used here exist on the real objects (when their modules import)."""
    sglang = pytest.importorskip("eagle3dash.engines.sglang.client")
    servebench = pytest.importorskip("eagle3dash.servebench")
    real = {f.name for f in dataclasses.fields(sglang.ServerReport)}
    assert {f.name for f in dataclasses.fields(Server)} <= real
    real = {f.name for f in dataclasses.fields(sglang.SpeculativeSettings)}
    assert {f.name for f in dataclasses.fields(Spec)} <= real
    real = {f.name for f in dataclasses.fields(servebench.BenchResult)}
    assert {f.name for f in dataclasses.fields(Bench)} <= real


# --- real objects -------------------------------------------------------------------------------

N = 61  # Kimi-K2 / DeepSeek-V3


SEED_TRAINING = (Tap(0), Tap(3), Tap(31))


def seed(version: str, **kw) -> Evidence:
    """The incident: SpecForge draft, nested ids [2,30,58], trained on emb + after 3 and 31."""
    spec = draft()
    layouts = predict_layouts(
        spec, N, training_override=SEED_TRAINING, sglang_version=version, arch="kimi"
    )
    base = dict(
        report=report(spec),
        num_target_layers=N,
        arch="kimi",
        server=Server(version=version),
        layouts=layouts,
    )
    base.update(kw)
    return Evidence(**base)


def ids_of(findings: list[Finding]) -> list[str]:
    return [f.id for f in findings]


def only(findings: list[Finding], rule_id: str) -> Finding:
    hits = [f for f in findings if f.id == rule_id]
    assert len(hits) == 1, ids_of(findings)
    return hits[0]


# --- the seed case end to end -------------------------------------------------------------------


def test_seed_on_0_5_12_kimi_layout_mismatch_first_and_says_to_upgrade() -> None:
    e = seed(
        "0.5.12",
        server=Server(version="0.5.12", speculative=Spec()),
        training_eval=GOOD,
        serving_eval=POOR,
    )
    found = diagnose(e)
    first = found[0]
    assert first.id == "layout-mismatch" and first.severity == "critical"
    assert first.title == (
        "Serving feeds the draft the layers after 3, 31 and 59 blocks, but training fed the "
        "embedding output and the layers after 3 and 31 blocks: every slot is shifted by one."
    )
    assert "embedding output" in first.evidence and "after block 59" in first.evidence
    # Plain words per slot, never the code's Tap(d) notation.
    assert "Training: slot 0: embedding output, slot 1: after block 3, slot 2: after block 31." in (
        first.evidence
    )
    assert "slot 0: after block 3, slot 1: after block 31, slot 2: after block 59." in (
        first.evidence
    )
    assert "Tap(" not in first.evidence + first.title + first.fix
    # At the server's chain length (3 steps), the one that its measured accept length reflects.
    assert "simulated accept length 2.85 at 3 steps, top-1 80.0%" in first.evidence
    assert "simulated accept length 1.06 at 3 steps, top-1 5.0%" in first.evidence
    # Tap(0) is not capturable on 0.5.12 for Kimi: the newest release that feeds the taps
    # (0.5.23, as every release from 0.5.16 on), with its ids
    assert "serve with SGLang 0.5.23 (every release read from 0.5.16 on feeds them)" in first.fix
    assert "[0, 3, 31]" in first.fix
    assert "retrain" in first.fix
    assert first.data["sglang_version"] == "0.5.23"
    ids = first.data["config_ids"]
    fixed = replace(draft(), aux_layer_ids=tuple(ids), aux_ids_location="eagle_config")
    for version in ("0.5.16", "0.5.23"):
        result = serving_layout(fixed, N, version, "kimi")
        assert result.error is None and result.layout == SEED_TRAINING


def test_seed_on_0_5_23_kimi_gives_verbatim_ids() -> None:
    found = diagnose(seed("0.5.23"))
    first = found[0]
    assert first.id == "layout-mismatch"
    assert first.data["config_ids"] == [0, 3, 31]  # first id != 1: used verbatim
    assert '"eagle_config": {"eagle_aux_hidden_state_layer_ids": [0, 3, 31]}' in first.fix
    fixed = replace(draft(), aux_layer_ids=(0, 3, 31))
    result = serving_layout(fixed, N, "0.5.23", "kimi")
    assert result.error is None and result.layout == SEED_TRAINING


def test_seed_fixed_config_has_no_layout_finding() -> None:
    spec = draft(aux_layer_ids=(0, 3, 31))
    layouts = predict_layouts(
        spec, N, training_override=SEED_TRAINING, sglang_version="0.5.23", arch="kimi"
    )
    e = Evidence(report=report(spec), num_target_layers=N, arch="kimi", layouts=layouts)
    assert diagnose(e) == []


def test_draft_tokens_capped_steps_1_draft_tokens_16() -> None:
    """--speculative-num-steps 1 --speculative-num-draft-tokens 16: SGLang runs (1, 1, 2)."""
    server = Server(speculative=Spec(num_steps=1, eagle_topk=1, num_draft_tokens=2))
    f = only(diagnose(Evidence(server=server, serving_eval=GOOD)), "draft-tokens-capped")
    assert f.severity == "warning"
    assert "speculative_num_draft_tokens=2" in f.evidence
    assert "speculative_num_steps=1" in f.evidence
    assert f.data["num_draft_tokens"] == 2
    assert f.data["simulated_accept_length"] == pytest.approx({1: 1.8, 3: 2.85, 5: 3.35})
    assert "1.80 at 1 steps" in f.evidence and "3.35 at 5 steps" in f.evidence
    assert "--speculative-num-steps 3 --speculative-eagle-topk 1" in f.fix
    assert "--speculative-num-draft-tokens 4" in f.fix


# --- one firing and one quiet Evidence per rule -------------------------------------------------


def _llama(version: str, ids=(1, 15, 28), training=None, **kw) -> Evidence:
    spec = draft(aux_layer_ids=ids)
    layouts = predict_layouts(spec, 32, training_override=training, sglang_version=version)
    kw.setdefault("sglang_version", version)
    return Evidence(report=report(spec), num_target_layers=32, layouts=layouts, **kw)


def _write_config(tmp_path: Path, cfg: dict) -> str:
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    return str(tmp_path)


Case = Callable[[Path], Evidence]

FIRES: list = [
    # rule 1
    pytest.param(
        lambda p: Evidence(report=report(), server=Server(speculative=Spec(algorithm="EAGLE"))),
        "algorithm-eagle",
        "critical",
        id="algorithm-eagle",
    ),
    pytest.param(
        lambda p: Evidence(report=report(), server=Server(speculative=Spec(algorithm="NEXTN"))),
        "algorithm-eagle",
        "critical",
        id="algorithm-nextn",
    ),
    # rule 2
    pytest.param(
        lambda p: Evidence(server=Server(speculative=Spec(num_steps=2, num_draft_tokens=3))),
        "draft-tokens-capped",
        "warning",
        id="draft-tokens-capped",
    ),
    # rule 3
    pytest.param(
        lambda p: Evidence(
            report=report(
                draft(format="speculators", aux_layer_ids=(3, 31, 59), aux_ids_location="top-level")
            ),
            num_target_layers=N,
        ),
        "aux-ids-not-read",
        "critical",
        id="aux-ids-top-level-critical",
    ),
    pytest.param(
        lambda p: Evidence(
            report=report(draft(aux_layer_ids=None, aux_ids_location="missing")),
            num_target_layers=N,
        ),
        "aux-ids-not-read",
        "info",
        id="aux-ids-missing-defaults-info",
    ),
    pytest.param(
        lambda p: Evidence(report=report(draft(aux_layer_ids=None, aux_ids_location="missing"))),
        "aux-ids-not-read",
        "warning",
        id="aux-ids-missing-unknown-n",
    ),
    # rule 4
    pytest.param(lambda p: seed("0.5.23"), "layout-mismatch", "critical", id="layout-mismatch"),
    pytest.param(
        lambda p: _llama("0.5.21", ids=(-1, 15, 28), training=(Tap(0), Tap(16), Tap(29))),
        "capture-error",
        "critical",
        id="capture-error",
    ),
    # rule 5
    pytest.param(
        lambda p: _llama("0.5.10", ids=(2, 16, 29)),
        "capture-rule-version",
        "critical",
        id="cuda-graph-default-layers",
    ),
    pytest.param(
        lambda p: Evidence(
            report=report(draft(aux_layer_ids=(2, 30, 57))),
            num_target_layers=N,
            arch="kimi",
            server=Server(version="0.5.13"),
            trainer="specforge-sglang",
            training_sglang_version="0.5.12",
        ),
        "capture-rule-version",
        "warning",
        id="first-id-rule-between-versions",
    ),
    # rule 6
    pytest.param(
        lambda p: Evidence(report=report(draft(draft_vocab_size=320))),
        "d2t-missing",
        "critical",
        id="d2t-missing",
    ),
    # rule 7
    pytest.param(
        lambda p: Evidence(report=report(draft(norm_before_residual=True))),
        "norm-before-residual",
        "critical",
        id="norm-before-residual",
    ),
    # rule 8
    pytest.param(
        lambda p: Evidence(report=report(draft(fc_norm=True)), server=Server(version="0.5.11")),
        "eagle31-ignored",
        "warning",
        id="fc-norm-before-0.5.12",
    ),
    pytest.param(
        lambda p: Evidence(report=report(draft(format="speculators", norm_before_fc=True))),
        "eagle31-ignored",
        "warning",
        id="top-level-norm-before-fc",
    ),
    pytest.param(
        lambda p: Evidence(
            report=report(
                path=_write_config(p, {"eagle_config": {"norm_before_fc": True}}),
            ),
            server=Server(version="0.5.16"),
        ),
        "eagle31-ignored",
        "warning",
        id="nested-norm-before-fc-before-0.5.17",
    ),
    pytest.param(
        lambda p: Evidence(
            report=report(draft(norm_output_key=True)), server=Server(version="0.5.12")
        ),
        "norm-output-clash",
        "warning",
        id="norm-output-clash",
    ),
    # rule 9
    pytest.param(
        lambda p: Evidence(server=Server(quantization="fp8")),
        "draft-quantized",
        "warning",
        id="draft-quantized",
    ),
    # rule 10
    pytest.param(
        lambda p: Evidence(
            report=report(path="/ckpt/run2/epoch_9"),
            server=Server(
                url="http://localhost:30000",
                speculative=Spec(draft_model_path="/ckpt/run1/epoch_9"),
            ),
        ),
        "draft-path-differs",
        "warning",
        id="draft-path-differs-local",
    ),
    pytest.param(
        lambda p: Evidence(
            report=report(path="/home/me/kimi-eagle3-v2"),
            server=Server(speculative=Spec(draft_model_path="/models/kimi-eagle3-v1")),
        ),
        "draft-path-differs",
        "warning",
        id="draft-path-differs-remote",
    ),
    # rule 11
    pytest.param(
        lambda p: Evidence(serving_eval=GOOD, measured=Bench(100.0, accept_length=1.6)),
        "measured-below-simulated",
        "warning",
        id="measured-below-simulated",
    ),
    # rule 12
    pytest.param(
        lambda p: Evidence(measured=Bench(80.0), baseline=Bench(100.0)),
        "slower-than-baseline",
        "critical",
        id="slower-than-baseline",
    ),
    pytest.param(
        lambda p: Evidence(measured=Bench(110.0), baseline=Bench(100.0)),
        "slower-than-baseline",
        "info",
        id="little-gain",
    ),
    # rule 13
    pytest.param(
        lambda p: Evidence(report=report(tensors={"fc.weight": ([64, 192], "bfloat16")})),
        "lm_head-missing",
        "critical",
        id="lm_head-missing",
    ),
    pytest.param(
        lambda p: Evidence(
            report=report(
                problems=[
                    CheckpointProblem(
                        ProblemCode.UNKNOWN_TENSOR,
                        {"tensor": "model.midlayer.foo.weight", "shape": [64]},
                    )
                ]
            )
        ),
        "unknown-tensors",
        "critical",
        id="unknown-tensors",
    ),
    pytest.param(
        lambda p: Evidence(
            report=report(
                problems=[
                    CheckpointProblem(
                        ProblemCode.SHAPE_MISMATCH,
                        {"tensor": "fc.weight", "shape": [64, 128], "expected": [64, 192]},
                    )
                ]
            )
        ),
        "checkpoint-problems",
        "warning",
        id="checkpoint-problems",
    ),
    pytest.param(
        lambda p: Evidence(server=Server(speculative=None)),
        "no-speculation",
        "critical",
        id="no-speculation",
    ),
    pytest.param(
        lambda p: Evidence(server=Server(version="0.5.13", enable_return_hidden_states=True)),
        "hidden-states-truncated",
        "info",
        id="hidden-states-truncated",
    ),
    pytest.param(
        lambda p: Evidence(
            server=Server(enable_return_hidden_states=True, return_hidden_states_mode="last")
        ),
        "hidden-states-last-only",
        "warning",
        id="hidden-states-last-only",
    ),
    pytest.param(
        lambda p: Evidence(server=Server(speculative=Spec(adaptive=True))),
        "speculative-adaptive",
        "warning",
        id="speculative-adaptive",
    ),
]

QUIET: list = [
    pytest.param(lambda p: Evidence(), "*", id="empty-evidence"),
    # vLLM 0.32.0's llama_eagle3.py reads eagle_config's norm_before_fc, else the top level's
    pytest.param(
        lambda p: Evidence(
            report=report(draft(format="speculators", norm_before_fc=True)),
            engine="vllm",
            sglang_version="0.32.0",
        ),
        "eagle31-ignored",
        id="top-level-norm-before-fc-on-vllm",
    ),
    pytest.param(
        lambda p: Evidence(report=report(), server=Server()), "algorithm-eagle", id="eagle3"
    ),
    pytest.param(
        lambda p: Evidence(server=Server(speculative=Spec(algorithm="EAGLE"))),
        "algorithm-eagle",
        id="no-draft-inspected",
    ),
    pytest.param(lambda p: Evidence(server=Server()), "draft-tokens-capped", id="steps-3"),
    pytest.param(
        lambda p: Evidence(server=Server(speculative=Spec(num_steps=1, eagle_topk=4))),
        "draft-tokens-capped",
        id="topk-4",
    ),
    pytest.param(lambda p: Evidence(report=report()), "aux-ids-not-read", id="nested-ids"),
    pytest.param(lambda p: _llama("0.5.23"), "layout-mismatch", id="llama-defaults-identical"),
    pytest.param(lambda p: Evidence(report=report()), "layout-mismatch", id="no-layouts"),
    pytest.param(
        lambda p: _llama("0.5.11", ids=(2, 16, 29)), "capture-rule-version", id="fixed-in-0.5.11"
    ),
    pytest.param(
        lambda p: _llama("0.5.10", ids=(2, 16, 29), server=Server(disable_cuda_graph=True)),
        "capture-rule-version",
        id="cuda-graph-off",
    ),
    pytest.param(
        lambda p: Evidence(
            report=report(draft(aux_layer_ids=(2, 30, 57))),
            num_target_layers=N,
            arch="kimi",
            server=Server(version="0.5.13"),
            trainer="specforge-sglang",
            training_sglang_version="0.5.14",
        ),
        "capture-rule-version",
        id="same-rule-both-versions",
    ),
    pytest.param(
        lambda p: Evidence(
            report=report(draft(aux_layer_ids=(2, 30, 57))),
            num_target_layers=32,
            server=Server(version="0.5.13"),
            trainer="specforge-sglang",
            training_sglang_version="0.5.12",
        ),
        "capture-rule-version",
        id="llama-has-no-first-id-rule",
    ),
    pytest.param(
        lambda p: Evidence(report=report(draft(draft_vocab_size=320, has_d2t=True))),
        "d2t-missing",
        id="d2t-present",
    ),
    pytest.param(lambda p: Evidence(report=report()), "norm-before-residual", id="nbr-false"),
    pytest.param(
        lambda p: Evidence(report=report(draft(fc_norm=True)), server=Server(version="0.5.12")),
        "eagle31-ignored",
        id="fc-norm-0.5.12",
    ),
    pytest.param(
        lambda p: Evidence(report=report(draft(fc_norm=True))),
        "eagle31-ignored",
        id="fc-norm-version-unknown",
    ),
    pytest.param(
        lambda p: Evidence(
            report=report(
                path=_write_config(p, {"eagle_config": {"norm_before_fc": True}}),
            ),
            server=Server(version="0.5.20"),
        ),
        "eagle31-ignored",
        id="nested-norm-before-fc-0.5.20",
    ),
    pytest.param(
        lambda p: Evidence(
            report=report(draft(norm_output_key=True)), server=Server(version="0.5.11")
        ),
        "norm-output-clash",
        id="norm-output-before-0.5.12",
    ),
    pytest.param(
        lambda p: Evidence(
            report=report(draft(format="speculators", norm_output_key=True)),
            server=Server(version="0.5.23"),
        ),
        "norm-output-clash",
        id="speculators-norm-output",
    ),
    pytest.param(
        lambda p: Evidence(
            server=Server(quantization="fp8", speculative=Spec(draft_quantization="unquant"))
        ),
        "draft-quantized",
        id="draft-unquant",
    ),
    pytest.param(lambda p: Evidence(server=Server()), "draft-quantized", id="no-quantization"),
    pytest.param(
        lambda p: Evidence(
            report=report(path="/ckpt/kimi-eagle3"),
            server=Server(
                url="http://127.0.0.1:30000",
                speculative=Spec(draft_model_path="/ckpt/./kimi-eagle3/"),
            ),
        ),
        "draft-path-differs",
        id="same-path-normalised",
    ),
    pytest.param(
        lambda p: Evidence(
            report=report(path="/home/me/kimi-eagle3"),
            server=Server(speculative=Spec(draft_model_path="/models/kimi-eagle3")),
        ),
        "draft-path-differs",
        id="remote-same-basename",
    ),
    pytest.param(
        lambda p: Evidence(serving_eval=GOOD, measured=Bench(100.0, accept_length=3.1)),
        "measured-below-simulated",
        id="measured-close",
    ),
    pytest.param(
        lambda p: Evidence(serving_eval=GOOD, measured=Bench(100.0)),
        "measured-below-simulated",
        id="no-measured-accept",
    ),
    pytest.param(
        lambda p: Evidence(measured=Bench(150.0), baseline=Bench(100.0)),
        "slower-than-baseline",
        id="fast",
    ),
    pytest.param(
        lambda p: Evidence(measured=Bench(80.0)), "slower-than-baseline", id="no-baseline"
    ),
    pytest.param(lambda p: Evidence(report=report()), "lm_head-missing", id="lm_head-present"),
    pytest.param(
        lambda p: Evidence(
            report=report(
                tensors={"fc.weight": ([64, 192], "bfloat16")},
                path=_write_config(p, {"tie_word_embeddings": False}),
            )
        ),
        "lm_head-missing",
        id="head-shared-with-target",
    ),
    pytest.param(
        lambda p: Evidence(
            report=report(
                draft(draft_vocab_size=320),
                problems=[
                    CheckpointProblem(
                        ProblemCode.D2T_MISSING, {"draft_vocab_size": 320, "vocab_size": 1000}
                    )
                ],
            )
        ),
        "checkpoint-problems",
        id="d2t-problem-has-its-own-rule",
    ),
    pytest.param(lambda p: Evidence(server=Server()), "no-speculation", id="speculating"),
    pytest.param(
        lambda p: Evidence(server=Server(version="0.5.14", enable_return_hidden_states=True)),
        "hidden-states-truncated",
        id="hidden-states-fixed-in-0.5.14",
    ),
    pytest.param(
        lambda p: Evidence(server=Server(version="0.5.16", enable_return_hidden_states=True)),
        "hidden-states-truncated",
        id="hidden-states-fixed-0.5.16",
    ),
    pytest.param(
        lambda p: Evidence(
            server=Server(enable_return_hidden_states=True, return_hidden_states_mode="full")
        ),
        "hidden-states-last-only",
        id="hidden-states-full",
    ),
    pytest.param(
        lambda p: Evidence(
            server=Server(enable_return_hidden_states=True, return_hidden_states_mode="last")
        ),
        "hidden-states-off",
        id="hidden-states-last-is-not-off",
    ),
    pytest.param(
        lambda p: Evidence(
            server=Server(
                version="0.5.13", enable_return_hidden_states=True, return_hidden_states_mode="last"
            )
        ),
        "hidden-states-truncated",
        id="hidden-states-last-has-no-rows-to-truncate",
    ),
    pytest.param(
        lambda p: Evidence(server=Server(speculative=Spec(num_steps=2, num_draft_tokens=3))),
        "speculative-adaptive",
        id="fixed-steps",
    ),
    pytest.param(
        lambda p: Evidence(
            server=Server(speculative=Spec(num_steps=2, num_draft_tokens=3, adaptive=True))
        ),
        "draft-tokens-capped",
        id="adaptive-steps-are-not-capped",
    ),
    pytest.param(
        lambda p: Evidence(
            server=Server(speculative=Spec(adaptive=True)),
            serving_eval=GOOD,
            measured=Bench(100.0, accept_length=1.6),
        ),
        "measured-below-simulated",
        id="adaptive-steps-simulate-nothing",
    ),
]


@pytest.mark.parametrize("make, rule_id, severity", FIRES)
def test_rule_fires(make: Case, rule_id: str, severity: str, tmp_path: Path) -> None:
    f = only(diagnose(make(tmp_path)), rule_id)
    assert f.severity == severity
    assert f.title.endswith(".") and f.evidence and f.fix


@pytest.mark.parametrize("make, rule_id", QUIET)
def test_rule_stays_quiet(make: Case, rule_id: str, tmp_path: Path) -> None:
    found = ids_of(diagnose(make(tmp_path)))
    if rule_id == "*":
        assert found == []
    else:
        assert rule_id not in found


# --- details of single rules --------------------------------------------------------------------


def test_aux_ids_top_level_fix_gives_nested_ids_for_training_taps() -> None:
    # speculators top-level ids are "input of layer k": Tap(3), Tap(31), Tap(59)
    spec = draft(format="speculators", aux_layer_ids=(3, 31, 59), aux_ids_location="top-level")
    f = only(
        diagnose(Evidence(report=report(spec), num_target_layers=N, arch="kimi")),
        "aux-ids-not-read",
    )
    assert "top level" in f.title and "after 2, 30 and 58 blocks" in f.title
    assert f.data["config_ids"] == [3, 31, 59]  # 0.5.23 Kimi: first id != 1, verbatim
    assert '"eagle_config": {"eagle_aux_hidden_state_layer_ids": [3, 31, 59]}' in f.fix


def test_detected_layout_fix_turns_capture_on_for_a_draft_that_has_it_off() -> None:
    """The detective's best taps 3, 13, 23 on a Llama target are SGLang ids [2, 12, 22] (id i
    feeds the state after i + 1 blocks); a config with use_aux_hidden_state false captures
    nothing from 0.5.8 on whatever its ids, so the fix writes the flag on beside them (the fix the
    layout findings give), not the ids alone."""
    from eagle3dash.detective import Detection, SweepRow

    spec = draft(aux_layer_ids=(1, 11, 21), use_aux_hidden_state=False)
    serving = ServingEngine("sglang", "0.5.23")
    layouts = predict_layouts(spec, N, engine=serving, arch="llama")
    claimed, best = tuple(layouts.training.layout), (Tap(3), Tap(13), Tap(23))
    rows = [SweepRow("best", best, 0.6, 2.5, 0.0), SweepRow("config", claimed, 0.2, 1.3, 0.0)]
    detection = Detection("/ckpt", N, rows, best, None, serving, [2, 12, 22], ["Best."] * 3)
    e = Evidence(
        report=report(spec),
        num_target_layers=N,
        arch="llama",
        server=Server(version="0.5.23"),
        layouts=layouts,
        detection=detection,
    )
    f = only(diagnose(e), "detected-layout")
    entry = '{"eagle_aux_hidden_state_layer_ids": [2, 12, 22], "use_aux_hidden_state": true}'
    assert f'"eagle_config": {entry}' in f.fix
    assert f.fix.endswith("Record that layout with the checkpoint.")
    assert f.data["fix_ids"] == [2, 12, 22]


def test_cuda_graph_finding_offers_upgrade_and_disable_flag() -> None:
    f = only(diagnose(_llama("0.5.10", ids=(2, 16, 29))), "capture-rule-version")
    assert "0.5.11" in f.fix and "--disable-cuda-graph" in f.fix
    assert "[1, 15, 28]" in f.fix  # the default ids, a third way out
    assert "after 2, 16 and 29 blocks" in f.title


def test_llama_off_by_one_fix_ids() -> None:
    # an HF-index trainer fed Tap(2), Tap(16), Tap(29); the config says [2, 16, 29] (SGLang: +1)
    e = _llama("0.5.23", ids=(2, 16, 29), training=(Tap(2), Tap(16), Tap(29)))
    f = diagnose(e)[0]
    assert f.id == "layout-mismatch"
    assert "one block later" in f.title
    assert f.data["config_ids"] == [1, 15, 28]


def test_d2t_missing_names_the_engine_that_serves() -> None:
    # Both engines read draft id i as target id i without a d2t: SGLang leaves hot_token_id None
    # (eagle_worker.py), vLLM 0.32.0 keeps draft_id_to_target_id at its zeros (llama_eagle3.py).
    # A vLLM run's finding was worded for SGLang.
    small_vocab = report(draft(draft_vocab_size=320))
    (on_vllm,) = [
        f
        for f in diagnose(
            Evidence(report=small_vocab, engine="vllm", sglang_version="0.32.0", vllm_runner="v1")
        )
        if f.id == "d2t-missing"
    ]
    assert "so vLLM 0.32.0 (V1 runner) reads draft id i as target id i" in on_vllm.title
    assert "SGLang" not in on_vllm.title + on_vllm.evidence
    assert "draft_id_to_target_id starts as zeros" in on_vllm.evidence
    (on_sglang,) = [
        f
        for f in diagnose(Evidence(report=small_vocab, sglang_version="0.5.23"))
        if f.id == "d2t-missing"
    ]
    assert "so SGLang 0.5.23 reads draft id i as target id i" in on_sglang.title
    assert "hot_token_id only when d2t is loaded" in on_sglang.evidence


def test_capture_error_fix_says_to_upgrade() -> None:
    f = only(
        diagnose(_llama("0.5.21", ids=(-1, 15, 28), training=(Tap(0), Tap(16), Tap(29)))),
        "capture-error",
    )
    assert "every release read from 0.5.22 on" in f.fix and f.data["config_ids"] == [-1, 15, 28]


def test_impossible_layout_says_retrain() -> None:
    # Tap(32) = the last block's output: no SGLang captures it for Llama
    e = _llama("0.5.23", ids=(1, 15, 28), training=(Tap(2), Tap(16), Tap(32)))
    f = only(diagnose(e), "layout-mismatch")
    assert "last block" in f.fix and "retrain" in f.fix and "config_ids" not in f.data


def test_draft_quantized_on_old_server_needs_upgrade() -> None:
    f = only(
        diagnose(Evidence(server=Server(version="0.5.6", quantization="fp8"))), "draft-quantized"
    )
    assert "0.5.8" in f.fix and "--speculative-draft-model-quantization unquant" in f.fix


def test_remote_path_evidence_says_only_basenames_compared() -> None:
    e = Evidence(
        report=report(path="/home/me/kimi-eagle3-v2"),
        server=Server(speculative=Spec(draft_model_path="/models/kimi-eagle3-v1")),
    )
    f = only(diagnose(e), "draft-path-differs")
    assert "only the final path components" in f.evidence
    assert "/home/me/kimi-eagle3-v2" in f.fix


def test_adaptive_steps_replace_the_fixed_steps_comparison() -> None:
    # At batch size 1 adaptive SGLang may draft up to 7 steps (adaptive_spec_params.py), so a
    # measured accept length above the 3-step simulation is no sign of another draft.
    def evidence(adaptive: bool) -> Evidence:
        return Evidence(
            server=Server(
                speculative=Spec(num_steps=3, adaptive=adaptive), enable_return_hidden_states=True
            ),
            serving_eval=POOR,
            measured=Bench(100.0, accept_length=3.5),
        )

    assert "measured-above-simulated" in ids_of(diagnose(evidence(False)))
    found = diagnose(evidence(True))
    assert ids_of(found) == ["speculative-adaptive"]
    assert found[0].evidence == (
        "speculative_adaptive=true; speculative_num_steps=3 is only where the steps start: "
        "SGLang picks them from candidate_steps per batch size by the observed acceptance (by "
        "default [1, 3, 5, 7] at batch size 1, [0, 1, 3] from 8, [0, 1] from 32, [0] from 64; "
        "0 means no drafting)."
    )


def test_hidden_states_last_only_names_the_restart_flag() -> None:
    server = Server(enable_return_hidden_states=True, return_hidden_states_mode="last")
    f = only(diagnose(Evidence(server=server)), "hidden-states-last-only")
    assert f.fix == (
        "Restart the server with --return-hidden-states-mode full, then run the diagnosis again."
    )
    assert f.evidence == (
        "http://gpubox:30000 /server_info: enable_return_hidden_states=true, "
        "return_hidden_states_mode=last; SGLang refuses return_hidden_states=true above the "
        "server's mode (\"The requested return_hidden_states mode exceeds the server maximum "
        '`last`").'
    )


def test_measured_below_simulated_uses_server_steps_and_lists_checks() -> None:
    e = Evidence(
        server=Server(
            quantization="fp8",
            speculative=Spec(num_steps=3, accept_threshold_single=0.5),
        ),
        serving_eval=GOOD,
        measured=Bench(100.0, accept_length=1.5),
        report=report(
            problems=[CheckpointProblem(ProblemCode.UNKNOWN_TENSOR, {"tensor": "x", "shape": [1]})]
        ),
    )
    f = only(diagnose(e), "measured-below-simulated")
    assert f.data["steps"] == 3 and f.data["simulated"] == pytest.approx(2.85)
    for needle in ("temperature", "SGLANG_SIMULATE_ACC_LEN", "fp8", "0.5", "unknown names"):
        assert needle in f.fix
    assert "1.50" in f.title and "2.85" in f.title


def test_slower_than_baseline_numbers() -> None:
    f = only(
        diagnose(Evidence(measured=Bench(80.0, accept_length=1.1), baseline=Bench(100.0))),
        "slower-than-baseline",
    )
    assert "80.0 tok/s" in f.evidence and "100.0 tok/s" in f.evidence and "0.80x" in f.title


def test_norm_output_fix_removes_the_key() -> None:
    e = Evidence(report=report(draft(norm_output_key=True)), server=Server(version="0.5.23"))
    f = only(diagnose(e), "norm-output-clash")
    assert "Remove norm_output" in f.fix


# --- ordering and shapes ------------------------------------------------------------------------


def test_findings_sorted_by_severity_then_rule_order() -> None:
    e = seed(
        "0.5.13",
        report=report(draft(draft_vocab_size=320, fc_norm=True)),
        server=Server(
            version="0.5.13",
            quantization="fp8",
            enable_return_hidden_states=True,
            speculative=Spec(algorithm="EAGLE", num_steps=1, num_draft_tokens=2),
        ),
        measured=Bench(80.0),
        baseline=Bench(100.0),
    )
    found = diagnose(e)
    ranks = [SEVERITIES.index(f.severity) for f in found]
    assert ranks == sorted(ranks)
    # With --speculative-algorithm EAGLE no aux states are captured at all: the layout is moot
    # until the algorithm is fixed, so the algorithm comes first and no layout finding is made.
    # The fp8 draft lowers the accept length: the slowdown it explains is its cost, so it is
    # critical beside the slowdown, before it (issue 36).
    assert ids_of(found)[:4] == [
        "algorithm-eagle",
        "d2t-missing",
        "draft-quantized",
        "slower-than-baseline",
    ]
    assert "layout-mismatch" not in ids_of(found)
    assert ids_of(found)[-1] == "hidden-states-truncated"


def test_every_rule_documents_its_source() -> None:
    for rule in (*RULES, *SUMMARY_RULES):
        assert rule.__doc__ and re.search(r"\w\.py\b|#\d+", rule.__doc__), rule


def test_finding_to_dict_and_severity_check() -> None:
    f = Finding("x", "info", "T.", "E", "F", {"a": 1})
    assert f.to_dict() == {
        "id": "x",
        "severity": "info",
        "title": "T.",
        "evidence": "E",
        "fix": "F",
        "data": {"a": 1},
        "basis": "observed",
    }
    json.dumps([g.to_dict() for g in diagnose(seed("0.5.12"))])
    with pytest.raises(ValueError):
        Finding("x", "fatal", "T.", "E", "F")


def test_a_local_copy_is_the_same_draft_and_another_epoch_is_not(tmp_path) -> None:
    # An upload is diagnosed from its copy under the home while the server serves the original.
    original, copy = tmp_path / "draft", tmp_path / "home" / "checkpoints" / ("ab" * 32)
    for folder in (original, copy):
        folder.mkdir(parents=True)
        (folder / "config.json").write_text('{"hidden_size": 32}')
        (folder / "model.safetensors").write_bytes(b"x" * 100)
    server = Server(url="http://127.0.0.1:30000", speculative=Spec(draft_model_path=str(original)))
    assert "draft-path-differs" not in ids_of(
        diagnose(Evidence(report=report(path=str(copy)), server=server))
    )
    # Another epoch: the same config and the same file sizes, other weights.
    (copy / "model.safetensors").write_bytes(b"y" * 100)
    found = diagnose(Evidence(report=report(path=str(copy)), server=server))
    assert only(found, "draft-differs").severity == "critical"


def test_a_slowdown_names_what_caps_the_accept_length_or_says_nothing_checked_did() -> None:
    slow = {"measured": Bench(80.0, accept_length=1.3), "baseline": Bench(100.0)}
    alone = only(diagnose(Evidence(server=Server(), **slow)), "slower-than-baseline")
    # 1.3 of at most 3 + 1 = 4 draft tokens per round, and nothing that ran explains it
    assert "The accept length is the cause (1.30 of at most 4)" in alone.fix
    assert "first" not in alone.fix
    eagle = Server(speculative=Spec(algorithm="EAGLE"))
    found = diagnose(Evidence(report=report(), server=eagle, **slow))
    assert ids_of(found)[0] == "algorithm-eagle"
    assert only(found, "slower-than-baseline").fix.startswith("Fix algorithm-eagle first")
    fast_enough = {"measured": Bench(80.0, accept_length=3.5), "baseline": Bench(100.0)}
    costly = only(diagnose(Evidence(server=Server(), **fast_enough)), "slower-than-baseline")
    assert costly.fix.startswith("The accept length is not the cause")


def test_nan_weights_are_the_first_critical_finding() -> None:
    nan = {"tensor": "fc.weight", "nan": 3, "inf": 0}
    broken = report(problems=[CheckpointProblem(ProblemCode.NOT_FINITE, nan)])
    broken.nonfinite.append("fc.weight")
    found = diagnose(Evidence(report=broken))
    assert ids_of(found)[0] == "weights-not-finite" and found[0].severity == "critical"
    assert "fc.weight holds 3 NaN and 0 Inf values" in found[0].evidence
    assert "checkpoint-problems" not in ids_of(found)  # the same line is not listed twice


def test_deepseek_first_id_case_names_the_newest_release_that_feeds_the_taps() -> None:
    # Trained on the states after blocks 1, 30 and 58 (SpecForge ids [0, 29, 57]). From 0.5.13
    # a first id 0 is kept verbatim (the embedding) and 1 becomes 2 (PR #25454): no ids lead
    # with Tap(1) on 0.5.23. Up to 0.5.12 every id is + 1; 0.5.10 and before feed CUDA-graph
    # decode the defaults. So the newest release is 0.5.12, with ids [0, 29, 57].
    trained = (Tap(1), Tap(30), Tap(58))
    spec = draft(aux_layer_ids=(0, 29, 57))
    arch = "DeepseekV3ForCausalLM"
    layouts = predict_layouts(
        spec, N, training_override=trained, sglang_version="0.5.23", arch=arch
    )
    e = Evidence(
        report=report(spec),
        num_target_layers=N,
        arch=arch,
        layouts=layouts,
        sglang_version="0.5.23",
    )
    f = only(diagnose(e), "layout-mismatch")
    assert f.data["config_ids"] == [0, 29, 57] and f.data["sglang_version"] == "0.5.12"
    assert "serve with SGLang 0.5.12 (the releases read that feed them: 0.5.11 and 0.5.12)" in (
        f.fix
    )
    assert f.basis == "predicted"  # no side was measured: the finding says it rests on rules


def test_low_acceptance_without_a_training_side_is_a_verdict_with_ranked_causes() -> None:
    # 1.40 tokens per round at 3 steps (at most 4): under half. No training side, no identity,
    # a quantized target: layout first (not observed), then the draft's identity and the
    # quantization (both settled by one run), then target and prompt format.
    e = Evidence(
        report=report(),
        num_target_layers=N,
        server=Server(quantization="fp8"),
        measured=Bench(output_tok_s_aggregate=50.0, accept_length=1.4),
    )
    f = only(diagnose(e), "low-acceptance")
    assert f.severity == "warning"
    assert f.title == (
        "The endpoint accepts few drafts (1.40 of at most 4), and the training side was not "
        "measured to tell why."
    )
    assert [c.split(":")[0] for c in f.data["causes"]] == [
        "layout",
        "wrong draft",
        "quantization",
        "wrong target",
        "prompt format",
    ]
    assert "(settled by a local copy of the target" in f.evidence
    assert f.fix.startswith("Check the first: a local copy of the target")


def test_low_acceptance_is_quiet_with_a_training_side_or_a_good_accept_length() -> None:
    measured = Bench(output_tok_s_aggregate=50.0, accept_length=1.4)
    with_training = Evidence(
        report=report(), server=Server(), measured=measured, training_eval=GOOD
    )
    assert "low-acceptance" not in ids_of(diagnose(with_training))
    good = Evidence(
        report=report(),
        server=Server(),
        measured=Bench(output_tok_s_aggregate=50.0, accept_length=2.6),
    )
    assert "low-acceptance" not in ids_of(diagnose(good))


@dataclass
class NoisyBench(Bench):
    """A benchmark stand-in with its per-request tok/s."""

    output_tok_s_per_request: list[float] = field(default_factory=list)


def test_a_slowdown_within_the_per_request_noise_is_not_critical() -> None:
    baseline = Bench(100.0)
    # 0.80x; per-request 60 and 100 tok/s: SE 20, two SE 40 = 50% of the mean: 0.80 ± 0.40.
    noisy = Evidence(
        server=Server(), measured=NoisyBench(80.0, 2.0, 1, [60.0, 100.0]), baseline=baseline
    )
    f = only(diagnose(noisy), "slower-than-baseline")
    assert f.severity == "info" and "within the per-request noise" in f.title
    assert f.data["noise"] == pytest.approx(0.4)
    # Per-request 78 and 82: two SE 4 = 5%: 0.80 ± 0.04 stays below 1.
    steady = Evidence(
        server=Server(), measured=NoisyBench(80.0, 2.0, 1, [78.0, 82.0]), baseline=baseline
    )
    assert only(diagnose(steady), "slower-than-baseline").severity == "critical"


def test_rules_match_problems_by_code_not_by_their_words() -> None:
    # A dropped tensor is its own critical rule, whatever the sentence says; a mismatch is one
    # line of checkpoint-problems; a missing d2t is left to d2t-missing's rule.
    unknown = CheckpointProblem(ProblemCode.UNKNOWN_TENSOR, {"tensor": "a.b", "shape": [2]})
    shape = CheckpointProblem(
        ProblemCode.SHAPE_MISMATCH, {"tensor": "fc.weight", "shape": [1], "expected": [2]}
    )
    d2t = CheckpointProblem(ProblemCode.D2T_MISSING, {"draft_vocab_size": 8, "vocab_size": 16})
    found = {f.id: f for f in diagnose(Evidence(report=report(problems=[unknown, shape, d2t])))}
    assert found["unknown-tensors"].data == {"count": 1}
    assert found["checkpoint-problems"].data == {
        "problems": ["shape mismatch: fc.weight is [1], config implies [2]"]
    }


def test_a_predicted_mismatch_the_measurement_does_not_bear_out_is_a_warning() -> None:
    # No training side was measured: the seed's mismatch is the rules' prediction. At 3 server
    # steps (at most 4 tokens a round) an endpoint accepting 2.6 shows no such cost (a draft fed
    # other taps than its training's accepts near 1): a warning; at 1.3 it bears it out.
    speculating = Server(version="0.5.23", speculative=Spec(num_steps=3))
    healthy = seed("0.5.23", server=speculating, measured=Bench(90.0, accept_length=2.6))
    (finding,) = [f for f in diagnose(healthy) if f.id == "layout-mismatch"]
    assert finding.severity == "warning"
    assert (
        "But the endpoint's measured accept length, 2.60 of at most 4, does not show the cost a "
        "mismatch would have: a warning until the training side is measured."
    ) in finding.evidence
    low = seed("0.5.23", server=speculating, measured=Bench(40.0, accept_length=1.3))
    (finding,) = [f for f in diagnose(low) if f.id == "layout-mismatch"]
    assert finding.severity == "critical"
