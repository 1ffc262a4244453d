"""Drafts as SpecForge 0.2 and speculators 0.9 make them: the trainer readings, run folders and
their provenance, training-time metrics, the declared target, FP8 dumps, other algorithms.

Run folders are written (tests/runfolders.py) in the shapes the trainers' sources write
(SpecForge 0.2.0 training/checkpoint.py and controller.py; speculators 0.9.0
train/checkpointer.py and config/artifacts.py), never by importing the trainers. Expected taps are
written by hand from SGLang's rules: DeepSeek from 0.5.13 uses ids verbatim unless the first is 1
(PR #25454), before that adds 1; the git-era HF hook on layers[id] feeds the output of layer id,
Tap(id + 1).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from safetensors.torch import save_file

from eagle3dash.capture.dumps import read_speculators_dump
from eagle3dash.capture.format import CaptureError
from eagle3dash.checkpoint import CheckpointError, inspect, save
from eagle3dash.checkpoint_problems import ProblemCode
from eagle3dash.diagnosis.stored import load_checkpoint_report
from eagle3dash.findings import Evidence, diagnose
from eagle3dash.layout import Tap
from eagle3dash.prediction import predict_layouts
from eagle3dash.provenance import read_run_folder
from eagle3dash.spec import DraftSpec
from eagle3dash.testing.tensors import random_tensors
from eagle3dash.ui.provenance import trainer_note
from tests.findingskit import Bench, Server
from tests.runfolders import RUN_YAML, TARGET_SHA, specforge_run, speculators_run
from tests.specs import tiny_spec

N = 61  # DeepSeek-V3 / Kimi-K2 decoder blocks
DEEPSEEK = ["DeepseekV3ForCausalLM"]


# What every stored diagnosis has: the options it was started with.
OPTIONS = {"options": {"draft": "/d", "endpoint": "http://gpubox:30000"}}


def taps(*depths: int) -> tuple[Tap, ...]:
    return tuple(Tap(d) for d in depths)


def specforge_export(root: Path, ids=(2, 30, 58)) -> Path:
    """A draft folder as `specforge export --to sglang` writes it under transformers 5."""
    spec = tiny_spec(aux_layer_ids=ids, aux_ids_location="eagle_config")
    out = save(spec, random_tensors(spec, seed=0), root, "specforge")
    cfg = json.loads((out / "config.json").read_text())
    cfg["dtype"] = cfg.pop("torch_dtype")
    cfg["rope_parameters"] = {"rope_type": "default", "rope_theta": cfg["rope_theta"]}
    cfg["transformers_version"] = "5.8.1"
    (out / "config.json").write_text(json.dumps(cfg))
    return out


def deepseek_evidence(draft: Path, **how) -> Evidence:
    report = inspect(draft)
    layouts = predict_layouts(
        report.spec,
        N,
        trainer=how.get("trainer"),
        sglang_version="0.5.23",
        arch=DEEPSEEK[0],
        training_sglang_version=how.get("training_sglang_version"),
    )
    return Evidence(
        report=report,
        num_target_layers=N,
        server=Server(version="0.5.23", architectures=DEEPSEEK),
        layouts=layouts,
        prediction=layouts,
        **how,
    )


# --- the readings ------------------------------------------------------------------------------


def test_a_specforge_02_deepseek_draft_gets_both_readings_and_no_critical(tmp_path) -> None:
    e = deepseek_evidence(specforge_export(tmp_path / "d"))
    assert e.layouts is not None and e.layouts.serving.layout == taps(2, 30, 58)
    findings = diagnose(e)
    assert [f for f in findings if f.severity == "critical"] == []
    unsettled = next(f for f in findings if f.id == "training-layout-unsettled")
    assert unsettled.data["readings"] == {"specforge": "2,30,58", "specforge-hf": "3,31,59"}
    assert unsettled.data["disagree"] == ["specforge-hf"]
    assert "transformers_version 5.8.1" in unsettled.evidence
    assert "--training-sglang-version" in unsettled.fix and "--train-states" in unsettled.fix


def test_the_trainer_and_its_older_sglang_make_the_first_id_drift_a_finding(tmp_path) -> None:
    e = deepseek_evidence(
        specforge_export(tmp_path / "d"), trainer="specforge", training_sglang_version="0.5.12"
    )
    findings = diagnose(e)
    mismatch = next(f for f in findings if f.id == "layout-mismatch")
    assert mismatch.severity == "critical"  # the user said which trainer: evidence
    assert mismatch.data["config_ids"] == [3, 31, 59]  # 0.5.23 keeps ids verbatim: 3 != 1
    drift = next(f for f in findings if f.id == "capture-rule-version")
    assert drift.data["training_sglang_version"] == "0.5.12"
    assert "0.5.12" in drift.fix
    assert not any(f.id == "training-layout-unsettled" for f in findings)


def test_readings_that_agree_need_no_settling(tmp_path) -> None:
    # first id 1 on DeepSeek: SGLang 0.5.14 adds 1 to every id, as the HF hook does: 2, 31, 59
    e = deepseek_evidence(specforge_export(tmp_path / "d", ids=(1, 30, 58)))
    assert e.layouts is not None and e.layouts.training.layout == taps(2, 31, 59)
    assert not any(f.id == "training-layout-unsettled" for f in diagnose(e))


def test_an_assumed_reading_that_disagrees_with_serving_is_no_critical(tmp_path) -> None:
    # the training side assumed to be the HF hook's (3, 31, 59) while 0.5.23 feeds (2, 30, 58):
    # the mismatch stands on one reading of two, so it is a warning that names the others
    draft = specforge_export(tmp_path / "d")
    report = inspect(draft)
    layouts = predict_layouts(
        report.spec, N, trainer="specforge-hf", sglang_version="0.5.23", arch=DEEPSEEK[0]
    )
    e = Evidence(
        report=report,
        num_target_layers=N,
        server=Server(version="0.5.23", architectures=DEEPSEEK),
        layouts=layouts,
    )
    mismatch = next(f for f in diagnose(e) if f.id == "layout-mismatch")
    assert mismatch.severity == "warning" and "one assumed reading" in mismatch.evidence


def test_the_hf_hook_reading_is_one_block_later_than_sglang_on_deepseek() -> None:
    from eagle3dash.trainers import training_layout

    spec = tiny_spec(aux_layer_ids=(2, 30, 58), aux_ids_location="eagle_config")
    assert training_layout(spec, N, "specforge-hf", arch="kimi").layout == taps(3, 31, 59)
    assert training_layout(spec, N, "specforge", arch="kimi").layout == taps(2, 30, 58)
    old = training_layout(spec, N, "specforge", sglang_version="0.5.12", arch="kimi")
    assert old.layout == taps(3, 31, 59)
    # SpecForge 0.1.0 ignores the ids: HF output_hidden_states[2, N//2, N-3]
    assert training_layout(spec, N, "specforge-0.1").layout == taps(2, 30, 58)
    assert training_layout(spec, 32, "specforge-0.1").layout == taps(2, 16, 29)


# --- SpecForge 0.2 run folders -----------------------------------------------------------------


def test_a_specforge_run_folder_gives_its_best_step_and_provenance(tmp_path) -> None:
    card = read_run_folder(specforge_run(tmp_path / "run"))
    assert card.trainer == "specforge" and card.chosen_by == "best"
    assert card.checkpoint == str((tmp_path / "run" / "r1-step10").resolve())
    assert (card.step, card.epoch, card.strategy) == (10, 0, "eagle3")
    assert card.target_path == "/models/DeepSeek-V3" and card.target_revision == "deadbeef"
    assert card.target_config_sha256 == TARGET_SHA
    assert card.capture_layers == (2, 30, 58)
    assert (card.best_metric, card.best_score) == ("eval/simulated_acc_len", 1.2)
    m = card.metrics
    assert m is not None
    assert m.per_position == pytest.approx([0.8, 0.4])  # 0.8, then 0.8 * 0.5
    assert m.accept_length == pytest.approx(2.2)  # 1 (bonus) + 1.2, SpecForge's 1.2 without it
    assert m.trainer_value == pytest.approx(1.2)
    assert m.sampled_per_position == pytest.approx([0.9, 0.45])  # 0.9, then 0.9 * 0.5
    note = trainer_note(load_checkpoint_report({"provenance": card.to_dict()}))
    assert note is not None and "temperature 1): accept length 2.35" in note


def test_without_a_best_link_the_latest_step_is_read(tmp_path) -> None:
    root = specforge_run(tmp_path / "run")
    (root / "r1-best").unlink()
    card = read_run_folder(root)
    assert card.chosen_by == "latest" and card.step == 20


def test_a_step_folder_needs_an_export_first(tmp_path) -> None:
    root = specforge_run(tmp_path / "run")
    with pytest.raises(CheckpointError, match="specforge export --to sglang --checkpoint"):
        inspect(root / "r1-step20")


def test_a_pickle_global_in_training_state_is_refused_and_never_runs(tmp_path) -> None:
    marker = tmp_path / "ran"

    class Evil:
        def __reduce__(self):
            return (open, (str(marker), "w"))

    step = tmp_path / "run" / "r1-step1"
    step.mkdir(parents=True)
    torch.save({"global_step": 1, "x": Evil()}, step / "training_state.pt")
    with pytest.raises(CheckpointError, match="training_state.pt: refused"):
        inspect(tmp_path / "run")
    assert not marker.exists()


# --- speculators 0.9 run folders ---------------------------------------------------------------


def test_a_speculators_run_folder_is_inspected_at_its_best_epoch(tmp_path) -> None:
    report = inspect(speculators_run(tmp_path / "run"))
    card = report.provenance
    assert card is not None and card.chosen_by == "best" and card.epoch == 1
    assert report.path == str((tmp_path / "run" / "1").resolve())
    assert card.trainer_version == "0.9.0" and card.strategy == "eagle3"
    assert card.capture_layers == (2, 16, 29)
    assert card.target_path == "meta-llama/Llama-3.1-8B-Instruct"
    assert card.metrics is not None
    assert card.metrics.per_position == [0.7, 0.4]
    assert card.metrics.accept_length == pytest.approx(2.1)  # 1 + 0.7 + 0.4
    as_json = report.to_json()["provenance"]
    assert as_json["epoch"] == 1 and as_json["metrics"]["accept_length"] == pytest.approx(2.1)


# --- the draft's target ------------------------------------------------------------------------


@pytest.mark.parametrize(
    "served, accept, severity",
    [
        ("Qwen/Qwen3-8B", 1.1, "critical"),
        ("Qwen/Qwen3-8B", 2.6, "warning"),
        ("/data/models/Llama-3.1-8B-Instruct", 1.1, None),  # the same model from a local folder
    ],
)
def test_a_draft_served_on_another_target(tmp_path, served, accept, severity) -> None:
    report = inspect(speculators_run(tmp_path / "run"))
    e = Evidence(
        report=report, server=Server(model_path=served), measured=Bench(100.0, accept_length=accept)
    )
    found = [f for f in diagnose(e) if f.id == "draft-for-another-target"]
    assert [f.severity for f in found] == ([severity] if severity else [])
    if found:
        assert "meta-llama/Llama-3.1-8B-Instruct" in found[0].title and served in found[0].title


def test_the_run_target_config_digest_against_the_local_target(tmp_path) -> None:
    root = specforge_run(tmp_path / "run")
    draft = specforge_export(tmp_path / "run" / "r1-step10", ids=(2, 30, 58))
    report = inspect(root)
    assert report.path == str(draft.resolve())
    e = Evidence(
        report=report,
        server=Server(model_path="/models/DeepSeek-V3"),
        target_json_sha256={"config.json": "cd" * 32, "tokenizer_config.json": "ef" * 32},
    )
    found = next(f for f in diagnose(e) if f.id == "draft-for-another-target")
    assert "abababababab" in found.evidence and "revision deadbeef" in found.evidence
    assert "another model or revision" in found.evidence
    assert "tokenizer_config.json sha256 121212121212..." in found.evidence
    assert "another tokenizer or chat template" in found.evidence
    e.target_json_sha256 = {"config.json": TARGET_SHA}
    assert not any(f.id == "draft-for-another-target" for f in diagnose(e))


# --- FP8 dumps ---------------------------------------------------------------------------------


def _fp8_file(path: Path, hs: torch.Tensor, **keep) -> None:
    """hs_connectors 0.9.0's fp8 format, by hand: scale = amax / 448 per token."""
    amax = hs.float().abs().amax(dim=(1, 2), keepdim=True)
    scales = (amax / 448.0).clamp(min=1e-12)
    tensors = {
        "hidden_states": (hs / scales).to(torch.float8_e4m3fn),
        "hidden_states_scales": scales,
        "token_ids": torch.arange(hs.shape[0]),
    }
    save_file({k: v for k, v in tensors.items() if keep.get(k, True)}, str(path))


