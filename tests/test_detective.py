"""The layout detective on the demo: the sweep, slot matching, the fc fingerprint, CLI and job."""

from __future__ import annotations

import json
import math

import pytest
import torch

from eagle3dash import capture as capture_mod
from eagle3dash import draft as draft_mod
from eagle3dash.checkpoint import inspect, load
from eagle3dash.cli import main
from eagle3dash.demo import DEMO_PROMPTS, FIXTURES, NUM_LAYERS
from eagle3dash.demo.language import STREAMS, sequences
from eagle3dash.detective import (
    candidate_layouts,
    capture_all_taps,
    detect,
    fc_fingerprint,
    side_states,
    slot_matching,
    sweep,
)
from eagle3dash.errors import InputError
from eagle3dash.layout import Tap
from tests.appkit import frame_with

A_TRAIN = (Tap(0), Tap(1), Tap(2))
SHIFTED = (Tap(1), Tap(2), Tap(3))
ALL_TAPS = tuple(Tap(d) for d in range(NUM_LAYERS + 1)) + (Tap(NUM_LAYERS, True),)


@pytest.fixture(scope="module")
def capture():
    """Four held-out sequences of the eval stream, every tap 0..4 and the final-normed state."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield capture_all_taps(FIXTURES / "target", sequences(STREAMS["eval"], 4))
    finally:
        torch.set_num_threads(threads)


@pytest.fixture
def no_target(monkeypatch):
    """Any target forward or capture from here on fails the test."""

    def refuse(*args, **kwargs):
        raise AssertionError("the sweep ran the target again")

    monkeypatch.setattr(capture_mod, "capture_with_transformers", refuse)
    monkeypatch.setattr("transformers.AutoModelForCausalLM.from_pretrained", refuse)


TAPS_012 = [{"depth": d, "post_norm": False} for d in (0, 1, 2)]  # Tap.to_dict
TAPS_123 = [{"depth": d, "post_norm": False} for d in (1, 2, 3)]


def _serving_capture(capture):
    """What SGLang feeds draft A: only taps 1, 2, 3 of the same sequences."""
    from eagle3dash.capture import Capture, Sequence

    seqs = [
        Sequence(s.input_ids, {t: s.states[t] for t in SHIFTED}, s.target_ids)
        for s in capture.sequences
    ]
    return Capture(SHIFTED, seqs, capture.hidden_size, source="serving")


def _runner_up(rows):
    return next(r for r in rows[1:] if r.layout != rows[0].layout)


def test_capture_holds_every_tap(capture):
    assert capture.taps == ALL_TAPS
    assert len(capture.sequences) == 4
    assert capture.embed_weight is not None


def test_candidates_cover_conventions_shifts_defaults_and_the_users():
    spec = inspect(FIXTURES / "draft-a").spec
    extra = {"mine": (Tap(0), Tap(1), Tap(3)), "too deep": (Tap(3), Tap(4), Tap(5))}
    cands = candidate_layouts(spec, NUM_LAYERS, extra)
    layouts = list(cands.values())
    assert len(layouts) == len(set(layouts))  # deduped
    assert all(len(v) == 3 and all(0 <= t.depth <= NUM_LAYERS for t in v) for v in layouts)
    assert cands["mine"] == (Tap(0), Tap(1), Tap(3))
    assert "too deep" not in cands
    by_layout = {v: k for k, v in cands.items()}
    assert "config ids as hf-index" in by_layout[A_TRAIN]
    assert "shift -1" in by_layout[A_TRAIN]  # output-of shifted back
    assert "SGLang 0.5.23 serving" in by_layout[SHIFTED]
    assert any("defaults" in k for k in cands)
    assert any("with embedding" in k for k in cands)


def test_sweep_names_draft_as_true_layout_and_the_shift(capture, no_target):
    det = detect(FIXTURES / "draft-a", capture=capture)
    rows = det.rows
    assert det.best == rows[0].layout == A_TRAIN
    runner = _runner_up(rows)
    assert rows[0].top1 - runner.top1 >= 0.25
    assert rows[0].sim_accept_length - runner.sim_accept_length >= 0.8
    served = next(r for r in rows if r.layout == SHIFTED)
    assert rows[0].top1 - served.top1 >= 0.5
    assert det.serving == SHIFTED
    assert det.fix_ids == [-1, 0, 1]
    text = " ".join(det.verdict)
    assert "performs best with [0,1,2] (embedding output, after block 1, after block 2)" in text
    assert "SGLang 0.5.23 feeds [1,2,3]" in text and "one block later" in text
    d = det.to_dict()
    assert (
        d["best"]
        == [
            {"depth": 0, "post_norm": False},
            {"depth": 1, "post_norm": False},
            {"depth": 2, "post_norm": False},
        ]
        and d["rows"][0]["gap_sim_accept_length"] == 0.0
    )
    json.dumps(d)


def test_sweep_confirms_the_serving_layout_of_draft_b(capture, no_target):
    det = detect(FIXTURES / "draft-b", capture=capture)
    rows = det.rows
    assert det.best == SHIFTED == det.serving
    assert rows[0].sim_accept_length - _runner_up(rows).sim_accept_length >= 0.3
    assert det.fix_ids is None
    assert "the layout it performs best with" in " ".join(det.verdict)


def test_twenty_layouts_cost_twenty_draft_evaluations_and_no_target_forward(
    capture, no_target, monkeypatch
):
    import itertools

    calls = []
    real = draft_mod.evaluate_capture

    def counted(*args, **kwargs):
        calls.append(args[2])
        return real(*args, **kwargs)

    monkeypatch.setattr(draft_mod, "evaluate_capture", counted)
    layouts = {f"c{i}": c for i, c in enumerate(itertools.combinations(ALL_TAPS, 3))}
    assert len(layouts) == 20
    rows = sweep(FIXTURES / "draft-a", capture, layouts, steps=4)
    assert len(rows) == len(calls) == 20
    assert A_TRAIN in [r.layout for r in rows[:2]]  # (0,1,4n) may edge it: same as 0,1,L3 normed
    assert all(r.sim_accept_length >= rows[-1].sim_accept_length for r in rows)


def test_slot_matching_names_the_shift(capture):
    training = side_states(capture, A_TRAIN)  # a "training dump" of taps 0, 1, 2
    serving = side_states(capture, SHIFTED)  # a "serving capture" of taps 1, 2, 3
    # the serving side comes in another order: sequences pair up by their tokens
    ids = [s.input_ids for s in capture.sequences]
    match = slot_matching(
        {"training": training, "serving": serving[::-1]},
        capture,
        {"training": ids, "serving": ids[::-1]},
    )
    assert match.best("training") == A_TRAIN
    assert match.best("serving") == SHIFTED  # Tap(4) ties Tap(3): the demo's last block is a no-op
    # training slot i is serving slot i-1; the embedding slot has no counterpart
    assert match.correspondence("training", "serving") == {0: None, 1: 0, 2: 1}
    assert all(s.confidence > 0.2 for s in match.sides["training"])
    summary = " ".join(match.summary(NUM_LAYERS))
    assert "one block later" in summary and "(undecided: another tap matches as well)" in summary
    assert "above the next tap's)" in summary  # the training slots are clear
    rms = match.tap_rms
    # scales differ by orders of magnitude
    assert rms[Tap(0)] < 0.1 < rms[Tap(1)] < rms[Tap(2)] < rms[Tap(3)]
    heat = match.heatmap()
    assert len(heat) == 2 * 3 * len(ALL_TAPS)
    assert {"side", "slot", "tap", "cosine", "rel_error", "rms_ratio", "score"} <= set(heat[0])
    json.dumps(match.to_dict())


def test_slot_matching_compares_content_not_only_scale(capture):
    """Tap 3 rescaled to tap 2's RMS is still tap 3 (content), with the scale gap reported."""
    rms2 = torch.cat([s.states[Tap(2)] for s in capture.sequences]).pow(2).mean().sqrt()
    rms3 = torch.cat([s.states[Tap(3)] for s in capture.sequences]).pow(2).mean().sqrt()
    rescaled = [s.states[Tap(3)] * (rms2 / rms3) for s in capture.sequences]
    match = slot_matching({"rescaled": rescaled}, capture)
    slot = match.sides["rescaled"][0]
    assert slot.best.depth in (3, 4)  # 3 and 4 (no-op block), or 4 final-normed: same content
    row = next(r for r in slot.scores if r["tap"] == {"depth": 3, "post_norm": False})
    assert row["cosine"] == pytest.approx(1.0, abs=1e-4)
    assert row["rms_ratio"] == pytest.approx(float(rms2 / rms3), rel=1e-3)


