"""Who can reach the app: loopback by default; a network bind needs an access token at every door.

Like TensorBoard, MLflow and Jupyter, the app listens on 127.0.0.1 unless told otherwise (a team
reaches it through an SSH tunnel). Whether it is reachable from the network is decided from the
address the server listens on, read from Streamlit's own config (`server.address`, flags included)
at run time, never from the environment. On a network address `serve.py` (what `make run` starts)
puts `AccessGate` in front of Streamlit, so every request, the page, the websocket, uploads
(`/_stcore/upload_file`) and media, needs the cookie the gate's form sets once the token from
EAGLE3DASH_TOKEN (or Streamlit's secrets, key `token`) is given. Only the health check (its body
is "ok") and the form itself answer without it. Pages also refuse to draw on a network address
when the gate is not in front of them (`streamlit run app.py --server.address 0.0.0.0`).
"""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
import os
import urllib.parse
from collections.abc import Awaitable, Callable, MutableMapping
from http.cookies import SimpleCookie
from typing import Any

import streamlit as st

from eagle3dash.ui import icons

TOKEN_ENV = "EAGLE3DASH_TOKEN"
COOKIE = "eagle3dash_access"
FORM_PATH = "/_eagle3dash/access"
# Streamlit's health check: "ok", nothing else; kept open for probes and `make run`'s wait.
OPEN_PATHS = frozenset({"/_stcore/health"})
MAX_FORM_BYTES = 4096  # a token form, not an upload

# streamlit 1.67 web/server/starlette/starlette_server.py: `_get_server_address` falls back to
# this when server.address is unset, and then binds every interface.
STREAMLIT_DEFAULT_ADDRESS = "0.0.0.0"

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

_gates: list[AccessGate] = []  # the gates this process serves behind (serve.py: one)


def listening_address() -> str:
    """The address the server listens on, from Streamlit's config as it runs (flags included)."""
    return str(st.get_option("server.address") or STREAMLIT_DEFAULT_ADDRESS)


def is_loopback(address: str) -> bool:
    """Whether an address only this machine can reach."""
    if address == "localhost":
        return True
    try:
        return ipaddress.ip_address(address.strip("[]")).is_loopback
    except ValueError:
        return False


def configured_token() -> str | None:
    """The access token: EAGLE3DASH_TOKEN, else Streamlit's secrets['token'], else None."""
    token = os.environ.get(TOKEN_ENV)
    if token:
        return token
    try:
        return str(st.secrets["token"]) if "token" in st.secrets else None
    except FileNotFoundError:  # no secrets file
        return None


def cookie_for(token: str) -> str:
    """The cookie value that proves a browser gave the token (the token itself never travels
    back out)."""
    return hmac.new(token.encode(), b"eagle3dash access", hashlib.sha256).hexdigest()


def cookie_is_valid(value: str | None, token: str | None) -> bool:
    """Whether a cookie value was made from this token."""
    if not value or not token:
        return False
    return hmac.compare_digest(value.encode(), cookie_for(token).encode())


def gate_is_installed() -> bool:
    """Whether this process serves behind an AccessGate (serve.py)."""
    return bool(_gates)


class AccessGate:
    """ASGI middleware: on a network address, no request passes without the token's cookie.

    Refusals: 401 for HTTP (a browser asking for a page gets the token form with it), a close
    before accept for a websocket (403 on the wire), 503 everywhere when no token is set.
    """

    def __init__(self, app: ASGIApp) -> None:
        self.app = app
        _gates.append(self)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] not in ("http", "websocket") or is_loopback(listening_address()):
            await self.app(scope, receive, send)
            return
        path = str(scope.get("path", ""))
        if path in OPEN_PATHS:
            await self.app(scope, receive, send)
            return
        token = configured_token()
        if scope["type"] == "websocket":
            if cookie_is_valid(_cookie(scope), token):
                await self.app(scope, receive, send)
            else:
                await send({"type": "websocket.close", "code": 1008})
            return
        if token is None:
            await _reply(send, 503, _NO_TOKEN, "text/plain")
        elif path == FORM_PATH and scope.get("method") == "POST":
            await _check_form(scope, receive, send, token)
        elif cookie_is_valid(_cookie(scope), token):
            await self.app(scope, receive, send)
        elif path == FORM_PATH or _wants_page(scope):
            await _reply(send, 401, _form_page(""), "text/html")
        else:
            await _reply(send, 401, _REFUSED, "text/plain")


