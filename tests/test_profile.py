"""The acceptance profile's arithmetic (eagle3dash/profile.py), on hand-computed numbers.

The benchmark side is real `servebench.RequestStat`/`BenchResult` rows; the standalone draft is a
stand-in with the two methods the profile reads, returning literals.
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from eagle3dash.engines.sglang.words import steps_flags as flags_for
from eagle3dash.engines.vllm import words as vllm_words
from eagle3dash.profile import (
    FROM_BASELINE,
    MEASURED,
    SIMULATED,
    Profile,
    StepCosts,
    accept_length_on_first,
    accept_lengths_by_steps,
    category_rows,
    parse_temperatures,
    per_position,
    rows_settled,
    step_costs,
    steps_advice,
    tok_s_on_first,
    wave_end,
)
from eagle3dash.servebench import BenchResult, RequestStat


def bench(requests: list[RequestStat], histogram: list[int] | None = None, tok_s: float = 100.0):
    """A BenchResult around these rows (the aggregates the profile reads given directly)."""
    return BenchResult(
        url="http://127.0.0.1:1",
        num_requests=len(requests),
        concurrency=1,
        max_new_tokens=64,
        warmup=0,
        wall_s=1.0,
        completion_tokens=sum(r.completion_tokens or 0 for r in requests),
        output_tok_s_aggregate=tok_s,
        output_tok_s_per_request=[],
        output_tok_s_per_request_mean=None,
        accept_length=None,
        accept_length_per_request=[],
        correct_drafts_histogram=histogram,
        latency_p50=None,
        latency_p90=None,
        latency_p99=None,
        server_latency_p50=None,
        server_latency_p90=None,
        server_latency_p99=None,
        errors=0,
        requests=requests,
    )


class Sim:
    """A standalone draft's evaluation: acceptance per step and literal replayed accept lengths."""

    def __init__(self, acceptance, by_steps, over=None, histogram=None):
        self.acceptance = acceptance
        self.steps = len(acceptance)
        self.by_steps = by_steps
        self.over = over or {}
        self.histogram = histogram  # replayed rounds by drafts accepted; None: no chains

    def served_histogram_at(self, steps: int):
        return self.histogram

    def simulated_accept_length(self, steps: int) -> float:
        return self.by_steps[steps]

    def simulated_accept_length_over(self, sequences, steps: int) -> float:
        return self.over[frozenset(sequences)]


def test_per_position_pads_the_measured_shares_past_the_histogram():
    # rounds by accepted drafts [2, 1, 1]: at least 1 in 2 of 4 rounds, at least 2 in 1 of 4
    measured = bench([], histogram=[2, 1, 1])
    sim = Sim([0.9, 0.7, 0.5, 0.3, 0.1], {})
    got = per_position(4, sim, None, measured)
    assert got.positions == [1, 2, 3, 4]
    assert got.measured == [0.5, 0.25, 0.0, 0.0]
    assert got.simulated_training == [0.9, 0.7, 0.5, 0.3]
    assert got.simulated_serving is None


def test_per_position_simulates_rounds_like_the_server_counts_them():
    # replayed rounds [3, 1, 0, 0, 1] by drafts accepted: >= 1 in 2 of 5, >= 2 in 1 of 5
    sim = Sim([0.9, 0.7, 0.5, 0.3], {}, histogram=[3, 1, 0, 0, 1])
    assert per_position(4, None, sim, None).simulated_serving == [0.4, 0.2, 0.2, 0.2]
    # no round replayed: per position, as the chains were scored
    sim = Sim([0.9, 0.7, 0.5, 0.3], {}, histogram=[0, 0, 0, 0, 0])
    assert per_position(4, None, sim, None).simulated_serving == [0.9, 0.7, 0.5, 0.3]


def test_per_position_without_a_histogram_is_none_not_zeros():
    assert per_position(3, None, None, bench([])).measured is None