def test_fc_fingerprint_one_finite_row_per_slot():
    for name, hinted in (("draft-a", [0]), ("draft-b", [])):
        spec, tensors, _ = load(FIXTURES / name)
        rows = fc_fingerprint(spec, tensors["fc.weight"])
        assert [r["slot"] for r in rows] == [0, 1, 2]
        for r in rows:
            values = [r["frobenius"], r["mean_col_norm"], *r["top_singular_values"]]
            assert len(r["top_singular_values"]) == 3
            assert all(math.isfinite(v) and v > 0 for v in values)
        assert [r["slot"] for r in rows if r["hint"]] == hinted, name


def test_cli_detect_json_on_the_demo_target(tmp_path, capsys):
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text("".join(json.dumps({"input_ids": p}) + "\n" for p in DEMO_PROMPTS[:6]))
    argv = ["detect", "--draft", str(FIXTURES / "draft-a"), "--target", str(FIXTURES / "target")]
    assert main([*argv, "--prompts", str(prompts), "--layout", "0,1,3", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["best"] == [
        {"depth": 0, "post_norm": False},
        {"depth": 1, "post_norm": False},
        {"depth": 2, "post_norm": False},
    ]
    assert out["serving"] == [
        {"depth": 1, "post_norm": False},
        {"depth": 2, "post_norm": False},
        {"depth": 3, "post_norm": False},
    ]
    assert out["num_sequences"] == 6 and out["capture_seconds"] > 0
    assert any(r["name"].startswith("user layout 0,1,3") for r in out["rows"])
    assert len(out["fingerprint"]) == 3


def test_detect_needs_token_sequences_for_a_target(no_target):
    with pytest.raises(InputError, match="needs token sequences"):
        detect(FIXTURES / "draft-a", target=FIXTURES / "target")


def test_cli_detect_needs_one_source(capsys):
    assert main(["detect", "--draft", str(FIXTURES / "draft-a")]) == 1
    assert "exactly one of --capture" in capsys.readouterr().err


def test_detect_job_on_a_saved_capture_with_a_side(capture, tmp_path, no_target):
    from eagle3dash.capture import save_capture
    from eagle3dash.job_kinds import job_detect

    save_capture(capture, tmp_path / "all")
    save_capture(_serving_capture(capture), tmp_path / "serving")
    result = job_detect(
        {
            "draft": str(FIXTURES / "draft-a"),
            "capture": str(tmp_path / "all"),
            "sides": [f"serving={tmp_path / 'serving'}"],
        },
        lambda fraction, message: None,
    )
    assert result["best"] == [
        {"depth": 0, "post_norm": False},
        {"depth": 1, "post_norm": False},
        {"depth": 2, "post_norm": False},
    ]
    assert result["slot_match"]["best"]["serving"] == [
        {"depth": 1, "post_norm": False},
        {"depth": 2, "post_norm": False},
        {"depth": 3, "post_norm": False},
    ]
    assert result["slot_match"]["heatmap"]


def test_the_run_page_shows_the_detective_when_a_detect_job_succeeded(
    capture, tmp_path, monkeypatch
):
    from pathlib import Path

    from streamlit.testing.v1 import AppTest

    from eagle3dash import jobs as jobq
    from eagle3dash import store as db
    from eagle3dash.capture import save_capture
    from eagle3dash.job_kinds import JOB_KINDS
    from eagle3dash.jobs.worker import run_worker
    from eagle3dash.preloaded import HEAVY

    save_capture(capture, tmp_path / "all")
    save_capture(_serving_capture(capture), tmp_path / "serving")
    home = tmp_path / "home"
    monkeypatch.setenv("EAGLE3DASH_HOME", str(home))
    store = db.open_store(home)
    try:
        run_id = db.create_run(store, None, None)
        params = {
            "draft": str(FIXTURES / "draft-a"),
            "capture": str(tmp_path / "all"),
            "sides": [f"serving={tmp_path / 'serving'}"],
        }
        jobq.submit_job(store, "detect", params, run_id=run_id)
        run_worker(store.home, JOB_KINDS, poll_interval=0.05, once=True, preload=HEAVY)
        job = jobq.list_jobs(store, run_id)[0]
        assert job["status"] == "succeeded", jobq.job_log(store, job["id"])
        db.update_run(store, run_id, status="succeeded")
    finally:
        store.close()
    app = str(Path(__file__).resolve().parents[1] / "eagle3dash" / "dashboard" / "app.py")
    at = AppTest.from_file(app, default_timeout=30)
    at.switch_page("views/run.py")
    at.query_params["run"] = str(run_id)
    at = at.run(timeout=30)
    assert not at.exception, [e.value for e in at.exception]
    assert "Layout detective" in [h.value for h in at.header]
    assert any("performs best with \\[0,1,2\\]" in i.value for i in at.info)
    sweep_table = frame_with(at, "candidate")  # a static table: a long candidate list wraps
    assert sweep_table["layout"].iloc[0] == "[0,1,2]"
    assert any("fingerprint" in s.value for s in at.subheader)
    specs = [json.loads(c.proto.spec) for c in at.get("vega_lite_chart")]
    assert "Which tap each slot carries: the match score of every slot and tap" in [
        spec.get("title") for spec in specs
    ]