def test_an_fp8_dump_round_trips_within_e4m3_precision(tmp_path) -> None:
    hs = torch.randn(5, 4, 8, generator=torch.Generator().manual_seed(0)) * torch.tensor(
        [1.0, 10.0, 100.0, 0.01, 3.0]
    ).reshape(5, 1, 1)
    _fp8_file(tmp_path / "hs_0.safetensors", hs)
    capture = read_speculators_dump(tmp_path, taps(1, 2, 3), 4)
    got = torch.stack([capture.sequences[0].states[t] for t in (*taps(1, 2, 3), Tap(4))], dim=1)
    amax = hs.abs().amax(dim=(1, 2), keepdim=True)
    # e4m3: 3 mantissa bits, so each value is within 1/16 of itself, and of its token's amax
    assert ((got - hs).abs() <= amax / 16).all()
    assert not torch.equal(got, hs.to(torch.float8_e4m3fn).float())  # the scales were applied


@pytest.mark.parametrize(
    "keep, says",
    [
        ({"hidden_states_scales": False}, "no hidden_states_scales"),
    ],
)
def test_an_inconsistent_fp8_dump_is_one_message(tmp_path, keep, says) -> None:
    _fp8_file(tmp_path / "hs_0.safetensors", torch.randn(3, 4, 8), **keep)
    with pytest.raises(CaptureError, match=says):
        read_speculators_dump(tmp_path, taps(1, 2, 3), 4)


