"""The serving-engine seam: what a diagnosis knows about a server, whichever engine serves it
(SGLang, vLLM): the server's report, its speculative settings, one generation's answer with its
speculative statistics, a benchmark's requests as the server answered them, and `EngineAdapter`,
the protocol each engine's adapter implements (`sglang_engine.SGLangEngine`,
`vllm_engine.VLLMEngine`; `endpoints.open_engine` picks one by asking the URL).

Nothing here speaks HTTP.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import MISSING, asdict, dataclass, field, fields
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

import numpy as np
from numpy.typing import NDArray

from eagle3dash.engines import rules as engine_rules
from eagle3dash.engines.serving import ENGINES, ServingEngine
from eagle3dash.engines.sglang.rules import hidden_states_mode, try_parse_version
from eagle3dash.http_client import EndpointError
from eagle3dash.layout import Layout

if TYPE_CHECKING:
    from eagle3dash.capture import Capture

SGLANG, VLLM = ENGINES
_T = TypeVar("_T")


def _from_stored(cls: type[_T], d: Mapping[str, Any], **typed: Any) -> _T:
    """A settings dataclass from its stored dict (asdict), `typed` already read: a field an
    older release did not store takes its default, else its off value (False for a flag, None
    for the rest); a TypeError names the part that is not a JSON object."""
    if not isinstance(d, Mapping):
        raise TypeError(f"{cls.__name__} is {type(d).__name__}, not an object")
    values: dict[str, Any] = {}
    for f in fields(cls):  # type: ignore[arg-type]
        if f.name in typed:
            values[f.name] = typed[f.name]
        elif f.name in d:
            values[f.name] = d[f.name]
        elif f.default is MISSING and f.default_factory is MISSING:
            values[f.name] = False if f.type == "bool" else None
    return cls(**values)


@dataclass
class SpeculativeSettings:
    """The server's speculative decoding settings, as resolved at startup (auto-choice applied)."""

    algorithm: str
    draft_model_path: str | None
    num_steps: int | None
    eagle_topk: int | None
    num_draft_tokens: int | None
    token_map: str | None
    draft_quantization: str | None
    quantization_explicitly_set: bool | None
    accept_threshold_single: float | None
    accept_threshold_acc: float | None
    adaptive: bool  # --speculative-adaptive: the draft steps change at runtime, down to 0
    # "key=value" of each claimed setting outside CLAIM_BOUNDS: the value is not used (None)
    implausible: list[str] = field(default_factory=list)
    # SGLang 0.5.12+ --speculative-draft-window-size: the draft's attention window (None: full)
    draft_window_size: int | None = None
    # vLLM 0.33+ --speculative-config draft_lm_head_quantization ("fp8" | "nvfp4"), None: off
    draft_lm_head_quantization: str | None = None

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> SpeculativeSettings:
        """As asdict stored it, of any release (`adaptive` and `implausible` came later)."""
        return _from_stored(cls, d)

    @property
    def max_accept_length(self) -> int | None:
        """The best accept length a chain of num_steps drafts can reach (num_steps + 1); None
        when the steps are adaptive (num_steps is only where they start)."""
        return None if self.num_steps is None or self.adaptive else self.num_steps + 1