def test_category_rows_split_requests_and_replays_by_category():
    requests = [
        RequestStat(0, completion_tokens=10, spec_verify_ct=4, latency_s=1.0),
        RequestStat(1, completion_tokens=10, spec_verify_ct=8, latency_s=2.0),
        RequestStat(2, completion_tokens=12, spec_verify_ct=4, latency_s=1.0),
        RequestStat(3, error="boom"),
    ]
    base = [
        RequestStat(0, completion_tokens=10, latency_s=2.0),
        RequestStat(1, completion_tokens=10, latency_s=2.0),
        RequestStat(2, completion_tokens=12, latency_s=2.0),
    ]
    serving = Sim([0.5], {}, over={frozenset({0, 2}): 2.5, frozenset({1, 3}): 1.2})
    rows = category_rows(
        ["chat", "code", "chat", "code"], 4, bench(requests), bench(base), None, serving
    )
    assert [r.category for r in rows] == ["chat", "code"]
    chat, code = rows
    assert chat.prompts == 2
    assert chat.measured_accept_length == pytest.approx(22 / 8)
    assert chat.tok_s == pytest.approx(22 / 2.0)
    assert chat.baseline_tok_s == pytest.approx(22 / 4.0)
    assert chat.speedup == pytest.approx(2.0)
    assert chat.sim_accept_serving == 2.5 and chat.sim_accept_training is None
    # the failed request counts in the prompts, not in the numbers
    assert code.prompts == 2
    assert code.measured_accept_length == pytest.approx(10 / 8)
    assert code.tok_s == pytest.approx(5.0)
    assert code.sim_accept_serving == 1.2


def test_prompts_without_a_category_share_one_row():
    rows = category_rows([None, None], 4, None)
    assert [(r.category, r.prompts, r.measured_accept_length) for r in rows] == [
        ("uncategorised", 2, None)
    ]


def test_waves_start_with_four_prompts_or_a_full_batch_then_double():
    assert [wave_end(0, 8, 1), wave_end(4, 8, 1)] == [4, 8]
    assert [wave_end(0, 16, 1), wave_end(4, 16, 1), wave_end(8, 16, 1)] == [4, 8, 16]
    assert wave_end(0, 16, 6) == 6  # one full batch of the run's concurrency first
    assert wave_end(0, 3, 1) == 3  # never past the prompts
    assert wave_end(8, 10, 1) == 10


def _by_accept_lengths(values: list[float], latency_s: float = 1.0) -> BenchResult:
    """A benchmark whose request i accepted values[i] (20 verify rounds each)."""
    rounds = 20
    return bench(
        [
            RequestStat(
                i, completion_tokens=round(v * rounds), spec_verify_ct=rounds, latency_s=latency_s
            )
            for i, v in enumerate(values)
        ]
    )


def test_rows_settle_once_their_noise_beside_the_reference_cannot_hide_half_a_token():
    reference = _by_accept_lengths([2.0, 2.2, 2.0, 2.2, 4.0, 1.0])
    # first four: mean 2.1, sd 0.11547, se 0.057735; two se added in quadrature over both rows
    steady = _by_accept_lengths([1.5, 1.7, 1.5, 1.7])
    assert rows_settled([steady], reference, 4)  # 2 * hypot(0.0577, 0.0577) = 0.163
    # sd 0.57735, se 0.288675: 2 * hypot(0.2887, 0.0577) = 0.589, a half-token gap could hide
    wide = _by_accept_lengths([1.0, 2.0, 1.0, 2.0])
    assert not rows_settled([wide], reference, 4)
    assert not rows_settled([steady, wide], reference, 4)  # every row must settle
    # the reference on six prompts is wide (sd 0.975, two se 0.796), whatever the row
    assert not rows_settled([steady], reference, 6)
    # one value leaves the noise unknown: not settled
    assert not rows_settled([_by_accept_lengths([1.5])], reference, 1)


