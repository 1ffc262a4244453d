"""Bad input, second pass (the hardening issue): the token at every door, foreign text shown as
text, foreign bodies classified, roots by real path, bounded prompts and server claims, corrupt
hidden states, total deadlines, CLI edges, exception boxes and conflicting id lists.

Collected with tests/test_bad_inputs.py (`pytest tests/test_bad_inputs*.py`), whose helpers it
uses. Expected lines are written by hand; the live gate binds the machine's own non-loopback
address, the escaping test drives the real app in headless Chromium.
"""

from __future__ import annotations

import asyncio
import json
import os
import socket
import subprocess
import threading
import time
import tomllib
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from types import SimpleNamespace

import pytest

from eagle3dash import store as db
from eagle3dash.checkpoint import inspect, save
from eagle3dash.checkpoint_problems import ProblemCode
from eagle3dash.engines.sglang.client import EndpointError, SGLangClient, parse_server_report
from eagle3dash.engines.sglang.states_json import ReplyError, StatesReader
from eagle3dash.findings import diagnose
from eagle3dash.findings.core import Evidence
from eagle3dash.roots import OutsideRootsError, within_roots
from eagle3dash.servebench import PromptFileError, load_prompts, parse_prompt_bytes
from eagle3dash.testing.tensors import random_tensors
from eagle3dash.text import ascii_int, one_line, printable
from eagle3dash.ui import access
from eagle3dash.uploads import MAX_UPLOAD_FILE_MB, UploadError, register_upload
from tests.appkit import app, double, no_exception, options, plain, texts
from tests.badinputkit import CALL_S, cli_error
from tests.browserkit import network_address, serving_app
from tests.httpserver import Reply, serve
from tests.specs import ROOT, served_draft_spec, tiny_spec
from tests.uploadkit import Upload

TOKEN = "correct-horse-battery-staple"
UI_MS = 60_000  # one UI step in Chromium (a rerun, a probe)
EVIL = "evil.invalid"
PAYLOAD = (
    f"![x](http://{EVIL}/md.png) [click](http://{EVIL}/phish) "
    f'<img src="http://{EVIL}/html.png"> <a href="http://{EVIL}/a">a</a> **bold** $x^2$'
)


def _in_thread(fn, *args):
    """fn(*args) in a thread that must end within CALL_S (a hang fails, nothing is timed)."""
    out: list = []

    def run() -> None:
        try:
            out.append(("ok", fn(*args)))
        except BaseException as e:  # noqa: BLE001 - handed to the test
            out.append(("raised", e))

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(CALL_S)
    assert not thread.is_alive(), f"{fn} still running after {CALL_S} s"
    return out[0]


# --- one gate for every door: a live app on the machine's own network address ----------------


def _request(url: str, method: str = "GET", cookie: str | None = None, body: bytes = b"", **h):
    """(status, headers, body) of one request, errors included."""
    headers = {"Accept": "text/html", **h}
    if cookie:
        headers["Cookie"] = f"{access.COOKIE}={cookie}"
    req = urllib.request.Request(url, data=body or None, method=method, headers=headers)

    class NoRedirect(urllib.request.HTTPRedirectHandler):
        def redirect_request(self, *args, **kwargs):
            return None

    opener = urllib.request.build_opener(NoRedirect)
    try:
        with opener.open(req, timeout=30) as r:
            return r.status, dict(r.headers), r.read()
    except urllib.error.HTTPError as e:
        return e.code, dict(e.headers), e.read()


def _websocket_status(host: str, port: int, cookie: str | None) -> int:
    """The HTTP status of a websocket upgrade on /_stcore/stream (101: opened)."""
    lines = [
        "GET /_stcore/stream HTTP/1.1",
        f"Host: {host}:{port}",
        "Upgrade: websocket",
        "Connection: Upgrade",
        "Sec-WebSocket-Version: 13",
        "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==",
    ]
    if cookie:
        lines.append(f"Cookie: {access.COOKIE}={cookie}")
    with socket.create_connection((host, port), timeout=30) as s:
        s.sendall(("\r\n".join(lines) + "\r\n\r\n").encode())
        status_line = s.recv(4096).split(b"\r\n", 1)[0]
    return int(status_line.split()[1])


@pytest.fixture(scope="module")
def gated_app(tmp_path_factory) -> Iterator[tuple[str, int]]:
    """`streamlit run serve.py` listening on this machine's network address, with a token and an
    EAGLE3DASH_BIND that says loopback (the socket decides, not the environment)."""
    host = network_address()
    if host is None:
        pytest.skip("this machine has no non-loopback IPv4 address to listen on")
    root = tmp_path_factory.mktemp("gate")
    env = {"EAGLE3DASH_TOKEN": TOKEN, "EAGLE3DASH_BIND": "127.0.0.1"}
    with serving_app(root / "home", root, script="serve.py", host=host, env=env) as served:
        yield host, served.port


DOORS = {
    # door: (method, path)
    "page": ("GET", "/"),
    "deep-link": ("GET", "/run?run=1"),
    "host-config": ("GET", "/_stcore/host-config"),
    "media": ("GET", "/media/0123456789abcdef.png"),
    "upload": ("PUT", "/_stcore/upload_file/a-session/a-file"),
    "static": ("GET", "/static/js/index.js"),
}


