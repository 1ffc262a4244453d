"""HTTP client for a vLLM server (0.33): its report, generation with token-id prompts, and the
speculative acceptance it measures, per request and server-wide.

Everything eagle3dash knows about a vLLM server comes through here; the app never imports `vllm`.
Read in the released wheel vllm 0.33.0:
- `/version` (`entrypoints/serve/instrumentator/basic.py`) and `/v1/models`
  (`entrypoints/serve/engine/protocol.py` `ModelCard`: `id` the served name, `root` the model
  path, `owned_by` "vllm") always; `/server_info?config_format=json`
  (`entrypoints/serve/dev/server_info/api_router.py`: `vllm_config`, `vllm_env`) only with
  `VLLM_SERVER_DEV_MODE=1`.
- `/metrics`: the counters of `v1/spec_decode/metrics.py` `SpecDecodingProm`, labelled by
  `model_name` and `engine` (`v1/metrics/loggers.py`), the per-position one also by `position`
  0..k-1 (one per draft token, so their count is `num_speculative_tokens`).
- `POST /v1/completions` (`entrypoints/openai/completion/protocol.py`): a prompt of token ids,
  `ignore_eos`, `return_token_ids`; with `--per-request-spec-decode-metrics summary|detailed`
  (`config/observability.py`) the answer carries `metrics.speculative_decoding`
  (`entrypoints/generate/base/protocol.py` `SpeculativeDecodingMetrics`, filled by
  `v1/metrics/stats.py` `RequestSpecDecodeMetrics.to_dict`), and `kv_transfer_params` (the
  `extract_hidden_states` capture file's path).
The transport (retries, deadlines, bounded replies, `EndpointError`) is `http_client.py`'s.
"""

from __future__ import annotations

import math
import re
import time
from dataclasses import dataclass
from typing import Any

from eagle3dash.engines.seam import (
    VLLM,
    GenerateResult,
    ServerReport,
    SpeculativeSettings,
    VLLMSettings,
)
from eagle3dash.engines.vllm.rules import read_runner
from eagle3dash.errors import InputError
from eagle3dash.http_client import EndpointError, HttpEndpoint, _describe_body

__all__ = [
    "AcceptanceDelta",
    "RequestSpecStats",
    "SpecCounters",
    "VLLMClient",
    "acceptance_between",
    "cache_dtype_from_metrics",
    "parse_completion",
    "parse_metrics",
    "parse_request_spec",
    "parse_vllm_report",
]

# The exported sample names (prometheus_client adds `_total` to a counter's name).
DRAFTS = "vllm:spec_decode_num_drafts_total"
DRAFT_TOKENS = "vllm:spec_decode_num_draft_tokens_total"
ACCEPTED = "vllm:spec_decode_num_accepted_tokens_total"
ACCEPTED_PER_POSITION = "vllm:spec_decode_num_accepted_tokens_per_pos_total"
_SPEC_SAMPLES = (DRAFTS, DRAFT_TOKENS, ACCEPTED, ACCEPTED_PER_POSITION)

# One sample line of the Prometheus text exposition format: name, optional {labels}, value,
# optional timestamp.
_SAMPLE = re.compile(
    r"(?P<name>[a-zA-Z_:][a-zA-Z0-9_:]*)"
    r"(?:\{(?P<labels>(?:[^\"}]|\"(?:[^\"\\]|\\.)*\")*)\})?"
    r"[ \t]+(?P<value>\S+)(?:[ \t]+-?\d+)?[ \t]*"
)
_LABEL = re.compile(r"\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*=\s*\"((?:[^\"\\]|\\.)*)\"\s*,?")
_ESCAPES = {"\\\\": "\\", '\\"': '"', "\\n": "\n"}


@dataclass(frozen=True)
class SpecCounters:
    """One engine's speculative-decoding counters at one moment, cumulative since it started."""

    model_name: str
    engine: str
    drafts: int
    draft_tokens: int
    accepted: int
    # Position i: the drafts whose first i+1 tokens were accepted; () when the server does not
    # export them (vLLM before the per-position counter).
    accepted_per_position: tuple[int, ...]


