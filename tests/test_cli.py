"""The CLI as a user runs it: `python -m eagle3dash ...` in a subprocess, on real files."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from eagle3dash.capture import Capture, Sequence, save_capture
from eagle3dash.checkpoint import save
from eagle3dash.layout import Tap
from eagle3dash.spec import FORMATS, DraftSpec
from eagle3dash.testing.tensors import random_tensors
from tests.specs import ROOT, run_cli, tiny_spec

JSON_KEYS = {
    "format",
    "hidden_size",
    "target_hidden_size",
    "num_aux",
    "vocab_size",
    "draft_vocab_size",
    "aux_layer_ids",
    "aux_ids_location",
    "has_d2t",
    "norm_before_residual",
    "dtype",
    "param_count",
    "problems",
}


def format_spec(fmt: str, **overrides) -> DraftSpec:
    """A tiny draft in format `fmt` with layer ids stored where that format keeps them."""
    location = "top-level" if fmt == "speculators" else "eagle_config"
    ids = (2, 3, 4) if fmt == "speculators" else (1, 2, 3)
    fields = dict(
        format=fmt,
        draft_vocab_size=48,
        aux_layer_ids=ids,
        aux_ids_location=location,
        has_d2t=True,
        has_t2d=True,
    )
    return tiny_spec(**{**fields, **overrides})


def write_draft(tmp_path: Path, fmt: str, with_embed: bool = True) -> Path:
    """Write a random-weight draft in format `fmt` and return its directory."""
    spec = format_spec(fmt, has_embed=with_embed)
    tensors = random_tensors(spec, seed=0, with_embed=with_embed)
    return save(spec, tensors, tmp_path / fmt, fmt)


@pytest.mark.parametrize("fmt", FORMATS)
def test_inspect_json_contract_for_every_format(tmp_path: Path, fmt: str) -> None:
    path = write_draft(tmp_path, fmt)
    out = run_cli("inspect", str(path), "--json")
    assert out.returncode == 0, out.stderr
    report = json.loads(out.stdout)
    assert report.keys() >= JSON_KEYS
    assert report["format"] == fmt
    assert report["num_aux"] == 3
    assert report["draft_vocab_size"] == 48
    assert report["has_d2t"] is True
    assert report["aux_ids_location"] == ("top-level" if fmt == "speculators" else "eagle_config")
    if fmt == "nemo-automodel":  # its format writes NeMo's own architecture, no engine's
        [problem] = report["problems"]
        assert "neither SGLang nor vLLM registers LlamaEagle3DraftModel" in problem
    else:
        assert report["problems"] == []


def test_inspect_human_report_names_problems(tmp_path: Path) -> None:
    spec = format_spec("specforge", has_d2t=False, has_t2d=False)
    tensors = random_tensors(spec, seed=0)
    tensors.pop("d2t", None)
    tensors.pop("t2d", None)
    path = save(spec, tensors, tmp_path / "nod2t", "specforge")
    out = run_cli("inspect", str(path))
    assert out.returncode == 0, out.stderr
    assert "specforge format" in out.stdout
    assert "d2t" in out.stdout and "problem" in out.stdout


@pytest.mark.parametrize(
    "setup, needle",
    [
        (lambda p: p / "missing", "does not exist"),
        (lambda p: (p / "empty").mkdir() or p / "empty", "config.json"),
    ],
)
def test_inspect_bad_path_is_one_clear_line(tmp_path: Path, setup, needle: str) -> None:
    out = run_cli("inspect", str(setup(tmp_path)))
    assert out.returncode == 1
    assert "Traceback" not in out.stderr
    assert needle in out.stderr
    assert out.stderr.startswith("error: ")


def test_layout_json_for_seed_like_shift(tmp_path: Path) -> None:
    # SpecForge ids [1, 15, 28] on a 32-layer Llama: both sides agree on Tap 2, 16, 29.
    spec = format_spec("specforge", aux_layer_ids=(1, 15, 28))
    path = save(spec, random_tensors(spec), tmp_path / "sf", "specforge")
    out = run_cli("layout", "--draft", str(path), "--target-layers", "32", "--json")
    assert out.returncode == 0, out.stderr
    result = json.loads(out.stdout)
    assert [t["depth"] for t in result["training"]] == [2, 16, 29]
    assert [t["depth"] for t in result["serving"]] == [2, 16, 29]
    assert result["diff"]["kind"] == "identical"

    # The seed: training really fed [embedding, 3, 31]; SGLang feeds [3, 31, 59].
    spec = format_spec("specforge", aux_layer_ids=(2, 30, 58))
    path = save(spec, random_tensors(spec), tmp_path / "seed", "specforge")
    out = run_cli(
        "layout",
        *("--draft", str(path), "--target-layers", "61", "--training-layout", "0,3,31"),
        *("--sglang-version", "0.5.12", "--arch", "kimi"),
    )
    assert out.returncode == 0, out.stderr
    assert "shifted by one slot; embedding output only in training" in out.stdout
    lines = out.stdout.splitlines()
    assert lines[0] == "training: [0,3,31] (embedding output, after block 3, after block 31)"
    assert "serving: [3,31,59] (after block 3, after block 31, after block 59)" in lines
    assert "Tap(" not in out.stdout


def test_eval_on_a_capture(tmp_path: Path) -> None:
    path = write_draft(tmp_path, "speculators")
    gen = torch.Generator().manual_seed(0)
    sequences = [
        Sequence(
            input_ids=torch.randint(0, 64, (40,), generator=gen),
            states={Tap(d): torch.randn(40, 32, generator=gen) for d in (0, 2, 3, 4)},
        )
        for _ in range(2)
    ]
    save_capture(
        Capture(taps=(Tap(0), Tap(2), Tap(3), Tap(4)), sequences=sequences, hidden_size=32),
        tmp_path / "cap",
    )
    args = ("eval", "--draft", str(path), "--capture", str(tmp_path / "cap"))
    out = run_cli(*args, "--layout", "2,3,4", "--steps", "3", "--json")
    assert out.returncode == 0, out.stderr
    result = json.loads(out.stdout)
    assert result["steps"] == 3
    assert len(result["accuracy"]) == 3
    assert 1.0 <= result["accept_length"] <= 4.0

    out = run_cli(*args, "--layout", "1,2,3")
    assert out.returncode == 1
    assert (
        "the capture has no states at [1] (after block 1); it has [0,2,3,4] (embedding output, "
        "after block 2, after block 3, after block 4)"
    ) in out.stderr
    assert "Tap(" not in out.stderr and "Traceback" not in out.stderr


@pytest.mark.parametrize(
    "flag, value, line",
    [
        ("--target-layers", "0", "error: --target-layers: must be between 1 and 10000, got 0\n"),
        ("--target-layers", "-3", "error: --target-layers: must be between 1 and 10000, got -3\n"),
        ("--num-prompts", "many", "error: --num-prompts: must be a whole number, got 'many'\n"),
        ("--device", "tpu", "error: --device: must be one of cpu, cuda, got 'tpu'\n"),
        ("--training-layout", "a,b", "error: --training-layout: not a tap: 'a'"),
    ],
)
def test_diagnose_refuses_a_bad_flag_value_in_one_line(
    tmp_path: Path, flag: str, value: str, line: str
) -> None:
    # Checked before any request: the endpoint is never reached.
    draft = str(tmp_path)
    out = run_cli("diagnose", "--draft", draft, "--endpoint", "127.0.0.1:9", flag, value)
    assert out.returncode == 1
    assert out.stderr.startswith(line) and out.stderr.count("\n") == 1


def test_double_command_runs_the_sglang_api_double(tmp_path: Path) -> None:
    out = run_cli("--help")
    assert out.returncode == 0, out.stderr
    listed = " ".join(out.stdout.split())  # argparse wraps the help text
    assert "double" in listed and "not a serving engine" in listed
    # every option after `double` is the double's own, --help included
    out = run_cli("double", "--help")
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("usage: python -m eagle3dash double")
    assert all(f in out.stdout for f in ("--target", "--capture-taps", "--reported-draft-path"))
    # a start failure comes back as the double's exit code 2 and one line, never a traceback
    out = run_cli("double", "--target", str(tmp_path), "--port", "0")
    assert out.returncode == 2
    assert "no config.json" in out.stderr and "Traceback" not in out.stderr
    # the module stays runnable on its own
    module = subprocess.run(
        [sys.executable, "-m", "eagle3dash.testing.sglang_double", "--help"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert module.returncode == 0, module.stderr
    assert module.stdout.startswith("usage: python -m eagle3dash.testing.sglang_double")


def test_diagnose_prints_measured_acceptance_per_position_beside_the_simulations(capsys):
    from eagle3dash.cli import _print_per_position
    from eagle3dash.diagnosis.stored import load_diagnosis

    d = {
        "schema": 3,
        "options": {"draft": "/d", "endpoint": "http://gpubox:30000"},
        "steps": 3,
        "training": {"eval": {"acceptance": [0.8, 0.5, 0.25, 0.125]}},
        "serving": {"eval": None},  # no serving states: no simulation on that side
        # 10 rounds accepted 3 x 0, 5 x 1, 2 x 2 drafts: >= 1 in 70%, >= 2 in 20%
        "measured": {"accept_length": 1.9, "correct_drafts_histogram": [3, 5, 2]},
    }
    _print_per_position(load_diagnosis(d))
    assert capsys.readouterr().out.splitlines() == [
        "accepted >= k drafts                training       serving      measured",
        "  k = 1                                80.0%                       70.0%",
        "  k = 2                                50.0%                       20.0%",
        "  k = 3                                25.0%                        0.0%",
    ]
    d["measured"] = {"accept_length": 1.9}  # a server without the histogram
    _print_per_position(load_diagnosis(d))
    out = capsys.readouterr().out.splitlines()
    assert out[1] == "  k = 1                                80.0%                            "
    assert out[-1] == "  measured: not reported (the server predates spec_correct_drafts_histogram)"
    d["training"]["eval"], d["measured"] = None, None  # nothing to show
    _print_per_position(load_diagnosis(d))
    assert capsys.readouterr().out == ""


def test_an_unexpected_exception_is_one_line_not_a_traceback(monkeypatch, capsys) -> None:
    import eagle3dash.cli as cli

    def broken(args):
        raise RuntimeError("boom")

    monkeypatch.setattr(cli, "cmd_inspect", broken)
    assert cli.main(["inspect", "anything"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("error: unexpected RuntimeError: boom (a bug in eagle3dash")
    assert err.count("\n") == 1 and "Traceback" not in err


def test_eval_refuses_a_draft_with_nan_weights(tmp_path: Path) -> None:
    spec = format_spec("specforge", has_embed=True)
    tensors = random_tensors(spec, seed=0, with_embed=True)
    tensors["fc.weight"][0, :2] = float("nan")
    path = save(spec, tensors, tmp_path / "nan-draft", "specforge")
    out = run_cli("eval", "--draft", str(path), "--capture", str(tmp_path), "--layout", "1,2,3")
    assert out.returncode == 1 and "Traceback" not in out.stderr
    assert out.stderr == (
        f"error: {path}: fc.weight hold NaN or Inf values: the checkpoint is broken, so an "
        "evaluation of it would mean nothing\n"
    )


def test_eval_of_a_draft_without_embed_tokens_takes_the_targets_embedding(tmp_path: Path) -> None:
    from safetensors.torch import save_file

    path = write_draft(tmp_path, "specforge", with_embed=False)
    spec = format_spec("specforge", has_embed=False)
    gen = torch.Generator().manual_seed(0)
    seqs = [
        Sequence(
            input_ids=torch.randint(0, 64, (30,), generator=gen),
            states={Tap(d): torch.randn(30, 32, generator=gen) for d in (1, 2, 3)},
        )
    ]
    save_capture(
        Capture(taps=(Tap(1), Tap(2), Tap(3)), sequences=seqs, hidden_size=32), tmp_path / "cap"
    )
    args = ("eval", "--draft", str(path), "--capture", str(tmp_path / "cap"), "--layout", "1,2,3")
    out = run_cli(*args)
    assert out.returncode == 1 and "eval --target PATH" in out.stderr
    target = tmp_path / "target"
    target.mkdir()
    embed = torch.randn(spec.vocab_size, 32, generator=gen)
    save_file({"model.embed_tokens.weight": embed}, str(target / "model.safetensors"))
    out = run_cli(*args, "--target", str(target), "--json")
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["steps"] == 5


def test_inspect_refuses_a_target_model_in_one_line(tmp_path: Path) -> None:
    from eagle3dash.testing.tiny import make_tiny_target

    target = make_tiny_target(tmp_path / "target", num_layers=4)
    out = run_cli("inspect", str(target))
    assert out.returncode == 1 and out.stdout == ""
    assert out.stderr == (
        f"error: {target}: this looks like a target model (a causal LM), not an EAGLE-3 draft: "
        "no fc.weight, 4 decoder layers; give the EAGLE-3 draft's folder\n"
    )


def test_layout_eval_and_detect_take_their_options_from_the_one_schema(monkeypatch, capsys):
    import eagle3dash.cli as cli

    seen: dict = {}

    def record(args) -> int:
        seen.clear()
        seen.update(vars(args))
        return 0

    for name in ("cmd_layout", "cmd_eval", "cmd_detect"):
        monkeypatch.setattr(cli, name, record)
    # detect once defaulted --steps to 4 and eval to 5: both now take the schema's 5
    assert cli.main(["detect", "--draft", "d", "--capture", "c"]) == 0
    assert (seen["steps"], seen["device"], seen["arch"]) == (5, "cpu", None)
    assert cli.main(["eval", "--draft", "d", "--capture", "c", "--layout", "1,2,3"]) == 0
    assert (seen["steps"], seen["device"], seen["dtype"]) == (5, "cpu", "float32")
    assert cli.main(["layout", "--draft", "d", "--target-layers", "32"]) == 0
    assert (seen["target_layers"], seen["trainer"], seen["arch"]) == (32, None, None)
    capsys.readouterr()
    # and they refuse a bad value with the schema's one line, as diagnose does
    assert cli.main(["detect", "--draft", "d", "--capture", "c", "--steps", "0"]) == 1
    assert capsys.readouterr().err == "error: --steps: must be between 1 and 64, got 0\n"
    assert (
        cli.main(["eval", "--draft", "d", "--capture", "c", "--layout", "1", "--dtype", "x"]) == 1
    )
    assert capsys.readouterr().err.startswith("error: --dtype: must be one of float32, bfloat16")
    assert cli.main(["layout", "--draft", "d", "--target-layers", "8", "--trainer", "nope"]) == 1
    assert capsys.readouterr().err.startswith("error: --trainer: must be one of specforge, ")


@pytest.mark.parametrize("command", ["inspect", "layout", "matrix"])
def test_a_peagle_draft_is_refused_with_where_vllm_serves_it(tmp_path: Path, command: str) -> None:
    """A speculators P-EAGLE export is refused in one line that says what the engines do with
    it: vLLM 0.32.0 and 0.33.0 serve it on their V1 runner, 0.34.0 refuses it at load
    (transformers_utils/configs/speculators/algos.py `update_peagle`, vllm 0.34.0)."""
    out_dir = write_draft(tmp_path, "speculators")
    cfg = json.loads((out_dir / "config.json").read_text())
    cfg["speculators_model_type"] = "peagle"
    (out_dir / "config.json").write_text(json.dumps(cfg))
    args = (
        [str(out_dir)]
        if command == "inspect"
        else ["--draft", str(out_dir), "--target-layers", "8"]
    )
    out = run_cli(command, *args)
    assert out.returncode == 1 and out.stdout == ""
    line = out.stderr.strip()
    assert "\n" not in line and "a P-EAGLE draft" in line
    assert "vLLM 0.32.0 and 0.33.0 serve it" in line
    assert (
        'vLLM 0.34.0 refuses it at load ("P-EAGLE (parallel drafting EAGLE-3) is not supported")'
        in line
    )


def test_layout_says_an_unnamed_trainers_reading_is_an_assumption() -> None:
    """Issue 42: the demo's draft A names no trainer and has no run folder: its training side is
    SpecForge's reading of its config, an assumption. `layout` said 'diff: identical' with no
    word of that (draft A was trained on the embedding and blocks 1 and 2, not what it reads)."""
    draft = ROOT / "eagle3dash" / "demo" / "fixtures" / "draft-a"
    done = run_cli("layout", "--draft", str(draft), "--target-layers", "4")
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0] == "training: [1,2,3] (after block 1, after block 2, after block 3, ASSUMED)"
    assert "diff: identical:" not in done.stdout
    assert "diff: identical against the assumed training side, so nothing is settled" in done.stdout
    assert "  specforge: [1,2,3] (no hints)" in lines  # every plausible reading shown
    assert "  specforge-hf: [1,2,3] (no hints)" in lines
    # named, the trainer settles which reading holds: no longer an assumption of the tool's
    named = run_cli(
        "layout", "--draft", str(draft), "--target-layers", "4", "--trainer", "hf-index"
    )
    assert named.returncode == 0, named.stderr
    assert "ASSUMED" not in named.stdout
    assert named.stdout.splitlines()[0].startswith("training: [0,1,2] (embedding output")