@pytest.mark.parametrize("door", list(DOORS))
def test_every_http_door_refuses_without_the_token(gated_app, door) -> None:
    host, port = gated_app
    method, path = DOORS[door]
    # An upload declares 200 MiB but sends little: refused before its body is read.
    extra = {"Content-Length": str(200 << 20)} if door == "upload" else {}
    body = b"x" * 1024 if door == "upload" else b""
    try:
        status, _, text = _request(f"http://{host}:{port}{path}", method, body=body, **extra)
    except (ConnectionError, urllib.error.URLError):  # closed before the declared body came
        status, text = 401, b""
    assert status == 401
    assert TOKEN.encode() not in text


def test_the_websocket_refuses_without_the_token_and_opens_with_it(gated_app) -> None:
    host, port = gated_app
    assert _websocket_status(host, port, None) == 403
    assert _websocket_status(host, port, "forged") == 403
    assert _websocket_status(host, port, access.cookie_for(TOKEN)) == 101


def test_the_form_sets_the_cookie_only_for_the_token(gated_app) -> None:
    host, port = gated_app
    url = f"http://{host}:{port}{access.FORM_PATH}"
    status, _, page = _request(url, "POST", body=b"token=not-it")
    assert status == 401 and b"That is not the access token." in page
    status, headers, _ = _request(url, "POST", body=f"token={TOKEN}".encode())
    assert status == 303 and headers["location"] == "/"
    assert headers["set-cookie"] == (
        f"{access.COOKIE}={access.cookie_for(TOKEN)}; Path=/; HttpOnly; SameSite=Strict"
    )


def test_with_the_cookie_every_door_reaches_streamlit(gated_app) -> None:
    host, port = gated_app
    cookie = access.cookie_for(TOKEN)
    for path in ("/", "/run?run=1", "/_stcore/host-config"):
        assert _request(f"http://{host}:{port}{path}", cookie=cookie)[0] == 200, path
    # Past the gate, Streamlit's own checks answer the upload (its XSRF token is missing): not
    # the gate's 401.
    status, _, _ = _request(
        f"http://{host}:{port}/_stcore/upload_file/s/f", "PUT", cookie=cookie, body=b"x"
    )
    assert status in (400, 403)
    assert _request(f"http://{host}:{port}/_stcore/health")[0] == 200  # open: its body is "ok"


# --- the gate as an ASGI app, in-process: the edges ---------------------------------------------


def _gate_call(scope: dict, body: bytes = b"") -> tuple[list[dict], bool]:
    """Drive AccessGate once: (the messages it sent, whether the app behind it was called)."""
    called: list[bool] = []

    async def inner(scope, receive, send) -> None:
        called.append(True)

    sent: list[dict] = []

    async def receive() -> dict:
        return {"type": "http.request", "body": body, "more_body": False}

    async def send(message) -> None:
        sent.append(dict(message))

    asyncio.run(access.AccessGate(inner)(scope, receive, send))
    return sent, bool(called)


def _scope(path: str = "/", method: str = "GET", cookie: str | None = None, kind: str = "http"):
    headers = [(b"accept", b"text/html")]
    if cookie is not None:
        headers.append((b"cookie", cookie.encode("latin-1")))
    return {"type": kind, "path": path, "method": method, "headers": headers}


@pytest.fixture
def network(monkeypatch) -> None:
    monkeypatch.setattr(access, "listening_address", lambda: "0.0.0.0")
    monkeypatch.setenv(access.TOKEN_ENV, TOKEN)
    monkeypatch.setattr(access, "_gates", [])


def test_the_gate_lets_everything_through_on_loopback(monkeypatch) -> None:
    monkeypatch.setattr(access, "listening_address", lambda: "127.0.0.1")
    monkeypatch.setattr(access, "_gates", [])
    assert _gate_call(_scope("/_stcore/upload_file/s/f", "PUT"))[1] is True


def test_without_a_token_every_door_is_closed(network, monkeypatch) -> None:
    monkeypatch.delenv(access.TOKEN_ENV)
    monkeypatch.setattr(access, "configured_token", lambda: None)
    sent, called = _gate_call(_scope("/"))
    assert not called and sent[0]["status"] == 503
    assert b"no access token is set: set EAGLE3DASH_TOKEN" in sent[1]["body"]


@pytest.mark.parametrize(
    "cookie",
    [
        "",
        f"{access.COOKIE}=",
        f"{access.COOKIE}={TOKEN}",  # the token itself is not the cookie
        f'{access.COOKIE}="{access.cookie_for(TOKEN)}x"',
        '\x00;;=="',
    ],
)
def test_a_wrong_or_malformed_cookie_is_refused(network, cookie) -> None:
    sent, called = _gate_call(_scope("/_stcore/host-config", cookie=cookie))
    assert not called and sent[0]["status"] == 401


def test_a_form_larger_than_4_kib_is_refused_unread(network) -> None:
    sent, called = _gate_call(_scope(access.FORM_PATH, "POST"), body=b"token=" + b"x" * 5000)
    assert not called and sent[0]["status"] == 413


def test_pages_refuse_without_the_gate_on_a_network_address(home, monkeypatch) -> None:
    from streamlit import config

    monkeypatch.setattr(access, "_gates", [])
    previous = config.get_option("server.address")
    config.set_option("server.address", "192.0.2.2")
    try:
        at = app("runs")
        no_exception(at)
        assert texts(at, "error").startswith(
            "This app listens on 192.0.2.2, a network address, without its access gate"
        )
        assert "Runs" not in [t.value for t in at.title]
    finally:
        config.set_option("server.address", previous)


