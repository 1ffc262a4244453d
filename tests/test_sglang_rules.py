"""SGLang's architecture table and the families whose capture differs from Llama's, as read in the
0.5.23 wheel (models/*.py set_eagle3_layers_to_capture; attention_backend_setup.py refuses EAGLE3
for a model without it) and the earlier wheels named in sglang_rules.py."""

from __future__ import annotations

import pytest

from eagle3dash.engines.sglang.rules import (
    EAGLE3_CAPTURE_ARCHS,
    NO_EAGLE3_CAPTURE_ARCHS,
    capture_layout,
    config_ids_for,
    default_capture,
    find_fix,
    lookup_arch,
    serving_layout,
)
from eagle3dash.layout import Tap
from tests.specs import tiny_spec


def taps(*depths: int) -> tuple[Tap, ...]:
    return tuple(Tap(d) for d in depths)


def nested(*ids: int):
    return tiny_spec(aux_layer_ids=tuple(ids), aux_ids_location="eagle_config")


NO_IDS = tiny_spec(aux_layer_ids=None, aux_ids_location="missing")


# --- the table ---------------------------------------------------------------------------------


def test_the_table_is_the_0_5_23_wheel() -> None:
    # 29 files define the method; qwen3_5.py only on the inner model qwen3_5_text.py calls.
    assert len(EAGLE3_CAPTURE_ARCHS) == 28
    assert sum(len(archs) for archs in EAGLE3_CAPTURE_ARCHS.values()) == 71
    assert len(NO_EAGLE3_CAPTURE_ARCHS) == 219
    every = [a for archs in EAGLE3_CAPTURE_ARCHS.values() for a in archs]
    assert not set(every) & NO_EAGLE3_CAPTURE_ARCHS


@pytest.mark.parametrize(
    "name, arch, family, model_file",
    [
        ("LlamaForCausalLM", "LlamaForCausalLM", "llama", "llama.py"),
        ("MistralForCausalLM", "MistralForCausalLM", "llama", "llama.py"),  # inherits llama.py's
        ("Qwen3MoeForCausalLM", "Qwen3MoeForCausalLM", "llama", "qwen3_moe.py"),
        ("DeepseekV3ForCausalLM", "DeepseekV3ForCausalLM", "deepseek", "deepseek_v2.py"),
        ("deepseekv3forcausallm", "DeepseekV3ForCausalLM", "deepseek", "deepseek_v2.py"),
        ("MistralLarge3ForCausalLM", "MistralLarge3ForCausalLM", "deepseek", "deepseek_v2.py"),
        ("GlmMoeDsaForCausalLM", "GlmMoeDsaForCausalLM", "deepseek", "deepseek_v2.py"),
        ("KimiK25ForConditionalGeneration", "KimiK25ForConditionalGeneration", "deepseek",
         "kimi_k25.py"),
        ("Gemma3ForCausalLM", "Gemma3ForCausalLM", "gemma", "gemma3_causal.py"),
        ("Gemma4ForConditionalGeneration", "Gemma4ForConditionalGeneration", "gemma",
         "gemma4_mm.py"),
        ("MiniMaxM3SparseForCausalLM", "MiniMaxM3SparseForCausalLM", "minimax-m3", "minimax_m3.py"),
        ("MiniMaxM3SparseForConditionalGeneration", "MiniMaxM3SparseForConditionalGeneration",
         "minimax-m3-vl", "minimax_m3_vl.py"),
        ("KimiK3ForConditionalGeneration", "KimiK3ForConditionalGeneration", "none", None),
        ("DeepseekV4ForCausalLM", "DeepseekV4ForCausalLM", "none", None),
        ("KimiLinearForCausalLM", "KimiLinearForCausalLM", "none", None),
        ("KimiVLForConditionalGeneration", "KimiVLForConditionalGeneration", "none", None),
        ("MixtralForCausalLM", "MixtralForCausalLM", "none", None),
        ("kimi", "kimi", "deepseek", None),  # the short name for Kimi-K2 / K2.5
        ("gpt-oss", "gpt-oss", "gpt-oss", None),
    ],
)  # fmt: skip
def test_lookup_arch(name: str, arch: str, family: str, model_file: str | None) -> None:
    found = lookup_arch(name)
    assert (found.name, found.family, found.model_file, found.known) == (
        arch,
        family,
        model_file,
        True,
    )
    assert found.eagle3 is (family != "none")


