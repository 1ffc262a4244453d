"""The verdict follows the evidence when the world disagrees with the project's model of SGLang.

Each test serves a trained demo draft through the SGLang API double with a knob that makes the
server behave otherwise than eagle3dash's rules predict (other taps fed, another draft behind
the same path, the wrong algorithm, no hidden states), then runs the real diagnosis. The layouts
and numbers asserted are the demo's by construction (eagle3dash/demo/__init__.py): draft A was
trained on [embedding, L1, L2], draft B on [L1, L2, L3]; both configs say ids [0, 1, 2], which
stock SGLang (Llama, +1 rule) reads as [L1, L2, L3].
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import torch
from safetensors import safe_open
from safetensors.torch import save_file

from eagle3dash.demo import FIXTURES, deployments
from eagle3dash.diagnosis.options import DiagnoseOptions
from eagle3dash.diagnosis.stages import run_diagnosis
from eagle3dash.layout import Tap
from eagle3dash.testing.sglang_double import start_double
from tests.specs import run_cli

L0_L1_L2 = (Tap(0), Tap(1), Tap(2))
L1_L2_L3 = (Tap(1), Tap(2), Tap(3))


def options(draft: Path, url: str, **overrides) -> DiagnoseOptions:
    """Small demo diagnoses: 2 prompts of the demo language, 32 new tokens, the target at hand."""
    fields = dict(
        draft=str(draft),
        endpoint=url,
        target=str(FIXTURES / "target"),
        prompts=str(FIXTURES / "prompts.jsonl"),
        num_prompts=2,
        max_new_tokens=32,
        concurrency=1,
        steps=4,
        profile=False,  # the layout's evidence; the profile has tests of its own
    )
    fields.update(overrides)
    return DiagnoseOptions(**fields)


def ids(diagnosis) -> list[str]:
    return [f.id for f in diagnosis.findings]


def another_epoch(source: Path, out: Path) -> Path:
    """A copy of a draft with the same config.json and the same file sizes, other weights (as
    another epoch of the same run would have): every float tensor gets noise of its own scale."""
    shutil.copytree(source, out)
    for path in out.glob("*.safetensors"):
        with safe_open(str(path), framework="pt") as f:
            metadata = f.metadata()
            tensors = {k: f.get_tensor(k) for k in f.keys()}  # noqa: SIM118
        gen = torch.Generator().manual_seed(7)
        for name, t in tensors.items():
            if t.is_floating_point():
                noise = torch.randn(t.shape, generator=gen) * t.float().std().clamp_min(1e-3)
                tensors[name] = (t.float() + 2 * noise).to(t.dtype)
        save_file(tensors, str(path), metadata=metadata)
    return out


def test_a_server_feeding_other_taps_than_predicted_is_observed_and_reported() -> None:
    # Draft B is served [emb, L1, L2] by a patched server; stock SGLang would feed [L1, L2, L3],
    # exactly what B was trained on, so the config-based prediction sees nothing wrong.
    plan = deployments()["correct"]
    config = plan.double_config(enable_return_hidden_states=True, capture_taps=[0, 1, 2])
    with start_double(config) as server:
        diagnosis = run_diagnosis(options(plan.draft_path, server.url))
    assert diagnosis.prediction.diff.kind == "identical"
    assert diagnosis.serving.source == "observed"
    assert diagnosis.serving.layout == L0_L1_L2
    assert diagnosis.serving.prediction == L1_L2_L3
    assert diagnosis.training.layout == L1_L2_L3  # the detective confirms the config
    other = next(f for f in diagnosis.findings if f.id == "server-feeds-other-taps")
    assert other.severity == "critical"
    assert other.data["observed"] == "0,1,2" and other.data["predicted"] == "1,2,3"
    assert all(m > 0 for m in other.data["margins"])
    # The fix is in THIS server's ids: it was seen to feed id i the tap after i blocks, so the
    # training taps after 1, 2 and 3 blocks take ids [1, 2, 3] (stock SGLang: [0, 1, 2]).
    mismatch = next(f for f in diagnosis.findings if f.id == "layout-mismatch")
    assert mismatch.data["config_ids"] == [1, 2, 3]
    assert mismatch.data["ids_from"] == "observed"
    assert '"eagle_aux_hidden_state_layer_ids": [1, 2, 3]' in mismatch.fix
    assert "On a released build (SGLang 0.5.23" in mismatch.fix and "[0, 1, 2]" in mismatch.fix
    assert mismatch.basis == "detective"  # the weaker side: the training side, inferred
    gap = next(f for f in diagnosis.findings if f.id == "training-serving-gap")
    assert diagnosis.training.top1 - diagnosis.serving.top1 >= 0.15
    assert set(gap.data["explained_by"]) >= {"layout-mismatch", "server-feeds-other-taps"}


def test_another_epoch_with_the_same_config_and_sizes_is_another_draft(tmp_path) -> None:
    plan = deployments()["correct"]
    epoch = another_epoch(plan.draft_path, tmp_path / "draft-b-epoch2")
    for name in ("config.json", "model.safetensors"):
        assert (epoch / name).stat().st_size == (plan.draft_path / name).stat().st_size
    assert (epoch / "config.json").read_bytes() == (plan.draft_path / "config.json").read_bytes()
    config = plan.double_config(enable_return_hidden_states=True)
    with start_double(config) as server:
        diagnosis = run_diagnosis(options(epoch, server.url))
    assert diagnosis.identity.status == "differs"
    differs = next(f for f in diagnosis.findings if f.id == "draft-differs")
    assert differs.severity == "critical"
    assert "draft-path-differs" not in ids(diagnosis)


def test_another_draft_behind_the_same_path_shows_as_measured_above_simulated(tmp_path) -> None:
    # The server names the diagnosed checkpoint's path but runs the trained draft B: the path
    # and the content behind it agree, so only the measurements can tell.
    plan = deployments()["correct"]
    epoch = another_epoch(plan.draft_path, tmp_path / "draft-b-epoch2")
    config = plan.double_config(enable_return_hidden_states=True, reported_draft_path=str(epoch))
    with start_double(config) as server:
        # Enough requests for the benchmark's own spread to be smaller than the gap.
        diagnosis = run_diagnosis(options(epoch, server.url, num_prompts=8))
    assert diagnosis.identity.status == "same"
    above = next(f for f in diagnosis.findings if f.id == "measured-above-simulated")
    assert above.severity == "critical"
    assert above.data["measured"] - above.data["simulated"] >= 0.3
    assert diagnosis.root_cause is not None


def test_algorithm_eagle_is_diagnosed_not_refused() -> None:
    plan = deployments()["mismatched"]
    config = plan.double_config(enable_return_hidden_states=True, speculative_algorithm="EAGLE")
    with start_double(config) as server:
        out = run_cli(
            *("diagnose", "--draft", str(plan.draft_path), "--endpoint", server.url),
            *("--target", str(plan.target_path), "--prompts", str(FIXTURES / "prompts.jsonl")),
            *("--num-prompts", "2", "--max-new-tokens", "32", "--concurrency", "1", "--json"),
        )
    assert out.returncode == 0, out.stderr
    result = json.loads(out.stdout)
    assert result["findings"][0]["id"] == "algorithm-eagle"
    assert result["verdict"]["root_cause"]["id"] == "algorithm-eagle"
    # The capture is marked impossible, with the reason; the benchmark still measured.
    assert "one hidden size" in result["serving"]["capture_error"]
    assert result["serving"]["eval"] is None
    assert result["measured"]["accept_length"] is not None
    # The training side was still measured on the target's taps.
    assert result["training"]["source"] == "layout-detective"
    assert result["training"]["top1"] > 0.5


def test_hidden_states_off_is_a_warning_with_the_restart_flag_and_not_checked() -> None:
    plan = deployments()["mismatched"]
    with start_double(plan.double_config(enable_return_hidden_states=False)) as server:
        diagnosis = run_diagnosis(options(plan.draft_path, server.url))
    off = next(f for f in diagnosis.findings if f.id == "hidden-states-off")
    assert off.severity == "warning" and "--enable-return-hidden-states" in off.fix
    # Nothing captured: the layout whose simulated acceptance matches the measured one, which
    # is what SGLang 0.5.23 feeds draft A's ids [0, 1, 2] (outputs of layers 0, 1, 2).
    assert diagnosis.serving.source == "acceptance-matched"
    assert diagnosis.serving.layout == (Tap(1), Tap(2), Tap(3))
    assert "serving-states" in [n.check for n in diagnosis.not_checked]
    verdict = diagnosis.verdict()
    assert verdict["all_checked"] is False and "serving-states" in verdict["not_checked"]


def test_without_a_target_the_training_side_says_it_is_assumed() -> None:
    plan = deployments()["mismatched"]
    with start_double(plan.double_config(enable_return_hidden_states=True)) as server:
        diagnosis = run_diagnosis(options(plan.draft_path, server.url, target=None))
    d = diagnosis.to_dict()
    assert d["training"]["source"] == "config" and d["training"]["measured"] is False
    assert d["serving"]["source"] == "predicted"
    item = next(n for n in d["not_checked"] if n["check"] == "training-side")
    assert item["option"] == "target"


def specforge_dump(out: Path, taps: tuple[Tap, ...], prompts: list[list[int]]) -> Path:
    """A SpecForge offline-feature dump (data_<i>.ckpt: input_ids, loss_mask, aux_hidden_state
    [1, L, A*Ht]) of the demo target at `taps`, as SpecForge's data generation writes it."""
    from eagle3dash.capture import capture_with_transformers

    capture = capture_with_transformers(FIXTURES / "target", prompts, taps)
    out.mkdir()
    for i, seq in enumerate(capture.sequences):
        aux = torch.cat([seq.states[t] for t in taps], dim=-1)[None]
        item = {
            "input_ids": seq.input_ids,
            "loss_mask": torch.ones_like(seq.input_ids),
            "aux_hidden_state": aux,
        }
        torch.save(item, out / f"data_{i}.ckpt")
    return out