@dataclass(frozen=True)
class AcceptanceDelta:
    """Speculative acceptance between two reads of /metrics, summed over the engines of one
    model. Server-wide: every request the server answered in between counts, not only ours, so
    it measures our requests only while nothing else uses the server."""

    drafts: int
    draft_tokens: int
    accepted: int
    accepted_per_position: tuple[int, ...]

    @property
    def mean_acceptance_length(self) -> float | None:
        """1 + accepted / drafts (the bonus token included, as vLLM logs it); None without
        drafts."""
        return 1.0 + self.accepted / self.drafts if self.drafts else None

    @property
    def per_position_rates(self) -> tuple[float, ...]:
        """Position i: the share of drafts whose token i was accepted; () without drafts."""
        if not self.drafts:
            return ()
        return tuple(count / self.drafts for count in self.accepted_per_position)

    @property
    def histogram(self) -> list[int] | None:
        """Rounds by accepted drafts, rebuilt from the per-position counts (a round that
        accepted j drafts counts at positions 0..j-1): entry 0 = drafts - position 0, entry j =
        position j-1 - position j, the last = the last position; None without them."""
        counts = self.accepted_per_position
        if not counts:
            return None
        at_least = (self.drafts, *counts, 0)
        return [at_least[j] - at_least[j + 1] for j in range(len(counts) + 1)]

    @property
    def acceptance_rate(self) -> float | None:
        """accepted / draft tokens; None without draft tokens."""
        return self.accepted / self.draft_tokens if self.draft_tokens else None


@dataclass(frozen=True)
class RequestSpecStats:
    """One response's `metrics.speculative_decoding` (--per-request-spec-decode-metrics)."""

    mean_acceptance_length: float
    draft_acceptance_rate: float  # a fraction, draft tokens only
    # Entry j: the verify steps that accepted exactly j draft tokens (length k + 1).
    acceptance_histogram: tuple[int, ...]
    num_spec_steps: int
    num_accepted_draft_tokens: int
    num_draft_tokens: int
    num_spec_tokens: int
    per_step_accepted: tuple[int, ...] | None  # `detailed` only
    per_step_drafted: tuple[int, ...] | None


def _bad_metrics(url: str, why: str) -> EndpointError:
    return EndpointError(
        f"GET {url}/metrics {why}: is this a vLLM server's Prometheus endpoint?",
        url=url,
        kind=EndpointError.BAD_RESPONSE,
    )


def _labels(text: str | None, url: str, number: int) -> dict[str, str]:
    if not text:
        return {}
    labels, at = {}, 0
    while at < len(text):
        match = _LABEL.match(text, at)
        if match is None:
            if text[at:].strip() in ("", ","):
                break
            raise _bad_metrics(url, f"has line {number} with labels that do not parse")
        value = re.sub(r"\\[\\\"n]", lambda m: _ESCAPES[m.group(0)], match.group(2))
        labels[match.group(1)] = value
        at = match.end()
    return labels


def _count(value: str, url: str, number: int) -> int:
    try:
        number_value = float(value)
    except ValueError:
        raise _bad_metrics(url, f"has line {number} whose value is not a number") from None
    if not math.isfinite(number_value) or number_value < 0:
        raise _bad_metrics(url, f"has line {number} with a counter that is not a count")
    return int(number_value)


def parse_metrics(text: str, url: str = "") -> list[SpecCounters]:
    """The speculative-decoding counters of every (model, engine) in a Prometheus text reply, in
    the order they appear; [] when the server exports none (no speculative decoding). Text that
    is not the exposition format is one EndpointError."""
    found: dict[tuple[str, str], dict[str, Any]] = {}
    samples = 0
    for number, line in enumerate(text.splitlines(), 1):
        stripped = line.strip()
        if not stripped or stripped.startswith("#"):
            continue
        match = _SAMPLE.fullmatch(stripped)
        if match is None:
            raise _bad_metrics(url, f"has line {number} that is not a Prometheus sample")
        samples += 1
        name = match.group("name")
        if name not in _SPEC_SAMPLES:
            continue
        labels = _labels(match.group("labels"), url, number)
        key = (labels.get("model_name", ""), labels.get("engine", ""))
        entry = found.setdefault(key, {"positions": {}})
        count = _count(match.group("value"), url, number)
        if name == ACCEPTED_PER_POSITION:
            position = labels.get("position", "")
            if not position.isdigit():
                raise _bad_metrics(url, f"has line {number} with a position that is not a number")
            entry["positions"][int(position)] = count
        else:
            entry[name] = count
    if samples == 0 and text.strip() and not text.lstrip().startswith("#"):
        raise _bad_metrics(url, "is not Prometheus text")
    counters = []
    for (model_name, engine), entry in found.items():
        positions = entry["positions"]
        if sorted(positions) != list(range(len(positions))):
            raise _bad_metrics(url, f"skips draft positions (it has {sorted(positions)})")
        counters.append(
            SpecCounters(
                model_name=model_name,
                engine=engine,
                drafts=entry.get(DRAFTS, 0),
                draft_tokens=entry.get(DRAFT_TOKENS, 0),
                accepted=entry.get(ACCEPTED, 0),
                accepted_per_position=tuple(positions[i] for i in range(len(positions))),
            )
        )
    return counters