_NO_TOKEN = (
    f"eagle3dash listens on a network address and no access token is set: set {TOKEN_ENV} "
    "(or `token` in .streamlit/secrets.toml) and restart, or serve on 127.0.0.1 and reach it "
    "through an SSH tunnel.\n"
)
_REFUSED = f"eagle3dash: this request needs the access token; give it at {FORM_PATH}\n"


def _headers(scope: Scope) -> dict[bytes, bytes]:
    return {name.lower(): value for name, value in scope.get("headers", [])}


def _cookie(scope: Scope) -> str | None:
    raw = _headers(scope).get(b"cookie", b"").decode("latin-1")
    try:
        jar: SimpleCookie = SimpleCookie(raw)
    except Exception:  # noqa: BLE001 - a malformed Cookie header is no cookie
        return None
    return jar[COOKIE].value if COOKIE in jar else None


def _wants_page(scope: Scope) -> bool:
    return scope.get("method") == "GET" and b"text/html" in _headers(scope).get(b"accept", b"")


async def _reply(
    send: Send, status: int, body: str, kind: str, extra: tuple[tuple[bytes, bytes], ...] = ()
) -> None:
    data = body.encode()
    headers = [
        (b"content-type", f"{kind}; charset=utf-8".encode()),
        (b"content-length", str(len(data)).encode()),
        (b"cache-control", b"no-store"),
        *extra,
    ]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": data})


async def _check_form(scope: Scope, receive: Receive, send: Send, token: str) -> None:
    body = b""
    more = True
    while more and len(body) <= MAX_FORM_BYTES:
        message = await receive()
        if message["type"] != "http.request":
            return
        body += message.get("body", b"")
        more = bool(message.get("more_body"))
    if len(body) > MAX_FORM_BYTES:
        await _reply(send, 413, "eagle3dash: the token form is larger than 4 KiB\n", "text/plain")
        return
    given = urllib.parse.parse_qs(body.decode("utf-8", "replace")).get("token", [""])[0]
    if not hmac.compare_digest(given.encode(), token.encode()):
        await _reply(send, 401, _form_page("That is not the access token."), "text/html")
        return
    cookie = f"{COOKIE}={cookie_for(token)}; Path=/; HttpOnly; SameSite=Strict"
    await _reply(
        send, 303, "", "text/plain", ((b"location", b"/"), (b"set-cookie", cookie.encode()))
    )


def _form_page(problem: str) -> str:
    # Fixed text only: nothing from the request is echoed into this page.
    note = f'<p role="alert">{problem}</p>' if problem else ""
    return (
        '<!doctype html><html><head><meta charset="utf-8"><title>eagle3dash</title></head>'
        "<body><h1>eagle3dash</h1><p>This app listens on a network address; its token is in "
        f"{TOKEN_ENV}.</p>{note}"
        f'<form method="post" action="{FORM_PATH}"><label>Access token '
        '<input type="password" name="token" autofocus></label> '
        '<button type="submit">Open</button></form></body></html>'
    )


def require_access() -> None:
    """On a network address, stop every page unless the gate let this session in."""
    address = listening_address()
    if is_loopback(address):
        return
    if not gate_is_installed():
        st.title("eagle3dash")
        st.error(
            f"This app listens on {address}, a network address, without its access gate (uploads "
            "and media would be open to anyone): start it with `eagle3dash app --bind ...`, "
            "`make run BIND=...` or `streamlit run serve.py`, or serve on 127.0.0.1 and reach it "
            "through an SSH tunnel.",
            icon=icons.LOCKED,
        )
        st.stop()
    if not cookie_is_valid(st.context.cookies.get(COOKIE), configured_token()):
        st.title("eagle3dash")
        st.error(
            f"This session has not given the access token: open {FORM_PATH}.", icon=icons.LOCKED
        )
        st.stop()
