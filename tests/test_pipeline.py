"""The diagnose pipeline end to end against the SGLang API double (real HTTP, real forwards)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from eagle3dash.diagnosis.stages import run_diagnosis
from eagle3dash.layout import Tap
from tests.appkit import double, options
from tests.specs import run_cli


@pytest.fixture(scope="module")
def models(served_models) -> dict[str, Path]:
    """The test world's 4-layer tiny target and random draft whose config ids are [0, 1, 2]."""
    return served_models


def test_seed_like_mismatch_is_the_first_finding(models) -> None:
    # Training fed [emb, L1, L2] (HF indices 0, 1, 2); SGLang adds +1 and feeds [L1, L2, L3].
    with double(models) as server:
        diagnosis = run_diagnosis(
            options(models, server.url, training_layout=(Tap(0), Tap(1), Tap(2)))
        )
    result = diagnosis.to_dict()
    assert [t["depth"] for t in result["training"]["layout"]] == [0, 1, 2]
    assert [t["depth"] for t in result["serving"]["layout"]] == [1, 2, 3]
    first = result["findings"][0]
    assert first["id"] == "layout-mismatch" and first["severity"] == "critical"
    assert "[-1, 0, 1]" in first["fix"]
    # Consecutive taps: every slot is one block later (the +1 of SGLang's convention).
    assert result["layout_diff"]["kind"] == "off-by-one"
    assert result["layout_diff"]["embedding_only_in"] == "training"
    # Both evaluations ran on the same sequences and rows, and the bench measured the server.
    assert diagnosis.training.eval.num_positions == diagnosis.serving.eval.num_positions > 0
    measured = result["measured"]["accept_length"]
    assert abs(measured - result["serving"]["sim_accept_length"]) < 0.15
    # Each side from its strongest evidence: declared training, observed serving slots.
    assert result["training"]["source"] == "declared"
    assert result["serving"]["source"] == "observed"
    assert [t["depth"] for t in result["serving"]["prediction"]] == [1, 2, 3]
    assert result["draft_identity"]["status"] == "same"
    assert [n["check"] for n in result["not_checked"]] == ["speedup"]
    assert result["not_checked"][0]["option"] == "baseline"
    assert result["profile"] is None  # profile=False, as --no-profile


def test_applying_the_fix_removes_the_layout_finding(models, tmp_path) -> None:
    # The fix, applied as a user would: the draft's config.json gets the ids the finding names.
    fixed = tmp_path / "draft-fixed"
    shutil.copytree(models["draft"], fixed)
    config = json.loads((fixed / "config.json").read_text())
    config["eagle_config"]["eagle_aux_hidden_state_layer_ids"] = [-1, 0, 1]
    (fixed / "config.json").write_text(json.dumps(config))
    fixed_models = {**models, "draft": fixed}
    with double(fixed_models) as server:
        diagnosis = run_diagnosis(
            options(fixed_models, server.url, training_layout=(Tap(0), Tap(1), Tap(2)))
        )
    ids = [f.id for f in diagnosis.findings]
    assert "layout-mismatch" not in ids
    assert diagnosis.layout_diff.kind == "identical"


def test_without_training_states_the_missing_comparison_is_named(models) -> None:
    with double(models) as server, double(models, speculative_algorithm=None) as baseline:
        opts = options(models, server.url, target=None, baseline=baseline.url)
        diagnosis = run_diagnosis(opts)
    assert diagnosis.training.eval is None and diagnosis.serving.eval is not None
    # The training side is assumed from the config, and the page and CLI say how to measure it.
    assert diagnosis.training.source == "config" and not diagnosis.training.measured
    assert diagnosis.serving.source == "predicted"
    missing = {n.check: n for n in diagnosis.not_checked}
    assert missing["training-side"].option == "target"
    assert missing["serving-taps"].option == "target"
    assert "speedup" not in missing
    assert diagnosis.baseline is not None and diagnosis.baseline.accept_length is None


def test_server_without_hidden_states_still_benchmarks(models) -> None:
    with double(models, enable_return_hidden_states=False) as server:
        diagnosis = run_diagnosis(options(models, server.url))
    assert diagnosis.serving.eval is None and diagnosis.measured is not None
    missing = {n.check: n for n in diagnosis.not_checked}
    assert "--enable-return-hidden-states" in missing["serving-states"].action
    assert "hidden-states-off" in [f.id for f in diagnosis.findings]


def test_cli_probe_and_diagnose_json_contract(models) -> None:
    with double(models, num_steps=1, num_draft_tokens=16) as server:
        out = run_cli("probe", server.url, "--json")
        assert out.returncode == 0, out.stderr
        probe = json.loads(out.stdout)
        assert probe["server"]["speculative"]["num_draft_tokens"] == 2
        assert "draft-tokens-capped" in [f["id"] for f in probe["findings"]]

        out = run_cli(
            *("diagnose", "--draft", str(models["draft"]), "--endpoint", server.url),
            *("--target", str(models["target"]), "--num-prompts", "2", "--max-new-tokens", "16"),
            "--json",
        )
    assert out.returncode == 0, out.stderr
    result = json.loads(out.stdout)
    assert {"findings", "training", "serving", "measured"} <= result.keys()
    for finding in result["findings"]:
        assert {"id", "severity", "title", "fix", "basis"} <= finding.keys()
    # How each claim is known: the sides, the comparison (the weaker side), the identity.
    assert result["serving"]["evidence"] == "observed"
    assert result["layout_diff"]["evidence"] in ("observed", "detective", "assumed")
    assert result["draft_identity"]["evidence"] == "observed"
    assert result["verdict"]["status"] in ("problem", "incomplete", "healthy")