def test_a_training_dump_measures_training_and_matches_the_served_slots_by_scale(tmp_path) -> None:
    # Draft A's real training features ([emb, L1, L2]) in a dump that records no layer ids; no
    # target at hand. The dump's slots are labelled with the config's taps ([L1, L2, L3] under
    # SpecForge's reading), but the features are what training used, and the served slots, matched
    # to them by scale, show that serving slot i carries what training slot i+1 carried.
    from eagle3dash.demo import DEMO_PROMPTS

    plan = deployments()["mismatched"]
    dump = specforge_dump(tmp_path / "dump", L0_L1_L2, [list(p) for p in DEMO_PROMPTS[:4]])
    with start_double(plan.double_config(enable_return_hidden_states=True)) as server:
        diagnosis = run_diagnosis(
            options(plan.draft_path, server.url, target=None, train_states=str(dump))
        )
    training, serving = diagnosis.training, diagnosis.serving
    assert training.source == "training-dump" and training.measured
    assert serving.source == "matched-to-dump" and serving.measured
    assert serving.layout[:2] == training.layout[1:]
    assert training.top1 - serving.top1 >= 0.15
    assert {"layout-mismatch", "training-serving-gap"} <= set(ids(diagnosis))
    # The dump's labels are the config's guess, so they say nothing against SGLang's rules.
    assert "server-feeds-other-taps" not in ids(diagnosis)