def test_a_benchmark_on_its_first_prompts():
    measured = bench(
        [
            RequestStat(0, completion_tokens=30, spec_verify_ct=10, latency_s=0.5),
            RequestStat(1, completion_tokens=20, spec_verify_ct=10, latency_s=0.5),
            RequestStat(2, completion_tokens=40, spec_verify_ct=10, latency_s=2.0),
        ],
        tok_s=77.0,
    )
    measured.accept_length = 3.0
    measured.concurrency = 2
    assert accept_length_on_first(measured, 2) == pytest.approx(2.5)  # 50 tokens / 20 rounds
    assert accept_length_on_first(measured, 3) == 3.0  # all of them: its own
    # 50 tokens over 1.0 s of summed latency, two requests in flight at a time
    assert tok_s_on_first(measured, 2) == pytest.approx(100.0)
    assert tok_s_on_first(measured, 1) == pytest.approx(60.0)  # one prompt: one in flight
    assert tok_s_on_first(measured, 3) == 77.0
    assert tok_s_on_first(None, 2) is None


def test_step_costs_need_a_baseline():
    # without one, nothing tells a verify forward from a draft step
    measured = bench([RequestStat(0, completion_tokens=30, spec_verify_ct=10, latency_s=0.52)])
    assert step_costs(measured, [0.02], steps=4, baseline=None) is None


def test_step_costs_take_the_verify_cost_from_the_baseline():
    # fixed 0.02 s (median of the one-token requests); a request of 10 verify rounds took
    # 0.52 s: 0.05 s a round
    measured = bench([RequestStat(0, completion_tokens=30, spec_verify_ct=10, latency_s=0.52)])
    # the baseline: 64 tokens in 0.02 + 63 * 0.01 s: a verify forward 0.01, 4 steps share 0.04
    baseline = bench([RequestStat(0, completion_tokens=64, latency_s=0.65)])
    costs = step_costs(measured, [0.03, 0.02, 0.01], steps=4, baseline=baseline)
    assert costs is not None
    assert costs.request_fixed_s == pytest.approx(0.02)
    assert costs.verify_s == pytest.approx(0.01)
    assert costs.draft_step_s == pytest.approx(0.01)
    assert costs.source == FROM_BASELINE


def test_step_costs_need_timings():
    measured = bench([RequestStat(0, completion_tokens=30, spec_verify_ct=10, latency_s=0.5)])
    baseline = bench([RequestStat(0, completion_tokens=64, latency_s=0.65)])
    assert step_costs(measured, [], steps=4, baseline=baseline) is None
    failed = bench([RequestStat(0, error="x")])
    assert step_costs(failed, [0.02], steps=4, baseline=baseline) is None


# Measured shares at the served 4 steps and a simulation to 8 steps (hand-computed below).
SHARES_HISTOGRAM = [2, 2, 2, 2, 2]  # 10 rounds: >=1: 0.8, >=2: 0.6, >=3: 0.4, >=4: 0.2
SIM = {1: 1.9, 2: 2.6, 3: 3.1, 4: 3.5, 5: 3.8, 6: 4.0, 7: 4.1, 8: 4.15}


def test_accept_lengths_measured_up_to_the_served_steps_then_scaled_simulation():
    measured = bench([], histogram=SHARES_HISTOGRAM)
    rows = accept_lengths_by_steps(4, measured, Sim([0.0] * 8, SIM))
    # measured: 1 + 0.8, + 0.6, + 0.4, + 0.2; past 4: 1 + (sim - 1) * (3.0 - 1) / (3.5 - 1)
    expected = [
        (1, 1.8, MEASURED),
        (2, 2.4, MEASURED),
        (3, 2.8, MEASURED),
        (4, 3.0, MEASURED),
        (5, 3.24, SIMULATED),
        (6, 3.4, SIMULATED),
        (7, 3.48, SIMULATED),
        (8, 3.52, SIMULATED),
    ]
    assert [(s, round(e, 6), src) for s, e, src in rows] == expected


