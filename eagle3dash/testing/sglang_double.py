"""A TEST AND DEMO DOUBLE of an SGLang 0.5.23 server: never a serving engine. This module is its
HTTP surface and command line (`python -m eagle3dash.testing.sglang_double`, or `python -m
eagle3dash double`): the routes of SGLang 0.5.23's FastAPI app (`entrypoints/http_server.py`) on
127.0.0.1, answered by the engine in `sglang_double_engine.py` (`DoubleEngine`: what the double
models, what it does not, and the knobs that make the world disagree with eagle3dash's model of
SGLang), and `start_double`, which serves one on a background thread.
"""

from __future__ import annotations

import argparse
import json
import logging
import signal
import sys
import threading
import time
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from eagle3dash.engines.sglang.rules import DEFAULT_SGLANG_VERSION

from ..errors import InputError
from .sglang_double_engine import (
    ALGORITHMS,
    DRIP_S,
    HIDDEN_STATES_FAULTS,
    NOTE,
    TAG,
    DoubleConfig,
    DoubleEngine,
    RequestError,
    serve_threads,
)

__all__ = ["RunningDouble", "main", "start_double"]

log = logging.getLogger(__name__)

FLUSH_CACHE_TEXT = (
    "Cache flushed.\nPlease check backend logs for more details. "
    "(When there are running or waiting requests, the operation will not be performed.)\n"
)


# ---------------------------------------------------------------------------------------------
# HTTP


_GET = {
    "/health",
    "/health_generate",
    "/server_info",
    "/get_server_info",
    "/model_info",
    "/get_model_info",
    "/flush_cache",
    "/v1/models",
}
_POST = {"/generate", "/flush_cache", "/v1/chat/completions"}
_PUT = {"/generate"}


class _Handler(BaseHTTPRequestHandler):
    """Routes like SGLang's FastAPI app; unknown paths get FastAPI's 404 body."""

    server_version = "eagle3dash-sglang-double"
    protocol_version = "HTTP/1.1"
    # TCP_NODELAY: the headers and the body are two writes, and with Nagle's algorithm the body
    # waits for the client's delayed ACK of the headers (about 40 ms a reply on Linux)
    disable_nagle_algorithm = True
    engine: DoubleEngine  # set on the subclass made per server

    def log_message(self, format: str, *args: Any) -> None:
        log.debug("%s %s - %s", TAG, self.address_string(), format % args)

    def _send(self, status: int, body: bytes, content_type: str = "application/json") -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def _drip(self, body: bytes) -> None:
        """A 200 reply whose body goes out DRIP_S seconds a byte, until the client hangs up."""
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        try:
            for i in range(len(body)):
                self.wfile.write(body[i : i + 1])
                self.wfile.flush()
                time.sleep(DRIP_S)
        except OSError:  # the client gave up at its deadline
            self.close_connection = True

    def _json(self, status: int, obj: Any) -> None:
        self._send(status, json.dumps(obj).encode())

    def _read_body(self) -> bytes:
        length = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(length) if length else b""

    def do_GET(self) -> None:
        self._route("GET", _GET)

    def do_POST(self) -> None:
        self._route("POST", _POST)

    def do_PUT(self) -> None:
        self._route("PUT", _PUT)

    def _route(self, method: str, allowed: set[str]) -> None:
        path = self.path.split("?", 1)[0]
        raw = self._read_body()  # always consumed, so keep-alive connections stay in sync
        if path not in allowed:
            if path in _GET | _POST | _PUT:
                self._json(405, {"detail": "Method Not Allowed"})
            else:
                self._json(404, {"detail": "Not Found"})
            return
        try:
            body = json.loads(raw) if raw.strip() else {}
        except (ValueError, UnicodeDecodeError) as e:
            self._json(
                422, {"detail": [{"type": "json_invalid", "msg": f"JSON decode error: {e}"}]}
            )
            return
        try:
            self._dispatch(path, body)
        except (RequestError, ValueError, TypeError) as e:
            log.error("%s [http_server] Error: %s", TAG, e)
            self._json(400, {"error": {"message": str(e)}})
        except Exception as e:  # a bug in the double: answer 500 rather than drop the connection
            log.exception("%s internal error on %s", TAG, path)
            self._json(500, {"error": {"message": f"eagle3dash double internal error: {e}"}})

    def _dispatch(self, path: str, body: Any) -> None:
        engine = self.engine
        if path == "/health":
            self._send(200, b"")
        elif path == "/health_generate":
            engine.generate([0], 1, set(), False)
            self._send(200, b"")
        elif path in ("/server_info", "/get_server_info"):
            self._json(200, engine.server_info())
        elif path in ("/model_info", "/get_model_info"):
            self._json(200, engine.model_info())
        elif path == "/flush_cache":
            self._send(200, FLUSH_CACHE_TEXT.encode(), "text/plain; charset=utf-8")
        elif path == "/v1/models":
            self._json(200, _models(engine))
        elif not isinstance(body, dict):
            raise RequestError("the request body must be a JSON object")
        elif path == "/generate" and engine.drips(body):
            self._drip(json.dumps(engine.handle_generate(body)).encode())
        elif path == "/generate":
            self._json(200, engine.handle_generate(body))
        elif path == "/v1/chat/completions":
            self._json(200, engine.handle_chat(body))