def test_the_upload_cap_is_the_largest_draft_file_accepted() -> None:
    config = tomllib.loads((ROOT / ".streamlit" / "config.toml").read_text())
    assert config["server"]["maxUploadSize"] == MAX_UPLOAD_FILE_MB == 8192


# --- foreign text is text: the app in Chromium, fed Markdown and HTML payloads -----------------


def _stored_with(**serving: object) -> dict:
    """A whole stored diagnosis (the hand-written schema-2 fixture) whose serving side was not
    evaluated, with its serving side's fields replaced."""
    d = json.loads((ROOT / "tests/fixtures/stored/schema2.json").read_text())
    d["serving"] = {**d["serving"], "eval": None, "sim_accept_length": None, **serving}
    d["verdict"]["sim_accept_serving"] = None
    return d


def _payload_world(home: Path) -> None:
    """Two runs of a checkpoint named PAYLOAD, whose serving side was not evaluated because of
    PAYLOAD (a server's error, as an older version stored it)."""
    with db.open_store(home) as store:
        checkpoint = db.add_checkpoint(store, home / "ck", name=PAYLOAD)
        for _ in range(2):
            run = db.create_run(store, checkpoint, "http://gpubox:30000", None, {})
            diagnosis = _stored_with(capture_error=PAYLOAD)
            db.update_run(store, run, status="succeeded", diagnosis_json=db.to_json(diagnosis))


def _payload_server_info(req) -> Reply:
    info = json.loads((ROOT / "eagle3dash/testing/double_data/server_info_0.5.23.json").read_text())
    info.update(version=PAYLOAD, speculative_algorithm=PAYLOAD, model_path=PAYLOAD)
    if req.path in ("/server_info", "/get_server_info"):
        return Reply(200, info)
    return Reply(404, {"detail": PAYLOAD})


def test_foreign_text_renders_as_text_in_chromium(tmp_path, home, browser) -> None:
    """Every field that reaches a page from a server, a checkpoint or a stored error: no request
    leaves for the payload's host, no link or image of it is rendered."""
    from playwright.sync_api import expect

    _payload_world(home.home)
    with serve(_payload_server_info) as server, serving_app(home.home, tmp_path) as served:
        url = served.url
        page = browser.new_context(viewport={"width": 1400, "height": 900}).new_page()
        page.set_default_timeout(UI_MS)
        asked: list[str] = []
        page.on("request", lambda r: asked.append(r.url))
        seen: dict[str, tuple[int, int, int]] = {}

        def look(name: str, ready: str) -> None:
            """Once the page is drawn: its links and images to the payload's host, and
            how often the payload's link text shows as text."""
            expect(page.get_by_text(ready).first).to_be_visible(timeout=UI_MS)
            expect(page.locator('[data-testid="stApp"]')).to_have_attribute(
                "data-test-script-state", "notRunning", timeout=UI_MS
            )
            text = page.locator("body").inner_text().replace("\u200b", "")
            seen[name] = (
                page.locator(f'a[href*="{EVIL}"]').count(),
                page.locator(f'img[src*="{EVIL}"]').count(),
                text.count(f"[click](http://{EVIL}/phish)"),
            )

        page.goto(f"{url}/")
        look("runs", "Runs 1–2 of 2")
        page.goto(f"{url}/checkpoints")
        look("checkpoints", "Checkpoints")
        page.goto(f"{url}/run?run=1")
        look("run", "why not evaluated")
        page.goto(f"{url}/compare?a=1&b=2")
        look("compare", "worst finding")
        page.goto(f"{url}/new_run")
        box = page.get_by_label(
            "Endpoint URL (the server running the target with this draft)", exact=True
        )
        box.fill(server.url)
        box.press("Enter")
        look("new_run", "SGLang version")
        page.context.close()
    assert [u for u in asked if EVIL in u] == []
    # No link, no image; the payload shown as the text it is: none on Runs (its table is drawn
    # on a canvas), once on Checkpoints (the name in its picker), on the Run page as the
    # checkpoint in its status line, under the serving number and in the "why not evaluated"
    # row; in Compare as both runs' checkpoint; on New run as the probe's version, algorithm and
    # model and twice in "Latest runs" (both runs' checkpoint).
    assert seen == {
        "runs": (0, 0, 0),
        "checkpoints": (0, 0, 1),
        "run": (0, 0, 3),
        "compare": (0, 0, 2),
        "new_run": (0, 0, 5),
    }


# --- foreign bodies are classified, never echoed -----------------------------------------------

SECRET = "SECRET-3b1f"
FOREIGN_REPLIES = {
    "500-detail": (Reply(500, {"detail": f"{SECRET} at /srv/app.py"}), "HTTP 500"),
    "401-message": (Reply(401, {"message": f"{SECRET} bad key"}), "HTTP 401"),
    "400-error-object": (Reply(400, {"error": {"message": SECRET}}), "HTTP 400"),
    "status-line": (Reply(raw=f"HTTP/1.1 2{SECRET}\r\n\r\n".encode()), "not valid HTTP"),
    "content-type": (Reply(503, "x", content_type=f"text/{SECRET}<b>"), "HTTP 503"),
}