def test_accept_lengths_without_a_simulation_stop_at_the_served_steps():
    rows = accept_lengths_by_steps(4, bench([], histogram=SHARES_HISTOGRAM), None)
    assert [s for s, _, _ in rows] == [1, 2, 3, 4]


def test_steps_advice_prices_each_setting_and_prefers_fewer_steps_within_one_percent():
    requests = [RequestStat(0, completion_tokens=64, spec_verify_ct=21, latency_s=0.3)]
    measured = bench(requests, histogram=SHARES_HISTOGRAM, tok_s=100.0)
    costs = StepCosts(verify_s=0.01, draft_step_s=0.001, request_fixed_s=0.02, source="x")
    rows, best = steps_advice(4, measured, Sim([0.0] * 8, SIM), costs, flags=flags_for)
    # time(s) = 0.02 + 63 / E(s) * (0.01 + s * 0.001); tok/s(s) = 100 * time(4) / time(s)
    expected = {1: 77.531, 2: 93.731, 3: 100.48, 4: 100.0, 5: 100.749, 6: 99.219, 8: 91.77}
    got = {r.num_steps: round(r.predicted_tok_s, 3) for r in rows}
    assert {s: got[s] for s in expected} == expected
    # per round 3.0 at 4 steps; reported as SGLang counts it: 64 tokens over 63 / 3.0 rounds
    assert rows[3].predicted_accept_length == pytest.approx(3.0 * 64 / 63)
    # 5 steps is fastest (100.749), but 3 steps is within 1% of it with fewer draft steps;
    # +0.48% is below 5% (and no per-request spread is known): the served 4 steps stay.
    assert best is not None
    assert best.fastest_num_steps == 3 and best.gain == pytest.approx(0.0048)
    assert (best.num_steps, best.changes, best.gain_low) == (4, False, None)
    assert best.current_num_steps == 4 and best.current_tok_s == 100.0
    assert best.flags == (
        "--speculative-num-steps 4 --speculative-eagle-topk 1 --speculative-num-draft-tokens 5"
    )


def _costly_drafts(per_request_tok_s: list[float]):
    """Draft steps half a verify forward: E(s) 1.8, 2.4, 2.8, 3.0 from the histogram; time(s) =
    0.02 + 63 / E(s) * (0.01 + 0.005 s): 0.545, 0.545, 0.5825, 0.65 s."""
    requests = [RequestStat(0, completion_tokens=64, spec_verify_ct=21, latency_s=0.3)]
    measured = replace(
        bench(requests, histogram=SHARES_HISTOGRAM, tok_s=100.0),
        output_tok_s_per_request=per_request_tok_s,
    )
    costs = StepCosts(verify_s=0.01, draft_step_s=0.005, request_fixed_s=0.02, source="x")
    return steps_advice(4, measured, None, costs, flags=flags_for)[1]


def test_steps_advice_changes_the_setting_only_above_the_noise():
    # 1 step: 100 * 0.65 / 0.545 = 119.27 tok/s, gain +19.27%. Per-request tok/s 95 and 105:
    # SE 5, two SE 10 = 10% of the mean, so the gain is 0.1927 -/+ 1.1927 * 0.1 = 7.3% .. 31.2%.
    best = _costly_drafts([95.0, 105.0])
    assert (best.num_steps, best.fastest_num_steps, best.changes) == (1, 1, True)
    assert best.gain == pytest.approx(0.19266, abs=1e-4)
    assert best.gain_low == pytest.approx(0.07339, abs=1e-4)
    assert best.gain_high == pytest.approx(0.31193, abs=1e-4)
    # Per-request tok/s 60 and 140: two SE = 80% of the mean; the gain's lower bound is below 0.
    noisy = _costly_drafts([60.0, 140.0])
    assert (noisy.num_steps, noisy.fastest_num_steps, noisy.changes) == (4, 1, False)
    assert noisy.gain_low == pytest.approx(0.19266 - 1.19266 * 0.8, abs=1e-4)
    # The same settings and measurements: the same recommendation.
    assert _costly_drafts([60.0, 140.0]) == noisy


