"""NeMo AutoModel drafts: its consolidated export read as its own format, its run folder's card,
the serving problems its serve scripts rewrite, and a diagnosis of one on the SGLang double.

Exports are written by tests/runfolders.py in the layout NeMo AutoModel 0.7.0 writes
(recipes/llm/train_eagle3.py, components/checkpoint/), never by importing it. Expected taps are
by hand: NeMo's id i is the output of layer i, Tap(i + 1) (eagle/target.py hooks layers[id]); its
default ids are [1, N//2-1, N-4]; SGLang and vLLM feed a draft naming no ids they read their
defaults [2, N//2, N-3] as "entering layer" indices, Tap(2), Tap(N//2), Tap(N-3).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from eagle3dash.checkpoint import CheckpointError, inspect, load, save
from eagle3dash.checkpoint_problems import ProblemCode
from eagle3dash.layout import Tap
from eagle3dash.provenance import run_checkpoints
from eagle3dash.testing.tensors import random_tensors
from tests.runfolders import (
    LLAMA_8B,
    llama_8b_weights,
    nemo_config,
    nemo_recipe,
    nemo_step,
)
from tests.specs import run_cli, tiny_spec

TARGET = "meta-llama/Llama-3.1-8B-Instruct"


def llama_8b_run(root: Path, ids: list[int] | None = (1, 15, 28), **more) -> Path:  # type: ignore[assignment]
    """A NeMo run over Llama-3.1-8B: one step, the recipe naming `ids` (None: none)."""
    recipe = nemo_recipe(TARGET, None if ids is None else list(ids), **more)
    config = nemo_config(LLAMA_8B, 32000)
    return nemo_step(root, 2, 900, config, llama_8b_weights, recipe, val_loss=1.25).parent


def test_a_llama_8b_nemo_export_is_read_as_nemos_with_its_serving_problems(tmp_path) -> None:
    run = llama_8b_run(tmp_path / "run")
    export = run / "epoch_2_step_900" / "model" / "consolidated"
    report = inspect(export)
    spec = report.spec
    assert spec.format == "nemo-automodel"
    # one trained decoder layer (the weights), not the 32 of the target's config
    assert (spec.num_layers, spec.hidden_size, spec.num_kv_heads) == (1, 4096, 8)
    assert (spec.draft_vocab_size, spec.has_d2t, spec.has_t2d, spec.has_embed) == (
        32000,
        True,
        True,
        True,
    )
    # NeMo's norm_output false: the head still sees the normed state (draft_llama.py)
    assert spec.norm_before_lm_head and not spec.feedback_post_norm
    assert spec.rope_scaling is not None and spec.rope_scaling["rope_type"] == "llama3"
    assert {p.code for p in report.problems} == {
        ProblemCode.UNREGISTERED_ARCHITECTURE,
        ProblemCode.TARGET_DEPTH_LAYERS,
    }
    texts = " | ".join(p.text for p in report.problems)
    assert 'set "architectures": ["LlamaForCausalLMEagle3"]' in texts
    assert "num_hidden_layers is 32" in texts and "runs the 31 extra ones untrained" in texts
    assert 'set "num_hidden_layers": 1' in texts and "0.5.11 and earlier refuse" in texts
    card = report.provenance  # the consolidated folder itself belongs to its step
    assert card is not None and card.trainer == "nemo-automodel"
    assert (card.chosen_by, card.step, card.epoch, card.target_path) == ("given", 900, 2, TARGET)
    assert card.capture_layers == (1, 15, 28)
    assert card.capture_record == "config.yaml recipe_args.aux_layer_ids"
    assert (card.best_metric, card.best_score) == ("val_loss", 1.25)


def test_inspect_names_nemo_and_says_what_each_engine_feeds(tmp_path) -> None:
    """ids [3, 15, 27] from config.yaml: taps 4, 16, 28; config.json names no ids, so SGLang
    0.5.23 and vLLM feed their defaults 2, 16, 29 for N = 32."""
    out = run_cli("inspect", str(llama_8b_run(tmp_path / "run", [3, 15, 27])))
    assert out.returncode == 0, out.stderr
    text = out.stdout
    assert "nemo-automodel (NeMo AutoModel's consolidated export) format" in text
    assert "trainer         NeMo AutoModel" in text
    assert (
        "Training fed 4,16,28 (after block 4, after block 16, after block 28) on the 32-layer "
        "target (config.json num_hidden_layers): ids [3, 15, 27] from the run's config.yaml "
        "recipe_args.aux_layer_ids" in text
    )
    feeds = [line for line in text.splitlines() if "feeds its defaults: 2,16,29" in line]
    assert [line.split(" finds")[0] for line in feeds] == [
        "SGLang 0.5.23",
        "vLLM 0.34.0 (V2 runner)",  # the newest release read, which has only V2
    ]
    assert all("not the training taps (predicted" in line for line in feeds)
    assert "2 problem(s):" in text


def test_without_recorded_ids_the_nemo_default_is_assumed(tmp_path) -> None:
    """No recipe_args.aux_layer_ids: [1, 15, 28], taps 2, 16, 29, which the engines' defaults
    feed too; said as assumed, in the card's notes as in the reading."""
    from eagle3dash.ui.provenance import export_lines

    report = inspect(llama_8b_run(tmp_path / "run", None))
    card = report.provenance
    assert card is not None and card.capture_layers is None and card.capture_record is None
    assert any("sets no recipe_args.aux_layer_ids" in n and "assumed" in n for n in card.notes)
    lines = export_lines(report.spec, card)
    assert lines[0].startswith("Training fed 2,16,29 (after block 2, after block 16, after block")
    assert "ids [1, 15, 28], NeMo AutoModel's default, assumed" in lines[0]
    assert all(
        line.endswith(
            "2,16,29 (after block 2, after block 16, after block 29), the "
            "training taps (predicted from its rules)."
        )
        for line in lines[1:]
    )


