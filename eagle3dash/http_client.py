"""The HTTP transport shared by the engines' clients (SGLang, vLLM): the one error type, URL
normalization, retries, a total deadline per request and bounded replies.

Every failure is an `EndpointError` with one line that names the URL and what to do, so interfaces
can show it without a traceback; a reply's content is classified, never echoed.
"""

from __future__ import annotations

import asyncio
import re
import socket
import threading
import time
import weakref
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from typing import Any, Self

import httpx
import orjson

from eagle3dash.errors import InputError
from eagle3dash.text import one_line

_CAUSE_SCAN = 4096  # an error reply's first characters, searched for a known cause
_MEDIA_TYPE = re.compile(r"[a-z0-9.+-]{1,40}/[a-z0-9.+-]{1,80}|no content type", re.IGNORECASE)
# The largest reply to a request without hidden states (server_info, a generation's text and
# meta_info): far above any real one, far below what would exhaust memory.
MAX_REPLY_BYTES = 64 << 20


class EndpointError(InputError):
    """An inference endpoint (SGLang, vLLM) that cannot be used; the one-line message names the
    URL and the fix."""

    DOWN = "down"
    TIMEOUT = "timeout"
    NOT_SGLANG = "not_sglang"
    BAD_RESPONSE = "bad_response"
    SERVER_ERROR = "server_error"
    REQUEST_REJECTED = "request_rejected"
    NO_SPECULATION = "no_speculation"
    NO_HIDDEN_STATES = "no_hidden_states"
    BAD_URL = "bad_url"
    TOO_LARGE = "too_large"

    def __init__(self, message: str, *, url: str, kind: str, status: int | None = None) -> None:
        super().__init__(message)
        self.url = url
        self.kind = kind
        self.status = status


LOCAL_HOSTS = ("localhost", "127.0.0.1", "::1", "0.0.0.0")  # with this machine's own name


def is_this_machine(host: str) -> bool:
    """Whether a URL's host names this machine."""
    return host.lower() in (*LOCAL_HOSTS, socket.gethostname().lower())


def server_key(url: str) -> str:
    """Which server a URL names, so that two spellings of one server are one: host (any name of
    this machine as 127.0.0.1), port (the scheme's default when none) and path."""
    parsed = httpx.URL(normalize_url(url))
    host = "127.0.0.1" if is_this_machine(parsed.host) else parsed.host.lower()
    port = parsed.port or (443 if parsed.scheme == "https" else 80)
    return f"{host}:{port}{parsed.path.rstrip('/')}"


def normalize_url(url: str) -> str:
    """`host:port` or `http://host:port/` -> `http://host:port`: scheme added, slash dropped."""
    text = (url or "").strip()
    if "://" not in text:
        text = "http://" + text
    text = text.rstrip("/")
    shown = one_line(repr(url), 120)
    try:
        parsed = httpx.URL(text)
    except httpx.InvalidURL as exc:
        raise EndpointError(
            f"{shown} is not a valid endpoint URL ({one_line(exc, 120)}): use http://host:port",
            url=url,
            kind=EndpointError.BAD_URL,
        ) from None
    if parsed.scheme not in ("http", "https") or not parsed.host:
        raise EndpointError(
            f"{shown} is not a valid endpoint URL: use http://host:port",
            url=url,
            kind=EndpointError.BAD_URL,
        )
    problem = _host_problem(parsed.host)
    if problem:
        raise EndpointError(
            f"{shown} is not a valid endpoint URL: {problem}; use http://host:port",
            url=url,
            kind=EndpointError.BAD_URL,
        )
    return text


def _host_problem(host: str) -> str | None:
    """Why a host name cannot be looked up (DNS: labels of 1-63 characters, 253 in all, as
    IDNA encodes them), else None; an IP address has none."""
    if host.startswith("[") or host.replace(".", "").isdigit() or ":" in host:
        return None
    try:
        encoded = host.encode("idna")
    except UnicodeError:
        return "its host name cannot be encoded for DNS (a label is empty or too long)"
    if len(encoded) > 253:
        return f"its host name is {len(encoded):,} characters long, over DNS's 253"
    return None