def test_each_predicted_setting_carries_its_interval():
    # Per-request tok/s 95 and 105: two standard errors are 10% of their mean, so 1 step's
    # 119.27 tok/s is ±11.93 and the served 4 steps' 100.0 is ±10.0 (the chart's error bars).
    requests = [RequestStat(0, completion_tokens=64, spec_verify_ct=21, latency_s=0.3)]
    measured = replace(
        bench(requests, histogram=SHARES_HISTOGRAM, tok_s=100.0),
        output_tok_s_per_request=[95.0, 105.0],
    )
    costs = StepCosts(verify_s=0.01, draft_step_s=0.005, request_fixed_s=0.02, source="x")
    rows, _ = steps_advice(4, measured, None, costs, flags=flags_for)
    assert [r.tok_s_noise for r in rows] == pytest.approx([11.927, 11.927, 11.159, 10.0], abs=1e-3)


def test_steps_advice_without_costs_predicts_accept_length_only():
    measured = bench([], histogram=SHARES_HISTOGRAM)
    rows, best = steps_advice(4, measured, None, None, flags=flags_for)
    assert [r.predicted_tok_s for r in rows] == [None] * 4
    assert best is None


def test_each_engine_has_its_own_flags_for_chain_drafting():
    assert flags_for(1) == (
        "--speculative-num-steps 1 --speculative-eagle-topk 1 --speculative-num-draft-tokens 2"
    )
    assert vllm_words.steps_flags(2, "/m/d") == (
        '--speculative-config \'{"method": "eagle3", "model": "/m/d", '
        '"num_speculative_tokens": 2}\''
    )


@pytest.mark.parametrize(
    ("text", "expected"),
    [("0,0.7", (0.0, 0.7)), (" 1, 0 ,0.70,", (0.0, 0.7, 1.0)), ("0.5", (0.5,))],
)
def test_parse_temperatures(text, expected):
    assert parse_temperatures(text) == expected


@pytest.mark.parametrize(
    ("text", "message"),
    [("hot", "'hot' is not a number"), ("3", "outside 0..2"), (",", "at least one")],
)
def test_parse_temperatures_refuses(text, message):
    with pytest.raises(ValueError, match=message):
        parse_temperatures(text)


def test_profile_round_trips_through_its_json_form():
    measured = bench([], histogram=SHARES_HISTOGRAM)
    rows, _ = steps_advice(4, measured, None, None, flags=flags_for)
    profile = Profile(steps=4, per_position=per_position(4, None, None, measured))
    profile.steps_advice = rows
    again = Profile.from_dict(profile.to_dict())
    assert again == profile
    assert again.to_dict()["per_position"]["measured"] == [0.8, 0.6, 0.4, 0.2]


# --- the profile's findings ------------------------------------------------------------------


def findings_of(profile: Profile) -> dict[str, list]:
    from eagle3dash.findings import Evidence
    from eagle3dash.findings.profile_rules import (
        rule_category_far_below,
        rule_num_steps_advice,
        rule_prompt_format_gap,
    )

    e = Evidence(profile=profile)
    return {
        "rule_category_far_below": rule_category_far_below(e, []),
        "rule_prompt_format_gap": rule_prompt_format_gap(e),
        "rule_num_steps_advice": rule_num_steps_advice(e, []),
    }


def profile_with(**parts) -> Profile:
    return Profile(steps=4, per_position=per_position(4, None, None, None), **parts)