def _models(engine: DoubleEngine) -> dict:
    ctx = getattr(engine.hf_config, "max_position_embeddings", None)
    return {
        "object": "list",
        "data": [
            {
                "id": engine.model_path,
                "object": "model",
                "created": int(time.time()),
                "owned_by": "sglang",
                "root": engine.model_path,
                "parent": None,
                "max_model_len": ctx,
            }
        ],
    }


@dataclass
class RunningDouble:
    """A double serving on a background thread; `with start_double(cfg) as d: d.url`."""

    server: ThreadingHTTPServer
    thread: threading.Thread
    engine: DoubleEngine

    @property
    def host(self) -> str:
        return str(self.server.server_address[0])

    @property
    def port(self) -> int:
        return int(self.server.server_address[1])

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def stop(self) -> None:
        """Stop serving and release the port (idempotent)."""
        if self.thread.is_alive():
            self.server.shutdown()
            self.thread.join(timeout=10)
        self.server.server_close()
        self.engine.close()

    def __enter__(self) -> RunningDouble:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def start_double(config: DoubleConfig, host: str = "127.0.0.1", port: int = 0) -> RunningDouble:
    """Load the models, bind host:port (0 = any free port) and serve on a daemon thread.

    Raises DoubleStartError when SGLang would refuse the configuration or crash at capture.
    """
    engine = DoubleEngine(config)
    handler = type("DoubleHandler", (_Handler,), {"engine": engine})
    server = ThreadingHTTPServer((host, port), handler)
    server.daemon_threads = True
    engine.host, engine.port = host, int(server.server_address[1])
    thread = threading.Thread(
        target=server.serve_forever,
        kwargs={"poll_interval": 0.05},
        name="eagle3dash-sglang-double",
        daemon=True,
    )
    thread.start()
    running = RunningDouble(server, thread, engine)
    log.info("%s serving %s at %s (%s)", TAG, engine.model_path, running.url, NOTE)
    return running


# ---------------------------------------------------------------------------------------------
# The command line


def _parse_ids(text: str) -> list[int]:
    try:
        return [int(p) for p in text.replace(" ", "").split(",") if p]
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a list of ints: {text!r} (e.g. 1,2,3)") from None


