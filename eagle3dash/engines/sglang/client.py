"""HTTP client for an SGLang server: server report, /generate, cache flush.

The app never imports `sglang`; everything it knows about a server comes through here. Field names
and endpoints follow SGLang 0.5.23's `python/sglang/srt/entrypoints/http_server.py`,
`managers/tokenizer_manager.py` and `arg_groups/fields/spec.py`. The transport (retries,
deadlines, bounded replies, `EndpointError`) is `http_client.py`'s. Replies are parsed with orjson;
a reply with hidden states is read as it arrives (`states_json.StatesReader`), never whole.
"""

from __future__ import annotations

import time
from typing import Any

import httpx
import numpy as np
import orjson
from numpy.typing import NDArray

from eagle3dash.engines.seam import (
    GenerateResult,
    ServerReport,
    SpeculativeSettings,
)
from eagle3dash.engines.sglang.states_json import (
    MAX_STATES_WIDTH,
    ReplyError,
    StatesReader,
    reply_bound,
)
from eagle3dash.http_client import (
    _CAUSE_SCAN,
    EndpointError,
    HttpEndpoint,
    _describe_body,
    _known_cause,
    normalize_url,
)
from eagle3dash.text import ascii_int

__all__ = [
    "EndpointError",
    "GenerateResult",
    "SGLangClient",
    "ServerReport",
    "SpeculativeSettings",
    "normalize_url",
    "parse_generate",
    "parse_server_report",
]

# SGLang's own wording when a request asks for hidden states the server was not started to return
# (tokenizer_manager.py): "... not configured to return the hidden states ..." up to 0.5.16, "...
# not configured to return hidden states ..." from 0.5.20; matched case-insensitively.
HIDDEN_STATES_REFUSED = "not configured to return"
# ... and when it was started with --return-hidden-states-mode last (0.5.20+): "The requested
# return_hidden_states mode exceeds the server maximum `last`. ..." (tokenizer_manager.py, 0.5.23).
HIDDEN_STATES_ABOVE_MODE = "exceeds the server maximum"


class _Fields:
    """Typed reads of one server_info: a value of the wrong type is one EndpointError naming the
    field (a "3" where SGLang writes 3 is not SGLang's answer), never a TypeError later."""

    def __init__(self, info: dict, url: str) -> None:
        self.info, self.url = info, url

    def _get(self, key: str, kinds: tuple[type, ...], what: str) -> Any:
        value = self.info.get(key)
        if value is None or (isinstance(value, kinds) and not isinstance(value, bool)):
            return value
        raise EndpointError(
            f"{self.url}: server_info field {key} is {type(value).__name__} {str(value)[:40]!r}, "
            f"not {what}: is this an SGLang server?",
            url=self.url,
            kind=EndpointError.BAD_RESPONSE,
        )

    def int(self, key: str) -> int | None:
        """An integer field, or None."""
        return self._get(key, (int,), "an integer")

    def number(self, key: str) -> float | None:
        """A numeric field, or None."""
        value = self._get(key, (int, float), "a number")
        return None if value is None else float(value)

    def text(self, key: str) -> str | None:
        """A string field, or None."""
        return self._get(key, (str,), "a string")


# What a server may claim for the three settings that size a diagnosis's work. SGLang needs at
# least one step and one branch, and verifies the bonus token plus at least one draft token
# (arg_groups/speculative_hook.py, 0.5.23: num_draft_tokens = num_steps + 1 when topk == 1); the
# upper ends are what eagle3dash simulates and prices (its tables are steps x draft tokens), far
# above any served setting. A claim outside them is not used, and `server-claims-implausible`
# names it.
CLAIM_BOUNDS: dict[str, tuple[int, int]] = {
    "speculative_num_steps": (1, 32),
    "speculative_eagle_topk": (1, 64),
    "speculative_num_draft_tokens": (2, 1024),
}


def _claim(f: _Fields, key: str, implausible: list[str]) -> int | None:
    value = f.int(key)
    low, high = CLAIM_BOUNDS[key]
    if value is not None and not low <= value <= high:
        implausible.append(f"{key}={value}")
        return None
    return value


