"""The SGLang HTTP client against real HTTP servers on 127.0.0.1.

Contract tests replay responses recorded from a real SGLang 0.5.23 server (shared/fixtures/); the
other servers are small stand-ins for an older SGLang and for endpoints that are down, slow or not
SGLang at all. The servers come from tests/httpserver.py, the replay from tests/sglangkit.py.
"""

from __future__ import annotations

import asyncio
import json
import socket
from collections.abc import Iterator

import numpy as np
import pytest

from eagle3dash.engines.sglang import client as sglang
from eagle3dash.engines.sglang.client import EndpointError, SGLangClient, normalize_url
from eagle3dash.errors import InputError
from eagle3dash.http_client import server_key
from tests.httpserver import Reply, Request, Served, closed_port_url, serve
from tests.sglangkit import (
    HIDDEN_STATES_MESSAGE_0_5_20,
    MODEL_INFO,
    load_fixture,
    replay_app,
    spec_server_info,
)

# The exact refusal of 0.5.x tokenizer_manager.py, sent as {"error": {"message": ...}} with 400.
HIDDEN_STATES_MESSAGE = (
    "The server is not configured to return the hidden states. "
    "Please set `--enable-return-hidden-states` to enable this feature."
)
REFUSALS = [
    pytest.param(HIDDEN_STATES_MESSAGE, id="0.5.16"),
    pytest.param(HIDDEN_STATES_MESSAGE_0_5_20, id="0.5.20"),
]


# --- the 0.5.23 replay server ---------------------------------------------------------------------


@pytest.fixture
def server_info() -> dict:
    return load_fixture("get_server_info.json")


@pytest.fixture
def replay(server_info: dict) -> Iterator[Served]:
    with serve(replay_app(server_info)) as served:
        yield served


def assert_one_line(err: EndpointError, url: str, *needles: str) -> None:
    msg = str(err)
    assert "\n" not in msg and "Traceback" not in msg
    assert url in msg, msg
    for needle in needles:
        assert needle in msg, msg
    assert isinstance(err, InputError)  # interfaces catch InputError and show only the message


# --- URLs -----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("given", "expected"),
    [
        ("gpubox:30000", "http://gpubox:30000"),
        ("http://gpubox:30000/", "http://gpubox:30000"),
        ("  https://gpubox//  ", "https://gpubox"),
        ("127.0.0.1:30000", "http://127.0.0.1:30000"),
    ],
)
def test_normalize_url(given: str, expected: str) -> None:
    assert normalize_url(given) == expected


@pytest.mark.parametrize(
    ("given", "expected"),
    [
        ("http://127.0.0.1:30000", "127.0.0.1:30000"),
        ("localhost:30000/", "127.0.0.1:30000"),  # one server, two spellings
        ("http://[::1]:30000", "127.0.0.1:30000"),
        (f"http://{socket.gethostname()}:30000", "127.0.0.1:30000"),
        ("http://GPUBox:30000", "gpubox:30000"),
        ("http://gpubox", "gpubox:80"),
        ("https://gpubox/", "gpubox:443"),
        ("https://gw:8443/sglang-a/", "gw:8443/sglang-a"),  # two servers behind one gateway
        ("https://gw:8443/sglang-b", "gw:8443/sglang-b"),
    ],
)
def test_server_key(given: str, expected: str) -> None:
    assert server_key(given) == expected


@pytest.mark.parametrize("bad", ["", "ftp://host:1", "http://"])
def test_bad_url_is_one_clear_error(bad: str) -> None:
    with pytest.raises(EndpointError) as info:
        SGLangClient(bad)
    assert info.value.kind == EndpointError.BAD_URL
    assert "http://host:port" in str(info.value)


# --- contract: real 0.5.23 responses --------------------------------------------------------------