@dataclass
class VLLMSettings:
    """What a vLLM server says (or leaves unsaid) beyond the engine-neutral report."""

    dev_endpoints: bool  # /server_info answered (VLLM_SERVER_DEV_MODE=1)
    # "v1" | "v2": the model runner as /server_info shows it (vllm/rules.py read_runner); None:
    # not known (dev endpoints off), so every runner of the release is a reading.
    runner: str | None
    # How the runner is known (vllm/rules.py RUNNER_SOURCES), and what showed it.
    runner_source: str
    runner_detail: str
    # "none" | "summary" | "detailed"; None: not said (dev endpoints off)
    per_request_spec_metrics: str | None
    # The draft steps from the count of per-position counters, when exported.
    steps_from_metrics: int | None
    # A capture server (speculative method extract_hidden_states): the layer ids it captures
    # (vLLM numbering) and the connector's folder; None otherwise or when not said.
    capture_layer_ids: list[int] | None
    capture_storage_path: str | None

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> VLLMSettings:
        """As asdict stored it; a report stored before the runner was read from the server kept
        only whether VLLM_USE_V2_MODEL_RUNNER said it (`runner_said`), else V2 assumed."""
        if isinstance(d, Mapping) and "runner_source" not in d:
            said = bool(d.get("runner_said"))
            d = {
                **d,
                "runner_source": "env" if said else "assumed",
                "runner_detail": "VLLM_USE_V2_MODEL_RUNNER" if said else "vLLM's default",
            }
        return _from_stored(cls, {k: v for k, v in d.items() if k != "runner_said"})


@dataclass
class ServerReport:
    """What a probe learned about one server; the SGLang-only fields are their off values on
    another engine (a vLLM server returns no hidden states from generate)."""

    url: str
    version: str | None
    model_path: str | None
    served_model_name: str | None
    architectures: list[str] | None
    model_type: str | None
    tp_size: int | None
    dtype: str | None
    quantization: str | None
    attention_backend: str | None
    device: str | None
    speculative: SpeculativeSettings | None
    enable_return_hidden_states: bool
    return_hidden_states_mode: str | None  # 0.5.20+: "full" | "last"; None: older, or off
    enable_return_aux_hidden_states: bool
    aux_hidden_state_capture: str | None  # capture-only mode's convention: "eagle3", "dflash", ...
    return_aux_hidden_state_layer_ids: list[int] | None
    chunked_prefill_size: int | None  # prompts longer than this are prefilled in chunks
    disable_radix_cache: bool | None
    disable_cuda_graph: bool | None
    decode_log_interval: int | None
    avg_spec_accept_length: float | None
    healthy: bool
    server_info: dict = field(repr=False)
    model_info: dict = field(default_factory=dict, repr=False)
    server_info_path: str = "/server_info"
    engine: str = SGLANG  # one of ENGINES
    vllm: VLLMSettings | None = None  # a vLLM server's own facts
    # The KV cache's dtype ("auto", "fp8_e4m3", ...): SGLang --kv-cache-dtype, vLLM's cache_dtype
    kv_cache_dtype: str | None = None
    # "prefill" | "decode" on a prefill/decode-disaggregated server; None: colocated, or not said
    disaggregation_mode: str | None = None
    # SGLang: the overlap scheduler is off (after startup resolution); None: not said
    disable_overlap_schedule: bool | None = None

    def to_dict(self) -> dict:
        """A JSON-ready dict of every field, raw server_info included."""
        return asdict(self)

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> ServerReport:
        """A report as to_dict() stored it (in a diagnosis or an endpoint's last probe), of any
        release: fields added since (the hidden-states mode, the chunked prefill, the engine,
        vLLM's settings) take their off values, and a report without an engine is SGLang's. A
        TypeError or KeyError for one that is not a report."""
        if not isinstance(d, Mapping):
            raise TypeError(f"the server report is {type(d).__name__}, not an object")
        spec, vllm = d.get("speculative"), d.get("vllm")
        return _from_stored(
            cls,
            d,
            url=str(d["url"]),
            speculative=None if spec is None else SpeculativeSettings.from_dict(spec),
            vllm=None if vllm is None else VLLMSettings.from_dict(vllm),
            server_info=dict(d.get("server_info") or {}),
            model_info=dict(d.get("model_info") or {}),
        )

    def require_speculative(self) -> SpeculativeSettings:
        """The speculative settings, or an EndpointError when the server runs without a draft."""
        if self.speculative is None:
            shown = (
                "its /metrics has no spec_decode counters"
                if self.engine == VLLM
                else "speculative_algorithm is null"
            )
            flags = engine_rules.words(self.engine).speculation_flags("<draft>")
            raise EndpointError(
                f"{self.url} serves {self.model_path} without speculative decoding ({shown}): "
                f"restart it with {flags}",
                url=self.url,
                kind=EndpointError.NO_SPECULATION,
            )
        return self.speculative

    def rules_engine(self) -> ServingEngine:
        """The engine whose id-to-tap rules apply to this server: its release and, on vLLM, its
        model runner (`engines.serving`)."""
        runner = self.vllm.runner if self.vllm is not None else None
        version = self.version if self.engine == VLLM else None
        if self.engine == SGLANG and self.version and try_parse_version(self.version):
            version = self.version
        return ServingEngine(self.engine, version, runner)

    @property
    def hidden_states(self) -> str | None:
        """What return_hidden_states=true gets: 'full' (a row per token), 'last' (refused) or
        None (refused: the server was not started to return hidden states)."""
        return hidden_states_mode(self.enable_return_hidden_states, self.return_hidden_states_mode)

    def require_hidden_states(self) -> None:
        """Raise an EndpointError when /generate cannot return hidden states on this server."""
        if self.engine == VLLM:
            raise no_hidden_states_on_vllm(self.url)
        if self.hidden_states == "last":
            raise EndpointError(
                f"{self.url} was started with --return-hidden-states-mode last, so it returns "
                "only the last token's hidden state and refuses return_hidden_states=true: "
                "restart it with --return-hidden-states-mode full",
                url=self.url,
                kind=EndpointError.NO_HIDDEN_STATES,
            )
        if self.hidden_states is None:
            raise EndpointError(
                f"{self.url} was started without --enable-return-hidden-states, so it cannot "
                "return hidden states: restart it with --enable-return-hidden-states",
                url=self.url,
                kind=EndpointError.NO_HIDDEN_STATES,
            )


