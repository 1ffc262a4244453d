"""The diagnosis's time budget: stage timings, the progress bar weighted by expected seconds, the
costs learnt from earlier runs, and the words that show them (no clock is asserted: a fake
clock drives the timings)."""

from __future__ import annotations

import pytest

from eagle3dash.diagnosis import stages
from eagle3dash.diagnosis.options import DiagnoseOptions
from eagle3dash.diagnosis.stages import (
    BASELINE,
    BENCHMARK,
    INSPECT,
    PROBE,
    Stages,
    earlier_timings,
    expected_seconds,
    stage_units,
    unit_costs,
)
from eagle3dash.ui.timings import timing_lines, timing_rows


def demo_like(**kw) -> DiagnoseOptions:
    base = dict(draft="d", endpoint="e", baseline="b", target="t", num_prompts=8, max_new_tokens=64)
    return DiagnoseOptions(**{**base, **kw})


def test_expected_seconds_follow_the_requests_each_stage_sends() -> None:
    # 8 prompts x 64 tokens = 512 tokens at 0.011 s a token; each benchmark (the endpoint's, the
    # baseline's) adds one warmup request (64 tokens); the capture keeps the benchmark's
    # completions: per prompt 8 tokens of reference tail and one token with the hidden states
    # (8 x 9 = 72); the profile: one more benchmark for 0.7, and through the chat template a
    # benchmark (512) and a capture that keeps its completions (72). A bug pricing the profile as
    # one stage, or the capture as generating its completions again, changes these.
    expected = expected_seconds(demo_like())
    assert expected == pytest.approx(
        {
            "inspect": 0.1,
            "probe": 0.3,
            "capture_serving": 0.792,
            "capture_target": 3.0,
            "detective": 1.0,
            "evaluate": 0.5,
            "benchmark": 6.336,
            "baseline": 6.336,
            "profile_temperatures": 5.632,
            "profile_formats": 6.424,
            "profile_steps": 0.3,
        }
    )
    no_profile = expected_seconds(demo_like(profile=False, temperatures=(0.0,)))
    assert "profile_formats" not in no_profile and "profile_steps" not in no_profile
    assert stage_units(demo_like(temperatures=(0.0, 0.5, 1.0)))["profile_temperatures"] == 1024


def test_the_bar_moves_by_expected_seconds_not_by_stage_count() -> None:
    seen: list[tuple[float, str]] = []
    bar = Stages((INSPECT, PROBE), lambda f, m: seen.append((f, m)), {"inspect": 1, "probe": 3})
    bar.report(INSPECT)
    bar.report(PROBE, 0.5, "probing http://x")
    bar.report(PROBE, 2.0)  # past the end: held at the stage's end
    assert seen == [
        (0.0, "stage 1/2: inspecting the checkpoint"),
        (0.625, "stage 2/2: probing http://x"),  # 1/4 + 3/4 * 0.5
        (1.0, "stage 2/2: probing the endpoint"),
    ]


def test_timings_add_each_stages_wall_time(monkeypatch) -> None:
    clock = iter([100.0, 100.0, 101.5, 101.5, 104.0, 104.0, 104.25, 104.25])
    monkeypatch.setattr(stages.time, "perf_counter", lambda: next(clock))
    bar = Stages((BENCHMARK, BASELINE), lambda f, m: None)
    bar.report(BENCHMARK)  # starts at 100.0
    bar.report(BASELINE)  # benchmark: 1.5 s; baseline starts at 101.5
    bar.report(BENCHMARK)  # baseline: 2.5 s; benchmark again from 104.0
    bar.close()  # +0.25 s
    assert bar.timings == {"benchmark": 1.75, "baseline": 2.5}


def test_interleaved_benchmarks_time_each_side_on_one_bar(monkeypatch) -> None:
    """The endpoint's and the baseline's waves alternate: each side's clock runs during its own
    waves, and the bar crosses both stages' spans by the requests done, never moving back."""
    # Stages starts at 99.0; each switch reads the clock twice (the one ending, the one starting)
    clock = iter([99.0, 100.0, 101.0, 101.0, 103.0, 103.0, 104.0, 104.0, 106.5])
    monkeypatch.setattr(stages.time, "perf_counter", lambda: next(clock))
    seen: list[tuple[float, str]] = []
    bar = Stages(
        (INSPECT, BENCHMARK, BASELINE),
        lambda f, m: seen.append((f, m)),
        {"inspect": 2, "benchmark": 4, "baseline": 4},
    )
    step = bar.together((BENCHMARK, BASELINE), "pair")
    step(BENCHMARK, 1, 4)  # the endpoint's first wave from 100.0
    step(BASELINE, 2, 4)  # the baseline's from 101.0
    step(BENCHMARK, 3, 4)  # the endpoint again from 103.0
    step(BASELINE, 4, 4)  # the baseline again from 104.0
    bar.close()  # at 106.5
    assert bar.timings == {"benchmark": 2.0, "baseline": 4.5}
    assert [f for f, _ in seen] == pytest.approx([0.4, 0.6, 0.8, 1.0])  # 0.2 + 0.8 * done/4
    assert [m for _, m in seen] == [
        "stage 2/3: pair (1/4 requests)",
        "stage 3/3: pair (2/4 requests)",
        "stage 2/3: pair (3/4 requests)",
        "stage 3/3: pair (4/4 requests)",
    ]


def test_earlier_runs_teach_the_cost_of_a_unit() -> None:
    # Two earlier runs benchmarked 16 prompts x 64 tokens (the defaults) and 8 x 64, each after
    # one warmup request of 64 tokens: 21.76 s over 1088 tokens and 5.76 s over 576 are 0.02 and
    # 0.01 s a token, median 0.015. The first's "demo" option is not a
    # diagnosis option and must not drop it; a row without a draft is another version's and
    # is left out; a stage never timed keeps its default.
    rows = [
        ({"benchmark": 21.76}, {"draft": "d", "endpoint": "e", "demo": "mismatched"}),
        ({"benchmark": 5.76}, {"draft": "d", "endpoint": "e", "num_prompts": 8}),
        ({"benchmark": 99.0}, {"endpoint": "e"}),
    ]
    earlier = earlier_timings(rows)
    assert [o.num_prompts for _, o in earlier] == [16, 8]
    costs = unit_costs(earlier)
    assert costs["benchmark"] == pytest.approx(0.015)
    assert costs["capture_target"] == 3.0
    assert expected_seconds(demo_like(), costs)["benchmark"] == pytest.approx(576 * 0.015)


def test_where_the_time_went_in_words() -> None:
    # Rows in the order the run's stages ran: an older run captured, then benchmarked.
    timings = {"total": 20.0, "probe": 1.0, "capture_serving": 4.0, "benchmark": 5.0}
    assert timing_rows(timings) == [
        {"stage": "probe the endpoint", "seconds": 1.0, "share": "5%"},
        {"stage": "capture what the server feeds the draft", "seconds": 4.0, "share": "20%"},
        {"stage": "benchmark the endpoint", "seconds": 5.0, "share": "25%"},
    ]
    lines = timing_lines(timings)
    assert lines[0] == "where the time went (20.0 s):"
    assert lines[3].split() == ["benchmark", "the", "endpoint", "5.0", "s", "25%"]
    now = {"probe": 1.0, "benchmark": 5.0, "capture_serving": 4.0, "total": 20.0}
    assert [r["stage"] for r in timing_rows(now)] == [
        "probe the endpoint",
        "benchmark the endpoint",
        "capture what the server feeds the draft",
    ]
    assert timing_lines({}) == []