def main(
    argv: list[str] | None = None, prog: str = "python -m eagle3dash.testing.sglang_double"
) -> int:
    """`PROG --target DIR [--draft DIR] --port N`: serve the double until ^C or SIGTERM."""
    p = argparse.ArgumentParser(
        prog=prog,
        description=f"{NOTE}. Answers like SGLang {DEFAULT_SGLANG_VERSION} for the endpoints "
        "eagle3dash uses.",
    )
    p.add_argument("--target", required=True, help="a transformers save_pretrained directory")
    p.add_argument("--draft", help="an EAGLE-3 draft checkpoint directory")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=30000)
    p.add_argument(
        "--algorithm",
        choices=[*ALGORITHMS, "none"],
        help="speculative algorithm (default: EAGLE3 with --draft, else none)",
    )
    p.add_argument(
        "--sglang-version", default=DEFAULT_SGLANG_VERSION, help="capture rules to emulate"
    )
    p.add_argument("--arch", help="target architecture for the rules (default: from its config)")
    p.add_argument("--aux-layer-ids", type=_parse_ids, help="pretend eagle_config ids, e.g. 1,2,3")
    p.add_argument(
        "--capture-taps",
        type=_parse_ids,
        help="feed the draft these taps (depths: 0 = embedding, d = after d blocks), e.g. 0,1,2, "
        "bypassing SGLang's capture rules (a patched or newer server)",
    )
    p.add_argument(
        "--reported-draft-path",
        help="the draft path server_info reports, while --draft is what is served",
    )
    p.add_argument(
        "--hidden-states-fault",
        choices=list(HIDDEN_STATES_FAULTS),
        help="make every reply with hidden states bad in this way (a server a capture refuses)",
    )
    p.add_argument("--num-steps", type=int, default=3)
    p.add_argument("--eagle-topk", type=int, default=1)
    p.add_argument("--num-draft-tokens", type=int, default=4)
    p.add_argument("--disable-cuda-graph", action="store_true")
    p.add_argument("--enable-return-hidden-states", action="store_true")
    p.add_argument("--return-hidden-states-mode", choices=("last", "full"))
    p.add_argument(
        "--chunked-prefill-size",
        type=int,
        default=4096,
        help="prompts longer than this return the hidden states of their last chunk only; -1: off",
    )
    p.add_argument("--disable-radix-cache", action="store_true")
    p.add_argument("--quantization")
    p.add_argument("--draft-quantization")
    p.add_argument("--decode-log-interval", type=int, default=40)
    p.add_argument("--delay", type=float, default=0.0, help="seconds per target forward (at least)")
    p.add_argument(
        "--draft-step-delay",
        type=float,
        help="seconds per draft step (at least; default: a tenth of --delay)",
    )
    p.add_argument("--dtype", default="float32")
    p.add_argument("--random-seed", type=int, help="seeds the sampling (default: drawn at start)")
    p.add_argument("--speculative-accept-threshold-single", type=float, default=1.0)
    p.add_argument("--speculative-accept-threshold-acc", type=float, default=1.0)
    p.add_argument(
        "--cpu-greedy-verify",
        action="store_true",
        help="verify greedily at any temperature, as SGLang on CPU does",
    )
    args = p.parse_args(argv)
    serve_threads()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    algorithm = args.algorithm or ("EAGLE3" if args.draft else "none")
    config = DoubleConfig(
        target_path=args.target,
        draft_path=args.draft,
        speculative_algorithm=None if algorithm == "none" else algorithm,
        num_steps=args.num_steps,
        eagle_topk=args.eagle_topk,
        num_draft_tokens=args.num_draft_tokens,
        sglang_version=args.sglang_version,
        arch=args.arch,
        cuda_graph=not args.disable_cuda_graph,
        enable_return_hidden_states=args.enable_return_hidden_states,
        return_hidden_states_mode=args.return_hidden_states_mode,
        chunked_prefill_size=args.chunked_prefill_size if args.chunked_prefill_size > 0 else None,
        disable_radix_cache=args.disable_radix_cache,
        quantization=args.quantization,
        draft_quantization=args.draft_quantization,
        aux_layer_ids_override=args.aux_layer_ids,
        capture_taps=args.capture_taps,
        reported_draft_path=args.reported_draft_path,
        hidden_states_fault=args.hidden_states_fault,
        decode_log_interval=args.decode_log_interval,
        delay_s=args.delay,
        draft_step_s=args.draft_step_delay,
        dtype=args.dtype,
        random_seed=args.random_seed,
        speculative_accept_threshold_single=args.speculative_accept_threshold_single,
        speculative_accept_threshold_acc=args.speculative_accept_threshold_acc,
        cpu_greedy_verify=args.cpu_greedy_verify,
    )
    try:
        running = start_double(config, args.host, args.port)
    except (InputError, OSError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(f"{TAG} {running.url} ({NOTE}); Ctrl-C to stop", flush=True)

    def on_term(_signum: int, _frame: object) -> None:
        raise KeyboardInterrupt

    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, on_term)  # stop cleanly under `kill` too
    try:
        while running.thread.is_alive():
            running.thread.join(timeout=1.0)
    except KeyboardInterrupt:
        pass
    finally:
        running.stop()
        log.info("%s stopped", TAG)
    return 0


if __name__ == "__main__":
    sys.exit(main())