def test_an_offline_run_takes_its_ids_from_the_cache_manifest(tmp_path) -> None:
    """recipes/llm/train_eagle3.py: with cached_target_path the cache decides, not the recipe."""
    cache = tmp_path / "cache"
    cache.mkdir()
    (cache / "manifest.json").write_text(
        json.dumps({"format_version": 2, "aux_layer_ids": [2, 14, 26]})
    )
    run = llama_8b_run(tmp_path / "run", [1, 15, 28], cached_target_path=str(cache))
    card = inspect(run).provenance
    assert card is not None and card.capture_layers == (2, 14, 26)
    assert card.capture_record == f"the offline cache's {cache / 'manifest.json'} aux_layer_ids"
    (cache / "manifest.json").unlink()
    card = inspect(run).provenance
    assert card is not None and card.capture_layers is None
    assert any("an offline run" in n and "not readable here" in n for n in card.notes)


def test_the_run_folder_reads_lowest_val_then_latest_and_skips_a_cut_save(tmp_path) -> None:
    run = tmp_path / "run"
    config = nemo_config(LLAMA_8B, 32000)
    for epoch, step, loss in ((1, 100, 1.5), (2, 200, 1.2), (3, 300, 1.4)):
        nemo_step(
            run, epoch, step, config, llama_8b_weights, nemo_recipe(TARGET, [1, 15, 28]), loss
        )
    nemo_step(run, 4, 400, config, llama_8b_weights, None)
    (run / "epoch_4_step_400" / ".incomplete").touch()  # a save cut short (checkpoint/utils.py)
    card = inspect(run).provenance
    assert card is not None and (card.chosen_by, card.step) == ("latest", 300)
    (run / "LATEST.txt").write_text("epoch_1_step_100")  # the text pointer, where links fail
    (run / "LOWEST_VAL").symlink_to("epoch_2_step_200")
    card = inspect(run).provenance
    assert card is not None and (card.chosen_by, card.step, card.best_score) == ("best", 200, 1.2)
    # a sweep takes every complete step's export, the LOWEST_VAL one as the run's best
    steps, best = run_checkpoints(run)
    assert steps == {s: run / f"epoch_{e}_step_{s}" / "model" / "consolidated" for e, s in
                     ((1, 100), (2, 200), (3, 300))}  # fmt: skip
    assert best == steps[200]
    (run / "LOWEST_VAL").unlink()
    card = inspect(run).provenance
    assert card is not None and (card.chosen_by, card.step) == ("latest", 100)
    assert any("val_tau_sim" in n and "no trainer acceptance" in n for n in card.notes)


