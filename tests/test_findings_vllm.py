"""The layout findings and their fixes on a vLLM server (Evidence.engine "vllm").

Expected taps and ids are written by hand from issue 22's rules: vLLM id k = the state after k
blocks; V2 never reads eagle_config.eagle_aux_hidden_state_layer_ids (defaults 2, N//2, N-3);
V1 reads it as stored; both read the top-level key first; SGLang's Llama id i feeds Tap(i + 1).
"""

from __future__ import annotations

import json

from eagle3dash.engines.serving import ServingEngine
from eagle3dash.findings import Evidence, Finding, diagnose
from eagle3dash.layout import Tap
from eagle3dash.prediction import predict_layouts
from tests.findingskit import GOOD, POOR, Eval, Server, report
from tests.specs import SPECFORGE_GPT_OSS, tiny_spec

N = 24
# SpecForge's gpt-oss-20B config: nested [1, 11, 21]; trained through SGLang: taps 2, 12, 22.
NESTED = SPECFORGE_GPT_OSS
TRAINED = (Tap(2), Tap(12), Tap(22))


def evidence(
    spec, runner: str, engine: str = "vllm", version: str = "0.33.0", **measured
) -> Evidence:
    serving = ServingEngine(engine, version, runner if engine == "vllm" else None)
    layouts = predict_layouts(spec, N, training_override=TRAINED, engine=serving)
    return Evidence(
        **measured,
        report=report(spec),
        num_target_layers=N,
        arch="llama",
        server=Server(version=version, model_path="openai/gpt-oss-20b"),
        layouts=layouts,
        engine=engine,
        vllm_runner=runner if engine == "vllm" else None,
    )


def by_id(found: list[Finding]) -> dict[str, Finding]:
    return {f.id: f for f in found}


def test_v2_ignores_nested_ids_is_critical_with_the_top_level_fix() -> None:
    """V2 feeds its defaults 2, 12, 21 where training fed 2, 12, 22: critical, first, and the
    fix is top-level [2, 12, 22] plus the dual-key config (nested [1, 11, 21])."""
    found = diagnose(evidence(NESTED, "v2"))
    first = found[0]
    assert first.id == "vllm-ids-not-read" and first.severity == "critical"
    assert "V2 runner" in first.title
    assert "after 2, 12 and 21 blocks" in first.title
    assert first.data["defaults"] == [2, 12, 21]
    assert first.data["top_level_ids"] == [2, 12, 22]
    assert '"eagle_aux_hidden_state_layer_ids": [2, 12, 22]' in first.fix
    assert first.data["dual_key"] == {
        "eagle_config": {"eagle_aux_hidden_state_layer_ids": [1, 11, 21]},
        "eagle_aux_hidden_state_layer_ids": [2, 12, 22],
    }
    mismatch = by_id(found)["layout-mismatch"]
    assert "Serving on vLLM 0.33.0 (V2 runner)" in mismatch.evidence
    # the SGLang-only rule stays quiet on vLLM: top-level ids are what vLLM reads
    assert "aux-ids-not-read" not in by_id(found)


def test_v2_ignoring_the_ids_is_graded_by_what_the_defaults_cost() -> None:
    """The same config on V2, with both sides evaluated: the severity is the measured cost, not
    the rules' prediction. At the server's 3 steps GOOD simulates 1 + 0.8 + 0.6 + 0.45 = 2.85
    tokens per round, POOR 1 + 0.05 + 0.01 + 0 = 1.06: 1.79 lost, material (critical); the
    same draft equally good on the defaults' states (identical per-sequence accept lengths, no
    noise): 0 lost, info."""
    costly = by_id(diagnose(evidence(NESTED, "v2", training_eval=GOOD, serving_eval=POOR)))
    f = costly["vllm-ids-not-read"]
    assert f.severity == "critical"
    assert f.data["impact"].startswith("cost simulated, training side minus serving side: 1.79")
    same = Eval(
        acceptance=GOOD.acceptance,
        accuracy=GOOD.accuracy,
        accept_length_per_sequence=[3.0, 3.5, 3.25],
    )
    free = by_id(diagnose(evidence(NESTED, "v2", training_eval=same, serving_eval=same)))
    f = free["vllm-ids-not-read"]
    assert f.severity == "info", f.to_dict()
    assert "0 tokens per round" in f.data["impact"]
    assert "critical" not in {g.severity for g in free.values()}


def test_v1_reads_nested_ids_one_block_early() -> None:
    """V1 feeds 1, 11, 21: an off-by-one layout mismatch fixed by top-level [2, 12, 22]."""
    found = by_id(diagnose(evidence(NESTED, "v1")))
    assert "vllm-ids-not-read" not in found
    f = found["layout-mismatch"]
    assert f.data["kind"] == "off-by-one"
    assert "one block earlier" in f.title
    assert f.data["top_level_ids"] == [2, 12, 22]
    assert f.data["vllm_runner"] == "v1"