# Phrases of the engines' own error messages (SGLang's, vLLM's), recognised (lower case) and said
# in our words: a reply's text is never shown, but a known cause is named.
_KNOWN_CAUSES = (
    ("out of memory", "the server ran out of GPU memory"),
    ("longer than the model's context length", "the prompt is longer than the context length"),
    ("input too long", "the prompt is longer than the context length"),
)


def _known_cause(text: str) -> str | None:
    """Our words for a known engine error phrase in a reply's text, else None."""
    lowered = text.lower()
    return next((words for phrase, words in _KNOWN_CAUSES if phrase in lowered), None)


def _describe_body(resp: httpx.Response) -> str:
    """A reply's kind and size, never its content: whatever answers at a URL is classified, not
    echoed (its words could be anyone's)."""
    kind = resp.headers.get("content-type", "no content type").split(";")[0].strip()
    if not _MEDIA_TYPE.fullmatch(kind):
        kind = "an unusual content type"
    size = len(resp.content)
    return f"{kind}, {size:,} bytes" if size else f"{kind}, empty body"


class HttpEndpoint:
    """The transport every engine's client shares: pooled connections, retries on connection
    errors only, one total deadline per request, bounded replies, and every failure one
    EndpointError naming the URL and the fix. `ENGINE` names the server it expects."""

    ENGINE = "inference"

    @property
    def _engine_server(self) -> str:
        article = "an" if self.ENGINE[0].lower() in "aeiosx" else "a"
        return f"{article} {self.ENGINE} server"

    def __init__(
        self,
        url: str,
        timeout: float = 60.0,
        retries: int = 3,
        *,
        backoff: float = 0.25,
        api_key: str | None = None,
    ) -> None:
        self.url = normalize_url(url)
        self.timeout = float(timeout)
        self.retries = max(1, int(retries))
        self.backoff = float(backoff)
        # SGLang's and vLLM's --api-key check a bearer token on every route.
        self._headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._http: httpx.Client | None = None
        # The sockets this client opened: the deadline shuts them down (see `_deadline`).
        self._sockets: weakref.WeakSet[socket.socket] = weakref.WeakSet()
        self._expired: threading.Event | None = None  # the running deadline's, once it passed

    # lifecycle

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Close the pooled sync connection."""
        if self._http is not None:
            self._http.close()
            self._http = None

    def _client(self) -> httpx.Client:
        if self._http is None:
            self._http = httpx.Client(timeout=self.timeout, headers=self._headers)
        return self._http

    def async_client(self, max_connections: int = 100) -> httpx.AsyncClient:
        """A new AsyncClient for `agenerate(session=...)`; the caller closes it."""
        limits = httpx.Limits(
            max_connections=max_connections, max_keepalive_connections=max_connections
        )
        return httpx.AsyncClient(timeout=self.timeout, headers=self._headers, limits=limits)

    # error mapping

    def _err(self, message: str, kind: str, status: int | None = None) -> EndpointError:
        return EndpointError(message, url=self.url, kind=kind, status=status)

    def _down(self, method: str, path: str, exc: Exception) -> EndpointError:
        tries = f" after {self.retries} tries" if self.retries > 1 else ""
        return self._err(
            f"cannot connect to {self.url} ({method} {path}: {one_line(str(exc), 120)}){tries}: "
            "is the server running? check the URL and port",
            EndpointError.DOWN,
        )

    def _http_error(self, method: str, path: str, exc: httpx.HTTPError) -> EndpointError:
        if isinstance(exc, httpx.TimeoutException):
            return self._err(
                f"{method} {self.url}{path} is slow: no answer within {self.timeout:g} s "
                "(is the server overloaded or stuck? raise the timeout for long generations)",
                EndpointError.TIMEOUT,
            )
        if isinstance(exc, httpx.RemoteProtocolError) and "disconnected" in str(exc).lower():
            # A server that crashes mid-request closes the socket without an answer.
            return self._err(
                f"{method} {self.url}{path}: the server closed the connection without answering "
                "(did it crash? check its log)",
                EndpointError.DOWN,
            )
        if isinstance(exc, httpx.RemoteProtocolError | httpx.DecodingError):
            return self._err(  # h11's words quote the reply's bytes: only the error's kind
                f"{method} {self.url}{path} answered with something that is not valid HTTP "
                f"({type(exc).__name__}): does the URL point at {self._engine_server}?",
                EndpointError.NOT_SGLANG,
            )
        if isinstance(exc, httpx.UnsupportedProtocol | httpx.InvalidURL):
            return self._err(
                f"{self.url} is not a usable URL ({exc}): use http://host:port",
                EndpointError.BAD_URL,
            )
        return self._err(
            f"{method} {self.url}{path} failed: {type(exc).__name__}: {one_line(str(exc), 120)} "
            "(did the server crash or drop the connection?)",
            EndpointError.DOWN,
        )

    def _check(self, resp: httpx.Response, method: str, path: str) -> httpx.Response:
        """Return a 2xx response; map anything else to one EndpointError."""
        status = resp.status_code
        if status < 300:
            return resp
        cause = _known_cause(resp.text[:_CAUSE_SCAN])
        text = f"{cause}; " if cause else ""
        text += f"its reply: {_describe_body(resp)}"
        where = f"{method} {self.url}{path}"
        if status >= 500:
            raise self._err(
                f"{where} failed with HTTP {status} ({text}): the server's log says why",
                EndpointError.SERVER_ERROR,
                status,
            )
        if status in (401, 403):
            raise self._err(
                f"{where} was refused with HTTP {status} ({text}): "
                "the server needs the API key it was started with (--api-key)",
                EndpointError.REQUEST_REJECTED,
                status,
            )
        if status == 404:
            raise self._err(
                f"{self.url} does not look like {self._engine_server}: "
                f"{method} {path} returned 404",
                EndpointError.NOT_SGLANG,
                status,
            )
        raise self._err(
            f"{where} was rejected with HTTP {status} ({text})",
            EndpointError.REQUEST_REJECTED,
            status,
        )

    def _json(self, resp: httpx.Response, method: str, path: str) -> Any:
        try:
            return orjson.loads(resp.content)
        except orjson.JSONDecodeError:
            raise self._err(
                f"{method} {self.url}{path} returned a body that is not JSON "
                f"({_describe_body(resp)}): does the URL point at {self._engine_server}?",
                EndpointError.BAD_RESPONSE,
                resp.status_code,
            ) from None

    def _trace(self, event: str, info: dict) -> None:
        # httpcore's trace extension: each new connection's socket, for `_deadline` to shut.
        if event == "connection.connect_tcp.complete" and info.get("return_value") is not None:
            sock = info["return_value"].get_extra_info("socket")
            if sock is not None:
                self._sockets.add(sock)
                if self._expired is not None and self._expired.is_set():
                    with suppress(OSError):  # connected after the deadline: no use any more
                        sock.shutdown(socket.SHUT_RDWR)

    def _slow(self, method: str, path: str) -> EndpointError:
        return self._err(
            f"{method} {self.url}{path} is slow: no complete answer within {self.timeout:g} s "
            "(is the server overloaded or stuck? raise the timeout for long generations)",
            EndpointError.TIMEOUT,
        )

    @contextmanager
    def _deadline(self, method: str, path: str) -> Iterator[None]:
        """One total deadline (`timeout`) over connect, headers and body: httpx's timeouts are
        per read, so a server sending its headers a byte a second would hold a request forever.
        At the deadline the client's sockets are shut down, which ends any blocked read."""
        fired = threading.Event()
        self._expired = fired

        def stop() -> None:
            fired.set()
            for sock in list(self._sockets):
                with suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)

        timer = threading.Timer(self.timeout, stop)
        timer.daemon = True
        timer.start()
        try:
            yield
        except (EndpointError, httpx.HTTPError):
            if fired.is_set():
                raise self._slow(method, path) from None
            raise
        finally:
            timer.cancel()
            self._expired = None
            if fired.is_set():
                self.close()  # its connections are dead
        if fired.is_set():  # an answer completed past the deadline is past it all the same
            raise self._slow(method, path)

    # transport: retries on connection errors only; an HTTP error or a timeout is final, since a
    # generate that timed out may still be running on the server.

    def _request(
        self, method: str, path: str, json: Any = None, *, stream: bool = False
    ) -> httpx.Response:
        """The response, read whole within the request's total deadline (`timeout`) and
        MAX_REPLY_BYTES; with `stream` its body is left unread (the caller closes it)."""
        if not stream:
            with self._deadline(method, path):
                return self._send(method, path, json, stream)
        return self._send(method, path, json, stream)

    def _send(self, method: str, path: str, json: Any, stream: bool) -> httpx.Response:
        last: Exception | None = None
        for attempt in range(self.retries):
            deadline = time.monotonic() + self.timeout
            try:
                client = self._client()
                request = client.build_request(
                    method, self.url + path, json=json, extensions={"trace": self._trace}
                )
                resp = client.send(request, stream=True)
                return resp if stream else self._read_bounded(resp, method, path, deadline)
            except httpx.ConnectError as exc:
                last = exc
                if attempt + 1 < self.retries:
                    time.sleep(self.backoff * 2**attempt)
            except httpx.HTTPError as exc:
                raise self._http_error(method, path, exc) from None
        assert last is not None
        raise self._down(method, path, last) from None

    def _read_bounded(
        self, resp: httpx.Response, method: str, path: str, deadline: float
    ) -> httpx.Response:
        """The response with its body read, refused past the deadline or MAX_REPLY_BYTES: httpx's
        timeout is per read, so a server sending a byte a second would hold a request forever."""
        chunks, size = [], 0
        try:
            for chunk in resp.iter_bytes():
                size += len(chunk)
                self._bound(size, deadline, method, path)
                chunks.append(chunk)
        finally:
            resp.close()
        return httpx.Response(
            resp.status_code, headers=resp.headers, content=b"".join(chunks), request=resp.request
        )

    def _bound(self, size: int, deadline: float, method: str, path: str) -> None:
        """Refuse a reply being read once it is larger than MAX_REPLY_BYTES or past its deadline."""
        if size > MAX_REPLY_BYTES:
            raise self._err(
                f"{method} {self.url}{path}: the reply is larger than {MAX_REPLY_BYTES >> 20} MiB, "
                f"more than any {self.ENGINE} answer to it: refused (does the URL point at "
                f"{self._engine_server}?)",
                EndpointError.TOO_LARGE,
            )
        if time.monotonic() > deadline:
            raise self._slow(method, path)

    async def _arequest(
        self, session: httpx.AsyncClient, method: str, path: str, json: Any = None
    ) -> httpx.Response:
        """`_request` for the benchmark's concurrent requests (same deadline and size bound)."""
        last: Exception | None = None
        for attempt in range(self.retries):
            deadline = time.monotonic() + self.timeout
            try:
                request = session.build_request(method, self.url + path, json=json)
                chunks, size = [], 0
                try:  # the total deadline covers the headers too (a server may drip them)
                    async with asyncio.timeout(self.timeout):
                        resp = await session.send(request, stream=True)
                        try:
                            async for chunk in resp.aiter_bytes():
                                size += len(chunk)
                                self._bound(size, deadline, method, path)
                                chunks.append(chunk)
                        finally:
                            await resp.aclose()
                except TimeoutError:
                    raise self._slow(method, path) from None
                return httpx.Response(
                    resp.status_code,
                    headers=resp.headers,
                    content=b"".join(chunks),
                    request=resp.request,
                )
            except httpx.ConnectError as exc:
                last = exc
                if attempt + 1 < self.retries:
                    await asyncio.sleep(self.backoff * 2**attempt)
            except httpx.HTTPError as exc:
                raise self._http_error(method, path, exc) from None
        assert last is not None
        raise self._down(method, path, last) from None