CACHE_CONFIG_INFO = "vllm:cache_config_info"


def cache_dtype_from_metrics(text: str) -> str | None:
    """The KV cache dtype in /metrics' `vllm:cache_config_info` gauge (v1/metrics/loggers.py
    `log_metrics_info`: every CacheConfig field a label, `cache_dtype` among them); None when
    the gauge is absent."""
    for line in text.splitlines():
        match = _SAMPLE.fullmatch(line.strip())
        if match is None or match.group("name") != CACHE_CONFIG_INFO:
            continue
        dtype = _labels(match.group("labels"), "", 0).get("cache_dtype")
        if dtype:
            return dtype
    return None


def _of_model(counters: list[SpecCounters], model_name: str | None) -> list[SpecCounters]:
    return [c for c in counters if model_name is None or c.model_name == model_name]


def acceptance_between(
    before: list[SpecCounters], after: list[SpecCounters], model_name: str | None = None
) -> AcceptanceDelta:
    """What the server's engines (of `model_name`, or all) counted between two reads of
    /metrics; InputError when a counter went down (the server restarted in between)."""
    earlier = {(c.model_name, c.engine): c for c in _of_model(before, model_name)}
    drafts = draft_tokens = accepted = 0
    per_position: list[int] = []
    for now in _of_model(after, model_name):
        then = earlier.get((now.model_name, now.engine))
        base = then or SpecCounters(now.model_name, now.engine, 0, 0, 0, ())
        deltas = (
            now.drafts - base.drafts,
            now.draft_tokens - base.draft_tokens,
            now.accepted - base.accepted,
        )
        was = base.accepted_per_position + (0,) * (
            len(now.accepted_per_position) - len(base.accepted_per_position)
        )
        position_deltas = [n - b for n, b in zip(now.accepted_per_position, was, strict=False)]
        if min((*deltas, *position_deltas), default=0) < 0:
            raise InputError(
                f"vLLM's speculative counters of engine {now.engine!r} went down between two "
                "reads of /metrics: the server restarted during the benchmark; run it again"
            )
        drafts, draft_tokens, accepted = (
            drafts + deltas[0],
            draft_tokens + deltas[1],
            accepted + deltas[2],
        )
        per_position += [0] * (len(position_deltas) - len(per_position))
        for i, d in enumerate(position_deltas):
            per_position[i] += d
    return AcceptanceDelta(drafts, draft_tokens, accepted, tuple(per_position))


def _bad_reply(url: str, path: str, why: str) -> EndpointError:
    return EndpointError(
        f"{url}{path} {why}: is this a vLLM server?", url=url, kind=EndpointError.BAD_RESPONSE
    )


def _ints(value: Any) -> tuple[int, ...] | None:
    if isinstance(value, list) and all(
        isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in value
    ):
        return tuple(value)
    return None


_STATS_INTS = ("num_spec_steps", "num_accepted_draft_tokens", "num_draft_tokens", "num_spec_tokens")