def test_probe_parses_real_0_5_23_server_info(replay: Served) -> None:
    with SGLangClient(replay.url + "/") as client:
        report = client.probe()
    assert report.url == replay.url
    assert report.version == "0.5.23"
    assert report.server_info_path == "/server_info"
    assert report.model_path == "models/tiny-llama"
    assert report.served_model_name == "models/tiny-llama"
    assert report.architectures == ["LlamaForCausalLM"]
    assert report.model_type == "llama"
    assert report.tp_size == 1
    assert report.dtype == "auto"
    assert report.quantization is None
    assert report.attention_backend == "torch_native"
    assert report.device == "cpu"
    assert report.speculative is None
    assert report.enable_return_hidden_states is False
    assert report.return_hidden_states_mode is None
    assert report.hidden_states is None
    assert report.enable_return_aux_hidden_states is False
    assert report.aux_hidden_state_capture is None
    assert report.return_aux_hidden_state_layer_ids is None
    assert report.chunked_prefill_size == 4096
    assert report.disable_radix_cache is False
    assert report.disable_cuda_graph is False
    assert report.decode_log_interval == 40
    assert report.avg_spec_accept_length is None
    assert report.healthy is True
    assert report.server_info["status"] == "ready"
    json.dumps(report.to_dict())  # JSON-ready for the store
    assert replay.hits("GET", "/get_server_info") == 0  # the new path answered


def test_report_requirements_name_the_restart_flags(replay: Served) -> None:
    report = SGLangClient(replay.url).probe()
    with pytest.raises(EndpointError) as spec:
        report.require_speculative()
    assert spec.value.kind == EndpointError.NO_SPECULATION
    assert_one_line(spec.value, replay.url, "--speculative-algorithm EAGLE3")
    with pytest.raises(EndpointError) as hidden:
        report.require_hidden_states()
    assert hidden.value.kind == EndpointError.NO_HIDDEN_STATES
    assert_one_line(hidden.value, replay.url, "--enable-return-hidden-states")


# arg_groups/serving_hook.py (0.5.20+): --enable-return-hidden-states alone resolves the mode to
# "full"; --return-hidden-states-mode last|full turns enable_return_hidden_states on.
@pytest.mark.parametrize(
    "enabled, mode, expected",
    [
        (True, "full", "full"),  # a 0.5.23 server started with --enable-return-hidden-states
        (True, None, "full"),  # before 0.5.20: no mode reported
        (True, "last", "last"),
        (False, "full", "full"),  # capture-only mode resolves the mode alone
        (False, None, None),
    ],
)
def test_hidden_states_mode(server_info: dict, enabled: bool, mode, expected) -> None:
    info = dict(server_info, enable_return_hidden_states=enabled, return_hidden_states_mode=mode)
    if mode is None:
        del info["return_hidden_states_mode"]
    report = sglang.parse_server_report("http://gpubox:30000", info)
    assert report.return_hidden_states_mode == mode
    assert report.hidden_states == expected


def test_mode_last_cannot_capture_and_says_how_to_restart(server_info: dict) -> None:
    info = dict(server_info, enable_return_hidden_states=True, return_hidden_states_mode="last")
    with serve(replay_app(info)) as served:
        client = SGLangClient(served.url)
        report = client.probe()
        with pytest.raises(EndpointError) as refused:
            client.generate(input_ids=[1, 2], max_new_tokens=8, return_hidden_states=True)
    with pytest.raises(EndpointError) as required:
        report.require_hidden_states()
    assert required.value.kind == refused.value.kind == EndpointError.NO_HIDDEN_STATES
    assert str(required.value) == (
        f"{served.url} was started with --return-hidden-states-mode last, so it returns only "
        "the last token's hidden state and refuses return_hidden_states=true: restart it with "
        "--return-hidden-states-mode full"
    )
    assert str(refused.value) == (
        f"{served.url} returns only the last token's hidden state (--return-hidden-states-mode "
        "last) and refuses return_hidden_states=true: restart it with --return-hidden-states-mode "
        "full"  # SGLang's own words are classified, not echoed
    )


@pytest.mark.parametrize("size, expected", [(8192, 8192), (-1, None), (None, None), (0, None)])
def test_chunked_prefill_size(server_info: dict, size, expected) -> None:
    info = dict(server_info, chunked_prefill_size=size)
    assert sglang.parse_server_report("u", info).chunked_prefill_size == expected


def test_adaptive_steps_have_no_ceiling(server_info: dict) -> None:
    info = dict(spec_server_info(server_info), speculative_adaptive=True)
    spec = sglang.parse_server_report("u", info).require_speculative()
    assert spec.adaptive is True and spec.num_steps == 3
    assert spec.max_accept_length is None