@pytest.mark.parametrize(
    "arch",
    [
        "KimiK3ForConditionalGeneration",
        "KimiK3LinearForCausalLM",
        "DeepseekV4ForCausalLM",
        "KimiLinearForCausalLM",
        "KimiVLForConditionalGeneration",
    ],
)
def test_architectures_without_capture_are_unsupported_not_predicted(arch: str) -> None:
    r = serving_layout(nested(1, 29, 57), 61, "0.5.23", arch)
    assert r.layout == ()
    assert r.error == f"SGLang 0.5.23 has no EAGLE-3 capture for {arch}"
    assert r.rule == (
        f"SGLang 0.5.23: {arch} has no set_eagle3_layers_to_capture (its models/ file, read in "
        "0.5.23), so SGLang refuses EAGLE3 at start (attention_backend_setup.py)."
    )
    assert r.decode_layout is None
    fix = find_fix(taps(2, 30, 58), NO_IDS, 61, (0, 5, 23), arch)
    assert fix.ids is None and fix.release is None and fix.releases == []
    assert fix.why_not == f"SGLang 0.5.23 has no EAGLE-3 capture for {arch}"


def test_an_unknown_name_follows_llama_with_a_note() -> None:
    r = serving_layout(nested(1, 15, 28), 32, "0.5.23", "MyOwnForCausalLM")
    assert r.layout == taps(2, 16, 29) and r.error is None
    assert r.notes == [
        "'MyOwnForCausalLM' is not an architecture of SGLang 0.5.23 nor a short name (llama, "
        "deepseek, gpt-oss, gemma, minimax-m3, minimax-m3-vl, kimi), so the Llama rule is "
        "assumed; give the target's config.json architectures[0]."
    ]


@pytest.mark.parametrize("arch", ["llama", "kimi", "LlamaForCausalLM", "DeepseekV3ForCausalLM"])
def test_known_names_carry_no_note(arch: str) -> None:
    assert serving_layout(nested(1, 15, 28), 61, "0.5.23", arch).notes == []


def test_mistral_large_3_follows_the_deepseek_first_id_rule() -> None:
    r = serving_layout(nested(2, 30, 58), 61, "0.5.23", "MistralLarge3ForCausalLM")
    assert r.layout == taps(2, 30, 58)
    assert "first id is 2, not 1" in r.rule


# --- the last block: Gemma3/Gemma4 (0.5.12+), MiniMax-M3 (0.5.23) ------------------------------


@pytest.mark.parametrize("arch", ["Gemma3ForCausalLM", "Gemma4ForCausalLM", "gemma"])
def test_gemma_captures_the_last_block(arch: str) -> None:
    r = serving_layout(nested(1, 12, 25), 26, "0.5.23", arch)
    assert r.layout == taps(2, 13, 26) and r.error is None
    assert config_ids_for(taps(2, 13, 26), NO_IDS, 26, "0.5.23", arch) == [1, 12, 25]


def test_llama_still_never_captures_the_last_block() -> None:
    r = serving_layout(nested(1, 12, 25), 26, "0.5.23", "LlamaForCausalLM")
    # two states reach an fc of three: the first request fails too (models/llama_eagle3.py)
    assert r.error == (
        "index 26 is the last block's output, which SGLang 0.5.23 never captures for "
        "llama-family targets; SGLang captures 2 states but the draft's fc takes 3: shape "
        "mismatch at fc"
    )
    assert config_ids_for(taps(2, 13, 26), NO_IDS, 26, "0.5.23", "LlamaForCausalLM") is None


