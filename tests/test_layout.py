"""Layout conventions, SGLang capture rules by version and architecture, and layout diffs.

The serving rules are SGLang's `set_eagle3_layers_to_capture` (0.5.23 `python/sglang/srt/models/
llama.py`, `models/deepseek_v2.py`, `models/gpt_oss.py`), as sglang_rules.py cites them by version.
"""

from __future__ import annotations

import pytest

from eagle3dash.engines.facts import FALLBACK_ARCH, target_arch
from eagle3dash.engines.sglang.rules import (
    arch_family,
    eagle_config_json,
    parse_version,
    serving_layout,
)
from eagle3dash.layout import (
    Tap,
    convert,
    default_aux_indices,
    default_layout,
    default_output_of_ids,
    describe_tap,
    diff,
    format_layout,
    parse_layout,
)
from eagle3dash.prediction import predict_layouts
from eagle3dash.spec import DraftSpec
from eagle3dash.trainers import training_layout
from tests.specs import tiny_spec


def spec(ids=None, where=None, fmt="specforge", **kw) -> DraftSpec:
    """A small draft whose only interesting fields are the aux ids and where they were stored."""
    if where is None:
        where = "missing" if ids is None else "eagle_config"
    aux = tuple(ids) if ids is not None else None
    return tiny_spec(format=fmt, aux_layer_ids=aux, aux_ids_location=where, **kw)


def depths(layout) -> list[int]:
    return [t.depth for t in layout]


# --- parsing helpers kept from the skeleton -------------------------------------------------


def test_parse_and_format_layout_round_trip() -> None:
    assert parse_layout("emb, 3, 61n") == (Tap(0), Tap(3), Tap(61, True))
    assert format_layout((Tap(0), Tap(3), Tap(61, True))) == "0,3,61n"
    with pytest.raises(ValueError):
        parse_layout("x")


@pytest.mark.parametrize(
    "text, expected",
    [
        ("0.5.23", (0, 5, 23)),
        ("0.5.15.post1", (0, 5, 15)),
        ("v0.5.4", (0, 5, 4)),
        ("0.5.24rc1", (0, 5, 24)),
    ],
)
def test_parse_version(text: str, expected: tuple) -> None:
    assert parse_version(text) == expected


@pytest.mark.parametrize(
    "text, needle", [("latest", "unparseable"), ("0.5", "unparseable"), ("0.4.9", "unknown")]
)
def test_parse_version_rejects_clearly(text: str, needle: str) -> None:
    with pytest.raises(ValueError, match=needle):
        parse_version(text)


@pytest.mark.parametrize(
    "name, family",
    [
        ("LlamaForCausalLM", "llama"),
        ("Qwen3MoeForCausalLM", "llama"),
        ("Glm4MoeForCausalLM", "llama"),
        ("qwen3", "llama"),
        ("llama", "llama"),
        ("DeepseekV3ForCausalLM", "deepseek"),
        ("DeepseekV2ForCausalLM", "deepseek"),
        ("KimiK25ForConditionalGeneration", "deepseek"),
        ("Glm4MoeLiteForCausalLM", "deepseek"),
        ("kimi", "deepseek"),
        ("deepseek", "deepseek"),
        ("GptOssForCausalLM", "gpt-oss"),
        ("gpt-oss", "gpt-oss"),
    ],
)
def test_arch_family(name: str, family: str) -> None:
    assert arch_family(name) == family


# --- conventions -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "convention, ids, expected",
    [
        ("hf-index", [0, 16, 32], (Tap(0), Tap(16), Tap(32, True))),  # c == N is post-norm
        ("output-of", [-1, 15, 28], (Tap(0), Tap(16), Tap(29))),  # id -1 = embedding
        ("input-of", [0, 16, 32], (Tap(0), Tap(16), Tap(32))),  # id N = last block, pre-norm
    ],
)
def test_conventions(convention: str, ids: list[int], expected: tuple) -> None:
    assert convert(ids, convention, 32) == expected


def test_default_layout() -> None:
    assert default_layout(32) == (Tap(2), Tap(16), Tap(29))
    assert default_layout(61) == (Tap(2), Tap(30), Tap(58))