def test_capture_only_convention(server_info: dict) -> None:
    info = dict(
        server_info,
        enable_return_aux_hidden_states=True,
        aux_hidden_state_capture="eagle3",
        return_aux_hidden_state_layer_ids=[1, 3],
    )
    report = sglang.parse_server_report("u", info)
    assert report.aux_hidden_state_capture == "eagle3"
    assert report.return_aux_hidden_state_layer_ids == [1, 3]


def test_generate_parses_real_meta_info(replay: Served) -> None:
    expected = load_fixture("generate_8_tokens.json")
    result = SGLangClient(replay.url).generate(input_ids=[1, 2, 3, 4], max_new_tokens=8)
    assert result.output_ids == expected["output_ids"]
    assert result.text == expected["text"]
    assert result.prompt_tokens == 4
    assert result.completion_tokens == 8
    assert result.finish_reason == "length"
    assert result.e2e_latency == pytest.approx(0.06216334199984885)
    assert result.spec_verify_ct is None  # no speculation on the recorded server
    assert result.spec_accept_length is None
    assert result.spec_num_correct_drafts is None
    assert result.spec_num_proposed_drafts is None
    assert result.spec_accept_rate is None
    assert result.spec_correct_drafts_histogram is None  # no speculation: no histogram
    assert result.prefill_states is None and result.prefill_shape is None
    assert result.meta_info["cached_tokens"] == 1
    assert result.client_latency_s > 0
    # The request SGLang saw: greedy, fixed length, token ids.
    sent = [r for r in replay.requests if r.path == "/generate"][-1].json()
    assert sent == {
        "input_ids": [1, 2, 3, 4],
        "sampling_params": {"max_new_tokens": 8, "temperature": 0.0, "ignore_eos": True},
    }


def test_generate_32_tokens_greedy_from_text(replay: Served) -> None:
    result = SGLangClient(replay.url).generate(text="Hello there", max_new_tokens=32)
    assert len(result.output_ids) == result.completion_tokens == 32
    sent = [r for r in replay.requests if r.path == "/generate"][-1].json()
    assert sent["text"] == "Hello there"
    assert "input_ids" not in sent and "return_hidden_states" not in sent


def test_generate_needs_exactly_one_input(replay: Served) -> None:
    client = SGLangClient(replay.url)
    with pytest.raises(ValueError):
        client.generate()
    with pytest.raises(ValueError):
        client.generate(input_ids=[1], text="x")


def test_speculative_server_info(server_info: dict) -> None:
    spec_info = spec_server_info(server_info)
    meta = {
        "spec_verify_ct": 10,
        "spec_accept_length": 3.2,
        "spec_accept_rate": 0.7333,
        "spec_num_correct_drafts": 22,
        "spec_num_proposed_drafts": 30,
        "spec_correct_drafts_histogram": [1, 2, 3, 4],
    }
    with serve(replay_app(spec_info, meta)) as served:
        client = SGLangClient(served.url)
        report = client.probe()
        result = client.generate(input_ids=[5, 6], max_new_tokens=32)
    spec = report.speculative
    assert spec is not None
    assert spec.algorithm == "EAGLE3"
    assert spec.draft_model_path == "drafts/tiny-eagle3"
    assert (spec.num_steps, spec.eagle_topk, spec.num_draft_tokens) == (3, 1, 4)
    assert spec.max_accept_length == 4
    assert spec.token_map is None
    assert spec.draft_quantization == "unquant"
    assert spec.quantization_explicitly_set is True
    assert spec.accept_threshold_single == 1.0
    assert spec.accept_threshold_acc == 1.0
    assert spec.adaptive is False
    assert report.require_speculative() is spec
    assert report.avg_spec_accept_length == 2.75
    assert result.spec_verify_ct == 10
    assert result.spec_accept_length == 3.2
    assert result.spec_num_correct_drafts == 22
    assert result.spec_num_proposed_drafts == 30
    assert result.spec_accept_rate == pytest.approx(0.7333)
    assert result.spec_correct_drafts_histogram == [1, 2, 3, 4]


