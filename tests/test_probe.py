"""probe(): an endpoint's report and its server-side findings, as the CLI, the job and the app get
them, against the recorded SGLang 0.5.23 answers."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from eagle3dash.checkpoint import save
from eagle3dash.cli import main
from eagle3dash.engines.sglang.client import EndpointError, parse_server_report
from eagle3dash.probe import ServedDraft, probe, probe_and_record, served_draft
from eagle3dash.store import get_endpoint, list_endpoints, open_store
from eagle3dash.testing.sglang_double_engine import TEMPLATE_PATH
from eagle3dash.testing.tensors import random_tensors
from tests.httpserver import App, Reply, Request, closed_port_url, serve
from tests.sglangkit import MODEL_INFO, load_fixture, replay_app, spec_server_info
from tests.specs import tiny_spec


def test_a_server_without_speculation_is_the_one_finding() -> None:
    with serve(replay_app(load_fixture("get_server_info.json"))) as served:
        found = probe(served.url + "/")
    assert found.server.url == served.url
    assert found.server.version == "0.5.23" and found.server.speculative is None
    assert [(f.id, f.severity) for f in found.findings] == [("no-speculation", "critical")]
    as_json = json.loads(json.dumps(found.to_dict()))
    assert as_json["server"]["model_path"] == "models/tiny-llama"
    assert [f["id"] for f in as_json["findings"]] == ["no-speculation"]


def test_an_eagle3_server_without_hidden_states_gets_only_the_restart_warning() -> None:
    info = spec_server_info(load_fixture("get_server_info.json"))
    with serve(replay_app(info)) as served:
        found = probe(served.url)
    assert found.server.speculative is not None
    assert found.server.speculative.num_steps == 3
    assert [(f.id, f.severity) for f in found.findings] == [("hidden-states-off", "warning")]
    assert "--enable-return-hidden-states" in found.findings[0].fix
    info["enable_return_hidden_states"] = True
    with serve(replay_app(info)) as served:
        assert probe(served.url).findings == []


def test_tries_are_the_callers_choice() -> None:
    # The app asks once, briefly; the CLI and the job keep the client's retries.
    url = closed_port_url()
    with pytest.raises(EndpointError) as once:
        probe(url, timeout=1.0, retries=1)
    with pytest.raises(EndpointError) as thrice:
        probe(url, timeout=1.0, retries=3)
    assert "cannot connect" in str(once.value) and "tries" not in str(once.value)
    assert "after 3 tries" in str(thrice.value)


def test_probe_and_record_keeps_what_the_server_reported_in_the_store(tmp_path: Path) -> None:
    # What the New run page calls: the endpoint is remembered under the URL the server reports
    # (no trailing slash), with its version and the whole report; a failed probe records nothing.
    store = open_store(tmp_path / "home")
    info = spec_server_info(load_fixture("get_server_info.json"))
    with serve(replay_app(info)) as served:
        found = probe_and_record(store, served.url + "/", timeout=5.0, retries=1)
    assert found.server.url == served.url
    row = get_endpoint(store, served.url)
    assert row is not None and row["version"] == "0.5.23" and row["stopped_at"] is None
    assert row["last_probe"]["model_path"] == "models/tiny-llama"
    assert row["last_probe"]["speculative"]["num_steps"] == 3
    assert row["last_probe"]["speculative"]["draft_model_path"] == "drafts/tiny-eagle3"
    assert get_endpoint(store, served.url + "/") is None
    with pytest.raises(EndpointError):
        probe_and_record(store, closed_port_url(), timeout=1.0, retries=1)
    assert [e["url"] for e in list_endpoints(store)] == [served.url]


# --- hidden-states mode, adaptive steps -------------------------------------------------------


def test_mode_last_is_its_own_finding_not_hidden_states_off() -> None:
    info = spec_server_info(load_fixture("get_server_info.json"))
    info.update(enable_return_hidden_states=True, return_hidden_states_mode="last")
    with serve(replay_app(info)) as served:
        found = probe(served.url)
    assert found.server.hidden_states == "last"
    assert [(f.id, f.severity) for f in found.findings] == [("hidden-states-last-only", "warning")]
    assert "--return-hidden-states-mode full" in found.findings[0].fix


def test_adaptive_steps_are_a_finding() -> None:
    info = spec_server_info(load_fixture("get_server_info.json"))
    info.update(enable_return_hidden_states=True, return_hidden_states_mode="full")
    info["speculative_adaptive"] = True
    with serve(replay_app(info)) as served:
        found = probe(served.url)
    assert found.server.speculative is not None and found.server.speculative.adaptive
    assert [f.id for f in found.findings] == ["speculative-adaptive"]


# --- the served draft, read when it is a folder here --------------------------------------------


def eagle3_draft(root: Path, **kw) -> Path:
    spec = tiny_spec(aux_layer_ids=(1, 2, 3), aux_ids_location="eagle_config", **kw)
    return save(spec, random_tensors(spec, seed=0), root / "served-draft", spec.format)


def test_a_local_served_draft_is_read_and_its_findings_made(tmp_path: Path) -> None:
    draft = eagle3_draft(tmp_path)
    info = spec_server_info(load_fixture("get_server_info.json"))
    info.update(
        enable_return_hidden_states=True,
        speculative_algorithm="EAGLE",  # an EAGLE-3 draft under EAGLE: fc skipped
        speculative_draft_model_path=str(draft),
    )
    with serve(replay_app(info)) as served:
        found = probe(served.url)
    assert found.draft is not None and found.draft.report is not None
    assert found.draft.path == str(draft)
    assert found.draft.reason == f"read here from {draft.resolve()}"
    assert found.draft.report.spec.aux_layer_ids == (1, 2, 3)
    assert [(f.id, f.severity) for f in found.findings] == [("algorithm-eagle", "critical")]
    as_json = json.loads(json.dumps(found.to_dict()))
    assert as_json["draft"]["report"]["aux_layer_ids"] == [1, 2, 3]
    assert as_json["draft"]["reason"] == found.draft.reason


def test_a_served_draft_with_top_level_ids_says_sglang_ignores_them(tmp_path: Path) -> None:
    spec = tiny_spec(format="speculators", aux_layer_ids=(2, 3, 4), aux_ids_location="top-level")
    draft = save(spec, random_tensors(spec, seed=0), tmp_path / "speculators", "speculators")
    info = spec_server_info(load_fixture("get_server_info.json"))
    info.update(enable_return_hidden_states=True, speculative_draft_model_path=str(draft))
    with serve(replay_app(info)) as served:
        found = probe(served.url)
    assert "aux-ids-not-read" in [f.id for f in found.findings]


def test_a_draft_not_here_is_a_reason_not_an_error(tmp_path: Path) -> None:
    info = spec_server_info(load_fixture("get_server_info.json"))
    with serve(replay_app(info)) as served:  # drafts/tiny-eagle3: no such folder here
        found = probe(served.url)
    assert found.draft == ServedDraft(
        "drafts/tiny-eagle3",
        None,
        "drafts/tiny-eagle3 is not a folder on this machine (a hub id, or moved since)",
    )
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "config.json").write_text("{not json")
    info["speculative_draft_model_path"] = str(broken)
    with serve(replay_app(info)) as served:
        found = probe(served.url)
    assert found.draft is not None and found.draft.report is None
    assert found.draft.reason.startswith(f"{broken} could not be inspected: ")
    assert [f.id for f in found.findings] == ["hidden-states-off"]


def test_a_remote_servers_draft_is_not_read_here(tmp_path: Path) -> None:
    info = spec_server_info(load_fixture("get_server_info.json"))
    info["speculative_draft_model_path"] = str(eagle3_draft(tmp_path))  # exists here, but...
    server = parse_server_report("http://gpubox:30000", info)
    assert served_draft(server) == ServedDraft(
        info["speculative_draft_model_path"],
        None,
        f"the server runs on another machine, so {info['speculative_draft_model_path']} is not "
        "a path here",
    )
    assert served_draft(parse_server_report("u", load_fixture("get_server_info.json"))) is None


def test_the_cli_prints_the_mode_and_the_draft(tmp_path: Path, capsys) -> None:
    draft = eagle3_draft(tmp_path)
    info = spec_server_info(load_fixture("get_server_info.json"))
    info.update(
        enable_return_hidden_states=True,
        return_hidden_states_mode="last",
        speculative_draft_model_path=str(draft),
    )
    with serve(replay_app(info)) as served:
        assert main(["probe", served.url]) == 0
    out = capsys.readouterr().out
    rows = dict(
        re.split(r"\s{2,}", line.strip(), maxsplit=1)
        for line in out.splitlines()
        if line.startswith("  ") and re.search(r"\S\s{2,}\S", line)
    )
    assert rows["return hidden states"] == (
        "last token only: no capture (enable_return_hidden_states True, "
        "return_hidden_states_mode last)"
    )
    assert rows["chunked prefill size"] == "4096"
    assert rows["adaptive steps"] == "False"
    assert rows["draft checkpoint"] == (
        f"read here from {draft.resolve()}: specforge format, aux layer ids [1, 2, 3] "
        "(eagle_config)"
    )
    assert "[warning] hidden-states-last-only" in out


def test_the_served_model_on_this_machine_is_proposed_as_the_target(tmp_path, capsys) -> None:
    model = tmp_path / "target"
    model.mkdir()
    (model / "config.json").write_text(json.dumps({"text_config": {"num_hidden_layers": 61}}))
    (model / "model-00001.safetensors").write_bytes(b"\0" * 1000)
    (model / "model-00002.safetensors").write_bytes(b"\0" * 234)
    (model / "tokenizer.json").write_bytes(b"{}" * 100)  # not a weight file
    info = json.loads(json.dumps(load_fixture("get_server_info.json")))
    info["model_path"] = str(model)
    with serve(replay_app(info)) as served:
        found = probe(served.url)
        assert main(["probe", served.url]) == 0
    out = capsys.readouterr().out
    assert found.target is not None
    assert (found.target.path, found.target.num_layers) == (str(model), 61)
    assert found.target.weight_bytes == 1234
    assert found.to_dict()["target"]["num_layers"] == 61
    assert f"served model here          {model} (61 layers, 1 KB of weights)" in out
    # A model path that is no folder here (a hub id) proposes nothing.
    info["model_path"] = "moonshotai/Kimi-K2"
    with serve(replay_app(info)) as served:
        assert probe(served.url).target is None


# --- before submit: the server against the chosen checkpoint ------------------------------------


def test_before_submit_warns_of_hidden_states_off_and_another_draft_served(tmp_path: Path) -> None:
    from eagle3dash.probe import before_submit

    served = eagle3_draft(tmp_path)
    spec = tiny_spec(aux_layer_ids=(1, 2, 3), aux_ids_location="eagle_config")
    mine = save(spec, random_tensors(spec, seed=5), tmp_path / "epoch-7", "specforge")
    info = spec_server_info(load_fixture("get_server_info.json"))
    info["speculative_draft_model_path"] = str(served)
    with serve(replay_app(info)) as endpoint:
        found = probe(endpoint.url)
    assert [f.id for f in before_submit(found, str(served))] == ["hidden-states-off"]
    warned = before_submit(found, str(mine))
    assert [(f.id, f.severity) for f in warned] == [
        ("draft-differs", "critical"),
        ("hidden-states-off", "warning"),
    ]
    assert warned[0].fix.startswith(
        f"Restart the server with --speculative-draft-model-path {mine}"
    )
    # Without a usable checkpoint: what the probe alone says.
    assert (
        before_submit(found, None) == before_submit(found, str(tmp_path / "nope")) == found.findings
    )


def test_before_submit_names_an_algorithm_that_does_not_fit_the_draft(tmp_path: Path) -> None:
    from eagle3dash.probe import before_submit

    draft = eagle3_draft(tmp_path)
    info = spec_server_info(load_fixture("get_server_info.json"))
    info.update(
        enable_return_hidden_states=True,
        speculative_algorithm="EAGLE",
        speculative_draft_model_path="drafts/elsewhere",  # not read here: the chosen one is
    )
    with serve(replay_app(info)) as endpoint:
        found = probe(endpoint.url)
    assert found.findings == []
    assert [f.id for f in before_submit(found, str(draft))] == [
        "algorithm-eagle",
        "draft-path-differs",
    ]


def test_the_cli_probe_checks_a_draft_and_refuses_a_target(tmp_path: Path, capsys) -> None:
    from eagle3dash.testing.tiny import make_tiny_target

    spec = tiny_spec(aux_layer_ids=(1, 2, 3), aux_ids_location="eagle_config")
    mine = save(spec, random_tensors(spec, seed=5), tmp_path / "epoch-7", "specforge")
    info = spec_server_info(load_fixture("get_server_info.json"))
    info["speculative_draft_model_path"] = str(eagle3_draft(tmp_path))
    with serve(replay_app(info)) as endpoint:
        assert main(["probe", endpoint.url, "--draft", str(mine)]) == 0
        assert "[critical] draft-differs" in capsys.readouterr().out
        target = make_tiny_target(tmp_path / "target")
        assert main(["probe", endpoint.url, "--draft", str(target)]) == 1
    assert "this looks like a target model (a causal LM)" in capsys.readouterr().err


def info_only_app(server_info: dict) -> App:
    """An SGLang server that answers only what a probe asks (/server_info, /model_info)."""

    def app(req: Request) -> Reply:
        if req.method == "GET" and req.path in ("/server_info", "/get_server_info"):
            return Reply(body=server_info)
        if req.method == "GET" and req.path in ("/model_info", "/get_model_info"):
            return Reply(body=MODEL_INFO)
        return Reply(404, {"detail": "Not Found"})

    return app


def test_an_fp8_kv_cache_is_a_note_before_anything_is_measured(tmp_path: Path) -> None:
    """sglang PR #14466 ("low AR for FP8 kv cache" with an EAGLE draft, worked around with
    --kv-cache-dtype auto): the probe and Before you submit say it where /server_info shows an
    FP8 KV cache, as a note (info); a KV cache in the model's dtype says nothing."""
    from eagle3dash.probe import before_submit

    draft = eagle3_draft(tmp_path)
    # A real 0.5.23 server_info (the doubles' template), speculating with the draft here.
    info = spec_server_info(json.loads(TEMPLATE_PATH.read_text()))
    info.update(
        enable_return_hidden_states=True,
        kv_cache_dtype="fp8_e4m3",
        speculative_draft_model_path=str(draft),
    )
    with serve(info_only_app(info)) as endpoint:
        found = probe(endpoint.url)
    assert [(f.id, f.severity) for f in found.findings] == [("fp8-kv-cache", "info")]
    note = found.findings[0]
    assert "fp8_e4m3" in note.title and "#14466" in note.evidence
    assert "--kv-cache-dtype auto" in note.fix
    assert [f.id for f in before_submit(found, str(draft))] == ["fp8-kv-cache"]
    info["kv_cache_dtype"] = "auto"
    with serve(info_only_app(info)) as endpoint:
        assert probe(endpoint.url).findings == []
