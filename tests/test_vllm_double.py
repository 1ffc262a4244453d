"""The vLLM double over real HTTP on 127.0.0.1, read by the vLLM adapter: engine detection, the
report with dev endpoints on and off, the taps each runner feeds (written by hand from vLLM
0.33.0's rules, never computed by vllm_rules), per-position acceptance from /metrics against the
per-request histograms, and the capture files of an extract_hidden_states server."""

from __future__ import annotations

import json
import shutil
from dataclasses import replace
from pathlib import Path

import pytest
from safetensors.torch import load_file

from eagle3dash.checkpoint import save
from eagle3dash.demo import DEMO_PROMPTS, FIXTURES
from eagle3dash.engines.endpoints import detect_engine, open_engine
from eagle3dash.engines.vllm.client import VLLMClient, acceptance_between, capture_path
from eagle3dash.http_client import EndpointError
from eagle3dash.testing.tensors import random_tensors
from eagle3dash.testing.tiny import make_tiny_target
from eagle3dash.testing.vllm_double import VLLMDoubleConfig, start_vllm_double
from tests.httpserver import Reply, Request, serve
from tests.specs import run_cli, served_draft_spec

PROMPTS = [[5, 17, 33, 2, 9, 41], [7, 7, 100, 3], [250, 1, 64, 128, 19]]


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """An 8-layer tiny target; a SpecForge draft with nested ids [0, 2, 4] (SGLang: the
    outputs of layers 0, 2, 4 = taps 1, 3, 5); a speculators draft with top-level ids [1, 3, 5]
    (vLLM numbering: taps 1, 3, 5)."""
    root = tmp_path_factory.mktemp("vllm-world")
    target = make_tiny_target(root / "target", num_layers=8, hidden_size=64)
    nested = served_draft_spec((0, 2, 4))
    tensors = random_tensors(nested, seed=1)
    specforge = save(nested, tensors, root / "specforge", "specforge")
    top = replace(
        nested, format="speculators", aux_layer_ids=(1, 3, 5), aux_ids_location="top-level"
    )
    speculators = save(top, tensors, root / "speculators", "speculators")
    return {"target": target, "specforge": specforge, "speculators": speculators, "root": root}


def config(world: dict[str, Path], **overrides: object) -> VLLMDoubleConfig:
    fields: dict = dict(
        target_path=world["target"],
        draft_path=world["specforge"],
        served_model_name="tiny-target",
    )
    fields.update(overrides)
    return VLLMDoubleConfig(**fields)


def fed_taps(running) -> list[int]:
    return [t.depth for t in running.double.engine.prefill_layout]


def test_v2_ignores_the_nested_ids_and_feeds_the_defaults(world) -> None:
    with start_vllm_double(config(world, runner="v2")) as running:
        # (2, N//2, N-3) for N = 8
        assert fed_taps(running) == [2, 4, 5]


def test_v1_reads_the_nested_ids_as_vllm_ids(world) -> None:
    with start_vllm_double(config(world, runner="v1")) as running:
        assert fed_taps(running) == [0, 2, 4]


def test_top_level_ids_are_read_by_v2(world) -> None:
    with start_vllm_double(config(world, draft_path=world["speculators"])) as running:
        assert fed_taps(running) == [1, 3, 5]


def test_the_capture_knob_overrides_the_rules(world) -> None:
    with start_vllm_double(config(world, capture_taps=[3, 6, 7])) as running:
        assert fed_taps(running) == [3, 6, 7]


def test_detection_and_report_with_dev_endpoints(world) -> None:
    cfg = config(world, runner="v1", dev_endpoints=True, per_request_metrics="summary")
    with start_vllm_double(cfg) as running:
        assert detect_engine(running.url) == "vllm"
        engine = open_engine(running.url)
        report = engine.probe()
        assert report.engine == "vllm"
        assert report.version == "0.33.0"
        assert report.speculative is not None
        assert report.speculative.draft_model_path == str(world["specforge"])
        assert report.speculative.num_steps == 3
        assert report.vllm is not None
        assert (report.vllm.runner, report.vllm.runner_source) == ("v1", "env")
        assert report.vllm.per_request_spec_metrics == "summary"
        rules = report.rules_engine()
        assert (rules.name, rules.version, rules.runner) == ("vllm", "0.33.0", "v1")
        engine.close()


def test_report_without_dev_endpoints_asks_for_the_draft(world) -> None:
    with start_vllm_double(config(world)) as running, VLLMClient(running.url) as client:
        report = client.probe()
        assert report.speculative is not None
        assert report.speculative.draft_model_path is None  # not said: the form asks
        assert report.speculative.num_steps == 3  # three per-position counters
        assert report.vllm is not None
        assert (report.vllm.runner, report.vllm.runner_source) == (None, "unknown")