def test_hidden_states_come_back_when_enabled(server_info: dict) -> None:
    info = dict(server_info, enable_return_hidden_states=True)
    rows = [[[0.1, 0.2], [0.3, 0.4]], [0.5, 0.6]]  # prefill block, then one row per token
    with serve(replay_app(info, {"hidden_states": rows})) as served:
        result = SGLangClient(served.url).generate(
            input_ids=[1, 2], max_new_tokens=8, return_hidden_states=True
        )
        sent = [r for r in served.requests if r.path == "/generate"][-1].json()
    assert sent["return_hidden_states"] is True
    # hidden_states[0] as float32, in one part; the decode row after it is not kept
    assert result.prefill_shape == (2, 2)
    assert result.prefill_states is not None and result.prefill_states.dtype == np.float32
    assert result.prefill_states.tolist() == [
        [[0.10000000149011612, 0.20000000298023224], [0.30000001192092896, 0.4000000059604645]]
    ]
    assert "hidden_states" not in result.meta_info


def test_hidden_states_refused_names_the_flag(replay: Served) -> None:
    with pytest.raises(EndpointError) as info:
        SGLangClient(replay.url).generate(
            input_ids=[1], max_new_tokens=8, return_hidden_states=True
        )
    assert info.value.kind == EndpointError.NO_HIDDEN_STATES
    assert info.value.status == 400
    assert_one_line(info.value, replay.url, "restart it with --enable-return-hidden-states")


@pytest.mark.parametrize("refusal", REFUSALS)
def test_sglangs_refusal_text_is_no_hidden_states_not_success(refusal: str) -> None:
    """A bare /generate that refuses hidden states with SGLang's 400 body, in either wording."""

    def app(req: Request) -> Reply:
        if req.method == "POST" and req.path == "/generate":
            return Reply(400, {"error": {"message": refusal}})
        return Reply(404, {"detail": "Not Found"})

    with serve(app) as served, pytest.raises(EndpointError) as info:
        SGLangClient(served.url, retries=1).generate(
            input_ids=[1, 2], max_new_tokens=4, return_hidden_states=True
        )
    assert served.hits("POST", "/generate") == 1
    assert info.value.kind == EndpointError.NO_HIDDEN_STATES
    assert info.value.status == 400
    assert str(info.value) == (  # recognised, said in our words, its text not echoed
        f"{served.url} was started without --enable-return-hidden-states, so it cannot return "
        "hidden states: restart it with --enable-return-hidden-states"
    )


def test_agenerate_on_a_shared_session(replay: Served) -> None:
    client = SGLangClient(replay.url)

    async def main() -> list:
        async with client.async_client() as session:
            jobs = [
                client.agenerate(input_ids=[i], max_new_tokens=8, session=session) for i in (1, 2)
            ]
            return [*await asyncio.gather(*jobs), await client.agenerate(text="x")]

    results = asyncio.run(main())
    assert [r.completion_tokens for r in results] == [8, 8, 32]


def test_flush_cache(replay: Served) -> None:
    SGLangClient(replay.url).flush_cache()
    assert replay.hits("POST", "/flush_cache") == 1


def test_flush_cache_refused_while_busy() -> None:
    with (
        serve(lambda req: Reply(400, "Cache not flushed.")) as served,
        pytest.raises(EndpointError) as info,
    ):
        SGLangClient(served.url).flush_cache()
    assert_one_line(info.value, served.url, "requests are running or queued")


# --- older servers --------------------------------------------------------------------------------


def test_older_server_without_server_info(server_info: dict) -> None:
    """Before 0.5.6 only /get_server_info and /get_model_info exist (0.5.4
    entrypoints/http_server.py)."""
    old_info = {k: v for k, v in server_info.items() if not k.startswith("enable_return_aux")}
    old_info["version"] = "0.5.4"
    old_model_info = {k: MODEL_INFO[k] for k in ("model_path", "tokenizer_path", "is_generation")}

    def app(req: Request) -> Reply:
        if req.path == "/get_server_info":
            return Reply(body=old_info)
        if req.path == "/get_model_info":
            return Reply(body=old_model_info)
        if req.path == "/health":
            return Reply(body=b"")
        return Reply(404, {"detail": "Not Found"})

    with serve(app) as served:
        report = SGLangClient(served.url).probe()
    assert report.version == "0.5.4"
    assert report.server_info_path == "/get_server_info"
    assert report.model_path == "models/tiny-llama"
    assert report.architectures is None  # 0.5.4's model info has none
    assert report.enable_return_aux_hidden_states is False
    assert report.healthy is True
    paths = [r.path for r in served.requests]
    assert paths.index("/server_info") < paths.index("/get_server_info")
    assert paths.index("/model_info") < paths.index("/get_model_info")