def test_the_checkpoints_page_names_nemo_and_what_the_engines_feed(home, tmp_path) -> None:
    from eagle3dash.uploads import register_path
    from tests.appkit import app, frames, no_exception, texts

    register_path(home, llama_8b_run(tmp_path / "run", [3, 15, 27]))
    at = app("checkpoints")
    no_exception(at)
    tables = {tuple(f.columns): dict(f.values.tolist()) for f in frames(at)}
    assert tables[("Field", "Value")]["Trainer"] == "NeMo AutoModel"
    assert tables[("Field", "Value")]["Capture layers"] == (
        "3, 15, 27 (config.yaml recipe_args.aux_layer_ids)"
    )
    assert tables[("field", "value")]["format"] == (
        "nemo-automodel (NeMo AutoModel's consolidated export)"
    )
    shown = texts(at)
    assert "Training fed 4,16,28" in shown and "SGLang 0.5.23 finds no layer ids" in shown
    assert 'set "num_hidden_layers": 1' in shown


def test_a_step_without_its_consolidated_export_says_how_to_make_it(tmp_path) -> None:
    step = llama_8b_run(tmp_path / "run") / "epoch_2_step_900"
    for f in (step / "model" / "consolidated").iterdir():
        f.unlink()
    (step / "model" / "consolidated").rmdir()
    with pytest.raises(CheckpointError) as err:
        inspect(step)
    assert "without a consolidated export" in str(err.value)
    assert f"bash {step}/model/consolidate.sh" in str(err.value)


