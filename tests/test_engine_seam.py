"""The job kinds reach a server through the serving-engine seam: the serve benchmark of an SGLang
and of a vLLM double (real HTTP on 127.0.0.1) through the adapter `endpoints.open_engine` picks,
the vLLM adapter's capture refused, before any request, without a capture server, and a vLLM
profile's chat-template rows captured on the capture server."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from eagle3dash.demo.vllm import vllm_deployment
from eagle3dash.diagnosis.options import DiagnoseOptions
from eagle3dash.diagnosis.stages import run_diagnosis
from eagle3dash.engines.seam import CaptureRequest
from eagle3dash.engines.vllm.adapter import VLLMEngine
from eagle3dash.http_client import EndpointError
from eagle3dash.job_kinds import job_serve_bench
from eagle3dash.layout import Tap
from eagle3dash.testing.vllm_double import VLLMDoubleConfig, start_vllm_double
from tests.httpserver import closed_port_url

# Token-id prompts of the tiny target's vocabulary (256): 6 new tokens each, ignore_eos.
PROMPT_IDS = [[5, 17, 33, 2, 9, 41], [7, 7, 100, 3]]
NEW_TOKENS = 6


def bench_params(url: str, tmp_path: Path) -> dict:
    prompts = tmp_path / "ids.jsonl"
    prompts.write_text("".join(json.dumps({"input_ids": ids}) + "\n" for ids in PROMPT_IDS))
    return {
        "url": url,
        "prompts": str(prompts),
        "num_prompts": 2,
        "concurrency": 1,
        "max_new_tokens": NEW_TOKENS,
    }


@pytest.mark.parametrize(
    ("metrics", "source"), [("summary", "per-request"), ("none", "metrics-delta")]
)
def test_the_serve_bench_job_measures_a_vllm_server(
    served_models, tmp_path: Path, metrics: str, source: str
) -> None:
    """The job once built an SGLang client whatever served the URL: on vLLM it failed."""
    config = VLLMDoubleConfig(
        target_path=served_models["target"],
        draft_path=served_models["draft"],
        served_model_name="tiny",
        per_request_metrics=metrics,
        runner="v1",  # reads the draft's ids [0, 1, 2]; V2's defaults repeat a layer of 4
    )
    said: list[tuple[float, str]] = []
    with start_vllm_double(config) as running:
        result = job_serve_bench(
            bench_params(running.url, tmp_path), lambda f, m: said.append((f, m))
        )
    assert (result["url"], result["num_requests"], result["errors"]) == (running.url, 2, 0)
    assert result["completion_tokens"] == 2 * NEW_TOKENS
    assert result["acceptance_source"] == source
    assert result["accept_length"] is not None and 1.0 <= result["accept_length"] <= 4.0
    assert said == [(0.5, "benchmarking"), (1.0, "benchmarking")]


def test_the_serve_bench_job_measures_an_sglang_server(eagle3_double, tmp_path: Path) -> None:
    result = job_serve_bench(bench_params(eagle3_double.url, tmp_path), lambda f, m: None)
    assert (result["num_requests"], result["errors"]) == (2, 0)
    assert result["completion_tokens"] == 2 * NEW_TOKENS
    assert result["acceptance_source"] == "per-request"
    assert [r["completion_tokens"] for r in result["requests"]] == [NEW_TOKENS, NEW_TOKENS]
    # 3 chain steps: each verify round yields 1 to 4 tokens
    assert all(1.0 <= r <= 4.0 for r in result["accept_length_per_request"])


def test_the_vllm_adapter_refuses_a_capture_without_a_capture_server() -> None:
    """Refused before any request: nothing listens at the URL, and the error is not 'down'."""
    engine = VLLMEngine(closed_port_url(), retries=1)
    request = CaptureRequest([[1, 2, 3]], (Tap(1), Tap(2), Tap(3)), max_new_tokens=2)
    with pytest.raises(EndpointError) as info:
        engine.capture(request)
    assert info.value.kind == EndpointError.NO_HIDDEN_STATES
    assert "vLLM returns no hidden states from generate" in str(info.value)
    assert str(info.value).endswith("and give its URL")


def test_a_vllm_profile_captures_its_chat_template_rows_on_the_capture_server(tmp_path) -> None:
    """The profile's chat-template capture once went to SGLang's capture whatever the engine,
    and on vLLM always failed ('vLLM returns no hidden states'), capture server or not."""
    served = vllm_deployment("vllm-dual-key", tmp_path)
    capture = VLLMDoubleConfig(
        target_path=served.target_path,
        draft_path=None,
        method="extract_hidden_states",
        capture_layer_ids=[1, 2, 3],  # the taps the dual-key config feeds: vLLM ids = depths
        shared_storage_path=tmp_path / "captures",
        served_model_name=served.served_model_name,
    )
    with start_vllm_double(served) as server, start_vllm_double(capture) as capturing:
        options = DiagnoseOptions(
            draft=str(served.draft_path),
            endpoint=server.url,
            capture_server=capturing.url,
            target=str(served.target_path),
            num_prompts=4,
            max_new_tokens=16,
            concurrency=1,
            temperatures=(0.0,),
        )
        diagnosis = run_diagnosis(options)
    assert diagnosis.serving.source == "observed"
    assert diagnosis.profile is not None
    rows = {row.format: row for row in diagnosis.profile.prompt_format}
    assert list(rows) == ["raw", "chat-template"]
    assert rows["chat-template"].sim_accept_serving is not None
    assert [n.check for n in diagnosis.not_checked] == ["speedup"]  # no baseline, nothing else
    assert [w for w in diagnosis.warnings if w.startswith("profile:")] == []