def demo_draft_b_with_top_level_ids(root: Path) -> Path:
    """The demo's draft B (trained on taps 1, 2, 3; nested SpecForge ids [0, 1, 2]) with the
    vLLM fix beside them: top-level ids [1, 2, 3]."""
    folder = root / "draft-b-dual"
    if not folder.exists():
        shutil.copytree(FIXTURES / "draft-b", folder)
        config_json = json.loads((folder / "config.json").read_text())
        config_json["eagle_aux_hidden_state_layer_ids"] = [1, 2, 3]
        (folder / "config.json").write_text(json.dumps(config_json))
    return folder


def test_per_position_acceptance_from_metrics_equals_the_histograms(world) -> None:
    cfg = VLLMDoubleConfig(
        target_path=FIXTURES / "target",
        draft_path=demo_draft_b_with_top_level_ids(world["root"]),
        served_model_name="tiny-target",
        per_request_metrics="summary",
        num_speculative_tokens=4,
    )
    prompts = [list(p) for p in DEMO_PROMPTS]
    with start_vllm_double(cfg) as running, VLLMClient(running.url) as client:
        assert fed_taps(running) == [1, 2, 3]
        before = client.metrics()
        histograms = [
            client.generate(p, "tiny-target", max_new_tokens=24).spec_correct_drafts_histogram
            for p in prompts[:3]
        ]
        after = client.metrics()
    delta = acceptance_between(before, after, "tiny-target")
    assert all(h is not None and len(h) == 5 for h in histograms)  # 4 steps: k + 1 entries
    # counted by hand from the histograms: a round that accepted j drafts adds one draft, j
    # accepted tokens, and one at each of positions 0..j-1
    summed = [sum(h[j] for h in histograms if h) for j in range(5)]
    assert summed[4] > 0  # the trained draft, fed its taps, accepts whole chains
    assert delta.drafts == sum(summed)
    assert delta.accepted == summed[1] + 2 * summed[2] + 3 * summed[3] + 4 * summed[4]
    assert delta.accepted_per_position == (
        summed[1] + summed[2] + summed[3] + summed[4],
        summed[2] + summed[3] + summed[4],
        summed[3] + summed[4],
        summed[4],
    )
    assert delta.draft_tokens == 4 * sum(summed)


def test_per_request_metrics_off_sends_none(world) -> None:
    with start_vllm_double(config(world)) as running, VLLMClient(running.url) as client:
        result = client.generate(PROMPTS[0], "tiny-target", max_new_tokens=8)
    assert result.spec_correct_drafts_histogram is None
    assert len(result.output_ids) == 8


def test_capture_server_writes_the_connectors_files(world) -> None:
    storage = world["root"] / "captures"
    cfg = config(
        world,
        draft_path=None,
        method="extract_hidden_states",
        capture_layer_ids=[1, 3, 5],
        shared_storage_path=storage,
    )
    with start_vllm_double(cfg) as running, VLLMClient(running.url) as client:
        result = client.generate(PROMPTS[0], "tiny-target", max_new_tokens=1)
    path = capture_path(result)
    assert path is not None and Path(path).parent == storage
    tensors = load_file(path)
    assert tuple(tensors["hidden_states"].shape) == (6, 3, 64)  # [tokens, ids, hidden]
    assert tensors["token_ids"].tolist() == PROMPTS[0]


def test_a_wrong_model_name_is_vllms_404(world) -> None:
    with (
        start_vllm_double(config(world)) as running,
        VLLMClient(running.url) as client,
        pytest.raises(EndpointError, match="does not look like a vLLM server"),
    ):
        client.generate(PROMPTS[0], "other-model", max_new_tokens=2)


def test_anything_else_is_one_line() -> None:
    def grafana(request: Request) -> Reply:
        return Reply(200, "<html>hi</html>", "text/html")

    with serve(grafana) as served:
        url = served.url
        with pytest.raises(EndpointError) as caught:
            detect_engine(url, retries=1)
    message = str(caught.value)
    assert message.startswith(f"{url} does not look like an SGLang or a vLLM server (")
    assert message.endswith("): check the URL and port")
    assert "\n" not in message


def test_the_cli_probe_names_the_engine_and_what_is_not_said(world) -> None:
    with start_vllm_double(config(world)) as running:
        done = run_cli("probe", running.url)
    assert done.returncode == 0, done.stderr
    lines = [line.strip() for line in done.stdout.splitlines()]
    assert any(
        line.startswith("engine") and line.endswith("vLLM 0.33.0 (runner not known)")
        for line in lines
    )
    # no SGLang row on a vLLM server; the runner says how it is (not) known
    assert not any(line.startswith(("return hidden states", "chunked prefill")) for line in lines)
    assert any(line.startswith("model runner") and "not known" in line for line in lines)
    assert "This vLLM server does not say which draft it serves" in done.stdout