def parse_request_spec(body: Any, url: str = "") -> RequestSpecStats | None:
    """A completion's `metrics.speculative_decoding`, or None when the server did not send it
    (per-request metrics off, or no speculation); EndpointError when it is malformed."""
    metrics = body.get("metrics") if isinstance(body, dict) else None
    spec = metrics.get("speculative_decoding") if isinstance(metrics, dict) else None
    if spec is None:
        return None
    where = "/v1/completions"
    if not isinstance(spec, dict):
        raise _bad_reply(url, where, "sent metrics.speculative_decoding that is not an object")
    raw: dict[str, Any] = {key: spec.get(key) for key in _STATS_INTS}
    histogram = _ints(spec.get("acceptance_histogram"))
    numbers: list[Any] = [spec.get("mean_acceptance_length"), spec.get("draft_acceptance_rate")]
    if (
        histogram is None
        or any(not isinstance(v, int) or isinstance(v, bool) or v < 0 for v in raw.values())
        or any(not isinstance(v, int | float) or isinstance(v, bool) for v in numbers)
    ):
        raise _bad_reply(url, where, "sent metrics.speculative_decoding without its counts")
    counts: dict[str, int] = {key: int(value) for key, value in raw.items()}
    if len(histogram) != counts["num_spec_tokens"] + 1:
        raise _bad_reply(
            url,
            where,
            f"sent an acceptance histogram of {len(histogram)} entries for "
            f"{counts['num_spec_tokens']} draft tokens (vLLM sends k + 1)",
        )
    return RequestSpecStats(
        mean_acceptance_length=float(numbers[0]),
        draft_acceptance_rate=float(numbers[1]),
        acceptance_histogram=histogram,
        num_spec_steps=counts["num_spec_steps"],
        num_accepted_draft_tokens=counts["num_accepted_draft_tokens"],
        num_draft_tokens=counts["num_draft_tokens"],
        num_spec_tokens=counts["num_spec_tokens"],
        per_step_accepted=_ints(spec.get("per_step_accepted")),
        per_step_drafted=_ints(spec.get("per_step_drafted")),
    )


def parse_completion(body: Any, url: str = "") -> GenerateResult:
    """A /v1/completions answer (one prompt, n = 1) as the engine-neutral GenerateResult: the
    per-request speculative statistics in SGLang's terms (verify steps, accept length,
    histogram), None when the server sent none; `meta_info` keeps `metrics` and
    `kv_transfer_params`."""
    where = "/v1/completions"
    choices = body.get("choices") if isinstance(body, dict) else None
    if not isinstance(choices, list) or len(choices) != 1 or not isinstance(choices[0], dict):
        raise _bad_reply(url, where, "answered without exactly one choice")
    choice = choices[0]
    ids = _ints(choice.get("token_ids"))
    if ids is None:
        raise _bad_reply(url, where, "answered without the generated token ids")
    usage = body.get("usage") if isinstance(body.get("usage"), dict) else {}
    spec = parse_request_spec(body, url)
    return GenerateResult(
        output_ids=list(ids),
        text=str(choice.get("text") or ""),
        prompt_tokens=usage.get("prompt_tokens"),
        completion_tokens=usage.get("completion_tokens"),
        spec_verify_ct=None if spec is None else spec.num_spec_steps,
        spec_accept_length=None if spec is None else spec.mean_acceptance_length,
        e2e_latency=None,
        finish_reason=choice.get("finish_reason"),
        spec_num_correct_drafts=None if spec is None else spec.num_accepted_draft_tokens,
        spec_num_proposed_drafts=None if spec is None else spec.num_draft_tokens,
        spec_accept_rate=None if spec is None else spec.draft_acceptance_rate,
        spec_correct_drafts_histogram=None if spec is None else list(spec.acceptance_histogram),
        meta_info={
            "metrics": body.get("metrics"),
            "kv_transfer_params": body.get("kv_transfer_params"),
        },
    )


def _section(config: dict, key: str) -> dict:
    value = config.get(key)
    return value if isinstance(value, dict) else {}


def _capture_ids(spec: dict) -> list[int] | None:
    # --speculative-config '{"method": "extract_hidden_states", "draft_model_config": {"hf_config":
    # {"eagle_aux_hidden_state_layer_ids": [...]}}}' (config/speculative.py,
    # v1/spec_decode/extract_hidden_states.py); shown only when /server_info dumps it as JSON.
    if spec.get("method") != "extract_hidden_states":
        return None
    hf = _section(_section(spec, "draft_model_config"), "hf_config")
    ids = _ints(hf.get("eagle_aux_hidden_state_layer_ids"))
    return None if ids is None else list(ids)


def _storage_path(config: dict) -> str | None:
    transfer = _section(config, "kv_transfer_config")
    extra = _section(transfer, "kv_connector_extra_config")
    path = extra.get("shared_storage_path")
    return path if isinstance(path, str) else None


def _disaggregation(config: dict) -> str | None:
    # A prefill/decode split: the KV connector's role (config/kv_transfer.py kv_role:
    # kv_producer = the prefill side, kv_consumer = the decode side); the hidden-states capture
    # connector moves no KV between instances.
    transfer = _section(config, "kv_transfer_config")
    if transfer.get("kv_connector") == "ExampleHiddenStatesConnector":
        return None
    return {"kv_producer": "prefill", "kv_consumer": "decode"}.get(str(transfer.get("kv_role")))