@pytest.mark.parametrize("case", list(FOREIGN_REPLIES))
def test_a_foreign_error_body_is_classified_not_echoed(case) -> None:
    reply, says = FOREIGN_REPLIES[case]
    with serve(lambda req: reply) as served:
        status, error = _in_thread(SGLangClient(served.url, timeout=10, retries=1).probe)
    assert status == "raised" and isinstance(error, EndpointError)
    assert says in str(error) and SECRET not in str(error)


def test_an_aborted_generation_names_no_foreign_message() -> None:
    body = {"text": "", "meta_info": {"finish_reason": {"type": "abort", "message": SECRET}}}
    with serve(lambda req: Reply(200, body)) as served:
        status, error = _in_thread(SGLangClient(served.url, retries=1).generate, None, "x")
    assert status == "raised" and str(error) == (
        f"POST {served.url}/generate: the server aborted the request (finish_reason abort): its "
        "log says why"
    )


# --- roots by real path ------------------------------------------------------------------------


@pytest.fixture
def rooted(tmp_path) -> tuple[Path, Path]:
    """A data root and, beside it, a folder outside it holding a good config.json."""
    root, outside = tmp_path / "root", tmp_path / "outside"
    root.mkdir()
    outside.mkdir()
    (outside / "config.json").write_text("{}")
    return root, outside


def test_a_folder_whose_file_links_outside_the_roots_is_refused(rooted) -> None:
    root, outside = rooted
    (root / "ck").mkdir()
    (root / "ck" / "config.json").symlink_to(outside / "config.json")
    with pytest.raises(OutsideRootsError) as refused:
        within_roots(root / "ck", [root], "Checkpoint folder")
    assert str(refused.value).startswith(
        f"Checkpoint folder: config.json in it is a link to a path outside the data roots ({root})"
    )


def test_a_nested_link_outside_the_roots_is_named_by_its_place(rooted) -> None:
    root, outside = rooted
    (root / "ck" / "shards").mkdir(parents=True)
    (root / "ck" / "shards" / "a.safetensors").symlink_to(outside / "config.json")
    with pytest.raises(OutsideRootsError, match="shards/a.safetensors in it is a link"):
        within_roots(root / "ck", [root], "Checkpoint folder")


def test_links_that_stay_inside_the_roots_are_fine(rooted) -> None:
    root, _ = rooted
    (root / "real").mkdir()
    (root / "real" / "config.json").write_text("{}")
    (root / "ck").mkdir()
    (root / "ck" / "config.json").symlink_to(root / "real" / "config.json")
    (root / "alias").symlink_to(root / "real")
    assert within_roots(root / "ck", [root], "x") == str(root / "ck")
    assert within_roots(root / "alias", [root], "x") == str(root / "real")


def test_a_file_link_out_of_the_roots_is_refused_like_any_outside_path(rooted) -> None:
    root, outside = rooted
    (root / "prompts.jsonl").symlink_to(outside / "config.json")
    with pytest.raises(OutsideRootsError, match="the app reads only paths under its data roots"):
        within_roots(root / "prompts.jsonl", [root], "Prompt file")


# --- bounded prompt files: the same for a path and an upload -----------------------------------

PROMPT_CASES = {
    # name: (file bytes, the line's expected text after the file's name)
    "a-line-over-2-mib": (
        b'{"prompt": "' + b"a" * (2 << 20) + b'"}\n',
        ", line 1: longer than 2 MiB, more than any context length takes; shorten the prompt",
    ),
    "over-100000-prompts": (
        b'{"prompt": "hi"}\n' * 100_001,
        ": more than 100,000 prompts; use fewer (a diagnosis uses the first few hundred)",
    ),
    "over-64-mib": (b"\n" * ((64 << 20) + 1), ": larger than 64 MiB; use fewer prompts"),
    "a-category-with-a-terminal-escape": (
        b'{"prompt": "hi", "category": "\\u001b[2Jmath"}\n',
        ', line 1: "category" must be a label of at most 64 printable characters (no control '
        "or terminal escape characters)",
    ),
    "a-category-of-65-characters": (
        b'{"prompt": "hi", "category": "' + b"c" * 65 + b'"}\n',
        ', line 1: "category" must be a label of at most 64 printable characters (no control '
        "or terminal escape characters)",
    ),
    "not-utf-8": (b'{"prompt": "\xff"}\n', ": not UTF-8 text (byte 12)"),
    "a-token-id-past-int64": (
        b'{"input_ids": [1, 9223372036854775808]}\n',
        ', line 1: "input_ids" holds 9223372036854775808, past int64 (at most '
        "9223372036854775807): no tokenizer makes such an id; give the target's token ids",
    ),
    "a-token-id-of-5000-digits": (
        b'{"prompt": "hi"}\n{"input_ids": [' + b"9" * 5000 + b"]}\n",
        ", line 2: holds a number of more than 4300 digits, past int64 (at most "
        "9223372036854775807) and any token id",
    ),
    "a-token-id-true": (
        b'{"input_ids": [true]}\n',
        ', line 1: "input_ids" must be a non-empty list of token ids',
    ),
}


@pytest.mark.parametrize("case", list(PROMPT_CASES))
def test_a_prompt_file_past_its_bounds_by_path_and_by_upload(case, tmp_path) -> None:
    data, says = PROMPT_CASES[case]
    path = tmp_path / "p.jsonl"
    path.write_bytes(data)
    with pytest.raises(PromptFileError) as by_path:
        load_prompts(path)
    with pytest.raises(PromptFileError) as by_upload:
        parse_prompt_bytes(data, "p.jsonl")
    assert str(by_path.value) == f"{path}{says}"
    assert str(by_upload.value) == f"p.jsonl{says}"