def test_default_capture_indices_are_written_once() -> None:
    # [2, N//2, N-3] by hand; N//2 rounds down on an odd depth (61 -> 30, not 31)
    assert default_aux_indices(32) == (2, 16, 29)
    assert default_aux_indices(61) == (2, 30, 58)
    # SpecForge writes the same taps as output-of ids [1, N//2-1, N-4]
    assert default_output_of_ids(32) == (1, 15, 28)
    assert default_output_of_ids(61) == (1, 29, 57)
    # SpecForge's own default (no eagle_config ids) is the same taps as every framework's
    assert training_layout(spec(), 32, "specforge-hf").layout == (Tap(2), Tap(16), Tap(29))


def test_architecture_fallback_is_given_then_served_then_llama() -> None:
    assert FALLBACK_ARCH == "llama"
    assert target_arch(None) == "llama"
    assert target_arch("kimi", ["LlamaForCausalLM"], "llama") == "kimi"
    assert target_arch(None, ["DeepseekV3ForCausalLM"], "deepseek_v3") == "DeepseekV3ForCausalLM"
    # a server without architectures but with a model_type (capture/from_sglang.py skipped it)
    assert target_arch(None, [], "deepseek_v3") == "deepseek_v3"
    assert target_arch("", None, None) == "llama"


def test_eagle_config_fix_is_one_json_entry() -> None:
    entry = eagle_config_json([1, 15, 28])
    assert entry == '"eagle_config": {"eagle_aux_hidden_state_layer_ids": [1, 15, 28]}'
    on = (
        '"eagle_config": {"eagle_aux_hidden_state_layer_ids": [-1, 0], '
        '"use_aux_hidden_state": true}'
    )
    assert eagle_config_json((-1, 0), aux_on=True) == on
    assert eagle_config_json(None) == '"eagle_config": {"eagle_aux_hidden_state_layer_ids": [...]}'


# --- serving: Kimi-K2 / DeepSeek-V3, L = 61 (SGLang models/deepseek_v2.py by version) ---------

# (config ids, ≤0.5.10 eager, ≤0.5.10 cuda-graph replay, 0.5.11–0.5.12, ≥0.5.13)
TABLE_7_2 = [
    (None, [2, 30, 58], [2, 30, 58], [2, 30, 58], [2, 30, 58]),
    ([1, 29, 57], [2, 30, 58], [2, 30, 58], [2, 30, 58], [2, 30, 58]),
    ([2, 30, 58], [3, 31, 59], [2, 30, 58], [3, 31, 59], [2, 30, 58]),
    ([2, 30, 57], [3, 31, 58], [2, 30, 58], [3, 31, 58], [2, 30, 57]),
]
CASES_7_2 = [
    case
    for ids, eager, replay, mid, new in TABLE_7_2
    for case in [
        (ids, "0.5.5", False, eager),
        (ids, "0.5.10", False, eager),
        (ids, "0.5.10", True, replay),
        (ids, "0.5.11", True, mid),
        (ids, "0.5.12", True, mid),
        (ids, "0.5.13", True, new),
        (ids, "0.5.23", True, new),
    ]
]


@pytest.mark.parametrize("ids, version, cuda_graph, expected", CASES_7_2)
def test_sglang_deepseek_table_7_2(ids, version: str, cuda_graph: bool, expected) -> None:
    r = serving_layout(spec(ids), 61, version, "DeepseekV3ForCausalLM", cuda_graph)
    assert r.error is None
    fed = r.decode_layout if cuda_graph and r.decode_layout is not None else r.layout
    assert depths(fed) == expected


def test_deepseek_before_0_5_5_has_no_eagle3() -> None:
    r = serving_layout(spec([1, 29, 57]), 61, "0.5.4.post1", "kimi")
    assert r.error and "0.5.5" in r.error and r.layout == ()


@pytest.mark.parametrize("version", ["0.5.4", "0.5.12", "0.5.13", "0.5.23"])
def test_sglang_llama_always_adds_one(version: str) -> None:
    r = serving_layout(spec([2, 16, 29]), 32, version, "LlamaForCausalLM", cuda_graph=False)
    assert depths(r.layout) == [3, 17, 30] and r.error is None and "+1" in r.rule


def test_sglang_defaults_when_ids_missing() -> None:
    r = serving_layout(spec(None), 32)
    assert r.layout == default_layout(32) and r.decode_layout is None and "defaults" in r.rule