def test_gemma_has_no_eagle3_before_0_5_12() -> None:
    r = serving_layout(nested(1, 12, 22), 26, "0.5.11", "Gemma3ForCausalLM")
    assert r.error == "SGLang 0.5.11 has no EAGLE-3 capture for Gemma3ForCausalLM (from 0.5.12)"
    fix = find_fix(taps(2, 13, 26), NO_IDS, 26, (0, 5, 11), "Gemma3ForCausalLM", cuda_graph=False)
    assert fix.why_not == "SGLang 0.5.11 has no EAGLE-3 capture for Gemma3ForCausalLM (from 0.5.12)"
    # The newest release that feeds these taps, and every release read that does.
    assert (fix.release, fix.release_ids) == ("0.5.23", [1, 12, 25])
    assert fix.releases[0] == "0.5.12" and fix.releases[-1] == "0.5.23"


def test_gemma_captures_the_embedding_from_its_first_eagle3_release() -> None:
    r = serving_layout(nested(-1, 12, 22), 26, "0.5.12", "Gemma3ForCausalLM", cuda_graph=False)
    assert r.layout == taps(0, 13, 23) and r.error is None


def test_minimax_m3_captures_the_last_block_from_0_5_23() -> None:
    arch = "MiniMaxM3SparseForCausalLM"
    assert serving_layout(nested(1, 30, 61), 62, "0.5.23", arch).layout == taps(2, 31, 62)
    old = serving_layout(nested(1, 30, 61), 62, "0.5.22", arch)
    assert old.error == (
        "index 62 is the last block's output, which SGLang 0.5.22 never captures for "
        "minimax-m3-family targets; SGLang captures 2 states but the draft's fc takes 3: shape "
        "mismatch at fc"
    )
    fix = find_fix(taps(2, 31, 62), NO_IDS, 62, (0, 5, 22), arch)
    assert fix.ids is None
    assert fix.why_not == (
        "SGLang 0.5.22 does not capture the last block's output for minimax-m3-family targets "
        "(from 0.5.23)"
    )
    assert (fix.release, fix.release_ids, fix.releases) == ("0.5.23", [1, 30, 61], ["0.5.23"])


# --- MiniMax-M3-VL: its defaults + 1 (minimax_m3_vl.py 0.5.20+) ------------------------------


def test_minimax_m3_vl_defaults_are_plus_one() -> None:
    arch = "MiniMaxM3SparseForConditionalGeneration"
    r = serving_layout(NO_IDS, 62, "0.5.23", arch)
    assert r.layout == taps(3, 32, 60) and r.error is None
    assert r.rule == (
        "SGLang 0.5.23: no eagle_config ids, so the target captures its defaults before layers "
        "[3, N//2+1, N-2] (minimax_m3_vl.py 0.5.20+: its defaults + 1)."
    )
    assert default_capture(62, arch) == taps(3, 32, 60)
    assert default_capture(62, "MiniMaxM3SparseForCausalLM") == taps(2, 31, 59)
    assert serving_layout(nested(1, 30, 58), 62, "0.5.23", arch).layout == taps(2, 31, 59)


def test_minimax_m3_vl_has_no_eagle3_before_0_5_20() -> None:
    r = capture_layout(62, None, "0.5.16", "MiniMaxM3SparseForConditionalGeneration")
    assert r.error == (
        "SGLang 0.5.16 has no EAGLE-3 capture for MiniMaxM3SparseForConditionalGeneration "
        "(from 0.5.20)"
    )


# --- the one fix search: ids for this server, else the newest release, else none --------------
# Expected ids are hand-derived from the rules cited in sglang_rules.py: Llama adds 1 to every id
# (models/llama.py); DeepSeek adds 1 up to 0.5.12 and, from 0.5.13 (PR #25454), only when the
# first id is 1; gpt-oss captures the last block's output (index N) from 0.5.17 (PR #32334: in the
# 0.5.17 wheel's gpt_oss.py, not in 0.5.16's).