# --- server claims within SGLang's range -------------------------------------------------------


def _server_info(**claims) -> dict:
    info = json.loads((ROOT / "eagle3dash/testing/double_data/server_info_0.5.23.json").read_text())
    info.update(speculative_algorithm="EAGLE3", **claims)
    return info


@pytest.mark.parametrize(
    "claims, named",
    [
        ({"speculative_num_steps": 10**9}, "speculative_num_steps=1000000000"),
        ({"speculative_num_steps": -3}, "speculative_num_steps=-3"),
        ({"speculative_num_steps": 0}, "speculative_num_steps=0"),
        ({"speculative_eagle_topk": 10**9}, "speculative_eagle_topk=1000000000"),
        ({"speculative_num_draft_tokens": 10**9}, "speculative_num_draft_tokens=1000000000"),
        ({"speculative_num_draft_tokens": 1}, "speculative_num_draft_tokens=1"),
    ],
)
def test_an_implausible_server_claim_is_not_used_and_named_once(claims, named) -> None:
    report = parse_server_report("http://gpubox:30000", _server_info(**claims))
    spec = report.speculative
    assert spec is not None and spec.implausible == [named]
    key = next(iter(claims)).removeprefix("speculative_")
    assert getattr(spec, key) is None
    found = [f for f in diagnose(Evidence(server=report)) if f.id == "server-claims-implausible"]
    assert len(found) == 1
    assert found[0].title == (
        f"The server reports speculative settings no SGLang server runs with ({named}), so they "
        "were not used: the draft steps come from the form or the defaults."
    )


def test_plausible_claims_are_kept_and_not_flagged() -> None:
    claims = {
        "speculative_num_steps": 3,
        "speculative_eagle_topk": 1,
        "speculative_num_draft_tokens": 4,
    }
    spec = parse_server_report("u", _server_info(**claims)).speculative
    assert spec is not None and spec.implausible == []
    assert (spec.num_steps, spec.eagle_topk, spec.num_draft_tokens) == (3, 1, 4)


# --- corrupt hidden states ---------------------------------------------------------------------

BLOCK_CASES = {
    "null": (
        [[1.0, 2.0], [3.0, None]],
        "holds a value that is not a finite float32 number (null, NaN, or beyond ±3.4e38) in row 1",
    ),
    "nan": (  # what Python's json.dumps writes for a NaN: no JSON literal
        [[1.0, 2.0], [float("nan"), 4.0]],
        "holds a value that is not a finite float32 number (NaN, which JSON has no literal for) "
        "in row 1",
    ),
    "beyond-float32": (
        [[1.0, 2.0], [1e39, 4.0]],
        "holds a value that is not a finite float32 number (null, NaN, or beyond ±3.4e38) in row 1",
    ),
    "ragged": (
        [[1.0, 2.0], [3.0]],
        "is not a [tokens][width] block of numbers (its rows differ in length (ragged) or from "
        "the first row's width)",
    ),
    "strings": (
        [[1.0, 2.0], ["a", "b"]],
        "is not a [tokens][width] block of numbers (it holds something other than numbers)",
    ),
    "too-wide": ([[0.0] * 9], "has rows of 9 numbers, more than the 8 this request can return"),
    "too-many-rows": ([[1.0, 2.0]] * 5, "has more rows than the 4 tokens sent"),
    "not-a-list": ("abc", "is neither a list nor null"),
}


@pytest.mark.parametrize("parts", [1, 2])
@pytest.mark.parametrize("case", list(BLOCK_CASES))
def test_a_corrupt_hidden_states_block_is_refused_naming_the_fault(case, parts) -> None:
    block, says = BLOCK_CASES[case]
    states = block if case == "not-a-list" else [block]
    reader = StatesReader(rows=4, max_width=8, parts=parts)
    with pytest.raises(ReplyError) as refused:
        reader.feed(json.dumps({"text": "", "meta_info": {"hidden_states": states}}).encode())
        reader.close()
    assert (
        str(refused.value)
        == f"meta_info.hidden_states{'' if case == 'not-a-list' else '[0]'} {says}"
    )


def test_the_run_page_shows_why_a_side_was_not_evaluated_under_its_number(home) -> None:
    run = db.create_run(home, None, "http://gpubox:30000", None, {})
    why = "POST http://gpubox:30000/generate: meta_info.hidden_states[0] holds a value ..."
    diagnosis = _stored_with(capture_error=why)
    db.update_run(home, run, status="succeeded", diagnosis_json=db.to_json(diagnosis))
    at = app("run", run=str(run))
    no_exception(at)
    assert f"Not evaluated: {why}" in texts(at, "caption")