def no_hidden_states_on_vllm(url: str) -> EndpointError:
    """The error of asking a vLLM server itself for hidden states, with the way round it."""
    return EndpointError(
        f"{url} is a vLLM server, and vLLM returns no hidden states from generate: start a "
        'capture server with --speculative-config \'{"method": "extract_hidden_states", ...}\' '
        "and give its URL",
        url=url,
        kind=EndpointError.NO_HIDDEN_STATES,
    )


@dataclass
class GenerateResult:
    """One /generate answer, with the meta_info fields the diagnosis reads."""

    output_ids: list[int]
    text: str
    prompt_tokens: int | None
    completion_tokens: int | None
    spec_verify_ct: int | None
    spec_accept_length: float | None
    e2e_latency: float | None
    finish_reason: str | None
    spec_num_correct_drafts: int | None
    spec_num_proposed_drafts: int | None
    spec_accept_rate: float | None
    # Entry k: the verify rounds that accepted exactly k drafts; SGLang grows the list only to the
    # largest k seen. None: a server that predates the field, or a request without speculation.
    spec_correct_drafts_histogram: list[int] | None
    meta_info: dict = field(repr=False)  # without hidden_states
    client_latency_s: float = 0.0
    # meta_info.hidden_states[0] (the prefill block, [tokens, width]) cut into `parts` equal column
    # blocks: float32 [parts, tokens, width / parts] (generate(return_hidden_states=True) only).
    prefill_states: NDArray[np.float32] | None = field(default=None, repr=False)

    @property
    def prefill_shape(self) -> tuple[int, int] | None:
        """(tokens, width) of the prefill block, None without hidden states."""
        if self.prefill_states is None:
            return None
        parts, rows, cols = self.prefill_states.shape
        return rows, parts * cols

    def to_dict(self) -> dict:
        """A JSON-ready dict of every field; the prefill block by its shape."""
        d = {k: v for k, v in vars(self).items() if k != "prefill_states"}
        d["prefill_shape"] = self.prefill_shape
        return d