def test_mode_last_is_not_tried_and_says_which_flag() -> None:
    plan = deployments()["mismatched"]
    with start_double(plan.double_config(return_hidden_states_mode="last")) as server:
        diagnosis = run_diagnosis(options(plan.draft_path, server.url))
    assert diagnosis.serving.source == "acceptance-matched"  # nothing captured
    assert diagnosis.serving.capture_error == (  # the stage's reason: no request was refused
        "the server was started with --return-hidden-states-mode last: it returns only the last "
        "token's hidden state and refuses return_hidden_states=true"
    )
    item = next(n for n in diagnosis.not_checked if n.check == "serving-states")
    assert item.action == "restart the server with --return-hidden-states-mode full"
    assert "hidden-states-last-only" in ids(diagnosis)
    assert "hidden-states-off" not in ids(diagnosis)


def test_prompts_are_cut_to_fit_one_prefill_chunk() -> None:
    # 48-token demo prompts + 32 new + 8 reference tokens = 88 > 64: cut to 24 + 40 = 64.
    plan = deployments()["mismatched"]
    config = plan.double_config(enable_return_hidden_states=True, chunked_prefill_size=64)
    with start_double(config) as server:
        diagnosis = run_diagnosis(options(plan.draft_path, server.url))
    assert diagnosis.serving.capture_error is None and diagnosis.serving.measured
    assert (
        "2 prompt(s) cut to their first 24 tokens for the serving capture, so that each sequence "
        "(40 generated tokens included) fits one prefill chunk of 64 tokens: SGLang returns the "
        "hidden states of the last chunk only"
    ) in diagnosis.warnings