# A server's hidden-states reply, bad in each way issue 37 lists (the SGLang double's
# hidden_states_fault), and what the refused capture's not-checked line must carry: the reason.
WIDE = 3 * served_draft_spec().target_hidden_size + 1  # one number past the 3 taps' width
NOT_FINITE = "not a finite float32 number (null, NaN, or beyond ±3.4e38) in row 0"
STATES_FAULTS = {
    "wide": f"the aux block is {WIDE} wide, not a multiple of the 3 taps of the serving layout",
    "ragged": "meta_info.hidden_states[0] is not a [tokens][width] block of numbers (its rows "
    "differ in length (ragged) or from the first row's width)",
    "nan": "meta_info.hidden_states[0] holds a value that is not a finite float32 number (NaN, "
    "which JSON has no literal for) in row 0",
    "null": f"meta_info.hidden_states[0] holds a value that is {NOT_FINITE}",
    "huge": f"meta_info.hidden_states[0] holds a value that is {NOT_FINITE}",
    "fewer-rows": "none of them cached (cached_tokens=0): the server returns fewer hidden-state "
    "rows than the tokens it prefilled",
    "more-rows": "meta_info.hidden_states[0] has more rows than the",
    "not-a-list": "meta_info.hidden_states is neither a list nor null",
    "drip": "/generate is slow: no complete answer within 3 s",
}
REFUSED = "the server refused or failed the capture of the states it feeds the draft ("
FIX = "): fix the server or the prompts, and run again"


@pytest.mark.parametrize("fault", list(STATES_FAULTS))
def test_a_bad_hidden_states_reply_is_said_on_its_not_checked_line(
    fault, served_models, home, capsys
) -> None:
    from eagle3dash import cli
    from eagle3dash.diagnosis.record import record_diagnosis
    from eagle3dash.diagnosis.stages import run_diagnosis
    from eagle3dash.diagnosis.stored import load_diagnosis

    says = STATES_FAULTS[fault]
    with double(served_models, hidden_states_fault=fault) as server:
        # 3 s per request: the dripping reply's deadline (a run's own is 120 s)
        asked = dict(target=None, num_prompts=2, max_new_tokens=8, timeout=3.0)
        diagnosis = run_diagnosis(options(served_models, server.url, **asked))
    cli._print_diagnosis(load_diagnosis(diagnosis.to_dict()))  # what `diagnose` prints
    out = capsys.readouterr().out
    lines = [line for line in out.splitlines() if REFUSED in line]
    assert [line[: line.index(REFUSED)] for line in lines] == ["  to check it: ", "not checked: "]
    assert all(line.endswith(FIX) and says in line for line in lines), lines
    assert "below" not in out and "above" not in out  # nothing points at what is not printed
    run = db.create_run(home, None, server.url, None, {})
    record_diagnosis(home, run, diagnosis)
    db.update_run(home, run, status="succeeded")
    at = app("run", run=str(run))
    no_exception(at)
    boxes = [plain(str(box.value)) for box in at.info if REFUSED in plain(str(box.value))]
    assert len(boxes) == 1 and boxes[0].startswith("Not checked: " + REFUSED)
    assert boxes[0].endswith(FIX) and says in boxes[0]


def test_a_sweep_whose_capture_was_refused_says_why(home) -> None:
    from eagle3dash.cli import _check_kept_capture
    from eagle3dash.errors import InputError

    run = db.create_run(home, None, "http://gpubox:30000", None, {})
    db.capture_dir(home.home, run)  # queued with its capture folder, which stayed empty
    why = "POST http://gpubox:30000/generate: meta_info.hidden_states is neither a list nor null"
    diagnosis = db.to_json(_stored_with(capture_error=why))
    db.update_run(home, run, status="succeeded", diagnosis_json=diagnosis)
    with pytest.raises(InputError) as refused:
        _check_kept_capture(home, run)
    assert str(refused.value) == f"run #{run} (succeeded) saved no serving capture: {why}"


def test_a_run_stored_with_the_old_pointer_carries_the_capture_error_instead(home) -> None:
    run = db.create_run(home, None, "http://gpubox:30000", None, {})
    why = "POST http://gpubox:30000/generate: meta_info.hidden_states is neither a list nor null"
    diagnosis = _stored_with(capture_error=why)
    diagnosis["not_checked"] = [
        {
            "check": "serving-states",
            "reason": "the server refused or failed the capture of the states it feeds the draft",
            "option": None,
            "action": "read the capture error below, fix the server or the prompts, and run again",
        }
    ]
    db.update_run(home, run, status="succeeded", diagnosis_json=db.to_json(diagnosis))
    at = app("run", run=str(run))
    no_exception(at)
    assert f"Not checked: {REFUSED}{why}{FIX}" in texts(at, "info")
    assert "below" not in texts(at, "info")


@pytest.mark.parametrize("diagnosed", [True, False])
def test_the_sweep_points_at_the_sides_table_only_when_it_is_drawn(home, diagnosed) -> None:
    from eagle3dash import jobs as jobq

    stored = json.loads((ROOT / "tests/fixtures/stored/schema1.json").read_text())
    run = db.create_run(home, None, "http://gpubox:30000", None, {})
    if diagnosed:
        db.update_run(home, run, status="succeeded", diagnosis_json=db.to_json(stored))
    else:  # a run that failed, with a detect job of its own that succeeded
        db.update_run(home, run, status="failed", error="boom")
        job = jobq.submit_job(home, "detect", {}, run_id=run)
        home.db.execute(
            "UPDATE jobs SET status = 'succeeded', result_json = ? WHERE id = ?",
            (json.dumps(stored["detective"]), job),
        )
    at = app("run", run=str(run))
    no_exception(at)
    ranking = [c for c in texts(at, "caption").splitlines() if c.startswith("Ranked by")]
    assert len(ranking) == 1
    assert ("above" in ranking[0]) is diagnosed  # it points at the table only when drawn
    assert ("Training vs serving" in [h.value for h in at.header]) is diagnosed