def test_cli_text_says_the_layout_comparison_is_not_checked_without_the_target(models) -> None:
    # The config's ids [0, 1, 2] under SpecForge's convention and SGLang's +1 rule: both sides
    # the taps after 1, 2 and 3 blocks, from the config alone.
    with double(models) as server:
        out = run_cli(
            *("diagnose", "--draft", str(models["draft"]), "--endpoint", server.url),
            *("--num-prompts", "2", "--max-new-tokens", "16", "--no-profile"),
        )
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[0].startswith("verdict (incomplete): ")
    assert (
        "layout comparison: Same taps on both sides (assumed from the config, not checked): "
        "training side assumed from the config, not checked, serving side predicted from "
        "SGLang's rules, not checked."
    ) in lines
    check = [line for line in lines if line.startswith("  to check it: ")]
    assert len(check) == 1 and "pass --target" in check[0], lines


def test_cli_diagnose_against_a_down_endpoint_is_one_line(models) -> None:
    out = run_cli("diagnose", "--draft", str(models["draft"]), "--endpoint", "127.0.0.1:9")
    assert out.returncode == 1
    assert "Traceback" not in out.stderr
    assert "cannot connect" in out.stderr


def test_a_diagnose_job_stores_the_run_for_its_page(models, tmp_path) -> None:
    """The app's path: submit_diagnosis queues a job, a worker runs it in a child process."""
    from eagle3dash import jobs, store
    from eagle3dash.job_kinds import JOB_KINDS
    from eagle3dash.jobs.worker import run_worker
    from eagle3dash.preloaded import HEAVY
    from eagle3dash.submit import submit_diagnosis

    home = store.open_store(tmp_path / "home")
    checkpoint_id = store.add_checkpoint(home, models["draft"], name="draft")
    with double(models) as server:
        opts = options(models, server.url, training_layout=(Tap(0), Tap(1), Tap(2)))
        run_id = submit_diagnosis(home, checkpoint_id, opts)
        assert store.get_run(home, run_id)["status"] == "queued"
        assert run_worker(home.home, JOB_KINDS, poll_interval=0.05, once=True, preload=HEAVY) == 1
    run = store.get_run(home, run_id)
    job = jobs.list_jobs(home, run_id)[0]
    assert job["status"] == "succeeded", jobs.job_log(home, job["id"])
    assert run["status"] == "succeeded"
    # The diagnosis is stored once, on the run; the summary columns are read off it.
    stored = run["diagnosis"]
    assert job["result"] == {"run_id": run_id, "findings": len(stored["findings"])}
    assert run["measured_accept_length"] == pytest.approx(stored["measured"]["accept_length"])
    assert run["sim_accept_serving"] == pytest.approx(stored["serving"]["sim_accept_length"])
    assert run["worst_severity"] == "critical"
    assert store.get_findings(home, run_id)[0]["rule_id"] == "layout-mismatch"
    assert [t["depth"] for t in stored["training"]["layout"]] == [0, 1, 2]
    assert [t["depth"] for t in stored["serving"]["layout"]] == [1, 2, 3]
    assert len(stored["serving"]["eval"]["accuracy"]) == 4
    assert (Path(opts.capture_dir or run["options"]["capture_dir"]) / "capture.json").is_file()


def test_a_failing_diagnose_job_fails_its_run(models, tmp_path) -> None:
    from eagle3dash import store
    from eagle3dash.job_kinds import JOB_KINDS
    from eagle3dash.jobs.worker import run_worker
    from eagle3dash.preloaded import HEAVY
    from eagle3dash.submit import submit_diagnosis

    home = store.open_store(tmp_path / "home")
    opts = options(models, "http://127.0.0.1:9")
    run_id = submit_diagnosis(home, None, opts)
    run_worker(home.home, JOB_KINDS, poll_interval=0.05, once=True, preload=HEAVY)
    run = store.get_run(home, run_id)
    assert run["status"] == "failed" and "cannot connect" in run["error"]


def test_prompt_ids_tokenize_text_with_the_local_target_only(models, tmp_path) -> None:
    from eagle3dash.diagnosis.stages import prompt_ids
    from eagle3dash.errors import InputError
    from eagle3dash.servebench import Prompt

    ids_only = [Prompt(text="", input_ids=(5, 6, 7))]
    assert prompt_ids(ids_only) == [[5, 6, 7]]  # no tokenizer needed, none looked for
    text = [Prompt(text="hi!"), *ids_only]
    # The tiny target's tokenizer is byte-level: the ids are the UTF-8 bytes.
    assert prompt_ids(text, str(tmp_path / "nothing"), str(models["target"])) == [
        list(b"hi!"),
        [5, 6, 7],
    ]
    with pytest.raises(InputError, match=r"give --target \('Local target path"):
        prompt_ids(text, str(tmp_path / "nothing"))
