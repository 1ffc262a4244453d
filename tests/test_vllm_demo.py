"""The demo's draft B on the vLLM double: V2 cannot serve its SpecForge config on the 4-block demo
target, V1 feeds it every slot one block early and acceptance collapses, the dual-key config
feeds it its training taps (1, 2, 3; written by hand from vLLM 0.33.0's rules)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from eagle3dash.demo.vllm import vllm_deployment, vllm_double_config
from eagle3dash.diagnosis.options import DiagnoseOptions
from eagle3dash.diagnosis.stages import run_diagnosis
from eagle3dash.layout import Tap
from eagle3dash.testing.sglang_double_engine import DoubleStartError
from eagle3dash.testing.vllm_double import start_vllm_double


def diagnose(config, url: str):
    return run_diagnosis(
        DiagnoseOptions(
            draft=str(config.draft_path),
            endpoint=url,
            num_prompts=4,
            max_new_tokens=32,
            concurrency=1,
            profile=False,
        )
    )


def test_v2_cannot_serve_the_nested_ids_on_the_demo_target(tmp_path) -> None:
    # defaults (2, N//2, N-3) = ids 2, 2, 1 for N = 4: two states for fc's three slots
    with pytest.raises(DoubleStartError, match="duplicate ids"):
        start_vllm_double(vllm_deployment("vllm-v2", tmp_path))


def test_v1_shifts_the_demo_draft_and_the_dual_key_config_fixes_it(tmp_path) -> None:
    v1 = vllm_deployment("vllm-v1", tmp_path)
    with start_vllm_double(v1) as server:
        shifted = diagnose(v1, server.url)
    fixed_config = vllm_deployment("vllm-dual-key", tmp_path)
    with start_vllm_double(fixed_config) as server:
        fixed = diagnose(fixed_config, server.url)
    assert shifted.serving.layout == (Tap(0), Tap(1), Tap(2))
    assert fixed.serving.layout == (Tap(1), Tap(2), Tap(3)) == fixed.training.layout
    first = shifted.findings[0]
    # no target given: the training side is assumed and its cost not measured (issue 41)
    assert (first.id, first.severity) == ("layout-mismatch", "warning")
    assert first.data["top_level_ids"] == [1, 2, 3]
    assert "layout-mismatch" not in [f.id for f in fixed.findings]
    assert shifted.measured is not None and fixed.measured is not None
    low, high = shifted.measured.accept_length, fixed.measured.accept_length
    assert low is not None and high is not None
    assert high > low + 1.0  # the trained draft fed its taps accepts far longer chains


def test_try_it_on_vllm_serves_v1_in_processes_of_their_own(tmp_path) -> None:
    # New run's "Try it on the demo", vLLM V1: the endpoint and a baseline without speculation,
    # each a vLLM double in a process of its own; the demo's diagnosis (target at hand) finds
    # the slots one block early (nested ids [0, 1, 2] read as vLLM ids: taps 0, 1, 2) against
    # the taps draft B was trained on (1, 2, 3), and copies the top-level vLLM ids [1, 2, 3].
    from eagle3dash.demo.serve import start_demo

    demo = start_demo("vllm-v1", tmp_path)
    try:
        diagnosis = run_diagnosis(replace(demo.options(), num_prompts=4, profile=False))
    finally:
        demo.stop()
    assert diagnosis.server.engine == "vllm"
    assert diagnosis.serving.layout == (Tap(0), Tap(1), Tap(2))
    assert diagnosis.training.layout == (Tap(1), Tap(2), Tap(3))
    first = diagnosis.findings[0]
    assert (first.id, first.severity) == ("layout-mismatch", "critical")
    assert first.data["top_level_ids"] == [1, 2, 3]
    # The layout detective reads the served taps by vLLM's V1 rules too (taps 0, 1, 2, as the
    # serving side), names the engine, and fixes with vLLM's top-level key: the state after k
    # blocks for taps 1, 2, 3 is ids [1, 2, 3] (vLLM 0.33.0 models/interfaces.py).
    detection = diagnosis.detection
    assert detection is not None and detection.serving == (Tap(0), Tap(1), Tap(2))
    assert detection.best == (Tap(1), Tap(2), Tap(3)) and detection.fix_ids == [1, 2, 3]
    assert detection.verdict[-1] == (
        'Fix: set "eagle_aux_hidden_state_layer_ids": [1, 2, 3] in the draft\'s config.json so '
        "vLLM 0.33.0 (V1 runner) feeds [1,2,3]."
    )
    assert "vLLM 0.33.0 (V1 runner) feeds [0,1,2]" in first.evidence
    assert not [line for line in detection.verdict if "SGLang" in line]
    assert diagnosis.baseline is not None  # the baseline double answered without speculation
    # both doubles pay the SGLang demo's modelled cost (10 ms a forward, 2 ms a draft step); the
    # speedup it shapes is timed by bench/bench_steadiness.py --deployment vllm-v1, not here
    info = diagnosis.server.server_info
    assert (info["eagle3dash_double_delay_s"], info["eagle3dash_double_draft_step_s"]) == (
        0.01,
        0.002,
    )
    baseline = vllm_double_config("vllm-v1", None, baseline=True)
    assert (baseline.method, baseline.delay_s, baseline.draft_step_s) == (None, 0.01, 0.002)


def test_without_a_capture_server_the_training_side_is_simulated_on_the_served_completions(
    tmp_path,
) -> None:
    # vLLM returns no hidden states, so the target's capture runs on each prompt followed by the
    # endpoint's own greedy completion (as the SGLang capture does), and scores only the rows
    # serving drafts from. The dual-key config feeds draft B its training taps, so the training
    # side's simulation replays what the server did: it matches the measured accept length, as
    # the SGLang demo's correct run does (test_demo's gap test). Scored on the prompts' own
    # text instead, it read 1.83 against 3.28 measured.
    from eagle3dash.demo.serve import start_demo

    demo = start_demo("vllm-dual-key", tmp_path)
    try:
        diagnosis = run_diagnosis(replace(demo.options(), num_prompts=4, profile=False))
    finally:
        demo.stop()
    assert diagnosis.training.layout == diagnosis.serving.layout == (Tap(1), Tap(2), Tap(3))
    assert diagnosis.measured is not None and diagnosis.measured.accept_length is not None
    assert diagnosis.training.sim_accept_length == pytest.approx(
        diagnosis.measured.accept_length, abs=0.15
    )