def test_sglang_ignores_top_level_ids() -> None:
    r = serving_layout(spec([3, 10, 20], "top-level", "speculators"), 32)
    assert r.layout == default_layout(32)
    assert any("top-level" in n for n in r.notes)


@pytest.mark.parametrize(
    "version, error, first",
    [("0.5.21", "crashes", Tap(0)), ("0.5.22", None, Tap(0)), ("0.5.23", None, Tap(0))],
)
def test_llama_id_minus_one_is_embedding_from_0_5_22(version, error, first) -> None:
    r = serving_layout(spec([-1, 15, 28]), 32, version, "llama", cuda_graph=False)
    assert r.layout[0] == first and depths(r.layout) == [0, 16, 29]
    assert (error in r.error) if error else r.error is None


@pytest.mark.parametrize(
    "version, crashes", [("0.5.14", True), ("0.5.15.post1", True), ("0.5.16", False)]
)
def test_deepseek_index_zero(version: str, crashes: bool) -> None:
    # first id 0 != 1 -> verbatim on >= 0.5.13; index 0 is the embedding from 0.5.16
    r = serving_layout(spec([0, 30, 57]), 61, version, "kimi")
    assert depths(r.layout) == [0, 30, 57]
    assert bool(r.error) is crashes


@pytest.mark.parametrize(
    "version, expected, error",
    [
        ("0.5.16", [25, 31], "outside"),  # +1 -> [25, 31, 37]: 37 is past the 36 blocks
        # PR #32334, in the 0.5.17 wheel: max id == N -> verbatim, the boundary captured
        ("0.5.17", [24, 30, 36], None),
        ("0.5.20", [24, 30, 36], None),
        ("0.5.23", [24, 30, 36], None),
    ],
)
def test_gpt_oss_boundary_rule(version: str, expected: list[int], error) -> None:
    r = serving_layout(spec([24, 30, 36]), 36, version, "GptOssForCausalLM")
    assert depths(r.layout) == expected
    assert (error in r.error) if error else r.error is None


def test_gpt_oss_other_ids_still_get_plus_one() -> None:
    r = serving_layout(spec([1, 17, 33]), 36, "0.5.23", "gpt-oss")
    assert depths(r.layout) == [2, 18, 34]


@pytest.mark.parametrize("version, decode", [("0.5.10", [2, 16, 29]), ("0.5.11", None)])
def test_cuda_graph_default_layer_bug(version: str, decode) -> None:
    r = serving_layout(spec([2, 16, 28]), 32, version, "llama", cuda_graph=True)
    assert depths(r.layout) == [3, 17, 29]
    assert (depths(r.decode_layout) if r.decode_layout else None) == decode
    assert any("decode" in n for n in r.notes) is (decode is not None)


def test_cuda_graph_bug_needs_cuda_graphs() -> None:
    r = serving_layout(spec([2, 16, 28]), 32, "0.5.10", "llama", cuda_graph=False)
    assert r.decode_layout is None


def test_last_block_not_capturable() -> None:
    r = serving_layout(spec([1, 15, 31]), 32)  # output of layer 31 = Tap(32)
    assert "last block" in r.error and depths(r.layout) == [2, 16]


def test_non_ascending_ids_are_sorted_with_a_note() -> None:
    r = serving_layout(spec([15, 1, 28]), 32)
    assert depths(r.layout) == [2, 16, 29]
    assert any("ascending" in n for n in r.notes)


def test_capture_off() -> None:
    r = serving_layout(spec([1, 15, 28], use_aux_hidden_state=False), 32, "0.5.23")
    assert "capture off" in r.error and r.layout == ()
    old = serving_layout(spec([1, 15, 28], use_aux_hidden_state=False), 32, "0.5.6")
    assert old.error is None and any("ignored" in n for n in old.notes)


def test_newer_version_assumes_latest_rules() -> None:
    r = serving_layout(spec([1, 15, 28]), 32, "0.6.0")
    assert depths(r.layout) == [2, 16, 29] and any("newer" in n for n in r.notes)


