"""The acceptance profile end to end: `diagnose --json --profile-out` against the demo's "format"
deployment (draft C, trained on the target's chat template) and its baseline, both served by the
SGLang API double over real HTTP, with real draft forwards.
"""

from __future__ import annotations

import contextlib
import csv
import io
import json

import pytest

from eagle3dash.cli import main
from eagle3dash.demo import FIXTURES, deployments
from eagle3dash.demo.serve import PROMPTS, serve_baseline, serve_deployment


@pytest.fixture(scope="module")
def diagnosed(tmp_path_factory) -> tuple[dict, dict, str]:
    """(the diagnosis JSON, the profile file, the CSV text) of one diagnosis with its profile."""
    out = tmp_path_factory.mktemp("profile") / "profile.json"
    plan = deployments()["format"]
    with serve_deployment(plan) as server, serve_baseline(plan) as baseline:
        args = [
            "diagnose",
            "--draft",
            str(plan.draft_path),
            "--endpoint",
            server.url,
            "--baseline",
            baseline.url,
            "--target",
            str(FIXTURES / "target"),
            "--prompts",
            str(PROMPTS),
            "--num-prompts",
            "4",
            "--max-new-tokens",
            "32",
            "--concurrency",
            "1",
            "--json",
            "--profile-out",
            str(out),
        ]
        stdout = io.StringIO()
        with contextlib.redirect_stdout(stdout):
            assert main(args) == 0
    return (
        json.loads(stdout.getvalue()),
        json.loads(out.read_text()),
        out.with_suffix(".csv").read_text(),
    )


def test_the_profile_has_its_five_parts(diagnosed) -> None:
    d, _, _ = diagnosed
    profile = d["profile"]
    assert profile["steps"] == 4
    per_position = profile["per_position"]
    assert per_position["positions"] == [1, 2, 3, 4]
    for line in ("simulated_training", "simulated_serving", "measured"):
        assert len(per_position[line]) == 4
        assert all(0.0 <= x <= 1.0 for x in per_position[line])
    # the serving side's replayed rounds are the server's rounds: at temperature 0 the double
    # runs the same draft forward, so both count the same rounds
    assert per_position["simulated_serving"] == pytest.approx(per_position["measured"], abs=0.02)
    # the demo's prompts alternate copy-heavy and novel: two of each in the first four
    rows = {r["category"]: r for r in profile["per_category"]}
    assert list(rows) == ["copy-heavy", "novel"]
    assert [r["prompts"] for r in rows.values()] == [2, 2]
    assert all(r["speedup"] is not None for r in rows.values())
    # raw (the benchmark itself) and through the demo target's chat template
    formats = [r["format"] for r in profile["prompt_format"]]
    assert formats == ["raw", "chat-template"]
    assert [r["temperature"] for r in profile["temperature"]] == [0.0, 0.7]
    assert profile["temperature"][0]["measured_accept_length"] == d["measured"]["accept_length"]
    advice = profile["steps_advice"]
    assert [r["num_steps"] for r in advice] == list(range(1, 9))
    assert [r["source"] for r in advice] == ["measured"] * 4 + ["simulated"] * 4
    assert all(r["predicted_tok_s"] > 0 for r in advice)
    best = profile["recommended"]
    n = best["num_steps"]
    assert best["flags"] == (
        f"--speculative-num-steps {n} --speculative-eagle-topk 1 "
        f"--speculative-num-draft-tokens {n + 1}"
    )
    assert profile["step_costs"]["source"] == "baseline"
    assert profile["not_profiled"] == []


def test_a_draft_trained_on_the_chat_template_is_caught_served_raw(diagnosed) -> None:
    d, _, _ = diagnosed
    raw, templated = d["profile"]["prompt_format"]
    # draft C was trained on templated prompts (and taught to fail raw ones)
    assert templated["measured_accept_length"] >= raw["measured_accept_length"] + 0.7
    assert templated["sim_accept_serving"] >= raw["sim_accept_serving"] + 0.7
    finding = next(f for f in d["findings"] if f["id"] == "prompt-format-gap")
    assert finding["data"] == {"best": "chat-template", "worst": "raw"}
    assert "trained on another prompt format" in finding["title"]
    # The benchmark sent raw prompts, the worse format: the gap is the run's root cause (issue 36),
    # and no remedy asks for the training side the local target measured.
    assert d["verdict"]["root_cause"]["id"] == "prompt-format-gap"
    assert not any("measure the training side" in f["fix"] for f in d["findings"])


def test_the_profile_file_and_its_csv(diagnosed) -> None:
    d, exported, text = diagnosed
    assert exported["format"] == "eagle3dash-profile" and exported["version"] == 1
    assert exported["profile"] == d["profile"]
    rows = list(csv.DictReader(io.StringIO(text)))
    assert list(rows[0]) == ["part", "row", "metric", "value"]
    raw_row = next(
        r
        for r in rows
        if r["part"] == "prompt_format" and r["row"] == "raw" and r["metric"] == "prompts"
    )
    assert raw_row["value"] == "4"
    parts = {r["part"] for r in rows}
    assert {"per_position", "per_category", "prompt_format", "temperature", "steps_advice"} <= parts


def test_profile_out_without_the_profile_is_refused_before_the_run(tmp_path, capsys) -> None:
    plan = deployments()["correct"]
    args = [
        "diagnose",
        "--draft",
        str(plan.draft_path),
        "--endpoint",
        "http://127.0.0.1:9",  # never reached: the flags are refused first
        "--no-profile",
        "--profile-out",
        str(tmp_path / "p.json"),
    ]
    assert main(args) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["error: --profile-out needs the profile: drop --no-profile"]
    assert not (tmp_path / "p.json").exists()


def test_identical_settings_give_the_same_steps_advice() -> None:
    # The correct deployment (draft B) diagnosed twice with the same settings. Its served 4 steps
    # are the fastest setting at the double's modelled costs (a verify forward 10 ms, a draft step
    # 2 ms; two runs on a quiet machine priced them at 10.2 and 2.0 ms), so the advice keeps them
    # both times, and the gain's interval holds 0. (The format deployment's raw prompts are no
    # such case: there 1 step is predicted about 26% faster with a lower bound near -5%, a coin
    # toss at the noise boundary, and once under the suite's load a run advised 1 step.)
    from eagle3dash.diagnosis.options import DiagnoseOptions
    from eagle3dash.diagnosis.stages import run_diagnosis

    plan = deployments()["correct"]
    with serve_deployment(plan) as server, serve_baseline(plan) as baseline:
        options = DiagnoseOptions(
            draft=str(plan.draft_path),
            endpoint=server.url,
            baseline=baseline.url,
            target=str(FIXTURES / "target"),
            prompts=str(PROMPTS),
            num_prompts=4,
            max_new_tokens=32,
            concurrency=1,
        )
        runs = [run_diagnosis(options).to_dict() for _ in range(2)]
    for run in runs:
        advice = run["profile"]["recommended"]
        assert (advice["num_steps"], advice["changes"]) == (4, False), advice
        assert advice["gain_low"] is not None and advice["gain_low"] <= 0 <= advice["gain_high"]
        assert "num-steps-advice" not in [f["id"] for f in run["findings"]]