def test_unhealthy_server_still_reports(server_info: dict) -> None:
    def app(req: Request) -> Reply:
        if req.path == "/health":
            return Reply(503, "unhealthy")
        if req.path == "/server_info":
            return Reply(body=server_info)
        return Reply(500, "model info broke")

    with serve(app) as served:
        report = SGLangClient(served.url).probe()
    assert report.healthy is False
    assert report.architectures is None and report.version == "0.5.23"


# --- endpoints that cannot be used: one clear message each ----------------------------------------


def test_nothing_listening(monkeypatch: pytest.MonkeyPatch) -> None:
    url = closed_port_url()
    sleeps: list[float] = []
    monkeypatch.setattr(sglang.time, "sleep", sleeps.append)
    with pytest.raises(EndpointError) as info:
        SGLangClient(url, retries=3, backoff=0.1).probe()
    assert info.value.kind == EndpointError.DOWN
    assert_one_line(info.value, url, "is the server running? check the URL and port", "3 tries")
    assert sleeps == [0.1, 0.2]  # bounded retries with backoff, on connection errors only


def test_nothing_listening_async() -> None:
    url = closed_port_url()
    with pytest.raises(EndpointError) as info:
        asyncio.run(SGLangClient(url, retries=2, backoff=0.01).agenerate(text="x"))
    assert info.value.kind == EndpointError.DOWN
    assert_one_line(info.value, url, "is the server running?")


def test_not_sglang_404_everywhere() -> None:
    with (
        serve(lambda req: Reply(404, "<html><body>Not Found</body></html>", "text/html")) as s,
        pytest.raises(EndpointError) as info,
    ):
        SGLangClient(s.url).probe()
    assert info.value.kind == EndpointError.NOT_SGLANG
    assert_one_line(
        info.value,
        s.url,
        "does not look like an SGLang server",
        "GET /server_info returned 404",
        "GET /get_server_info returned 404",
    )


def test_not_sglang_html_page() -> None:
    page = "<!doctype html><html><head><title>Grafana</title></head><body>hi</body></html>"
    with (
        serve(lambda req: Reply(200, page, "text/html")) as s,
        pytest.raises(EndpointError) as info,
    ):
        SGLangClient(s.url).probe()
    assert info.value.kind == EndpointError.NOT_SGLANG
    assert_one_line(
        info.value, s.url, "does not look like an SGLang server: GET /server_info returned"
    )
    assert "text/html" in str(info.value)
    # The tool is no proxy: what answers at a typed URL is classified, never shown.
    assert "Grafana" not in str(info.value) and f"{len(page)} bytes" in str(info.value)


@pytest.mark.parametrize("status", [200, 500, 418])
def test_a_foreign_body_is_never_echoed(status: int) -> None:
    secret = "<html><body>internal-dashboard token=SECRET123</body></html>"
    with serve(lambda req: Reply(status, secret, "text/html")) as s:
        with pytest.raises(EndpointError) as probe:
            SGLangClient(s.url, retries=1).probe()
        with pytest.raises(EndpointError) as generate:
            SGLangClient(s.url, retries=1).generate(input_ids=[1, 2], max_new_tokens=1)
    for error in (probe.value, generate.value):
        assert "SECRET123" not in str(error) and "internal-dashboard" not in str(error)


def test_not_sglang_other_json() -> None:
    with serve(lambda req: Reply(200, {"status": "ok"})) as s, pytest.raises(EndpointError) as info:
        SGLangClient(s.url).probe()
    assert info.value.kind == EndpointError.NOT_SGLANG
    assert_one_line(info.value, s.url, "JSON without model_path")