def test_fc_width_mismatch_fails() -> None:
    """Three states (SGLang's defaults: top-level ids are not read) for an fc of four: the
    joined states do not fit fc, so the capture is an error, not a note."""
    r = serving_layout(spec([5, 9, 20, 28], "top-level", "speculators", num_aux=4), 32)
    assert len(r.layout) == 3
    assert r.error == "SGLang captures 3 states but the draft's fc takes 4: shape mismatch at fc"


# --- training --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "draft, trainer, expected",
    [
        (spec([1, 15, 28]), "specforge", [2, 16, 29]),  # output-of
        (spec([1, 15, 28]), "specforge-hf", [2, 16, 29]),
        (spec([1, 15, 28]), "specforge-sglang", [2, 16, 29]),
        (spec(None), "specforge", [2, 16, 29]),  # default [1, N//2-1, N-4]
        (spec([2, 16, 29], "top-level", "speculators"), "speculators", [2, 16, 29]),  # input-of
        (spec([2, 16, 29], "top-level", "speculators"), "vllm", [2, 16, 29]),
        (spec(None, fmt="speculators"), "speculators", [2, 16, 29]),
        (spec([5, 9, 20], fmt="eagle"), "eagle", [2, 16, 29]),  # SafeAILab ignores ids
        (spec([0, 16, 32]), "hf-index", [0, 16, 32]),
    ],
)
def test_trainer_conventions(draft: DraftSpec, trainer: str, expected: list[int]) -> None:
    r = training_layout(draft, 32, trainer)
    assert depths(r.layout) == expected and r.error is None


@pytest.mark.parametrize(
    "draft, expected",
    [
        (spec([1, 15, 28]), "specforge"),
        (spec([2, 16, 29], "top-level", "speculators"), "speculators"),
        (spec([1, 15, 28], fmt="export"), "SpecForge"),
        (spec(None, fmt="eagle"), "SafeAILab"),
    ],
)
def test_default_trainer_follows_format(draft: DraftSpec, expected: str) -> None:
    assert expected.lower() in training_layout(draft, 32).rule.lower()


def test_hf_index_last_entry_is_post_norm() -> None:
    r = training_layout(spec([2, 16, 32]), 32, "hf-index")
    assert r.layout[-1] == Tap(32, post_norm=True)


def test_specforge_reads_only_nested_ids() -> None:
    r = training_layout(spec([5, 9, 20], "top-level", "speculators"), 32, "specforge")
    assert depths(r.layout) == [2, 16, 29] and any("ignored" in n for n in r.notes)


def test_speculators_reads_only_top_level_ids() -> None:
    r = training_layout(spec([5, 9, 20]), 32, "speculators")
    assert r.layout == default_layout(32) and any("ignored" in n for n in r.notes)


def test_specforge_rejects_negative_or_not_three_ids() -> None:
    assert "3 non-negative" in training_layout(spec([-1, 15, 28]), 32).error
    assert "3 non-negative" in training_layout(spec([1, 8, 15, 28]), 32).error


def test_specforge_hf_keeps_list_order_with_a_note() -> None:
    r = training_layout(spec([15, 1, 28]), 32, "specforge-hf")
    assert depths(r.layout) == [16, 2, 29] and any("list order" in n for n in r.notes)


def test_specforge_sglang_follows_the_version_rule() -> None:
    # a DeepSeek draft with output-of ids not starting at 1, trained on 0.5.12 vs 0.5.13
    draft = spec([2, 30, 57])
    old = training_layout(draft, 61, "specforge-sglang", sglang_version="0.5.12", arch="kimi")
    new = training_layout(draft, 61, "specforge-sglang", sglang_version="0.5.13", arch="kimi")
    assert depths(old.layout) == [3, 31, 58] and depths(new.layout) == [2, 30, 57]
    assert new.rule.startswith("SpecForge >= 0.2 trained through SGLang")


def test_training_ids_out_of_range() -> None:
    r = training_layout(spec([1, 15, 32]), 32, "specforge")  # output of layer 32 does not exist
    assert "outside" in r.error and depths(r.layout) == [2, 16]


def test_training_override_and_unknown_trainer() -> None:
    given = (Tap(0), Tap(3), Tap(31))
    assert training_layout(spec([1, 2, 3]), 61, layout=given).layout == given
    with pytest.raises(ValueError, match="unknown trainer"):
        training_layout(spec([1, 2, 3]), 61, "axolotl")