def test_scales_beside_plain_hidden_states_are_one_message(tmp_path) -> None:
    save_file(
        {
            "hidden_states": torch.randn(3, 4, 8),
            "hidden_states_scales": torch.ones(3, 1, 1),
            "token_ids": torch.arange(3),
        },
        str(tmp_path / "hs_0.safetensors"),
    )
    with pytest.raises(CaptureError, match="not float8"):
        read_speculators_dump(tmp_path, taps(1, 2, 3), 4)


# --- other algorithms --------------------------------------------------------------------------


@pytest.mark.parametrize(
    "key, value, algorithm",
    [
        ("speculators_model_type", "peagle", "P-EAGLE"),
        ("speculators_model_type", "dflash", "DFlash"),
        ("speculators_model_type", "dflash2", "DFlash2"),
        ("speculators_model_type", "dspark", "DSpark"),
        ("speculators_model_type", "xpress", "XPress"),
        ("speculators_model_type", "mtp", "MTP"),
        ("architectures", ["DominoDraftModel"], "Domino"),
        ("architectures", ["DFlashDraftModel"], "DFlash"),
        ("architectures", ["PEagleDraftModel"], "P-EAGLE"),
    ],
)
def test_another_algorithm_is_refused_by_name(tmp_path, key, value, algorithm) -> None:
    spec: DraftSpec = tiny_spec()
    out = save(spec, random_tensors(spec, seed=0), tmp_path / "d", "specforge")
    cfg = json.loads((out / "config.json").read_text())
    cfg[key] = value
    (out / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(CheckpointError) as e:
        inspect(out)
    line = str(e.value)
    assert f"a {algorithm} draft" in line and "EAGLE-3 drafts only" in line
    assert "\n" not in line
    if algorithm == "P-EAGLE":
        assert "parallel" in line


def test_a_dflash_dump_is_named_not_missing_keys(tmp_path) -> None:
    from eagle3dash.capture.dumps import read_specforge_dump

    torch.save(
        {
            "input_ids": torch.arange(4),
            "loss_mask": torch.ones(4),
            "hidden_states": torch.zeros(1, 4, 24),
        },
        tmp_path / "data_0.ckpt",
    )
    with pytest.raises(CaptureError, match="features of a DFlash or Domino draft"):
        read_specforge_dump(tmp_path, taps(1, 2, 3))


# --- SpecForge's id checks ---------------------------------------------------------------------


@pytest.mark.parametrize("ids", [(2, 2, 30), (2, 30), (1, 2, 30, 58)])
def test_ids_specforge_could_not_have_trained_on_are_problems(tmp_path, ids) -> None:
    spec = tiny_spec(aux_layer_ids=ids, aux_ids_location="eagle_config", num_aux=len(ids))
    report = inspect(save(spec, random_tensors(spec, seed=0), tmp_path / "d", "specforge"))
    [problem] = [p for p in report.problems if p.code is ProblemCode.SPECFORGE_IDS]
    assert "exactly three distinct" in problem.text


def test_the_layout_fixs_embedding_id_is_no_checkpoint_problem(tmp_path) -> None:
    # [-1, 0, 1] is the serving edit the layout fix writes for SGLang 0.5.22+ (id -1 = the
    # embedding output for Llama): the demo's "fixed" deployment must not be told it is wrong.
    spec = tiny_spec(aux_layer_ids=(-1, 0, 1), aux_ids_location="eagle_config", num_aux=3)
    report = inspect(save(spec, random_tensors(spec, seed=0), tmp_path / "d", "specforge"))
    id_codes = {
        ProblemCode.AUX_IDS_COUNT,
        ProblemCode.AUX_IDS_ORDER,
        ProblemCode.AUX_IDS_TWO_LISTS,
        ProblemCode.SPECFORGE_IDS,
    }
    assert not [p for p in report.problems if p.code in id_codes], report.problems


def test_ids_past_the_target_are_a_finding(tmp_path) -> None:
    spec = tiny_spec(aux_layer_ids=(2, 30, 61), aux_ids_location="eagle_config")
    report = inspect(save(spec, random_tensors(spec, seed=0), tmp_path / "d", "specforge"))
    found = [f for f in diagnose(Evidence(report=report, num_target_layers=N))]
    beyond = [f for f in found if f.id == "ids-beyond-target"]
    assert len(beyond) == 1 and beyond[0].data["ids"] == [2, 30, 61]
    assert "[61]" in beyond[0].evidence and "below 61" in beyond[0].fix
    spec = tiny_spec(aux_layer_ids=(2, 30, 60), aux_ids_location="eagle_config")
    report = inspect(save(spec, random_tensors(spec, seed=0), tmp_path / "e", "specforge"))
    assert not any(
        f.id == "ids-beyond-target" for f in diagnose(Evidence(report=report, num_target_layers=N))
    )


def test_an_uploaded_speculators_run_registers_its_best_epoch(tmp_path) -> None:
    from eagle3dash import store as db
    from eagle3dash.uploads import register_upload
    from tests.uploadkit import Upload, tar_of

    run = speculators_run(tmp_path / "run")
    members = {
        f"run/{p.relative_to(run)}": p.read_bytes()
        for p in sorted(run.rglob("*"))
        if p.is_file() and "checkpoint_best" not in p.parts
    }
    # archived with links followed (tar -h): checkpoint_best is a folder holding epoch 1's files
    members |= {
        f"run/checkpoint_best/{p.name}": p.read_bytes() for p in sorted((run / "1").iterdir())
    }
    store = db.open_store(tmp_path / "home")
    try:
        result = register_upload(store, [Upload("run.tar.gz", tar_of(members))])
        assert result.path.name == "checkpoint_best" and result.path.parent.is_dir()
        assert result.report["provenance"]["chosen_by"] == "best"
        assert result.report["provenance"]["target_path"] == "meta-llama/Llama-3.1-8B-Instruct"
    finally:
        store.close()


# --- the card and the trainer's numbers on the pages -------------------------------------------


def test_the_trainers_eval_joins_the_per_position_chart_converted(tmp_path) -> None:
    from eagle3dash.ui import charts, tables
    from eagle3dash.ui.provenance import card_frame, trainer_note

    report = inspect(speculators_run(tmp_path / "run")).to_json()
    from eagle3dash.diagnosis.stored import load_diagnosis

    diagnosis = load_diagnosis(
        {"schema": 3, "training": {}, "serving": {}, "checkpoint": report, **OPTIONS}
    )
    metrics = tables.diagnosis_metrics(diagnosis)
    trainer = metrics[metrics["source"] == "trainer"]
    assert list(trainer["step"]) == [1, 2] and list(trainer["value"]) == [0.7, 0.4]
    spec = charts.per_position_chart(metrics).to_dict()
    values = {v["side"]: v for v in spec["datasets"][next(iter(spec["datasets"]))]}
    assert "trainer's own eval (converted)" in values
    assert diagnosis.checkpoint is not None and diagnosis.checkpoint.provenance is not None
    note = trainer_note(diagnosis.checkpoint)
    assert note is not None and "accept length 2.10 with the bonus token" in note
    assert "full_acc_k" in note
    rows = dict(card_frame(diagnosis.checkpoint.provenance).values.tolist())
    assert rows["Target"] == "meta-llama/Llama-3.1-8B-Instruct"
    assert rows["Capture layers"] == "2, 16, 29 (run.yaml target_layer_ids)"
    assert rows["Step / epoch"] == "— / 1"


def test_inspect_json_carries_the_card(tmp_path, capsys) -> None:
    from eagle3dash import cli

    root = speculators_run(tmp_path / "run")
    assert cli.main(["inspect", "--json", str(root)]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert printed["provenance"]["epoch"] == 1
    assert printed["provenance"]["metrics"]["per_position"] == [0.7, 0.4]
    assert cli.main(["inspect", str(root)]) == 0
    text = capsys.readouterr().out
    assert "provenance (the run folder):" in text and "accept length 2.10" in text


def test_the_checkpoints_page_shows_the_card_of_a_registered_run(home, tmp_path) -> None:
    from eagle3dash.uploads import register_path
    from tests.appkit import app, frames, no_exception, texts

    register_path(home, speculators_run(tmp_path / "run"))
    at = app("checkpoints")
    no_exception(at)
    cards = [f for f in frames(at) if list(f.columns) == ["Field", "Value"]]
    assert cards, "no provenance card on the Checkpoints page"
    rows = dict(cards[0].values.tolist())
    assert rows["Target"] == "meta-llama/Llama-3.1-8B-Instruct" and rows["Trainer"] == (
        "speculators 0.9.0"
    )
    assert "accept length 2.10 with the bonus token" in texts(at)


def test_a_step_folder_is_read_from_its_state_dict_with_the_draft_config(tmp_path) -> None:
    from safetensors.torch import load_file

    from eagle3dash.checkpoint import inspect_draft, load

    exported = specforge_export(tmp_path / "exported")
    weights = load_file(str(exported / "model.safetensors"))  # SpecForge's midlayer.* names
    step = tmp_path / "run" / "r1-step7"
    step.mkdir(parents=True)
    payload = {"draft_state_dict": weights, "global_step": 7, "strategy": "eagle3", "run_id": "r1"}
    torch.save(payload, step / "training_state.pt")
    report = inspect_draft(step, exported / "config.json")
    assert report.provenance is not None and report.provenance.step == 7
    assert report.spec.aux_layer_ids == (2, 30, 58) and report.problems == []
    _, tensors, _ = load(report.path)
    assert torch.equal(tensors["fc.weight"], weights["fc.weight"])
    assert torch.equal(
        tensors["layers.0.mlp.down_proj.weight"], weights["midlayer.mlp.down_proj.weight"]
    )
    with pytest.raises(CheckpointError, match="no such draft config"):
        inspect_draft(step, tmp_path / "nope.json")


def test_the_local_target_json_digests_are_its_top_level_json_files(tmp_path) -> None:
    import hashlib

    from eagle3dash.provenance import json_digests

    (tmp_path / "config.json").write_text('{"a": 1}')
    (tmp_path / "model.safetensors").write_bytes(b"weights")
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "other.json").write_text("{}")
    assert json_digests(tmp_path) == {"config.json": hashlib.sha256(b'{"a": 1}').hexdigest()}
    assert json_digests(None) == {} and json_digests(tmp_path / "nope") == {}


def test_a_diagnosis_of_a_specforge_step_folder_through_the_double(
    tmp_path_factory, home, served_models
) -> None:
    """The whole diagnosis on a SpecForge 0.2 run folder (the draft from its state dict and the
    draft config given): the trainer comes from the run, so no readings are left unsettled, the
    run's target config digest is checked against the local target, and the Run page shows the
    card and the trainer's eval."""
    from safetensors.torch import load_file

    from eagle3dash.diagnosis.stages import run_diagnosis
    from tests.appkit import double, options

    models = served_models
    run = tmp_path_factory.mktemp("run")
    step = run / "r1-step5"
    step.mkdir()
    target = (
        "directory-stat-v2",
        str(models["target"]),
        (("sha256", "config.json", 10, "0" * 64),),  # not the local target's config
    )
    torch.save(
        {
            "draft_state_dict": load_file(str(models["draft"] / "model.safetensors")),
            "global_step": 5,
            "strategy": "eagle3",
            "run_id": "r1",
            "specforge_model_provenance": (("capture_layers", (0, 1, 2)), ("target_model", target)),
        },
        step / "training_state.pt",
    )
    (run / "r1-latest").symlink_to(step)
    meta = {"run_id": "r1", "step": 5, "score": 0.875, "metric": "eval/simulated_acc_len"}
    meta["metrics"] = {"eval/per_position_acc": [0.5, 0.5, 0.5], "eval/simulated_acc_len": 0.875}
    (run / "r1.best_meta.json").write_text(json.dumps(meta))
    with double(models) as server:
        diagnosis = run_diagnosis(
            options(
                models,
                server.url,
                draft=str(run),
                draft_config=str(models["draft"] / "config.json"),
            )
        )
    assert diagnosis.report.provenance is not None and diagnosis.report.provenance.step == 5
    ids = {f.id: f for f in diagnosis.findings}
    assert "training-layout-unsettled" not in ids
    another = ids["draft-for-another-target"]
    assert "config.json sha256 000000000000..." in another.evidence
    stored = diagnosis.to_dict()["checkpoint"]["provenance"]
    assert stored["capture_layers"] == [0, 1, 2] and stored["chosen_by"] == "latest"
    # the training side names the record its ids came from, not the config
    assert diagnosis.training.source == "run-record"
    assert "training_state.pt specforge_model_provenance" in diagnosis.training.detail

    from eagle3dash import store as db
    from eagle3dash.diagnosis.record import record_diagnosis
    from tests.appkit import app, no_exception, texts

    run_id = db.create_run(home, None, diagnosis.server.url)
    record_diagnosis(home, run_id, diagnosis)
    at = app("run", run=str(run_id))
    no_exception(at)
    shown = texts(at)
    assert "Provenance (the trainer's run folder)" in shown
    # 0.5, 0.25, 0.125 accepted per position: 1 + 0.875 with the bonus token
    assert "accept length 1.88 with the bonus token" in shown


def test_an_epoch_folder_of_a_speculators_run_keeps_the_runs_card(tmp_path) -> None:
    run = speculators_run(tmp_path / "run")
    report = inspect(run / "2")
    assert report.provenance is not None
    assert (report.provenance.chosen_by, report.provenance.epoch) == ("given", 2)
    assert report.provenance.metrics is None  # epoch 2 did not improve: no val_metrics.json
    assert report.path == str(run / "2")


def test_a_truncated_training_state_is_one_line(tmp_path) -> None:
    step = tmp_path / "r1-step1"
    step.mkdir()
    (step / "training_state.pt").write_bytes(b"PK\x03\x04 not really a zip")
    with pytest.raises(CheckpointError, match="cannot be read as a SpecForge training state"):
        inspect(step)


def test_done_when_a_deepseek_specforge_02_draft_through_a_diagnosis(
    tmp_path_factory, served_models
) -> None:
    """A DeepSeek-family SpecForge 0.2 export (transformers 5 config, eagle_config ids, no dump,
    no target) diagnosed on 0.5.23: no critical layout finding and both readings with what
    settles them; then with the trainer and its SGLang 0.5.12 given, the first-id drift is a
    finding with a fix. N = 4, ids [0, 1, 2]: 0.5.23 keeps them (first id 0, not 1): taps 0, 1, 2;
    the HF hook and 0.5.12 add 1: taps 1, 2, 3."""
    import shutil

    from eagle3dash.diagnosis.stages import run_diagnosis
    from tests.appkit import double, options

    models = served_models
    draft = tmp_path_factory.mktemp("export") / "draft"
    shutil.copytree(models["draft"], draft)
    cfg = json.loads((draft / "config.json").read_text())
    cfg["dtype"] = cfg.pop("torch_dtype")
    cfg["transformers_version"] = "5.8.1"
    (draft / "config.json").write_text(json.dumps(cfg))
    how = dict(draft=str(draft), target=None, arch="DeepseekV3ForCausalLM", target_layers=4)
    with double(models) as server:
        assumed = run_diagnosis(options(models, server.url, **how))
        given = run_diagnosis(
            options(
                models,
                server.url,
                **how,
                trainer="specforge",
                training_sglang_version="0.5.12",
            )
        )
    layout_ids = {"layout-mismatch", "capture-error", "capture-rule-version", "aux-ids-not-read"}
    found = {f.id: f for f in assumed.findings}
    assert not [f for f in assumed.findings if f.id in layout_ids and f.severity == "critical"]
    assert found["training-layout-unsettled"].data["readings"] == {
        "specforge": "0,1,2",
        "specforge-hf": "1,2,3",
    }
    assert "--trainer specforge" in found["training-layout-unsettled"].fix
    found = {f.id: f for f in given.findings}
    # the trainer named, its training side is still its rule's reading of the config (assumed),
    # and no cost was measured (no target): a warning that says what would settle it (issue 41)
    assert found["layout-mismatch"].severity == "warning"
    assert "would settle it" in found["layout-mismatch"].evidence
    # on 0.5.23 a first id of 1 is read +1 and any other first id verbatim, so no ids lead with
    # the state after block 1: the fix says why and offers the training release
    assert "cannot lead the list" in found["layout-mismatch"].fix
    drift = found["capture-rule-version"]
    assert drift.data["training_sglang_version"] == "0.5.12"
    assert "serve with SGLang 0.5.12" in drift.fix
    assert "training-layout-unsettled" not in found


# --- the run's record against its export -------------------------------------------------------


def test_done_when_a_specforge_run_whose_record_disagrees_with_its_export_is_warned(
    tmp_path,
) -> None:
    """training_state.pt records capture layers [2, 30, 58]; the export written into the best
    step says [1, 29, 57]: one warning names both lists and which side each is."""
    run = specforge_run(tmp_path / "run", capture_layers=(2, 30, 58))
    spec = tiny_spec(aux_layer_ids=(1, 29, 57), aux_ids_location="eagle_config")
    save(spec, random_tensors(spec, seed=0), run / "r1-step10", "specforge")
    report = inspect(run)
    [problem] = [p for p in report.problems if p.code is ProblemCode.RECORD_IDS_DIFFER]
    assert problem.text.startswith(
        "the run's record (training_state.pt specforge_model_provenance) says training captured "
        "layer ids [2, 30, 58], but the exported config.json's "
        "eagle_config.eagle_aux_hidden_state_layer_ids ids are [1, 29, 57]"
    )
    found = {f.id: f for f in diagnose(Evidence(report=report))}
    warning = found["record-ids-differ"]
    assert warning.severity == "warning"
    assert warning.evidence.startswith(
        "Training (the run's record, training_state.pt specforge_model_provenance): [2, 30, 58]. "
        "Serving (config.json eagle_config.eagle_aux_hidden_state_layer_ids, what the engines "
        "read): [1, 29, 57]."
    )
    assert "checkpoint-problems" not in found  # said once, by its own rule
    # the same run with the draft config given (the state dict made into a model folder)
    from safetensors.torch import load_file

    from eagle3dash.checkpoint import inspect_draft

    exported = specforge_export(tmp_path / "export", ids=(1, 29, 57))
    step = tmp_path / "run2" / "r1-step3"
    step.mkdir(parents=True)
    payload = {
        "draft_state_dict": load_file(str(exported / "model.safetensors")),
        "run_id": "r1",
        "specforge_model_provenance": (("capture_layers", (2, 30, 58)),),
    }
    torch.save(payload, step / "training_state.pt")
    given = inspect_draft(step, exported / "config.json")
    assert [p.code for p in given.problems] == [ProblemCode.RECORD_IDS_DIFFER]


def test_a_speculators_runs_recorded_ids_are_read_as_vllm_numbers(tmp_path) -> None:
    """run.yaml target_layer_ids [1, 10, 20] against top-level [2, 16, 29] in config.json: the
    training side is the record's, vLLM numbering (id k = entering layer k: taps 1, 10, 20), and
    the two lists are a warning."""
    run = speculators_run(tmp_path / "run")
    (run / "run.yaml").write_text(
        RUN_YAML.replace("- 2\n", "- 1\n").replace("- 16", "- 10").replace("- 29", "- 20")
    )
    report = inspect(run)
    card = report.provenance
    assert card is not None and card.capture_layers == (1, 10, 20)
    layouts = predict_layouts(
        report.spec, 32, trainer="speculators", training_ids=card.capture_layers
    )
    assert layouts.training.layout == taps(1, 10, 20)
    [problem] = [p for p in report.problems if p.code is ProblemCode.RECORD_IDS_DIFFER]
    assert "run.yaml target_layer_ids" in problem.text and "[2, 16, 29]" in problem.text
    assert "top-level eagle_aux_hidden_state_layer_ids" in problem.text