def _speculative(info: dict, url: str = "") -> SpeculativeSettings | None:
    algorithm = info.get("speculative_algorithm")
    if not algorithm:
        return None
    f = _Fields(info, url)
    implausible: list[str] = []
    return SpeculativeSettings(
        algorithm=str(algorithm),
        draft_model_path=f.text("speculative_draft_model_path"),
        num_steps=_claim(f, "speculative_num_steps", implausible),
        eagle_topk=_claim(f, "speculative_eagle_topk", implausible),
        num_draft_tokens=_claim(f, "speculative_num_draft_tokens", implausible),
        token_map=f.text("speculative_token_map"),
        # 0.5.8+ only; older servers quantize the draft like the target
        # (0.5.23 arg_groups/fields/spec.py).
        draft_quantization=f.text("speculative_draft_model_quantization"),
        quantization_explicitly_set=info.get("_speculative_draft_quantization_explicitly_set"),
        accept_threshold_single=f.number("speculative_accept_threshold_single"),
        accept_threshold_acc=f.number("speculative_accept_threshold_acc"),
        # 0.5.16+ (server_args.py; 0.5.23 arg_groups/fields/spec.py), after startup resolution
        adaptive=bool(info.get("speculative_adaptive")),
        implausible=implausible,
        # 0.5.12+ (server_args.py; 0.5.23 arg_groups/fields/spec.py)
        draft_window_size=_positive_int(info.get("speculative_draft_window_size")),
    )


def _avg_accept_length(info: dict) -> float | None:
    # Cumulative since start and only updated every decode_log_interval steps
    # (0.5.23 managers/scheduler_components/metrics_reporter.py).
    states = info.get("internal_states")
    if isinstance(states, list) and states and isinstance(states[0], dict):
        value = states[0].get("avg_spec_accept_length")
        if isinstance(value, int | float):
            return float(value)
    return None


def _text_or_none(value: Any) -> str | None:
    return None if value is None else str(value)


def _positive_int(value: Any) -> int | None:
    # chunked_prefill_size: None, or <= 0 (-1), turns chunked prefill off (server_args.py)
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


def parse_server_report(
    url: str,
    server_info: dict,
    model_info: dict | None = None,
    healthy: bool = False,
    server_info_path: str = "/server_info",
) -> ServerReport:
    """Build a ServerReport from raw /server_info and /model_info bodies."""
    info = server_info
    mi = model_info or {}
    archs = mi.get("architectures")
    f = _Fields(info, url)
    return ServerReport(
        url=url,
        version=None if info.get("version") is None else str(info["version"]),
        model_path=f.text("model_path") or mi.get("model_path"),
        served_model_name=info.get("served_model_name") or mi.get("served_model_name"),
        architectures=list(archs) if isinstance(archs, list) and archs else None,
        model_type=mi.get("model_type"),
        tp_size=f.int("tp_size"),
        dtype=info.get("dtype"),
        quantization=info.get("quantization"),
        attention_backend=info.get("attention_backend"),
        device=info.get("device"),
        speculative=_speculative(info, url),
        enable_return_hidden_states=bool(info.get("enable_return_hidden_states")),
        # 0.5.20+ (arg_groups/serving_hook.py); absent on older servers.
        return_hidden_states_mode=_text_or_none(info.get("return_hidden_states_mode")),
        # 0.5.23 capture-only mode; absent (False) on older servers.
        enable_return_aux_hidden_states=bool(info.get("enable_return_aux_hidden_states")),
        aux_hidden_state_capture=_text_or_none(info.get("aux_hidden_state_capture")),
        return_aux_hidden_state_layer_ids=info.get("return_aux_hidden_state_layer_ids"),
        chunked_prefill_size=_positive_int(info.get("chunked_prefill_size")),
        disable_radix_cache=info.get("disable_radix_cache"),
        disable_cuda_graph=info.get("disable_cuda_graph"),
        decode_log_interval=f.int("decode_log_interval"),
        avg_spec_accept_length=_avg_accept_length(info),
        healthy=healthy,
        server_info=info,
        model_info=mi,
        server_info_path=server_info_path,
        kv_cache_dtype=_text_or_none(info.get("kv_cache_dtype")),
        disaggregation_mode=_disaggregation(info.get("disaggregation_mode")),
        disable_overlap_schedule=_bool_or_none(info.get("disable_overlap_schedule")),
    )


