"""engine_rules: one engine seam over SGLang's and vLLM's rules, and the dual-key fix.

Expected taps and ids are hand-written from issue 22's rules (SGLang Llama id i -> Tap(i + 1);
vLLM id k -> Tap(k); V2 ignores the nested ids and feeds 2, N//2, N-3).
"""

from __future__ import annotations

import json

import pytest

from eagle3dash.checkpoint import inspect, save
from eagle3dash.engines import rules as engine_rules
from eagle3dash.engines.serving import ServingEngine
from eagle3dash.engines.sglang import rules as sglang_rules
from eagle3dash.engines.vllm import rules as vllm_rules
from eagle3dash.layout import Tap
from eagle3dash.testing.tensors import random_tensors
from tests.specs import SPECFORGE_GPT_OSS

NESTED = SPECFORGE_GPT_OSS  # nested [1, 11, 21]


def depths(layout) -> list[int]:
    return [t.depth for t in layout]


@pytest.mark.parametrize(
    "engine, expected",
    [
        (ServingEngine("sglang", "0.5.23"), [2, 12, 22]),
        (ServingEngine("vllm", "0.33.0", "v2"), [2, 12, 21]),
        (ServingEngine("vllm", "0.33.0"), [2, 12, 21]),  # V2 is vLLM's default runner
        (ServingEngine("vllm", "0.33.0", "v1"), [1, 11, 21]),
    ],
)
def test_serving_layout_by_engine(engine, expected):
    assert depths(engine_rules.serving_layout(engine, NESTED, 24, "llama").layout) == expected


def test_labels_and_refusals():
    assert ServingEngine("vllm", "0.33.0", "v1").label() == "vLLM 0.33.0 (V1 runner)"
    assert ServingEngine("sglang").label() == "SGLang 0.5.23"
    with pytest.raises(ValueError, match="tensorrt"):
        ServingEngine("tensorrt")
    with pytest.raises(ValueError, match="v1, v2"):
        ServingEngine("vllm", runner="v9")


def test_dual_key_fix_for_the_gpt_oss_taps():
    """Taps 2, 12, 22 on N=24: nested [1, 11, 21] (SGLang), top-level [2, 12, 22] (vLLM)."""
    fix = engine_rules.dual_key_fix((Tap(2), Tap(12), Tap(22)), NESTED, 24, "llama")
    assert fix.nested_ids == [1, 11, 21]
    assert fix.top_level_ids == [2, 12, 22]
    assert fix.config() == {
        "eagle_config": {"eagle_aux_hidden_state_layer_ids": [1, 11, 21]},
        "eagle_aux_hidden_state_layer_ids": [2, 12, 22],
    }


def test_dual_key_fix_embedding_tap():
    """The embedding: SGLang 0.5.23 Llama takes id -1 for Tap(0); vLLM takes id 0."""
    fix = engine_rules.dual_key_fix((Tap(0), Tap(12), Tap(22)), NESTED, 24, "llama")
    assert fix.nested_ids == [-1, 11, 21]
    assert fix.top_level_ids == [0, 12, 22]


def test_dual_key_fix_without_a_vllm_side():
    """A post-norm tap: no ids on either engine; the config holds nothing."""
    fix = engine_rules.dual_key_fix((Tap(2), Tap(12), Tap(24, True)), NESTED, 24, "llama")
    assert fix.nested_ids is None and fix.top_level_ids is None and not fix.complete
    assert fix.config() == {}
    assert fix.vllm_why_not is not None and "final-normed" in fix.vllm_why_not


def test_dual_key_config_round_trips_through_a_checkpoint(tmp_path):
    """The fix written by checkpoint.save and read back: both keys on disk, and SGLang 0.5.23,
    vLLM V1 and vLLM V2 all feed 2, 12, 22."""
    fix = engine_rules.dual_key_fix((Tap(2), Tap(12), Tap(22)), NESTED, 24, "llama")
    fixed = engine_rules.with_dual_keys(NESTED, fix)
    out = save(fixed, random_tensors(fixed, seed=3), tmp_path / "fixed", "specforge")
    cfg = json.loads((out / "config.json").read_text())
    assert cfg["eagle_config"]["eagle_aux_hidden_state_layer_ids"] == [1, 11, 21]
    assert cfg["eagle_aux_hidden_state_layer_ids"] == [2, 12, 22]
    report = inspect(out)
    assert report.problems == []
    read = report.spec
    assert depths(sglang_rules.serving_layout(read, 24, "0.5.23").layout) == [2, 12, 22]
    for runner in ("v1", "v2"):
        served = vllm_rules.serving_layout(read, 24, "0.33.0", runner=runner)
        assert depths(served.layout) == [2, 12, 22]
    assert depths(vllm_rules.serving_layout(read, 24, "0.34.0").layout) == [2, 12, 22]


def test_cli_layout_on_vllm_runners(tmp_path):
    """`layout --engine vllm`: V2 feeds 2, 12, 21 (defaults-used), V1 feeds 1, 11, 21."""
    from tests.specs import run_cli

    draft = save(NESTED, random_tensors(NESTED, seed=4), tmp_path / "d", "specforge")
    base = ("layout", "--draft", str(draft), "--target-layers", "24", "--engine", "vllm")
    v2 = run_cli(*base, "--json")
    assert v2.returncode == 0, v2.stderr
    d = json.loads(v2.stdout)
    assert [t["depth"] for t in d["serving"]] == [2, 12, 21]
    assert d["diff"]["kind"] == "defaults-used"
    v1 = run_cli(*base, "--vllm-version", "0.33.0", "--vllm-runner", "v1", "--json")
    assert [t["depth"] for t in json.loads(v1.stdout)["serving"]] == [1, 11, 21]
    bad = run_cli(*base, "--vllm-runner", "v3")
    assert bad.returncode != 0 and "v3" in bad.stderr
    # the default release is the newest read, 0.34.0, which has no V1 runner: one line
    gone = run_cli(*base, "--vllm-runner", "v1")
    assert gone.returncode == 1 and "Traceback" not in gone.stderr
    assert "vLLM 0.34.0 has no V1 model runner" in gone.stderr