def test_a_chunk_too_small_is_not_checked_with_the_restart_flag_and_the_run_incomplete() -> None:
    plan = deployments()["correct"]
    config = plan.double_config(enable_return_hidden_states=True, chunked_prefill_size=32)
    with start_double(config) as server:
        diagnosis = run_diagnosis(options(plan.draft_path, server.url))
    item = next(n for n in diagnosis.not_checked if n.check == "serving-states")
    # 48 prompt tokens + 32 new + 8 reference tokens.
    assert item.action == (
        "restart the server with --chunked-prefill-size 88 or more (or ask for fewer new tokens)"
    )
    verdict = diagnosis.verdict()
    assert verdict["status"] == "incomplete" and verdict["root_cause"] is None
    # the served taps inferred from the measured acceptance: checked against requests, weaker
    # than an observation
    assert diagnosis.to_dict()["layout_diff"]["evidence"] == "acceptance"


def test_without_the_target_the_layout_comparison_is_assumed_and_the_run_incomplete() -> None:
    plan = deployments()["correct"]
    with start_double(plan.double_config(enable_return_hidden_states=True)) as server:
        diagnosis = run_diagnosis(options(plan.draft_path, server.url, target=None))
    result = diagnosis.to_dict()
    layout = result["layout_diff"]
    assert layout["kind"] == "identical"  # both sides from the config: same, but not checked
    assert (layout["evidence"], layout["checked"]) == ("assumed", False)
    assert (layout["training_evidence"], layout["serving_evidence"]) == ("assumed", "predicted")
    assert {n["check"] for n in layout["would_check"]} == {"training-side", "serving-taps"}
    assert all(n["option"] == "target" for n in layout["would_check"])
    assert result["verdict"]["status"] == "incomplete"
    assert result["verdict"]["root_cause"] is None


def test_a_slot_difference_without_a_measured_cost_is_not_critical() -> None:
    # Draft B was trained on the taps after 1, 2 and 3 blocks; this server feeds the raw last
    # block's output in the last slot. The demo target's 4th block is a no-op, so that state is
    # the one training used: a difference (or none) that costs nothing is never critical.
    plan = deployments()["correct"]
    config = plan.double_config(enable_return_hidden_states=True, capture_taps=[1, 2, 4])
    with start_double(config) as server:
        diagnosis = run_diagnosis(options(plan.draft_path, server.url))
    assert [f.id for f in diagnosis.findings if f.severity == "critical"] == []
    for f in diagnosis.findings:
        if f.id in ("layout-mismatch", "server-feeds-other-taps"):
            assert f.severity == "info", f.to_dict()


def test_a_chunk_too_small_for_the_completion_is_named_in_the_capture_error() -> None:
    plan = deployments()["mismatched"]
    config = plan.double_config(enable_return_hidden_states=True, chunked_prefill_size=32)
    with start_double(config) as server:
        diagnosis = run_diagnosis(options(plan.draft_path, server.url))
    assert diagnosis.serving.source == "acceptance-matched"  # the capture was refused
    assert diagnosis.serving.capture_error == (
        f"{server.url}: prompt 0: the capture sequence would be 88 tokens (48 prompt + 40 "
        "generated), more than the server's chunked_prefill_size 32: SGLang prefills it in "
        "chunks and returns the hidden states of the last chunk only. Ask for fewer new tokens, "
        "or restart the server with --chunked-prefill-size 88 or more"
    )


def test_an_endpoint_without_speculation_is_diagnosed_with_what_could_be_measured() -> None:
    plan = deployments()["mismatched"]
    config = plan.double_config(draft_path=None, speculative_algorithm=None)
    with start_double(config) as server:
        diagnosis = run_diagnosis(options(plan.draft_path, server.url))
    assert diagnosis.root_cause is not None and diagnosis.root_cause.id == "no-speculation"
    assert diagnosis.serving.eval is None
    assert "no speculative decoding" in (diagnosis.serving.capture_error or "")
    assert diagnosis.measured is not None and diagnosis.measured.accept_length is None
    # The draft itself was still measured against the target's taps.
    assert diagnosis.training.source == "layout-detective" and diagnosis.training.top1 > 0.5