def test_a_gap_names_the_findings_that_explain_it_without_placing_them() -> None:
    from eagle3dash.findings import Finding
    from eagle3dash.findings.measurement_rules import rule_training_serving_gap
    from eagle3dash.severity import Severity

    training = SimpleNamespace(source="config", sim_accept_length=3.0, top1=0.8)
    serving = SimpleNamespace(source="observed", sim_accept_length=1.5, top1=0.4)
    # a warning (a mismatch graded down) is listed after the critical gap, not above it
    mismatch = Finding("layout-mismatch", Severity.WARNING, "t", "e", "f")
    gap = rule_training_serving_gap(Evidence(training=training, serving=serving), [mismatch])
    assert gap[0].severity == Severity.CRITICAL
    assert gap[0].fix == "Apply the fix of finding layout-mismatch, then run the diagnosis again."


def test_a_small_gain_points_at_other_findings_only_when_there_are_some() -> None:
    from tests.findingskit import Bench, Server, Spec, report

    def fix(server: Server) -> str:
        gain = {"measured": Bench(110.0, 2.0, 1), "baseline": Bench(100.0)}  # 1.10x
        found = diagnose(Evidence(report=report(), server=server, **gain))
        return next(f.fix for f in found if f.id == "slower-than-baseline")

    assert fix(Server()).startswith("Raise the accept length or try ")
    eagle = Server(speculative=Spec(algorithm="EAGLE"))  # critical: EAGLE feeds no aux states
    assert fix(eagle).startswith("Raise the accept length (see algorithm-eagle) or try ")


def test_a_stored_diagnosis_cut_short_is_one_message_on_the_run_page(home) -> None:
    run = db.create_run(home, None, "http://gpubox:30000", None, {})
    cut = {"steps": 4, "verdict": {}, "findings": []}  # no sides: a killed writer, another program
    db.update_run(home, run, status="succeeded", diagnosis_json=db.to_json(cut))
    at = app("run", run=str(run))
    no_exception(at)
    assert [e.value.replace("\\", "") for e in at.error] == [  # markdown escapes dropped
        "this run's stored diagnosis cannot be read (no 'training'): it was cut short or written "
        "by another program; run the diagnosis again"
    ]


# --- total deadlines ---------------------------------------------------------------------------