def parse_vllm_report(
    url: str,
    version: str,
    models: dict,
    counters: list[SpecCounters],
    server_info: dict | None,
    cache_dtype: str | None = None,
) -> ServerReport:
    """A ServerReport of a vLLM server from its /version, /v1/models, /metrics (its counters
    and `cache_dtype`) and, with dev endpoints on, /server_info?config_format=json (None when
    they are off)."""
    cards = models.get("data") if isinstance(models.get("data"), list) else []
    card = cards[0] if cards and isinstance(cards[0], dict) else {}
    served = card.get("id") if isinstance(card.get("id"), str) else None
    info = server_info or {}
    config = _section(info, "vllm_config")
    model = _section(config, "model_config")
    spec_config = _section(config, "speculative_config")
    mine = _of_model(counters, served) or counters
    positions = max((len(c.accepted_per_position) for c in mine), default=0) or None
    runner = read_runner(
        version, config if server_info is not None else None, _section(info, "vllm_env")
    )
    capture_ids = _capture_ids(spec_config)
    observability = _section(config, "observability_config")
    per_request = observability.get("per_request_spec_decode_metrics")
    settings = VLLMSettings(
        dev_endpoints=server_info is not None,
        runner=runner.runner,
        runner_source=runner.source,
        runner_detail=runner.detail,
        per_request_spec_metrics=per_request if isinstance(per_request, str) else None,
        steps_from_metrics=positions,
        capture_layer_ids=capture_ids,
        capture_storage_path=_storage_path(config) if capture_ids is not None else None,
    )
    speculative = _speculative(spec_config, bool(counters), positions)
    device = _section(config, "device_config").get("device")
    parallel = _section(config, "parallel_config")
    tp = parallel.get("tensor_parallel_size")
    root = card.get("root") if isinstance(card.get("root"), str) else None
    return ServerReport(
        url=url,
        version=version,
        model_path=model.get("model") if isinstance(model.get("model"), str) else root,
        served_model_name=served,
        architectures=None,
        model_type=None,
        tp_size=tp if isinstance(tp, int) else None,
        dtype=_dtype(model.get("dtype")),
        quantization=None if model.get("quantization") is None else str(model["quantization"]),
        attention_backend=None,
        device=device if isinstance(device, str) else None,
        speculative=speculative,
        enable_return_hidden_states=False,  # vLLM returns no hidden states from generate
        return_hidden_states_mode=None,
        enable_return_aux_hidden_states=False,
        aux_hidden_state_capture=None,
        return_aux_hidden_state_layer_ids=None,
        chunked_prefill_size=None,
        disable_radix_cache=None,
        disable_cuda_graph=None,
        decode_log_interval=None,
        avg_spec_accept_length=None,
        healthy=True,
        server_info=info,
        model_info=models,
        server_info_path="/server_info" if server_info is not None else "",
        engine=VLLM,
        vllm=settings,
        kv_cache_dtype=_text(_section(config, "cache_config").get("cache_dtype")) or cache_dtype,
        disaggregation_mode=_disaggregation(config),
    )


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) and value else None


def _dtype(value: Any) -> str | None:
    """The model's dtype as SGLang and the drafts name it ('float32'): /server_info's JSON writes
    vLLM's torch.dtype with str() ('torch.float32'; entrypoints/serve/dev/server_info/
    api_router.py, `fallback=str`, 0.32.0)."""
    return None if value is None else str(value).removeprefix("torch.")


def _speculative(spec: dict, counting: bool, positions: int | None) -> SpeculativeSettings | None:
    """The speculative settings from --speculative-config when /server_info shows it, else what
    /metrics tells (speculation on, its steps), else None (no speculative decoding)."""
    method = spec.get("method")
    if isinstance(method, str) and method:
        steps = spec.get("num_speculative_tokens")
        steps = steps if isinstance(steps, int) and not isinstance(steps, bool) else positions
        draft = spec.get("model")
        return SpeculativeSettings(
            algorithm=method.upper(),
            draft_model_path=draft if isinstance(draft, str) else None,
            num_steps=steps,
            eagle_topk=1,  # vLLM drafts a chain
            num_draft_tokens=None if steps is None else steps + 1,
            token_map=None,
            # the draft's own quantization (config/speculative.py `quantization`)
            draft_quantization=_text(spec.get("quantization")),
            quantization_explicitly_set=None,
            accept_threshold_single=None,
            accept_threshold_acc=None,
            # a dynamic schedule or adaptive verification varies the draft length per step
            # (config/speculative.py)
            adaptive=bool(
                spec.get("num_speculative_tokens_per_batch_size")
                or spec.get("enable_adaptive_verification")
            ),
            draft_lm_head_quantization=_text(spec.get("draft_lm_head_quantization")),
        )
    if not counting:
        return None
    return SpeculativeSettings(
        algorithm="",  # speculation is on (its counters exist); the method is not said
        draft_model_path=None,
        num_steps=positions,
        eagle_topk=1,
        num_draft_tokens=None if positions is None else positions + 1,
        token_map=None,
        draft_quantization=None,
        quantization_explicitly_set=None,
        accept_threshold_single=None,
        accept_threshold_acc=None,
        adaptive=False,
    )