def test_a_category_far_below_the_others_is_named():
    from eagle3dash.profile import CategoryRow

    rows = [
        CategoryRow("chat", 2, measured_accept_length=3.0),
        CategoryRow("code", 2, measured_accept_length=2.8),
        CategoryRow("math", 2, measured_accept_length=1.9),  # 0.9 below the median 2.9
        CategoryRow("json", 2, measured_accept_length=None, sim_accept_serving=2.9),
    ]
    (finding,) = findings_of(profile_with(per_category=rows))["rule_category_far_below"]
    # No training side per category: not known to be the draft's own weakness, so a warning.
    assert finding.id == "category-far-below" and finding.severity == "warning"
    assert finding.data == {"categories": ["math"], "weak_in_training": None}
    assert "whether the draft itself is weak there was not measured" in finding.title
    assert "math (2 prompts): serving accept length 1.90 against 2.90" in finding.evidence
    assert "training side not measured" in finding.evidence


def test_a_category_weak_on_both_sides_is_an_info_note_weak_only_in_serving_a_warning():
    from eagle3dash.profile import CategoryRow

    rows = [
        # Weak on both sides (2.46 and 2.50 against 4.92): the draft, not the deployment.
        CategoryRow("novel", 4, 2.46, sim_accept_training=2.50, sim_accept_serving=2.46),
        CategoryRow("copy-heavy", 4, 4.92, sim_accept_training=4.92, sim_accept_serving=4.92),
        # Weak in serving only (1.9 against a median 3.69; training 4.8 against 3.71).
        CategoryRow("math", 4, 1.9, sim_accept_training=4.8, sim_accept_serving=1.9),
    ]
    found = findings_of(profile_with(per_category=rows))["rule_category_far_below"]
    assert [(f.severity, f.data["categories"]) for f in found] == [
        ("info", ["novel"]),
        ("warning", ["math"]),
    ]
    assert found[0].title == (
        "The draft is weak on novel prompts, on the training side as in serving."
    )
    assert "add" not in found[0].fix.lower().split()  # asks for no data that cannot exist


def test_no_category_note_while_a_critical_layout_finding_stands():
    from eagle3dash.findings import Evidence, Finding
    from eagle3dash.findings.profile_rules import rule_category_far_below
    from eagle3dash.profile import CategoryRow

    rows = [CategoryRow("a", 2, 3.0), CategoryRow("b", 2, 2.8), CategoryRow("c", 2, 1.0)]
    e = Evidence(profile=profile_with(per_category=rows))
    broken = Finding("layout-mismatch", "critical", "T.", "E", "F")
    assert rule_category_far_below(e, [broken]) == []
    assert len(rule_category_far_below(e, [])) == 1


def test_categories_close_together_make_no_finding():
    from eagle3dash.profile import CategoryRow

    # 2.5 is 0.5 below 3.0 but above 80% of it: not far below
    rows = [CategoryRow("chat", 2, 3.0), CategoryRow("code", 2, 2.5), CategoryRow("x", 2, 3.0)]
    assert findings_of(profile_with(per_category=rows))["rule_category_far_below"] == []


def test_a_prompt_format_gap_names_both_formats():
    from eagle3dash.profile import FormatRow

    rows = [FormatRow("raw", 8, 1.3, 1.4), FormatRow("chat-template", 8, 2.9, 3.0)]
    (finding,) = findings_of(profile_with(prompt_format=rows))["rule_prompt_format_gap"]
    assert finding.id == "prompt-format-gap"
    assert "2.90 on chat-template prompts but 1.30 on raw prompts" in finding.title
    assert finding.data == {"best": "chat-template", "worst": "raw"}


def test_formats_alike_make_no_finding():
    from eagle3dash.profile import FormatRow

    rows = [FormatRow("raw", 8, 2.8), FormatRow("chat-template", 8, 2.9)]
    assert findings_of(profile_with(prompt_format=rows))["rule_prompt_format_gap"] == []