def test_a_nemo_p_eagle_draft_is_refused_by_name(tmp_path) -> None:
    run = llama_8b_run(tmp_path / "run")
    export = run / "epoch_2_step_900" / "model" / "consolidated"
    cfg = json.loads((export / "config.json").read_text())
    cfg["parallel_drafting"] = True  # eagle/draft_llama.py: P-EAGLE's mask_hidden draft
    (export / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(CheckpointError, match="a P-EAGLE draft"):
        inspect(export)


def test_nemo_norm_output_feeds_the_normed_state_back_and_is_no_clash(tmp_path) -> None:
    """NeMo's norm_output (EAGLE-3.1) is SGLang's meaning, not SpecForge's: no clash finding."""
    from eagle3dash.findings import Evidence, diagnose
    from tests.findingskit import Server

    run = tmp_path / "run"
    config = nemo_config(LLAMA_8B, 32000, norm_output=True)
    nemo_step(run, 1, 10, config, llama_8b_weights, nemo_recipe(TARGET, [1, 15, 28]))
    report = inspect(run)
    assert report.spec.feedback_post_norm and report.spec.norm_before_lm_head
    found = diagnose(Evidence(report=report, server=Server(version="0.5.23")))
    assert "norm-output-clash" not in {f.id for f in found}


def test_the_nemo_format_round_trips_through_save(tmp_path) -> None:
    spec = tiny_spec(
        format="nemo-automodel",
        draft_vocab_size=48,
        has_d2t=True,
        has_t2d=True,
        norm_output_key=True,
        feedback_post_norm=True,
        architectures=("LlamaEagle3DraftModel",),
    )
    tensors = random_tensors(spec, seed=3)
    ckpt = save(spec, tensors, tmp_path / "nemo", "nemo-automodel")
    cfg = json.loads((ckpt / "config.json").read_text())
    assert cfg["architectures"] == ["LlamaEagle3DraftModel"] and cfg["norm_output"] is True
    assert "eagle_config" not in cfg and cfg["num_hidden_layers"] == 1
    loaded_spec, loaded, report = load(ckpt)
    assert loaded_spec == spec
    assert [p.code for p in report.problems] == [ProblemCode.UNREGISTERED_ARCHITECTURE]
    assert all(torch.equal(loaded[n], t) for n, t in tensors.items())
    # the target's depth, as NeMo wrote it, survives a save of what was read
    cfg["num_hidden_layers"] = 6
    (ckpt / "config.json").write_text(json.dumps(cfg))
    again = save(inspect(ckpt).spec, tensors, tmp_path / "again", "nemo-automodel")
    assert json.loads((again / "config.json").read_text())["num_hidden_layers"] == 6


def test_a_diagnosis_of_a_demo_sized_nemo_export_on_the_double(
    tmp_path_factory, home, served_models
) -> None:
    """The demo's draft weights in NeMo's layout over the 4-layer demo target, config.yaml ids
    [0, 1, 2] (taps 1, 2, 3), served by the double with the taps training fed: the diagnosis
    completes, takes the training side from the run's record, reports the serving problems, and
    the Run page names the trainer."""
    from safetensors.torch import load_file, save_file

    from eagle3dash import store as db
    from eagle3dash.diagnosis.record import record_diagnosis
    from eagle3dash.diagnosis.stages import run_diagnosis
    from tests.appkit import app, no_exception, options, speculative_double, texts

    models = served_models
    target = json.loads((models["target"] / "config.json").read_text())
    weights = load_file(str(models["draft"] / "model.safetensors"))  # SpecForge's names

    def nemo_weights(export: Path) -> None:
        names = {n: n.replace("midlayer.", "layers.0.") for n in weights}
        disk = {
            (n if n in ("lm_head.weight", "d2t", "t2d") else f"model.{n}"): weights[raw]
            for raw, n in names.items()
        }
        save_file(disk, str(export / "model.safetensors"), metadata={"format": "pt"})

    run = tmp_path_factory.mktemp("nemo") / "run"
    recipe = nemo_recipe(str(models["target"]), [0, 1, 2])
    config = nemo_config(target, target["vocab_size"])
    export = nemo_step(run, 1, 8, config, nemo_weights, recipe, val_loss=2.0)
    export = export / "model" / "consolidated"
    with speculative_double(models["target"], export, capture_taps=[1, 2, 3]) as server:
        diagnosis = run_diagnosis(options(models, server.url, draft=str(run)))
    assert diagnosis.report.spec.format == "nemo-automodel"
    training = diagnosis.training
    assert training.source == "run-record" and training.layout == (Tap(1), Tap(2), Tap(3))
    assert "config.yaml recipe_args.aux_layer_ids" in training.detail
    found = {f.id: f for f in diagnosis.findings}
    # config.json names no ids, so SGLang feeds its defaults; the recorded ids, nested, feed
    # the training taps (SGLang's Llama id i = output of layer i, as NeMo's)
    fix = '"eagle_config": {"eagle_aux_hidden_state_layer_ids": [0, 1, 2]}'
    assert fix in found["layout-mismatch"].fix
    problems = found["checkpoint-problems"].evidence
    assert 'set "architectures": ["LlamaForCausalLMEagle3"]' in problems
    assert 'set "num_hidden_layers": 1' in problems and "runs the 3 extra ones" in problems

    run_id = db.create_run(home, None, diagnosis.server.url)
    record_diagnosis(home, run_id, diagnosis)
    at = app("run", run=str(run_id))
    no_exception(at)
    shown = texts(at)
    assert "NeMo AutoModel" in shown and "recorded by the training run" in shown