class VLLMClient(HttpEndpoint):
    """Talks to one vLLM server over HTTP: probe, completions, /metrics."""

    ENGINE = "vLLM"

    def version(self) -> str:
        """GET /version's version; EndpointError when the server does not answer as vLLM."""
        resp = self._request("GET", "/version")
        body = self._json(self._check(resp, "GET", "/version"), "GET", "/version")
        version = body.get("version") if isinstance(body, dict) else None
        if not isinstance(version, str) or not version:
            raise self._err(
                f"{self.url} does not look like a vLLM server: GET /version returned "
                f"{_describe_body(resp)} without a version",
                EndpointError.NOT_SGLANG,
                resp.status_code,
            )
        return version

    def metrics_text(self) -> str:
        """GET /metrics, as Prometheus text."""
        return self._check(self._request("GET", "/metrics"), "GET", "/metrics").text

    def healthy(self) -> bool:
        """GET /health answers 200 (`entrypoints/serve/instrumentator/health.py`: 503 once the
        engine is dead); False when it does not."""
        try:
            return self._request("GET", "/health").status_code == 200
        except EndpointError:
            return False

    def metrics(self) -> list[SpecCounters]:
        """GET /metrics, its speculative-decoding counters."""
        return parse_metrics(self.metrics_text(), self.url)

    def _server_info(self) -> dict | None:
        resp = self._request("GET", "/server_info?config_format=json")
        if resp.status_code == 404:  # dev endpoints off
            return None
        body = self._json(self._check(resp, "GET", "/server_info"), "GET", "/server_info")
        if not isinstance(body, dict):
            raise _bad_reply(self.url, "/server_info", "answered with JSON that is not an object")
        return body

    def probe(self) -> ServerReport:
        """Read /version, /v1/models, /metrics and /server_info (when on) into a ServerReport."""
        version = self.version()
        models = self._json(
            self._check(self._request("GET", "/v1/models"), "GET", "/v1/models"),
            "GET",
            "/v1/models",
        )
        if not isinstance(models, dict):
            raise _bad_reply(self.url, "/v1/models", "answered with JSON that is not an object")
        text = self.metrics_text()
        return parse_vllm_report(
            self.url,
            version,
            models,
            parse_metrics(text, self.url),
            self._server_info(),
            cache_dtype_from_metrics(text),
        )

    def generate(
        self,
        input_ids: list[int] | str,
        model: str,
        max_new_tokens: int = 64,
        temperature: float = 0.0,
        ignore_eos: bool = True,
    ) -> GenerateResult:
        """POST /v1/completions with a token-id prompt (or text; greedy by default); the answer
        with its per-request speculative statistics when the server sends them."""
        prompt = input_ids if isinstance(input_ids, str) else [int(t) for t in input_ids]
        payload = {
            "model": model,
            "prompt": prompt,
            "max_tokens": int(max_new_tokens),
            "temperature": float(temperature),
            "ignore_eos": bool(ignore_eos),
            "return_token_ids": True,
            "n": 1,
        }
        start = time.perf_counter()
        resp = self._check(
            self._request("POST", "/v1/completions", json=payload), "POST", "/v1/completions"
        )
        result = parse_completion(self._json(resp, "POST", "/v1/completions"), self.url)
        result.client_latency_s = time.perf_counter() - start
        return result


def capture_path(result: GenerateResult) -> str | None:
    """The extract_hidden_states capture file a completion names (kv_transfer_params), else
    None."""
    params = result.meta_info.get("kv_transfer_params")
    path = params.get("hidden_states_path") if isinstance(params, dict) else None
    return path if isinstance(path, str) else None
