"""The vLLM adapter's parsers on replies written by hand from vLLM 0.33.0's formats
(tests/fixtures/vllm-0.33/README.md): Prometheus counters, per-request metrics, completions, the
server report. Every expected number is counted by hand from the fixture."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from eagle3dash.engines.vllm.client import (
    SpecCounters,
    acceptance_between,
    capture_path,
    parse_completion,
    parse_metrics,
    parse_request_spec,
    parse_vllm_report,
)
from eagle3dash.errors import InputError
from eagle3dash.http_client import EndpointError

FIXTURES = Path(__file__).parent / "fixtures" / "vllm-0.33"


def text(name: str) -> str:
    return (FIXTURES / name).read_text()


def body(name: str) -> dict:
    return json.loads(text(name))


def test_counters_of_one_engine_skip_other_metrics() -> None:
    # a gauge, a _created sample and a histogram sit between the counters: none is read
    assert parse_metrics(text("metrics_before.txt")) == [
        SpecCounters("tiny-target", "0", 100, 300, 150, (70, 50, 30))
    ]


def test_counters_of_two_engines_stay_apart() -> None:
    assert parse_metrics(text("metrics_two_engines.txt")) == [
        SpecCounters("tiny-target", "0", 40, 120, 50, (25, 15, 10)),
        SpecCounters("tiny-target", "1", 60, 180, 66, (36, 20, 10)),
    ]


def test_an_older_vllm_without_per_position_counters() -> None:
    assert parse_metrics(text("metrics_without_per_position.txt")) == [
        SpecCounters("tiny-target", "0", 12, 48, 30, ())
    ]


def test_no_speculation_is_no_counters() -> None:
    assert parse_metrics(text("metrics_no_speculation.txt")) == []


def test_garbage_is_one_clear_error() -> None:
    with pytest.raises(EndpointError) as caught:
        parse_metrics(text("metrics_garbage.html"), "http://127.0.0.1:9")
    message = str(caught.value)
    assert message == (
        "GET http://127.0.0.1:9/metrics has line 1 that is not a Prometheus sample: "
        "is this a vLLM server's Prometheus endpoint?"
    )
    assert caught.value.kind == EndpointError.BAD_RESPONSE


def test_a_counter_that_is_not_a_number_is_named() -> None:
    with pytest.raises(EndpointError, match="line 2 whose value is not a number"):
        parse_metrics('# TYPE x counter\nvllm:spec_decode_num_drafts_total{engine="0"} many\n')


def test_a_skipped_position_is_refused() -> None:
    lines = (
        'vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",position="0"} 1\n'
        'vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",position="2"} 1\n'
    )
    with pytest.raises(EndpointError, match=r"skips draft positions \(it has \[0, 2\]\)"):
        parse_metrics(lines)


def test_label_values_with_escapes_and_commas() -> None:
    line = 'vllm:spec_decode_num_drafts_total{model_name="a \\"quoted\\", name",engine="0"} 3.0\n'
    [counters] = parse_metrics(line)
    assert counters.model_name == 'a "quoted", name'
    assert counters.drafts == 3


def test_acceptance_between_two_reads() -> None:
    delta = acceptance_between(
        parse_metrics(text("metrics_before.txt")), parse_metrics(text("metrics_after.txt"))
    )
    # by hand: 110-100 drafts, 330-300 tokens, 168-150 accepted, per position 8, 6, 4
    assert (delta.drafts, delta.draft_tokens, delta.accepted) == (10, 30, 18)
    assert delta.accepted_per_position == (8, 6, 4)
    assert delta.per_position_rates == pytest.approx((0.8, 0.6, 0.4))
    assert delta.mean_acceptance_length == pytest.approx(2.8)
    assert delta.acceptance_rate == pytest.approx(0.6)


def test_acceptance_sums_the_engines_of_one_model() -> None:
    # from nothing (a server just started) to the two engines' counts: 40+60 drafts, 50+66
    # accepted, positions 25+36, 15+20, 10+10
    delta = acceptance_between([], parse_metrics(text("metrics_two_engines.txt")), "tiny-target")
    assert (delta.drafts, delta.accepted) == (100, 116)
    assert delta.accepted_per_position == (61, 35, 20)
    assert delta.mean_acceptance_length == pytest.approx(2.16)
    assert (
        acceptance_between([], parse_metrics(text("metrics_two_engines.txt")), "other").drafts == 0
    )


def test_counters_that_went_down_mean_a_restart() -> None:
    with pytest.raises(InputError, match="restarted during the benchmark"):
        acceptance_between(
            parse_metrics(text("metrics_after.txt")), parse_metrics(text("metrics_before.txt"))
        )


def test_no_drafts_have_no_rates() -> None:
    delta = acceptance_between(
        parse_metrics(text("metrics_before.txt")), parse_metrics(text("metrics_before.txt"))
    )
    assert delta.mean_acceptance_length is None
    assert delta.per_position_rates == ()


def test_per_request_summary() -> None:
    stats = parse_request_spec(body("completion_summary.json"))
    assert stats is not None
    # 3 steps accepting 0, 1 and 3 drafts: 1 + 2 + 4 = 7 tokens after the prefill's one
    assert stats.acceptance_histogram == (1, 1, 0, 1)
    assert (stats.num_spec_steps, stats.num_accepted_draft_tokens, stats.num_spec_tokens) == (
        3,
        4,
        3,
    )
    assert stats.mean_acceptance_length == pytest.approx(1 + 4 / 3)
    assert stats.per_step_accepted is None


def test_per_request_detailed_keeps_the_steps() -> None:
    stats = parse_request_spec(body("completion_detailed.json"))
    assert stats is not None
    assert stats.per_step_accepted == (2, 1)
    assert stats.per_step_drafted == (2, 2)


def test_per_request_metrics_off_is_none() -> None:
    assert parse_request_spec(body("completion_no_metrics.json")) is None


def test_a_histogram_of_the_wrong_length_is_refused() -> None:
    with pytest.raises(EndpointError, match="histogram of 2 entries for 2 draft tokens"):
        parse_request_spec(body("completion_bad_histogram.json"), "http://h:1")


def test_completion_in_the_engine_neutral_terms() -> None:
    result = parse_completion(body("completion_summary.json"))
    assert result.output_ids == [11, 42, 42, 7, 19, 3, 3, 28]
    assert (result.prompt_tokens, result.completion_tokens) == (5, 8)
    assert result.spec_verify_ct == 3
    assert result.spec_accept_length == pytest.approx(1 + 4 / 3)
    assert result.spec_correct_drafts_histogram == [1, 1, 0, 1]
    assert result.finish_reason == "length"
    assert capture_path(result) is None


def test_completion_names_its_capture_file() -> None:
    result = parse_completion(body("completion_detailed.json"))
    assert capture_path(result) == "/srv/captures/cmpl-91ab-0.safetensors"


def test_completion_without_metrics_has_no_speculative_statistics() -> None:
    result = parse_completion(body("completion_no_metrics.json"))
    assert result.spec_verify_ct is None
    assert result.spec_correct_drafts_histogram is None


@pytest.mark.parametrize(
    "reply",
    [{"choices": []}, {"choices": [{"text": "x"}]}, [1, 2], {"choices": [{"token_ids": "1"}]}],
)
def test_a_completion_that_is_not_vllms(reply: object) -> None:
    with pytest.raises(EndpointError, match="is this a vLLM server"):
        parse_completion(reply)


def test_report_with_dev_endpoints() -> None:
    report = parse_vllm_report(
        "http://h:1",
        "0.33.0",
        body("models.json"),
        parse_metrics(text("metrics_before.txt")),
        body("server_info.json"),
    )
    assert report.engine == "vllm"
    assert (report.version, report.model_path, report.served_model_name) == (
        "0.33.0",
        "/models/tiny-target",
        "tiny-target",
    )
    spec = report.speculative
    assert spec is not None
    assert (spec.algorithm, spec.draft_model_path, spec.num_steps, spec.num_draft_tokens) == (
        "EAGLE3",
        "/drafts/specforge-nested",
        3,
        4,
    )
    assert report.vllm is not None
    assert (report.vllm.runner, report.vllm.runner_source) == ("v1", "env")  # the env says 0
    assert report.vllm.per_request_spec_metrics == "summary"
    assert report.vllm.dev_endpoints is True
    assert report.hidden_states is None  # vLLM's generate returns none


def test_report_without_dev_endpoints_tells_only_the_steps() -> None:
    report = parse_vllm_report(
        "http://h:1",
        "0.33.0",
        body("models.json"),
        parse_metrics(text("metrics_before.txt")),
        None,
    )
    spec = report.speculative
    assert spec is not None
    assert spec.draft_model_path is None  # the form and the CLI ask for it
    assert spec.num_steps == 3  # three per-position counters
    assert report.model_path == "/models/tiny-target"  # the model card's root
    assert report.vllm is not None
    # no /server_info: the runner is not known (each runner's reading is kept)
    assert (report.vllm.runner, report.vllm.runner_source) == (None, "unknown")
    assert report.vllm.per_request_spec_metrics is None


def test_report_of_an_older_vllm_without_dev_endpoints_knows_no_steps() -> None:
    report = parse_vllm_report(
        "http://h:1",
        "0.8.5",
        body("models.json"),
        parse_metrics(text("metrics_without_per_position.txt")),
        None,
    )
    assert report.speculative is not None
    assert report.speculative.num_steps is None


def test_report_without_speculation() -> None:
    report = parse_vllm_report(
        "http://h:1",
        "0.33.0",
        body("models.json"),
        parse_metrics(text("metrics_no_speculation.txt")),
        None,
    )
    assert report.speculative is None