def test_garbage_body() -> None:
    with serve(lambda req: Reply(200, b"\x00\xff\xfe garbage \x13\x37")) as s:
        with pytest.raises(EndpointError) as probe:
            SGLangClient(s.url).probe()
        with pytest.raises(EndpointError) as gen:
            SGLangClient(s.url).generate(text="x")
    assert probe.value.kind == EndpointError.NOT_SGLANG
    assert_one_line(probe.value, s.url, "not JSON")
    assert gen.value.kind == EndpointError.BAD_RESPONSE
    assert_one_line(gen.value, s.url, "POST", "/generate returned a body that is not JSON")


def test_garbage_bytes_instead_of_http() -> None:
    with (
        serve(lambda req: Reply(raw=b"\x16\x03\x01 this is not HTTP at all\r\n\r\n")) as s,
        pytest.raises(EndpointError) as info,
    ):
        SGLangClient(s.url).probe()
    assert info.value.kind == EndpointError.NOT_SGLANG
    assert_one_line(info.value, s.url, "not valid HTTP")


def test_generate_json_without_meta_info() -> None:
    with serve(lambda req: Reply(200, {"choices": []})) as s, pytest.raises(EndpointError) as info:
        SGLangClient(s.url).generate(text="x")
    assert info.value.kind == EndpointError.BAD_RESPONSE
    assert_one_line(info.value, s.url, "without meta_info")


def test_slow_server_times_out_without_retry() -> None:
    with serve(lambda req: Reply(body={"model_path": "m"}, delay=1.0)) as s:
        client = SGLangClient(s.url, timeout=0.2, retries=3)
        with pytest.raises(EndpointError) as info:
            client.generate(text="x")
        assert s.hits("POST", "/generate") == 1  # a generate that timed out is never resent
    assert info.value.kind == EndpointError.TIMEOUT
    assert_one_line(info.value, s.url, "slow: no complete answer within 0.2 s")


def test_server_error_names_a_known_cause_without_its_text_or_a_retry() -> None:
    message = "CUDA out of memory. Tried to allocate 2.00 GiB"
    with serve(lambda req: Reply(500, {"error": {"message": message}})) as s:
        with pytest.raises(EndpointError) as info:
            SGLangClient(s.url, retries=3).generate(text="x")
        assert s.hits("POST", "/generate") == 1
    assert info.value.kind == EndpointError.SERVER_ERROR
    assert info.value.status == 500
    assert str(info.value) == (
        f"POST {s.url}/generate failed with HTTP 500 (the server ran out of GPU memory; its reply: "
        "application/json, 72 bytes): the server's log says why"
    )


def test_aborted_generate() -> None:
    body = {
        "text": "",
        "output_ids": [],
        "meta_info": {"finish_reason": {"type": "abort", "message": "input too long"}},
    }
    with serve(lambda req: Reply(200, body)) as s, pytest.raises(EndpointError) as info:
        SGLangClient(s.url).generate(text="x")
    assert str(info.value) == (
        f"POST {s.url}/generate: the server aborted the request (the prompt is longer than the "
        "context length): its log says why"
    )


def test_api_key_is_sent_and_refusal_explained() -> None:
    with serve(lambda req: Reply(401, {"error": "Unauthorized"})) as s:
        with pytest.raises(EndpointError) as info:
            SGLangClient(s.url, api_key="k").probe()
        assert s.requests[0].headers["authorization"] == "Bearer k"
    assert_one_line(info.value, s.url, "--api-key")


def test_connection_closed_without_answer() -> None:
    with serve(lambda req: Reply(raw=b"")) as s, pytest.raises(EndpointError) as info:
        SGLangClient(s.url).generate(text="x")
    assert info.value.kind == EndpointError.DOWN
    assert_one_line(info.value, s.url, "closed the connection without answering")


# --- hidden states read as they arrive ----------------------------------------------------------


def states_reply(rows: int, width: int) -> bytes:
    """A /generate reply whose prefill block is [rows][width] of 0.25."""
    block = [[0.25] * width for _ in range(rows)]
    meta = {"prompt_tokens": rows, "completion_tokens": 1, "hidden_states": [block]}
    return json.dumps({"text": "", "output_ids": [5], "meta_info": meta}).encode()