# --- diff ------------------------------------------------------------------------------------


def test_seed_case_exactly() -> None:
    d = diff((Tap(0), Tap(3), Tap(31)), (Tap(3), Tap(31), Tap(59)))
    assert d.kind == "shifted-slot"
    assert d.embedding_only_in == "training"
    assert "shifted by one slot; embedding output only in training" in d.summary
    assert [s[3] for s in d.slots] == [False, False, False]


@pytest.mark.parametrize(
    "training, serving, default, kind, embedding_only_in",
    [
        ("2,16,29", "2,16,29", None, "identical", None),
        ("2,16,29", "3,17,30", None, "off-by-one", None),
        ("0,16,29", "1,17,30", None, "off-by-one", "training"),
        ("3,17,30", "2,16,29", None, "off-by-one", None),
        ("3,31,59", "0,3,31", None, "shifted-slot", "serving"),
        ("2,16,32n", "2,16,32", None, "post-norm", None),
        ("5,9,20", "2,16,29", "2,16,29", "defaults-used", None),
        ("5,9,20", "2,16,29", None, "other", None),
        ("2,9,16,29", "2,16,29", None, "different-width", None),
        ("0,9,20", "2,16,29", None, "other", "training"),
    ],
)
def test_diff_kinds(training, serving, default, kind, embedding_only_in) -> None:
    d = diff(
        parse_layout(training), parse_layout(serving), parse_layout(default) if default else None
    )
    assert d.kind == kind and d.embedding_only_in == embedding_only_in
    assert d.summary.endswith(".") and d.summary.count(".") == 1


def test_diff_to_dict_slots_in_the_one_tap_form() -> None:
    d = diff(parse_layout("2,16,32n"), parse_layout("2,16"))
    out = d.to_dict()
    assert out["kind"] == "different-width"
    assert out["slots"][2] == {
        "slot": 2,
        "training": {"depth": 32, "post_norm": True},
        "serving": None,
        "same": False,
    }
    assert Tap.from_dict(out["slots"][2]["training"]) == Tap(32, True)
    assert out["training"][2] == {"depth": 32, "post_norm": True}


@pytest.mark.parametrize(
    "tap, words",
    [
        (Tap(0), "embedding output"),
        (Tap(3), "after block 3"),
        (Tap(61), "last block's output"),
        (Tap(61, True), "after the final norm"),
        (Tap(62), "depth 62 (outside the target's 61 blocks)"),
    ],
)
def test_describe_tap(tap: Tap, words: str) -> None:
    assert describe_tap(tap, 61) == words


def test_a_tap_prints_as_plain_words_without_the_depth() -> None:
    assert [str(t) for t in (Tap(0), Tap(3), Tap(61), Tap(61, True))] == [
        "embedding output",
        "after block 3",
        "after block 61",
        "after the final norm",
    ]


# --- compare ---------------------------------------------------------------------------------


def test_compare_specforge_default_llama_is_identical() -> None:
    r = predict_layouts(spec([1, 15, 28]), 32)
    assert r.diff.kind == "identical" and r.decode_diff is None


def test_compare_top_level_ids_fall_back_to_defaults() -> None:
    r = predict_layouts(spec([3, 10, 20], "top-level", "speculators"), 32)
    assert depths(r.training.layout) == [3, 10, 20]
    assert r.diff.kind == "defaults-used"


def test_compare_input_of_ids_in_eagle_config_are_off_by_one() -> None:
    # speculators-style ids written into eagle_config and trained as "input of" (vLLM)
    r = predict_layouts(spec([2, 16, 29]), 32, trainer="hf-index")
    assert r.diff.kind == "off-by-one"


def test_compare_seed_with_override_and_cuda_graph_decode_diff() -> None:
    r = predict_layouts(
        spec([2, 30, 58]),
        61,
        sglang_version="0.5.10",
        arch="kimi",
        training_override=parse_layout("0,3,31"),
    )
    assert depths(r.serving.layout) == [3, 31, 59]
    assert r.diff.kind == "shifted-slot"
    assert r.decode_diff.kind == "defaults-used"
    assert r.serving.to_dict()["decode_layout"][0] == {"depth": 2, "post_norm": False}