def test_speculators_top_level_ids_are_clean_on_both_runners() -> None:
    spec = tiny_spec(
        format="speculators",
        aux_layer_ids=(2, 12, 22),
        aux_ids_location="top-level",
        norm_before_residual_key=False,
    )
    for runner in ("v1", "v2"):
        found = by_id(diagnose(evidence(spec, runner)))
        assert "layout-mismatch" not in found and "vllm-ids-not-read" not in found


def test_dual_key_config_is_clean_on_both_engines() -> None:
    spec = tiny_spec(
        aux_layer_ids=(1, 11, 21), aux_ids_location="eagle_config", dual_top_level_ids=(2, 12, 22)
    )
    for found in (
        diagnose(evidence(spec, "v2")),
        diagnose(evidence(spec, "v1")),
        diagnose(evidence(spec, "", engine="sglang", version="0.5.23")),
    ):
        assert not {"layout-mismatch", "vllm-ids-not-read", "aux-ids-not-read"} & set(by_id(found))


def test_sglang_fix_no_longer_says_a_wrong_top_level_key_is_safe_for_vllm() -> None:
    """SpecForge-style ids [1, 11, 21] stored top-level (a converted draft): SGLang feeds its
    defaults; training fed 2, 12, 22; vLLM would read the top-level ids as 1, 11, 21. The SGLang
    fix must not call that key safe, and offers the dual-key config."""
    spec = tiny_spec(aux_layer_ids=(1, 11, 21), aux_ids_location="top-level")
    e = evidence(spec, "", engine="sglang", version="0.5.23")
    f = by_id(diagnose(e))["aux-ids-not-read"]
    assert "can stay" not in f.fix
    assert "Do not count on the top-level key [1, 11, 21] for vLLM" in f.fix
    assert '"eagle_aux_hidden_state_layer_ids": [2, 12, 22]' in f.fix
    assert '"eagle_config": {"eagle_aux_hidden_state_layer_ids": [1, 11, 21]}' in f.fix


def test_sglang_fix_keeps_a_right_top_level_key() -> None:
    """Top-level [2, 12, 22] (vLLM numbering) trained as 2, 12, 22: the key can stay."""
    spec = tiny_spec(aux_layer_ids=(2, 12, 22), aux_ids_location="top-level", format="speculators")
    e = evidence(spec, "", engine="sglang", version="0.5.23")
    f = by_id(diagnose(e))["aux-ids-not-read"]
    assert "can stay" in f.fix and "training taps too" in f.fix


def test_speculators_without_norm_before_residual_warns_on_vllm_only() -> None:
    spec = tiny_spec(format="speculators", aux_layer_ids=(2, 12, 22), aux_ids_location="top-level")
    assert by_id(diagnose(evidence(spec, "v2")))["norm-before-residual"].severity == "warning"
    sglang = by_id(diagnose(evidence(spec, "", engine="sglang", version="0.5.23")))
    assert "norm-before-residual" not in sglang


def test_the_fix_block_is_the_whole_dual_key_config() -> None:
    from eagle3dash.ui.words import fix_block

    block = fix_block(diagnose(evidence(NESTED, "v2"))[0])
    assert block is not None and "SGLang and vLLM" in block.where
    assert json.loads(block.code) == {
        "eagle_config": {"eagle_aux_hidden_state_layer_ids": [1, 11, 21]},
        "eagle_aux_hidden_state_layer_ids": [2, 12, 22],
    }
    assert block.note is None  # no -1 among the ids


def test_evidence_reads_a_vllm_version_and_runner() -> None:
    """'0.33.0' is a vLLM release (not an SGLang one too old to know); no SGLang tuple."""
    e = Evidence(server=Server(version="0.33.0"), engine="vllm", vllm_runner="v1")
    assert e.version() == "0.33.0" and e.version_tuple() is None
    assert e.engine_label() == "vLLM 0.33.0 (V1 runner)"
    assert Evidence(server=Server(version="nope")).engine_label() == "SGLang (version unknown)"
    assert Evidence(server=Server(version="nope"), engine="vllm").engine_label() == (
        "vLLM (version unknown, V2 runner)"
    )


def test_sglang_fix_of_a_dual_key_config_rewrites_both_keys() -> None:
    """Dual-key nested [1, 11, 21] / top-level [2, 12, 22], but training fed 3, 13, 23 (declared):
    on SGLang 0.5.23 the nested fix is [2, 12, 22], and the top-level key must become
    [3, 13, 23] for vLLM, or the two engines feed different taps."""
    spec = tiny_spec(
        aux_layer_ids=(1, 11, 21), aux_ids_location="eagle_config", dual_top_level_ids=(2, 12, 22)
    )
    serving = ServingEngine("sglang", "0.5.23")
    trained = (Tap(3), Tap(13), Tap(23))
    e = Evidence(
        report=report(spec),
        num_target_layers=N,
        server=Server(version="0.5.23"),
        layouts=predict_layouts(spec, N, training_override=trained, engine=serving),
    )
    f = by_id(diagnose(e))["layout-mismatch"]
    assert f.data["config_ids"] == [2, 12, 22]
    assert "Do not count on the top-level key [2, 12, 22] for vLLM" in f.fix
    assert '"eagle_aux_hidden_state_layer_ids": [3, 13, 23]' in f.fix
