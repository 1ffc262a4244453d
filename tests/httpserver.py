"""A tiny HTTP server on 127.0.0.1 for tests: an `App` maps each Request to a Reply.

Used for SGLang stand-ins (older versions, endpoints that are down, slow or not SGLang at all).
"""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


@dataclass
class Request:
    method: str
    path: str
    body: bytes
    headers: dict[str, str] = field(default_factory=dict)

    def json(self) -> dict:
        return json.loads(self.body or b"{}")


@dataclass
class Reply:
    status: int = 200
    body: bytes | str | dict | list = b""
    content_type: str | None = None
    delay: float = 0.0
    raw: bytes | None = None  # written to the socket as-is, no HTTP framing
    drip: float = 0.0  # seconds between the body's bytes (a server sending a byte at a time)


App = Callable[[Request], Reply]


@dataclass
class Served:
    url: str
    requests: list[Request] = field(default_factory=list)

    def hits(self, method: str, path: str) -> int:
        return sum(1 for r in self.requests if (r.method, r.path) == (method, path))


class _Handler(BaseHTTPRequestHandler):
    server: _Server

    def _serve(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else b""
        req = Request(
            self.command, self.path, body, {k.lower(): v for k, v in self.headers.items()}
        )
        with self.server.lock:
            self.server.served.requests.append(req)
        reply = self.server.app(req)
        if reply.delay:
            time.sleep(reply.delay)
        try:
            if reply.raw is not None:
                self.wfile.write(reply.raw)
                self.close_connection = True
                return
            body, ctype = reply.body, reply.content_type
            if isinstance(body, dict | list):
                body, ctype = json.dumps(body).encode(), ctype or "application/json"
            elif isinstance(body, str):
                body, ctype = body.encode(), ctype or "text/plain; charset=utf-8"
            self.send_response(reply.status)
            self.send_header("Content-Type", ctype or "application/octet-stream")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            if not reply.drip:
                self.wfile.write(body)
            for i in range(len(body) if reply.drip else 0):
                self.wfile.write(body[i : i + 1])
                self.wfile.flush()
                time.sleep(reply.drip)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the client gave up (timeout tests)

    do_GET = do_POST = do_PUT = _serve

    def log_message(self, format: str, *args: object) -> None:
        pass


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    block_on_close = False  # a slow handler must not hold up the test's teardown

    def __init__(self, app: App) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.app = app
        self.lock = threading.Lock()
        self.served = Served(f"http://127.0.0.1:{self.server_address[1]}")


@contextmanager
def serve(app: App) -> Iterator[Served]:
    """Run `app` on an ephemeral 127.0.0.1 port for the duration of the block."""
    server = _Server(app)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.02})
    thread.daemon = True
    thread.start()
    try:
        yield server.served
    finally:
        server.shutdown()
        server.server_close()


def closed_port_url() -> str:
    """A URL on which nothing listens."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return f"http://127.0.0.1:{port}"