def test_a_reply_larger_than_the_request_can_be_is_refused() -> None:
    # 2 tokens + 1 new of at most 4 numbers: 3 x 4 x 32 bytes + 1 MiB for the rest = 1,048,960
    big = states_reply(2, 200_000)  # 400,000 x "0.25, ": 2.4 MB
    assert len(big) == 2_400_115
    with serve(lambda req: Reply(200, big, "application/json")) as s:
        with pytest.raises(EndpointError) as info:
            SGLangClient(s.url).generate(
                input_ids=[1, 2], max_new_tokens=1, return_hidden_states=True, states_width=4
            )
        # the same reply fits a request that may return rows this wide
        result = SGLangClient(s.url).generate(
            input_ids=[1, 2], max_new_tokens=1, return_hidden_states=True, states_width=200_000
        )
    assert info.value.kind == EndpointError.TOO_LARGE
    assert_one_line(info.value, s.url, "larger than 1.0 MB", "3 rows of 4", "refused")
    assert result.prefill_shape == (2, 200_000)


def test_a_reply_without_content_length_is_cut_at_the_bound() -> None:
    big = states_reply(2, 200_000)
    head = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nConnection: close\r\n\r\n"
    with serve(lambda req: Reply(raw=head + big)) as s, pytest.raises(EndpointError) as info:
        SGLangClient(s.url).generate(
            input_ids=[1, 2], max_new_tokens=1, return_hidden_states=True, states_width=4
        )
    assert info.value.kind == EndpointError.TOO_LARGE
    assert_one_line(info.value, s.url, "larger than 1.0 MB", "refused")


def test_hidden_states_that_are_not_a_block_are_a_bad_response() -> None:
    meta = {"hidden_states": [[[0.5, 1.0], [2.0]]]}
    body = {"text": "", "output_ids": [5], "meta_info": meta}
    with serve(lambda req: Reply(200, body)) as s, pytest.raises(EndpointError) as info:
        SGLangClient(s.url).generate(input_ids=[1, 2], max_new_tokens=1, return_hidden_states=True)
    assert info.value.kind == EndpointError.BAD_RESPONSE
    assert_one_line(info.value, s.url, "not a [tokens][width] block of numbers")


def test_hidden_states_need_token_ids(replay: Served) -> None:
    with pytest.raises(ValueError, match="needs input_ids"):
        SGLangClient(replay.url).generate(text="x", return_hidden_states=True)


def test_a_slow_drip_is_refused_at_the_requests_total_deadline() -> None:
    # 300 bytes at a byte every 0.1 s: each read comes quickly, the whole takes 30 s.
    info = json.dumps({"model_path": "x", "pad": "." * 260})
    drip = Reply(200, info, "application/json", drip=0.1)
    with serve(lambda req: drip) as s, pytest.raises(EndpointError) as err:
        SGLangClient(s.url, timeout=1.0, retries=1).probe()
    assert err.value.kind == EndpointError.TIMEOUT
    assert "no complete answer within 1 s" in str(err.value)


def test_a_huge_reply_is_refused_at_the_size_bound() -> None:
    huge = b'{"model_path": "x", "pad": "' + b"." * (65 << 20) + b'"}'
    with (
        serve(lambda req: Reply(200, huge, "application/json")) as s,
        pytest.raises(EndpointError) as err,
    ):
        SGLangClient(s.url, retries=1).probe()
    assert err.value.kind == EndpointError.TOO_LARGE
    assert "larger than 64 MiB" in str(err.value)


@pytest.mark.parametrize(
    "key, value",
    [
        ("speculative_num_steps", "3"),
        ("speculative_eagle_topk", 1.5),
        ("tp_size", [8]),
        ("speculative_accept_threshold_single", "1.0"),
        ("model_path", 42),
    ],
)
def test_a_server_info_field_of_the_wrong_type_is_one_line_naming_it(key, value) -> None:
    info = spec_server_info(load_fixture("get_server_info.json"))
    info[key] = value
    with serve(replay_app(info)) as s, pytest.raises(EndpointError) as err:
        SGLangClient(s.url, retries=1).probe()
    assert err.value.kind == EndpointError.BAD_RESPONSE
    assert f"server_info field {key} is {type(value).__name__}" in str(err.value)
    assert "\n" not in str(err.value)