@dataclass(frozen=True)
class ServerWideAcceptance:
    """Acceptance a server counted over an interval across every request it answered (its
    counters read before and after), not per request."""

    accept_length: float | None
    histogram: list[int] | None  # rounds by accepted drafts, as GenerateResult's histogram


Progress = Callable[[int, int], None]  # (done, total)


@dataclass(frozen=True)
class BenchRequests:
    """A benchmark's requests: `warmup` unmeasured ones (cycling the prompts; the first failure
    raises its EndpointError), then each prompt once, text or token ids, at most `concurrency`
    at a time, `max_new_tokens` each (ignore_eos), at `temperature`; `done` is called as each
    measured one ends."""

    prompts: Sequence[str | list[int]]
    concurrency: int
    max_new_tokens: int
    warmup: int
    temperature: float
    done: Callable[[], None] | None = None

    def ended(self, answer: GenerateResult | EndpointError) -> GenerateResult | EndpointError:
        """A measured request's answer (or the error it met), once `done` is told."""
        if self.done is not None:
            self.done()
        return answer


# Tokens generated past a serving capture's budget, so that the last rounds replayed within the
# budget have references for chains of up to REFERENCE_TAIL - 1 draft steps.
REFERENCE_TAIL = 8


@dataclass(frozen=True)
class CaptureRequest:
    """A serving capture: the states the server feeds its draft at `layout`'s taps on each
    prompt's greedy completion of `max_new_tokens` (plus a reference tail). `report`: the
    server's, when already probed; `hidden_size`: the target's, when known; `warn` gets what
    the capture says on the way; `served`: each prompt's answer from a greedy benchmark of these
    ids on this endpoint (None where it failed), whose completions the capture keeps instead of
    generating them again."""

    tokens: list[list[int]]
    layout: Layout
    max_new_tokens: int
    report: ServerReport | None = None
    hidden_size: int | None = None
    progress: Progress | None = None
    warn: Callable[[str], None] | None = None
    served: list[GenerateResult | None] | None = None


def kept_completion(
    served: list[GenerateResult | None] | None, i: int, max_new_tokens: int
) -> GenerateResult | None:
    """Prompt i's answer from a greedy benchmark (`CaptureRequest.served`) when it holds a whole
    completion of `max_new_tokens` for a capture to keep; None when it must be generated."""
    if served is None or i >= len(served):
        return None
    answer = served[i]
    if answer is None or len(answer.output_ids) < max_new_tokens:
        return None
    return answer


@dataclass
class ServedRequests:
    """A benchmark's measured requests as the server answered them: each answer, or the
    EndpointError that request met, in the order sent, and the wall time they took together."""

    answers: list[GenerateResult | EndpointError]
    wall_s: float
    # The server's counters over the measured requests, read when called (they raise an
    # InputError when the server restarted in between); None where the engine keeps none that
    # are read, or serves without a draft.
    server_wide: Callable[[], ServerWideAcceptance] | None = None


class EngineAdapter(Protocol):
    """What a diagnosis needs from a server, whichever engine serves it: its report (whose
    `rules_engine` names the id-to-tap rules of that engine, release and model runner), one
    generation and a benchmark's requests with their per-request speculative statistics, and
    the states the server feeds its draft (the serving capture)."""

    name: str  # one of ENGINES
    url: str

    def probe(self) -> ServerReport:
        """The server's report."""
        ...

    def generate_ids(
        self, input_ids: list[int], max_new_tokens: int, temperature: float = 0.0
    ) -> GenerateResult:
        """One generation from a token-id prompt."""
        ...

    def serve_requests(self, requests: BenchRequests) -> ServedRequests:
        """A benchmark's requests, each answer with its per-request speculative statistics."""
        ...

    def capture(self, request: CaptureRequest) -> Capture:
        """The states the server feeds its draft (CaptureError or EndpointError when it
        cannot)."""
        ...

    def close(self) -> None:
        """Release the connections."""
        ...