def test_fix_search_llama_ids_on_this_server() -> None:
    fix = find_fix(taps(2, 16, 29), NO_IDS, 32, (0, 5, 23), "LlamaForCausalLM")
    assert (fix.ids, fix.ids_from, fix.departs, fix.release) == ([1, 15, 28], "rules", False, None)


def test_fix_search_deepseek_state_after_block_1_leads_only_before_0_5_13() -> None:
    # Tap(1) first: id 0 under +1. From 0.5.13 a first id 0 is kept (embedding), 1 becomes 2.
    arch = "DeepseekV3ForCausalLM"
    on_12 = find_fix(taps(1, 30, 58), NO_IDS, 61, (0, 5, 12), arch)
    assert on_12.ids == [0, 29, 57]
    on_13 = find_fix(taps(1, 30, 58), NO_IDS, 61, (0, 5, 13), arch)
    assert on_13.ids is None
    # 0.5.10 and before: CUDA-graph decode feeds the defaults; 0.5.11 and 0.5.12 feed them.
    assert (on_13.release, on_13.release_ids, on_13.releases) == (
        "0.5.12",
        [0, 29, 57],
        ["0.5.11", "0.5.12"],
    )


def test_fix_search_gpt_oss_last_block_from_0_5_17() -> None:
    arch = "GptOssForCausalLM"
    on_16 = find_fix(taps(2, 12, 24), NO_IDS, 24, (0, 5, 16), arch)
    assert on_16.ids is None
    assert on_16.why_not == (
        "SGLang 0.5.16 does not capture the last block's output for gpt-oss-family targets "
        "(from 0.5.17)"
    )
    assert (on_16.release, on_16.release_ids) == ("0.5.23", [1, 11, 23])
    assert on_16.releases == ["0.5.20", "0.5.21", "0.5.22", "0.5.23"]  # the releases listed
    assert find_fix(taps(2, 12, 24), NO_IDS, 24, (0, 5, 17), arch).ids == [1, 11, 23]


def test_fix_search_no_release_feeds_a_post_norm_tap() -> None:
    target = (Tap(2), Tap(16), Tap(32, post_norm=True))
    fix = find_fix(target, NO_IDS, 32, (0, 5, 23), "LlamaForCausalLM")
    assert (fix.ids, fix.release, fix.releases) == (None, None, [])


def test_fix_search_from_an_observed_custom_mapping() -> None:
    # The server was seen to feed ids [1, 3, 5] the taps after 3, 5 and 7 blocks: each id two
    # blocks deeper (stock Llama: one). To get Tap(2), Tap(4), Tap(6): ids [0, 2, 4].
    observed = ((1, Tap(3)), (3, Tap(5)), (5, Tap(7)))
    fix = find_fix(taps(2, 4, 6), NO_IDS, 8, (0, 5, 23), "LlamaForCausalLM", observed=observed)
    assert (fix.ids, fix.ids_from, fix.departs) == ([0, 2, 4], "observed", True)
    # Stock rules (+1) would say [1, 3, 5]: on a released build only.
    assert (fix.release, fix.release_ids) == ("0.5.23", [1, 3, 5])


def test_fix_search_observed_mapping_that_does_not_reach_the_taps() -> None:
    # No constant offset (the last slot is final-normed) and Tap(3) never seen: stock ids hold
    # only on a released build.
    observed = ((1, Tap(2)), (3, Tap(4)), (5, Tap(8, post_norm=True)))
    fix = find_fix(taps(2, 3, 4), NO_IDS, 8, (0, 5, 23), "LlamaForCausalLM", observed=observed)
    assert (fix.ids, fix.departs) == (None, True)
    assert (fix.release, fix.release_ids) == ("0.5.23", [1, 2, 3])