def _disaggregation(value: Any) -> str | None:
    # --disaggregation-mode "null" | "prefill" | "decode" (0.5.23 arg_groups/fields/disagg.py)
    return value if value in ("prefill", "decode") else None


def _bool_or_none(value: Any) -> bool | None:
    return value if isinstance(value, bool) else None


def _histogram(value: Any, url: str) -> list[int] | None:
    if value is None:
        return None
    if not isinstance(value, list) or not all(
        isinstance(c, int) and not isinstance(c, bool) and c >= 0 for c in value
    ):
        raise EndpointError(
            f"POST {url}/generate: meta_info.spec_correct_drafts_histogram is not a list of "
            f"counts (a {type(value).__name__}): is this an SGLang server?",
            url=url,
            kind=EndpointError.BAD_RESPONSE,
        )
    return value


def parse_generate(
    body: Any, url: str = "", prefill_states: NDArray[np.float32] | None = None
) -> GenerateResult:
    """Build a GenerateResult from a /generate JSON body; EndpointError when it is not one.

    meta_info.hidden_states is left out: `generate` reads it as the reply arrives and passes
    hidden_states[0] as `prefill_states`."""
    if not isinstance(body, dict) or not isinstance(body.get("meta_info"), dict):
        raise EndpointError(
            f"POST {url}/generate returned JSON without meta_info (a {type(body).__name__}): "
            "is this an SGLang server?",
            url=url,
            kind=EndpointError.BAD_RESPONSE,
        )
    meta = {k: v for k, v in body["meta_info"].items() if k != "hidden_states"}
    reason = meta.get("finish_reason")
    # finish_reason is {"type": "length", "length": 8} (or "stop", "abort" with a message).
    reason_type = reason.get("type") if isinstance(reason, dict) else reason
    if reason_type == "abort":
        message = reason.get("message") if isinstance(reason, dict) else None
        cause = _known_cause(str(message)[:_CAUSE_SCAN]) if message else None
        raise EndpointError(
            f"POST {url}/generate: the server aborted the request ({cause or 'finish_reason abort'}"
            "): its log says why",
            url=url,
            kind=EndpointError.SERVER_ERROR,
        )
    return GenerateResult(
        output_ids=list(body.get("output_ids") or []),
        text=body.get("text") or "",
        prompt_tokens=meta.get("prompt_tokens"),
        completion_tokens=meta.get("completion_tokens"),
        # The spec_* keys exist only with a speculative algorithm and verify_ct > 0
        # (0.5.23 managers/tokenizer_manager.py).
        spec_verify_ct=meta.get("spec_verify_ct"),
        spec_accept_length=meta.get("spec_accept_length"),
        e2e_latency=meta.get("e2e_latency"),
        finish_reason=None if reason_type is None else str(reason_type),
        spec_num_correct_drafts=meta.get("spec_num_correct_drafts"),
        spec_num_proposed_drafts=meta.get("spec_num_proposed_drafts"),
        spec_accept_rate=meta.get("spec_accept_rate"),
        spec_correct_drafts_histogram=_histogram(meta.get("spec_correct_drafts_histogram"), url),
        meta_info=meta,
        prefill_states=prefill_states,
    )


# --- client ---------------------------------------------------------------------------------------


