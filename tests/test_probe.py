"""probe(): an endpoint's report and its server-side findings, as the CLI, the job and the app get
them, against the recorded SGLang 0.5.23 answers."""

from __future__ import annotations

import json

import pytest

from eagle3dash.probe import probe
from eagle3dash.sglang import EndpointError
from tests.httpserver import closed_port_url, serve
from tests.test_sglang import load_fixture, replay_app, spec_server_info


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