@contextmanager
def header_drip() -> Iterator[str]:
    """A server that sends its status line and headers one byte every 0.2 s, forever."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    stop = threading.Event()

    def one(conn: socket.socket) -> None:
        with conn:
            conn.recv(65536)
            for byte in b"HTTP/1.1 200 OK\r\nX-Pad: " + b"a" * 100_000:
                if stop.is_set():
                    return
                try:
                    conn.send(bytes([byte]))
                except OSError:
                    return
                time.sleep(0.2)

    def accept() -> None:
        while not stop.is_set():
            try:
                conn, _ = listener.accept()
            except OSError:
                return
            threading.Thread(target=one, args=(conn,), daemon=True).start()

    threading.Thread(target=accept, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{listener.getsockname()[1]}"
    finally:
        stop.set()
        listener.close()


def test_a_probe_whose_headers_drip_ends_at_its_deadline() -> None:
    with header_drip() as url:
        status, error = _in_thread(SGLangClient(url, timeout=2, retries=1).probe)
    assert status == "raised" and error.kind == EndpointError.TIMEOUT
    assert str(error) == (
        f"GET {url}/server_info is slow: no complete answer within 2 s (is the server overloaded "
        "or stuck? raise the timeout for long generations)"
    )


def test_a_hidden_states_reply_that_drips_ends_at_its_deadline() -> None:
    body = {"text": "", "meta_info": {"hidden_states": [[[0.5] * 8] * 3]}}
    with serve(lambda req: Reply(200, body, drip=0.2)) as served:
        client = SGLangClient(served.url, timeout=2, retries=1)
        status, error = _in_thread(
            lambda: client.generate(
                input_ids=[1, 2, 3], max_new_tokens=1, return_hidden_states=True
            )
        )
    assert status == "raised" and error.kind == EndpointError.TIMEOUT


def test_a_benchmark_request_whose_headers_drip_ends_at_its_deadline() -> None:
    with header_drip() as url:
        client = SGLangClient(url, timeout=2, retries=1)
        status, error = _in_thread(lambda: asyncio.run(client.agenerate(text="x")))
    assert status == "raised" and error.kind == EndpointError.TIMEOUT


# --- CLI edges ---------------------------------------------------------------------------------


def test_a_4000_character_file_name_is_one_line(place, capsys) -> None:
    name = "a" * 4000
    line = cli_error(["inspect", name], capsys)
    assert line.endswith("aaa: File name too long") and "OSError" not in line
    assert len(line) == len("error: ") + 1000  # cut in the middle, at the error line's cap


def test_a_4000_character_host_names_the_url(place, capsys) -> None:
    line = cli_error(["probe", f"http://{'h' * 4000}:30000", "--timeout", "2"], capsys)
    assert line.startswith("error: 'http://hhhh") and "…" in line
    assert line.endswith(
        "is not a valid endpoint URL: its host name cannot be encoded for DNS (a label is empty or "
        "too long); use http://host:port"
    )


def test_terminal_escapes_in_a_printed_path_are_shown_not_obeyed(draft, place, capsys) -> None:
    target = place / "d\x1b[2J\x1b]0;owned\x07"
    target.symlink_to(draft)
    from eagle3dash import cli

    assert _in_thread(cli.main, ["inspect", str(target)]) == ("ok", 0)
    out = capsys.readouterr().out
    assert "\x1b" not in out and "\x07" not in out
    assert "d\\x1b[2J\\x1b]0;owned\\x07" in out


@pytest.mark.parametrize(
    "text, line",
    [
        ("a\nb\r\nc", "a b c"),
        ("\x1b[31mred\x1b[0m", "\\x1b[31mred\\x1b[0m"),
        ("bidi \u202eevil", "bidi \\u202eevil"),
        ("tab\tand\x00nul", "tab and\\x00nul"),
    ],
)
def test_one_line_folds_breaks_and_escapes_controls(text, line) -> None:
    assert one_line(text) == line
    assert printable("x\ny") == "x\ny"  # printable keeps line breaks (tables), escapes the rest


@pytest.mark.parametrize(
    "text, value",
    [("12", 12), ("²", None), ("١٢", None), ("9" * 18, 10**18 - 1), ("9" * 19, None), ("", None)],
)
def test_ascii_int_takes_ascii_digits_that_fit_sqlite(text, value) -> None:
    assert ascii_int(text) == value


# --- exception boxes ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "page, params",
    [
        ("run", {"run": "²"}),
        ("run", {"run": "9" * 25}),
        ("compare", {"a": "²", "b": "1"}),
        ("new_run", {"checkpoint": "²"}),
    ],
)
def test_a_superscript_or_huge_id_in_a_link_is_one_message(home, page, params) -> None:
    at = app(page, **params)
    no_exception(at)
    assert texts(at, "error", "warning")


@pytest.mark.parametrize("search", ["²", "#" + "9" * 25, "#²"])
def test_the_runs_search_with_a_strange_id_finds_nothing(home, search) -> None:
    db.create_run(home, None, "http://gpubox:30000", None, {})
    at = app("runs")
    at.text_input(key="runs_search").set_value(search).run()
    no_exception(at)
    assert db.list_runs(home, search=search) == []


def test_a_database_with_a_dropped_table_is_one_message(tmp_path, monkeypatch) -> None:
    home = tmp_path / "home"
    db.open_store(home).close()
    import sqlite3

    conn = sqlite3.connect(home / db.DB_NAME)
    conn.execute("DROP TABLE findings")
    conn.commit()
    conn.close()
    with pytest.raises(db.HomeError) as refused:
        db.open_store(home)
    assert str(refused.value) == (
        f"the database {home / db.DB_NAME} lacks its findings table (dropped by hand or by a "
        "tool): move it aside to start a new one, or restore it from a backup"
    )
    monkeypatch.setenv("EAGLE3DASH_HOME", str(home))
    at = app("runs")
    no_exception(at)
    assert texts(at, "error").startswith(f"the database {home / db.DB_NAME} lacks its findings")


@contextmanager
def full_disk(where: Path) -> Iterator[Path]:
    """A 1 MiB tmpfs mounted at `where` (root only)."""
    where.mkdir()
    if os.geteuid() != 0:
        pytest.skip("mounting a small tmpfs needs root")
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(where)], capture_output=True
    )
    if mounted.returncode != 0:
        pytest.skip("cannot mount a tmpfs here")
    try:
        yield where
    finally:
        subprocess.run(["umount", "--lazy", str(where)], check=True)


def test_an_upload_onto_a_full_disk_is_one_message(draft, tmp_path) -> None:
    with full_disk(tmp_path / "small") as small:
        store = db.open_store(small / "home")
        with (small / "filler").open("wb") as filler, pytest.raises(OSError):
            while True:  # the rest of the disk
                filler.write(b"\0" * 65536)
                filler.flush()
        files = [Upload(f.name, f.read_bytes()) for f in sorted(draft.iterdir())]
        with pytest.raises(UploadError) as refused:
            register_upload(store, files)
        leftovers = sorted(p.name for p in (small / "home" / "checkpoints").iterdir())
        store.close()
    assert str(refused.value) == (
        f"the upload could not be written into the home {small / 'home'} (the disk is full): "
        "free space there (or set EAGLE3DASH_HOME to a folder on a larger disk) and upload again"
    )
    assert leftovers == []  # nothing half-stored


# --- two id lists in one config ----------------------------------------------------------------


@pytest.mark.parametrize(
    "top, conflict",
    [([5, 9, 13], True), ([2, 3, 4], False), ([1, 2, 3], False)],
)
def test_two_aux_id_lists_that_name_different_taps_are_a_problem(tmp_path, top, conflict):
    spec = tiny_spec(aux_layer_ids=(1, 2, 3), aux_ids_location="eagle_config")
    folder = save(spec, random_tensors(spec, seed=0), tmp_path / "d", "specforge")
    config = json.loads((folder / "config.json").read_text())
    config["eagle_aux_hidden_state_layer_ids"] = top
    (folder / "config.json").write_text(json.dumps(config))
    problems = [p.text for p in inspect(folder).problems if p.code is ProblemCode.AUX_IDS_TWO_LISTS]
    expected = (
        "two different aux layer id lists: eagle_config.eagle_aux_hidden_state_layer_ids "
        f"[1, 2, 3] (what SGLang captures) and top-level eagle_aux_hidden_state_layer_ids {top} "
        "(what vLLM reads first), so the two engines feed this draft different layers: keep one "
        "list, or write the top-level one as the nested ids + 1"
    )
    assert problems == ([expected] if conflict else [])
