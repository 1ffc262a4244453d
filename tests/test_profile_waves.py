"""The acceptance profile sends its extra prompts in waves and stops once the statistics are
settled: a diagnosis with the profile against the SGLang API double (in-process, no modelled
cost, a fixed seed) over real HTTP, with real draft forwards. On the demo's mismatched deployment
every request accepts about the same (the draft is fed the wrong layers everywhere), so four of
the eight prompts settle each row; on the correct deployment the copy-heavy and novel prompts
accept very differently, so four cannot and every prompt is sent. The expectations are computed
here from the benchmark's own per-request statistics, not by the code under test.
"""

from __future__ import annotations

import math
import statistics
import threading

import pytest

from eagle3dash import cli
from eagle3dash.demo import FIXTURES, NUM_STEPS, deployments
from eagle3dash.demo.serve import PROMPTS
from eagle3dash.diagnosis.options import DiagnoseOptions
from eagle3dash.diagnosis.stages import run_diagnosis
from eagle3dash.diagnosis.stored import load_diagnosis
from eagle3dash.testing.sglang_double import start_double

PROMPTS_SENT = 8


def _diagnose(name: str) -> tuple[object, list[float]]:
    """A diagnosis with the profile of a demo deployment served without modelled cost, and the
    temperature of every generate request the endpoint answered after its benchmark."""
    plan = deployments()[name]
    config = plan.double_config(enable_return_hidden_states=True)
    temperatures: list[float] = []
    lock = threading.Lock()
    with start_double(config) as served:
        answer = served.engine.handle_generate

        def counted(body: dict) -> dict | list:
            with lock:
                temperatures.append(
                    float((body.get("sampling_params") or {}).get("temperature", 1.0))
                )
            return answer(body)

        served.engine.handle_generate = counted  # type: ignore[method-assign]
        options = DiagnoseOptions(
            draft=str(plan.draft_path),
            endpoint=served.url,
            prompts=str(PROMPTS),
            num_prompts=PROMPTS_SENT,
            max_new_tokens=32,
            concurrency=1,
            target=str(FIXTURES / "target"),
            steps=NUM_STEPS,
            temperatures=(0.0, 0.7),
        )
        diagnosis = run_diagnosis(options)
    return diagnosis, temperatures


def _accept_lengths(requests, n: int) -> list[float]:
    """completion_tokens / spec_verify_ct of each of the first n requests (SGLang's meta_info)."""
    return [r.completion_tokens / r.spec_verify_ct for r in requests if r.index < n]


def _two_standard_errors(values: list[float]) -> float:
    return 2 * statistics.stdev(values) / math.sqrt(len(values))


@pytest.fixture(scope="module")
def mismatched():
    return _diagnose("mismatched")


@pytest.fixture(scope="module")
def correct():
    return _diagnose("correct")


def test_settled_rows_stop_after_the_first_wave(mismatched) -> None:
    d, temperatures = mismatched
    profile = d.profile
    assert [r.prompts for r in profile.temperature] == [4, 4]
    assert [r.prompts for r in profile.prompt_format] == [4, 4]
    # only four prompts went out at 0.7 (the capture's requests are greedy)
    assert temperatures.count(0.7) == 4
    # every row is on the benchmark's first four prompts: Σ tokens / Σ verify rounds over them
    first = [r for r in d.measured.requests if r.index < 4]
    by_hand = sum(r.completion_tokens for r in first) / sum(r.spec_verify_ct for r in first)
    assert profile.temperature[0].measured_accept_length == pytest.approx(by_hand)
    raw = profile.prompt_format[0]
    assert raw.format == "raw" and raw.measured_accept_length == pytest.approx(by_hand)
    noise = _two_standard_errors(_accept_lengths(d.measured.requests, 4))
    assert raw.accept_length_noise == pytest.approx(noise)
    # settled: each row's noise beside the benchmark's could not hide a 0.5-token gap
    for row in (profile.temperature[1], profile.prompt_format[1]):
        assert math.hypot(row.accept_length_noise, noise) < 0.5


def test_the_cli_says_which_prompts_the_rows_are_on(mismatched, correct, capsys) -> None:
    """The CLI's report names the prompts the rows cover, as the Run page does, so its raw row
    (the first four prompts) is not read against its headline (all eight)."""
    said = (
        "Every row on the same first 4 of the 8 prompts (the first row: the benchmark's own "
        "requests on them)."
    )
    cli._print_diagnosis(load_diagnosis(mismatched[0].to_dict()))
    out = capsys.readouterr().out
    assert f"prompt formats and temperatures: {said}" in out
    cli._print_diagnosis(load_diagnosis(correct[0].to_dict()))
    assert "Every row on the same first" not in capsys.readouterr().out


def test_unsettled_rows_send_every_prompt(correct) -> None:
    d, temperatures = correct
    profile = d.profile
    # on the first four prompts the benchmark alone is too noisy to settle any row
    assert _two_standard_errors(_accept_lengths(d.measured.requests, 4)) >= 0.5
    assert temperatures.count(0.7) == PROMPTS_SENT
    assert [r.prompts for r in profile.temperature] == [PROMPTS_SENT, PROMPTS_SENT]
    assert [r.prompts for r in profile.prompt_format] == [PROMPTS_SENT, PROMPTS_SENT]
    # on every prompt the rows are the benchmark's own numbers, as before waves
    assert profile.temperature[0].measured_accept_length == d.measured.accept_length
    assert profile.temperature[0].tok_s == d.measured.output_tok_s_aggregate