def test_a_faster_steps_setting_is_advised_from_five_percent():
    from eagle3dash.profile import Recommendation

    def advice(predicted: float, changes: bool) -> list:
        gain = predicted / 100.0 - 1
        best = Recommendation(
            2, 2.4, predicted, 4, 100.0, flags_for(2), 2, gain, gain - 0.08, gain + 0.08, changes
        )
        return findings_of(profile_with(recommended=best))["rule_num_steps_advice"]

    (finding,) = advice(110.0, True)
    assert finding.severity == "info" and finding.fix == flags_for(2)
    assert finding.title == (
        "--speculative-num-steps 2 is predicted 10% faster than the served 4 (+2% to +18% with "
        "the per-request noise)."
    )
    assert advice(104.0, False) == []


def test_steps_advice_is_withheld_while_a_critical_finding_stands():
    from eagle3dash.findings import Evidence, Finding
    from eagle3dash.findings.profile_rules import rule_num_steps_advice
    from eagle3dash.profile import Recommendation

    best = Recommendation(1, 1.2, 134.0, 4, 100.0, flags_for(1), 1, 0.34, 0.2, 0.48, True)
    e = Evidence(profile=profile_with(recommended=best))
    broken = Finding("layout-mismatch", "critical", "T.", "E", "F")
    assert rule_num_steps_advice(e, [broken]) == []
    assert len(rule_num_steps_advice(e, [])) == 1


def test_a_slowdown_fix_names_the_steps_advice_setting():
    from eagle3dash.findings import Evidence
    from eagle3dash.findings.measurement_rules import rule_slower_than_baseline
    from eagle3dash.profile import Recommendation

    best = Recommendation(1, 1.2, 62.8, 4, 47.1, flags_for(1), 1, 0.33, 0.2, 0.46, True)
    e = Evidence(
        measured=bench([], tok_s=50.0),
        baseline=bench([], tok_s=100.0),
        profile=profile_with(recommended=best),
    )
    (finding,) = rule_slower_than_baseline(e, [])
    assert finding.fix == (
        "The accept length is not the cause; lower the batch or draft cost: "
        "--speculative-num-steps 1 --speculative-eagle-topk 1 --speculative-num-draft-tokens 2 "
        "(the steps advice's recommendation) and --cuda-graph-max-bs 1 (the request "
        "concurrency)."
    )


def test_a_slowdown_fix_never_asks_for_the_served_steps():
    """The advice keeps the served 4 steps (1 step predicts +3%, within the noise): the fix names
    no steps setting, never the 4 the server runs as "the fastest" (issue 36)."""
    from eagle3dash.findings import Evidence
    from eagle3dash.findings.measurement_rules import rule_slower_than_baseline
    from eagle3dash.profile import Recommendation

    keep = Recommendation(4, 1.6, 50.0, 4, 50.0, flags_for(4), 1, 0.03, -0.1, 0.16, False)
    e = Evidence(
        measured=bench([], tok_s=50.0),
        baseline=bench([], tok_s=100.0),
        profile=profile_with(recommended=keep),
    )
    (finding,) = rule_slower_than_baseline(e, [])
    assert "--speculative-num-steps" not in finding.fix
    assert finding.fix == (
        "The accept length is not the cause; lower the batch or draft cost: --cuda-graph-max-bs "
        "1 (the request concurrency)."
    )


def test_a_prompt_format_gap_within_the_requests_noise_makes_no_finding():
    from eagle3dash.profile import FormatRow

    # 2.90 against 1.30: 1.60 apart, but each row's requests spread ±1.20: hypot 1.70 > 1.60.
    rows = [
        FormatRow("raw", 2, 1.3, accept_length_noise=1.2),
        FormatRow("chat-template", 2, 2.9, accept_length_noise=1.2),
    ]
    assert findings_of(profile_with(prompt_format=rows))["rule_prompt_format_gap"] == []
    rows[0].accept_length_noise = rows[1].accept_length_noise = 0.3  # hypot 0.42 < 1.60
    assert len(findings_of(profile_with(prompt_format=rows))["rule_prompt_format_gap"]) == 1