class SGLangClient(HttpEndpoint):
    """Talks to one SGLang server over HTTP; sync for probe/generate, async for benchmarks."""

    ENGINE = "SGLang"

    def _check(self, resp: httpx.Response, method: str, path: str) -> httpx.Response:
        """Return a 2xx response; SGLang's own refusals of hidden states in its words, anything
        else as the transport maps it."""
        status = resp.status_code
        if status < 300:
            return resp
        if HIDDEN_STATES_ABOVE_MODE in resp.text.lower():
            raise self._err(
                f"{self.url} returns only the last token's hidden state "
                "(--return-hidden-states-mode last) and refuses return_hidden_states=true: "
                "restart it with --return-hidden-states-mode full",
                EndpointError.NO_HIDDEN_STATES,
                status,
            )
        if HIDDEN_STATES_REFUSED in resp.text.lower():
            return_msg = (
                f"{self.url} was started without --enable-return-hidden-states, so it cannot "
                "return hidden states: restart it with --enable-return-hidden-states"
            )
            raise self._err(return_msg, EndpointError.NO_HIDDEN_STATES, status)
        return super()._check(resp, method, path)

    # operations

    def _server_info(self) -> tuple[dict, str]:
        # /server_info is 0.5.6+; older servers only have /get_server_info (0.5.23 http_server.py).
        answers: list[str] = []
        for path in ("/server_info", "/get_server_info"):
            resp = self._request("GET", path)
            if resp.status_code == 404:
                answers.append(f"GET {path} returned 404")
                continue
            self._check(resp, "GET", path)
            try:
                body = resp.json()
            except ValueError:
                body = None
                what = f"a body that is not JSON ({_describe_body(resp)})"
            else:
                what = f"JSON without model_path ({_describe_body(resp)})"
            if not isinstance(body, dict) or "model_path" not in body:
                raise self._err(
                    f"{self.url} does not look like an SGLang server: GET {path} returned {what}",
                    EndpointError.NOT_SGLANG,
                    resp.status_code,
                )
            return body, path
        raise self._err(
            f"{self.url} does not look like an SGLang server: " + ", and ".join(answers),
            EndpointError.NOT_SGLANG,
            404,
        )

    def _model_info(self) -> dict:
        # Optional extras (architectures, model_type); a server without them is still usable.
        for path in ("/model_info", "/get_model_info"):
            try:
                resp = self._request("GET", path)
            except EndpointError:
                return {}
            if resp.status_code == 404:
                continue
            if resp.status_code >= 300:
                return {}
            try:
                body = resp.json()
            except ValueError:
                return {}
            return body if isinstance(body, dict) else {}
        return {}

    def health(self) -> bool:
        """True when GET /health answers 200 (it generates one token by default, so may be slow)."""
        try:
            return self._request("GET", "/health").status_code == 200
        except EndpointError:
            return False

    def probe(self) -> ServerReport:
        """Read server info, model info and health into a ServerReport."""
        info, path = self._server_info()
        return parse_server_report(self.url, info, self._model_info(), self.health(), path)

    @staticmethod
    def _payload(
        input_ids: list[int] | None,
        text: str | None,
        max_new_tokens: int,
        temperature: float,
        return_hidden_states: bool,
        ignore_eos: bool,
    ) -> dict:
        if (input_ids is None) == (text is None):
            raise ValueError("generate needs exactly one of input_ids or text")
        payload: dict[str, Any] = (
            {"input_ids": [int(t) for t in input_ids]} if input_ids is not None else {"text": text}
        )
        payload["sampling_params"] = {
            "max_new_tokens": int(max_new_tokens),
            "temperature": float(temperature),
            "ignore_eos": bool(ignore_eos),
        }
        if return_hidden_states:
            payload["return_hidden_states"] = True
        return payload

    def generate(
        self,
        input_ids: list[int] | None = None,
        text: str | None = None,
        max_new_tokens: int = 64,
        temperature: float = 0.0,
        return_hidden_states: bool = False,
        ignore_eos: bool = True,
        *,
        states_parts: int = 1,
        states_width: int | None = None,
    ) -> GenerateResult:
        """POST /generate once (greedy by default) and parse the answer.

        With `return_hidden_states` (token ids only) the reply is read as it arrives:
        meta_info.hidden_states[0] becomes `prefill_states`, cut into `states_parts` column
        blocks, and a reply larger than `reply_bound(len(input_ids) + max_new_tokens,
        states_width)` is refused. `states_width` is the widest row this request can return
        (`states_json.states_width`); None allows MAX_STATES_WIDTH.
        """
        payload = self._payload(
            input_ids, text, max_new_tokens, temperature, return_hidden_states, ignore_eos
        )
        start = time.perf_counter()
        if return_hidden_states:
            if input_ids is None:
                raise ValueError("return_hidden_states needs input_ids: rows follow tokens")
            width = MAX_STATES_WIDTH if states_width is None else states_width
            result = self._generate_states(
                payload, len(input_ids), len(input_ids) + max_new_tokens, width, states_parts
            )
        else:
            resp = self._check(
                self._request("POST", "/generate", json=payload), "POST", "/generate"
            )
            result = parse_generate(self._json(resp, "POST", "/generate"), self.url)
        result.client_latency_s = time.perf_counter() - start
        return result

    def _generate_states(
        self, payload: dict, tokens: int, rows: int, width: int, parts: int
    ) -> GenerateResult:
        """POST /generate with return_hidden_states, the reply parsed by a StatesReader."""
        where, limit = f"POST {self.url}/generate", reply_bound(rows, width)
        too_large = (
            f"{where}: the reply is larger than {limit / 1e6:,.1f} MB, the most {rows} rows of "
            f"{width} hidden-state numbers can take: refused (is this the server and the "
            "layout the capture expects?)"
        )
        with self._deadline("POST", "/generate"):
            rest, block, status = self._read_states(payload, tokens, width, parts, limit, too_large)
        try:
            body = orjson.loads(rest)
        except orjson.JSONDecodeError:
            raise self._err(
                f"{where} returned a body that is not JSON ({len(rest):,} bytes after the hidden "
                "states): does the URL point at an SGLang server?",
                EndpointError.BAD_RESPONSE,
                status,
            ) from None
        return parse_generate(body, self.url, block)

    def _read_states(
        self, payload: dict, tokens: int, width: int, parts: int, limit: int, too_large: str
    ) -> tuple[bytes, Any, int]:
        """The /generate reply read as it arrives: (the JSON left after the hidden states, the
        prefill block, the status)."""
        where = f"POST {self.url}/generate"
        resp = self._request("POST", "/generate", json=payload, stream=True)
        try:
            if resp.status_code >= 300:  # read within the size bound, then classified
                deadline = time.monotonic() + self.timeout
                self._check(
                    self._read_bounded(resp, "POST", "/generate", deadline), "POST", "/generate"
                )
            length = resp.headers.get("content-length", "")
            declared = ascii_int(length)
            if declared is not None and declared > limit:
                raise self._err(too_large, EndpointError.TOO_LARGE, resp.status_code)
            reader, received = StatesReader(tokens, width, parts), 0
            deadline = time.monotonic() + self.timeout
            try:
                for chunk in resp.iter_bytes():
                    received += len(chunk)
                    if received > limit:
                        raise self._err(too_large, EndpointError.TOO_LARGE, resp.status_code)
                    if time.monotonic() > deadline:
                        raise self._slow("POST", "/generate")
                    reader.feed(chunk)
                rest, block = reader.close()
            except ReplyError as e:
                raise self._err(f"{where}: {e}", EndpointError.BAD_RESPONSE) from None
            except httpx.HTTPError as exc:
                raise self._http_error("POST", "/generate", exc) from None
        finally:
            resp.close()
        return rest, block, resp.status_code

    async def agenerate(
        self,
        input_ids: list[int] | None = None,
        text: str | None = None,
        max_new_tokens: int = 64,
        temperature: float = 0.0,
        ignore_eos: bool = True,
        *,
        session: httpx.AsyncClient | None = None,
    ) -> GenerateResult:
        """`generate` (without hidden states) on an AsyncClient; a `session` from
        `async_client` shares connections."""
        payload = self._payload(input_ids, text, max_new_tokens, temperature, False, ignore_eos)
        own = session is None
        client = self.async_client() if session is None else session
        try:
            start = time.perf_counter()
            resp = await self._arequest(client, "POST", "/generate", json=payload)
            elapsed = time.perf_counter() - start
        finally:
            if own:
                await client.aclose()
        self._check(resp, "POST", "/generate")
        result = parse_generate(self._json(resp, "POST", "/generate"), self.url)
        result.client_latency_s = elapsed
        return result

    def flush_cache(self) -> None:
        """POST /flush_cache; SGLang refuses (400) while requests are running or queued."""
        resp = self._request("POST", "/flush_cache")
        if resp.status_code == 400:
            raise self._err(
                f"{self.url} did not flush its cache: requests are running or queued "
                f"(its reply: {_describe_body(resp)}); retry when it is idle",
                EndpointError.REQUEST_REJECTED,
                400,
            )
        self._check(resp, "POST", "/flush_cache")
