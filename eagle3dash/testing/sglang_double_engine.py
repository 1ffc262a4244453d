"""The engine of the SGLang API double, A TEST AND DEMO DOUBLE of an SGLang 0.5.23 server: never
a serving engine. Its HTTP surface and command line are `sglang_double.py`.

The double serves a tiny `transformers` causal LM over HTTP on 127.0.0.1 and answers the endpoints
`engines/sglang/client.py` uses with SGLang 0.5.23's JSON shapes (0.5.23
`entrypoints/http_server.py`, `managers/tokenizer_manager.py`). With a draft it runs real *chain*
speculative decoding through the package's own draft forward (`draft.Draft`), so acceptance,
`spec_verify_ct` and the aux states it returns are measured, not invented. It exists so that tests
and the demo can exercise the client, the capture and the diagnosis on a CPU. server_info and
model_info carry `"eagle3dash_double": true` (plus `eagle3dash_double_*` details in server_info),
and every log line starts with `[eagle3dash SGLang double]`.

What it models
- Aux capture by SGLang's rules: the target's taps are `sglang_rules.serving_layout(draft spec, N,
  sglang_version, arch, cuda_graph)`, the same function the diagnosis uses, read from the target's
  `output_hidden_states` (`hidden_states[d]`, d < N, is the residual stream after d blocks; a tap at
  depth N, which only the gpt-oss boundary rule yields, comes from a hook on the last block). If
  that function reports an error (SGLang would crash at capture), the double refuses to start with
  its message. CUDA-graph emulation (<= 0.5.10 with custom ids): the prefill (eager) forward
  captures `layout`, every verify forward (a CUDA-graph replay on a real server) captures
  `decode_layout`; the draft's state for each position is whatever the target captured when it
  processed that position.
- `eagle_config.use_aux_hidden_state: false` (0.5.8+) and `--speculative-algorithm EAGLE` with an
  EAGLE-3 draft: no aux capture; the draft gets the target's final-normed hidden state (width H) and
  `fc` is skipped by SGLang's width check (`llama_eagle3.py`: fc only when the width differs from
  the embedding's), so acceptance collapses (SGLang PR #21272).
- EAGLE3: the draft uses the TARGET's embedding (SGLang's `set_embed`) unless target_hidden_size
  != hidden_size, then its own; its own `lm_head` (the target's when it has none and the
  vocabularies match); `d2t` maps draft ids to target ids. EAGLE (the non-EAGLE3 branch of
  eagle_worker.py): the target's embedding AND lm_head (`set_embed_and_head`), no d2t.
- Chain drafting (eagle_topk == 1): each round the draft proposes `num_steps` tokens greedily (its
  top-1 at any temperature, as topk 1 drafting does), the target verifies them in ONE forward over
  the sequence plus the proposals (no KV cache: the tiny target is recomputed), and the accepted
  drafts plus one token from the target are emitted; `spec_verify_ct` counts rounds. At
  temperature 0 the longest prefix matching the target's argmax is accepted and the output equals
  plain greedy decoding of the target. SGLang's topk == 1 rule is applied: num_draft_tokens !=
  num_steps + 1 becomes num_steps + 1 (the warning SGLang logs is logged and listed under
  `eagle3dash_double_warnings` in server_info).
- Sampling and verification (the maths in `double_maths.py`, shared with the vLLM double), per
  request (`temperature`, `top_p`, `top_k`, `sampling_seed` in
  sampling_params; /v1/chat/completions reads them from the body). Defaults and normalisation of
  SGLang's SamplingParams (`srt/sampling/sampling_params.py`, read in the current source):
  temperature 1.0 when not sent; a temperature below 1e-6 means greedy (top_k = 1); top_k -1 means
  the whole vocabulary; verify()'s range checks answer 400 with its texts. A request is greedy when
  top_k <= 1 (`sampling_batch_info.py`: is_all_greedy). Otherwise:
  - the first token (prefill) and every plain-decode token are drawn from `target_probs`;
  - verification is SGLang's target-only speculative sampling (`eagle_info.py` 0.5.4 l.272-341;
    `eagle_utils.py::eagle_sample` in the current source): `tree_speculative_sampling_target_only`
    with `draft_probs = zeros`, kernel `sgl-kernel/csrc/speculative/speculative_sampling.cuh`
    TreeSpeculativeSamplingTargetOnly; `verify_chain` here): target_probs = softmax(logits / T),
    top-k then top-p renormalised; draft j is accepted when coin_j <= p_target(draft_j) /
    max(threshold_acc, 1e-9) or p_target(draft_j) >= threshold_single (with the default thresholds
    1.0: with probability p_target(draft_j)); at the first rejection the next token is drawn from
    the target's row with the rejected token zeroed, renormalised; after S accepted drafts the
    bonus token is drawn from the target's row. One coin per draft-tree node plus one for the final
    draw, as eagle_info.py draws them. `speculative_accept_threshold_single` / `_acc` (DoubleConfig,
    defaults 1.0 as SGLang's server args) are reported in server_info.
  - `cpu_greedy_verify`: SGLang on CPU (and XPU) always verifies greedily (0.5.23
    `eagle_utils.py::_verify_uses_greedy`: is_all_greedy or is_cpu or is_xpu or (is_hip and not
    rejection sampling)): the prefill token is still sampled, every verify round commits the
    target's argmax. Off by default, so the double behaves as a CUDA deployment (whose accept
    length falls with temperature) while server_info keeps reporting `device: cpu`;
    `eagle3dash_double_verification` in server_info says which rule runs.
  - Determinism: `random_seed` (SGLang's --random-seed, reported as server_info `random_seed`;
    None draws one at start, as SGLang does) seeds one stream the server's requests draw from in
    turn, so the same seed and the same requests in the same order give the same outputs. A
    request's `sampling_seed` gives it a stream of its own, seeded with it.
- The draft is recomputed over the whole prefix each round (`Draft.chain` over every row, last row
  used): its step-0 states at earlier positions are exactly the KV a real server keeps, computed
  from the aux states the target captured at those positions.
- `return_hidden_states` (needs enable_return_hidden_states or `return_hidden_states_mode`
  "full", else SGLang 0.5.23's 400 text; mode "last" refuses it with 0.5.23's "exceeds the
  server maximum" text; server_info reports the mode as 0.5.23 resolves it: "full" under
  --enable-return-hidden-states):
  meta_info["hidden_states"] = [prefill block [n_prompt][dim], then one row per token emitted
  after the first: the state at the position that produced it, so a verify round that accepts k
  drafts adds k + 1 rows (0.5.14+)]. dim = K*Ht, the captured taps concatenated in ascending layer
  order, when EAGLE-3 capture is on; else H, the final-normed state.
- Chunked prefill, as hidden states show it: a prompt longer than `chunked_prefill_size` (4096,
  the template's) returns the prefill rows of its last chunk only, as SGLang stores no rows for
  the earlier chunks; the forward itself runs in one piece.
- Stopping: `max_new_tokens` (default 128), EOS from the target's config unless `ignore_eos`,
  `stop_token_ids`; a stop inside a verify round truncates it (SGLang counts only the kept drafts).
- meta_info per request like 0.5.23 (`spec_*` fields only when spec_verify_ct > 0;
  `spec_correct_drafts_histogram[k]` counts the rounds that accepted exactly k drafts, the list
  grown only to the largest k seen, so sum(h) = spec_verify_ct and sum(k * h[k]) =
  spec_num_correct_drafts = completion_tokens - 1 - spec_verify_ct), the
  `Decode batch, ... accept len: ...` log line every `decode_log_interval` decode forwards, and
  `internal_states[0].avg_spec_accept_length` from the totals those log lines add (so it appears
  only after `decode_log_interval` verify rounds, and covers everything since start).
- `delay_s`: an artificial latency so throughput numbers resemble real serving, where a target
  forward costs far more than a draft step: a target forward (prefill, plain decode) costs
  `delay_s`, a speculative round (its draft steps and the verify forward)
  `delay_s + num_steps * draft_step_s` (`draft_step_s` defaults to a tenth of a forward;
  server_info's `eagle3dash_double_delay_s` and `eagle3dash_double_draft_step_s`). The cost is a
  floor on every path (`_Pace`): a request pays at least the sum of its forwards' costs, the
  compute and bookkeeping run inside it and the rest is slept, a forward that overran made up
  by the next ones, so tok/s and speedups follow the modelled cost, not the machine's load, as
  long as the tiny models' compute fits inside it on average. Plain decoding runs on a KV cache
  (one token a forward, as a server decodes), which keeps its compute far inside its floor; a
  process serving a double runs one torch thread (`serve_threads`).

Knobs that make the world disagree with eagle3dash's model of SGLang
By default the taps come from `serving_layout`, the function the diagnosis uses, so the double
agrees with the project by construction. These knobs make it a server the diagnosis must measure:
- `capture_taps`: the target feeds the draft exactly these taps (slot order as given; Tap(d) is the
  residual stream after d blocks, 0 the embedding output, N the raw last-block output), for prefill
  and verify alike, whatever the draft's config, the version or `use_aux_hidden_state` say: a
  patched SGLang build or a release whose rules eagle3dash has not read.
- `reported_draft_path`: server_info names this path as `speculative_draft_model_path` (and in
  `launch_command`) while the double serves `draft_path`: a server restarted with another
  checkpoint behind the same path, or another epoch.
With either knob the stock SGLang fields look as they would without it; only the
`eagle3dash_double_*` details (`eagle3dash_double_capture`, `eagle3dash_double_draft_path`) tell.
- `hidden_states_fault`: every reply with hidden states is bad in one way (`HIDDEN_STATES_FAULTS`):
  a prefill block one number wider than its taps fill ("wide"), a short last row ("ragged"), a
  NaN, a null or a 1e39 in its first row ("nan", "null", "huge"), a row fewer or one more than
  the tokens sent ("fewer-rows", "more-rows"), hidden_states a string ("not-a-list"), or the
  whole reply sent one byte a second ("drip"): a server a capture must refuse, naming why.

What it does not model
- Sampling beyond temperature/top_p/top_k: min_p, penalties, logit_bias, n are accepted and
  ignored; model-provided defaults (`--sampling-defaults model`, generation_config.json) are not
  read. The random numbers are torch.Generator draws, not SGLang's (CUDA RNG, or murmur-hash coins
  under sampling_seed), so a seed reproduces the double's outputs, never a real server's. Plain
  sampling uses the verify path's top-k-then-top-p filter, and one inverse-CDF draw, not the
  sampler backend's own. Rejection sampling with draft probabilities
  (`--speculative-use-rejection-sampling`) is not modelled. `stop` strings, logprobs, streaming,
  LoRA, multimodal input: not served (`stream: true` is answered 400).
- Tree drafting (eagle_topk > 1): refused at start. Batching: requests run one at a time under a
  lock; a batch of prompts is decoded prompt after prompt.
- Radix/prefix caching (`cached_tokens` is always 0), quantization (the flags are only reported),
  memory pools, CUDA graphs themselves, the capture-only `--enable-return-aux-hidden-states` mode.
- Tokenisation without a tokenizer in the target directory: a trivial byte-level scheme, token id =
  UTF-8 byte (modulo the vocabulary size when it is below 256), decoding keeps ids < 256 as bytes.
- server_info always has the key set of a real 0.5.23 response (a copy of it is the template,
  `double_data/server_info_0.5.23.json`), whatever `sglang_version` the capture rules emulate; its
  `version` field reports the emulated version.
"""

from __future__ import annotations

import copy
import json
import logging
import math
import random
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from eagle3dash.engines.sglang.rules import (
    DEFAULT_SGLANG_VERSION,
    USE_AUX_FLAG_SINCE,
    hidden_states_mode,
    parse_version,
    serving_layout,
)

from .. import checkpoint
from ..draft import Draft, build_draft
from ..errors import InputError
from ..layout import Layout, Tap, format_layout
from ..spec import DraftSpec
from .double_maths import (
    GREEDY,
    Sampling,
    parse_sampling,
    sample_from,
    target_probs,
    verify_chain,
)

__all__ = [
    "DRIP_S",
    "DoubleConfig",
    "DoubleEngine",
    "DoubleStartError",
    "HIDDEN_STATES_ABOVE_LAST",
    "HIDDEN_STATES_FAULTS",
    "HIDDEN_STATES_DISABLED",
    "RequestError",
]

TAG = "[eagle3dash SGLang double]"
log = logging.getLogger(__name__)

# A real server_info of the newest release read, the key set every answer keeps.
TEMPLATE_PATH = (
    Path(__file__).with_name("double_data") / f"server_info_{DEFAULT_SGLANG_VERSION}.json"
)
# tokenizer_manager.py 0.5.23 (l.1406-1410; 0.5.20+), without hidden states configured ...
HIDDEN_STATES_DISABLED = (
    "The server is not configured to return hidden states. "
    "Please set `--return-hidden-states-mode last`, `--return-hidden-states-mode full`, "
    "or the legacy `--enable-return-hidden-states` flag."
)
# ... and under --return-hidden-states-mode last (l.1400-1405)
HIDDEN_STATES_ABOVE_LAST = (
    "The requested return_hidden_states mode exceeds the server maximum `last`. "
    "Please launch with `--return-hidden-states-mode full` to allow return_hidden_states=True."
)
# server_args.py 0.5.4 l.1492-1499 / speculative_hook.py 0.5.23 l.1255-1266
TOPK1_WARNING = (
    "speculative_num_draft_tokens is adjusted to speculative_num_steps + 1 when "
    "speculative_eagle_topk == 1"
)
DEFAULT_MAX_NEW_TOKENS = 128  # SGLang's SamplingParams default
MAX_TOTAL_TOKENS = 8192  # the template's max_total_num_tokens, for the `token usage` log field
ALGORITHMS = ("EAGLE3", "EAGLE")
# DoubleConfig fields SGLang has no twin of
WORLD_KNOBS = ("capture_taps", "reported_draft_path", "hidden_states_fault")
# What `hidden_states_fault` does to a reply's meta_info.hidden_states (its prefill block first);
# "drip" is the HTTP surface's (`sglang_double.py`): DRIP_S seconds a byte.
HIDDEN_STATES_FAULTS: dict[str, Callable[[list], Any]] = {
    "wide": lambda hs: [[[*row, 0.0] for row in hs[0]], *hs[1:]],
    "ragged": lambda hs: [[*hs[0][:-1], hs[0][-1][:-1]], *hs[1:]],
    "nan": lambda hs: [[[math.nan, *hs[0][0][1:]], *hs[0][1:]], *hs[1:]],
    "null": lambda hs: [[[None, *hs[0][0][1:]], *hs[0][1:]], *hs[1:]],
    "huge": lambda hs: [[[1e39, *hs[0][0][1:]], *hs[0][1:]], *hs[1:]],
    "fewer-rows": lambda hs: [hs[0][:-1], *hs[1:]],
    "more-rows": lambda hs: [[*hs[0], hs[0][-1]], *hs[1:]],
    "not-a-list": lambda hs: "hidden states",
    "drip": lambda hs: hs,
}
DRIP_S = 1.0
NOTE = "eagle3dash SGLang API double for tests and demos: not a serving engine"


class DoubleStartError(InputError):
    """The double cannot start with this configuration (SGLang would refuse or crash too)."""


@dataclass
class DoubleConfig:
    """How the double is launched; field names follow SGLang's server arguments where they exist.

    `aux_layer_ids_override` pretends the draft's config had these nested
    `eagle_config.eagle_aux_hidden_state_layer_ids` (to apply a fix without rewriting the
    checkpoint); None reads the draft's own config. `delay_s`: each target forward takes at least
    delay_s, each draft step `draft_step_s` (None: delay_s / 10; see the module docstring).
    `arch` defaults to the target config's first architecture. `capture_taps`,
    `reported_draft_path` and `hidden_states_fault` make the server disagree with eagle3dash's
    model of SGLang (the module docstring): None keeps SGLang's rules and the truth.
    """

    target_path: str | Path
    draft_path: str | Path | None = None
    speculative_algorithm: str | None = None  # "EAGLE3" | "EAGLE" | None
    num_steps: int = 3
    eagle_topk: int = 1
    num_draft_tokens: int = 4
    sglang_version: str = DEFAULT_SGLANG_VERSION
    arch: str | None = None
    cuda_graph: bool = True
    enable_return_hidden_states: bool = False
    return_hidden_states_mode: str | None = None  # --return-hidden-states-mode: "last" | "full"
    chunked_prefill_size: int | None = 4096  # the template's (SGLang's CPU default); None: off
    disable_radix_cache: bool = False
    quantization: str | None = None
    draft_quantization: str | None = None
    aux_layer_ids_override: list[int] | None = None
    capture_taps: list[int] | None = None  # tap depths fed to the draft, bypassing SGLang's rules
    reported_draft_path: str | Path | None = None  # what server_info says is served
    hidden_states_fault: str | None = None  # a HIDDEN_STATES_FAULTS name: every such reply bad
    decode_log_interval: int = 40
    delay_s: float = 0.0
    draft_step_s: float | None = None  # the modelled cost of a draft step; None: delay_s / 10
    dtype: str = "float32"  # the compute dtype of target and draft
    random_seed: int | None = None  # --random-seed; None: drawn at start, as SGLang does
    speculative_accept_threshold_single: float = 1.0
    speculative_accept_threshold_acc: float = 1.0
    # SGLang's CPU rule (eagle_utils.py _verify_uses_greedy): verification commits the argmax at
    # any temperature. False: the sampling verification of a CUDA server.
    cpu_greedy_verify: bool = False


# ---------------------------------------------------------------------------------------------
# Tokenisation


class _ByteTokenizer:
    """The documented fallback: token id = UTF-8 byte (mod vocab); decode keeps ids < 256."""

    def __init__(self, vocab_size: int):
        self.vocab_size = vocab_size

    def encode(self, text: str) -> list[int]:
        return [b % self.vocab_size for b in text.encode("utf-8")]

    def decode(self, ids: list[int]) -> str:
        return bytes(i for i in ids if 0 <= i < 256).decode("utf-8", errors="replace")

    def chat_prompt(self, messages: list[dict]) -> str:
        lines = [f"{m.get('role', 'user')}: {_content_text(m.get('content'))}" for m in messages]
        return "\n".join(lines) + "\nassistant: "


class _HFTokenizer:
    """A tokenizer saved next to the target (tokenizer.json / tokenizer_config.json)."""

    def __init__(self, path: Path):
        from transformers import AutoTokenizer

        self.tok = AutoTokenizer.from_pretrained(str(path))

    def encode(self, text: str) -> list[int]:
        return list(self.tok(text)["input_ids"])

    def decode(self, ids: list[int]) -> str:
        return str(self.tok.decode(ids, skip_special_tokens=True))

    def chat_prompt(self, messages: list[dict]) -> str:
        if getattr(self.tok, "chat_template", None):
            return str(
                self.tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
            )
        return _ByteTokenizer(0).chat_prompt(messages)


def _content_text(content: Any) -> str:
    if isinstance(content, list):  # OpenAI content parts
        return "".join(p.get("text", "") for p in content if isinstance(p, dict))
    return "" if content is None else str(content)


# ---------------------------------------------------------------------------------------------
# The model side


def serve_threads() -> None:
    """One torch thread for a process that serves a double: the tiny models gain nothing from
    more, and OpenMP threads spinning beside other processes on a small machine make a forward
    take many times its compute (the floors would no longer hold)."""
    torch.set_num_threads(1)


@dataclass
class _Pace:
    """One request's modelled clock: each forward moves it on by its floor, and the request
    sleeps until it when the compute and the bookkeeping between forwards took less. A forward
    that overran is made up by the next ones, so a request pays the sum of its forwards' floors
    on every path (prefill, plain decode, speculative round) while their compute fits on average,
    whatever the machine's load does to one forward."""

    due: float  # perf_counter seconds: when the forwards so far are paid for

    @contextmanager
    def costs(self, seconds: float) -> Iterator[None]:
        """A forward whose modelled cost is `seconds`: the compute inside, the rest slept."""
        yield
        self.due += seconds
        left = self.due - time.perf_counter()
        if left > 0:
            time.sleep(left)


class RequestError(Exception):
    """A bad request: answered 400 {"error": {"message": ...}} like SGLang's /generate."""


@dataclass
class _Result:
    output_ids: list[int]
    finish_reason: dict
    prompt_tokens: int
    latency: float
    hidden_states: list | None = None
    verify_ct: int = 0
    correct_drafts: int = 0
    # entry k: rounds that accepted exactly k drafts; grown only to the largest k seen, like
    # SGLang's spec_correct_drafts_histogram
    histogram: list[int] = field(default_factory=list)


class DoubleEngine:
    """Target, draft and counters behind the HTTP handler; one request at a time."""

    def __init__(self, config: DoubleConfig):
        self.config = config
        self.warnings: list[str] = []
        self._lock = threading.Lock()  # the model: one forward at a time
        self._stats_lock = threading.Lock()
        self.host, self.port = "127.0.0.1", 0
        try:
            parse_version(config.sglang_version)
        except ValueError as e:
            raise DoubleStartError(f"{TAG} {e}") from None
        if config.return_hidden_states_mode not in (None, "last", "full"):
            # arg_groups/serving_hook.py handle_return_hidden_states_mode (0.5.23)
            raise DoubleStartError(
                f"{TAG} return_hidden_states_mode must be one of: None, 'last', or 'full'."
            )
        dtype = getattr(torch, config.dtype, None)
        if not isinstance(dtype, torch.dtype) or not dtype.is_floating_point:
            raise DoubleStartError(f"{TAG} unknown dtype {config.dtype!r} (use e.g. float32)")
        self.dtype: torch.dtype = dtype
        t0 = time.perf_counter()
        self._load_target(Path(config.target_path))
        algorithm = config.speculative_algorithm
        self.algorithm = algorithm.upper() if isinstance(algorithm, str) else None
        self.feed: str | None = None  # "aux" | "last" | None (no speculation)
        self.prefill_layout: Layout = ()
        self.decode_layout: Layout = ()
        self.layout_rule = ""
        self.layout_notes: list[str] = []
        self.draft: Draft | None = None
        self.draft_spec: DraftSpec | None = None
        self.embed_weight: Tensor | None = None
        self.num_steps = config.num_steps
        self.num_draft_tokens = config.num_draft_tokens
        knobs = [k for k in WORLD_KNOBS if getattr(config, k) is not None]
        fault = config.hidden_states_fault
        if fault is not None and fault not in HIDDEN_STATES_FAULTS:
            known = ", ".join(HIDDEN_STATES_FAULTS)
            raise DoubleStartError(f"{TAG} hidden_states_fault {fault!r}: not one of {known}")
        if knobs and self.algorithm is None:
            raise DoubleStartError(f"{TAG} {', '.join(knobs)} need a speculative algorithm")
        if self.algorithm is not None:
            self._setup_speculation()
        self.load_seconds = time.perf_counter() - t0
        # counters (scheduler_metrics_mixin / internal_state.py semantics)
        self._decode_forward_ct = 0
        self._interval: dict[str, float] = {
            "forward_ct": 0,
            "accepted": 0,
            "tokens": 0,
            "seconds": 0.0,
        }
        self._total_accepted = 0
        self._total_forward_ct = 0
        self._last_gen_throughput = 0.0
        self._template = json.loads(TEMPLATE_PATH.read_text())
        # server_args.py: an unset --random-seed is drawn at start; it seeds the server's stream
        seed = config.random_seed
        self.random_seed = random.randint(0, 1 << 30) if seed is None else int(seed)
        self._rng = torch.Generator().manual_seed(self.random_seed)

    # -- loading ----------------------------------------------------------------------------

    def _load_target(self, path: Path) -> None:
        from transformers import AutoConfig, AutoModelForCausalLM
        from transformers.utils import logging as hf_logging

        if not (path / "config.json").is_file():
            raise DoubleStartError(f"{TAG} {path}: no config.json (a save_pretrained directory)")
        try:
            hf_config = AutoConfig.from_pretrained(str(path))
            hf_logging.disable_progress_bar()  # no "Loading weights" bars in logs
            self.model = AutoModelForCausalLM.from_pretrained(str(path), dtype=self.dtype).eval()
        except (OSError, ValueError) as e:
            raise DoubleStartError(f"{TAG} cannot load the target {path}: {e}") from None
        self.model.requires_grad_(False)
        self.hf_config = hf_config
        self.num_layers = int(hf_config.num_hidden_layers)
        self.hidden_size = int(hf_config.hidden_size)
        self.vocab_size = int(hf_config.vocab_size)
        archs = list(getattr(hf_config, "architectures", None) or ["LlamaForCausalLM"])
        self.architectures = archs
        self.arch = self.config.arch or archs[0]
        eos: set[int] = set()
        for source in (getattr(self.model, "generation_config", None), hf_config):
            value = getattr(source, "eos_token_id", None) if source is not None else None
            if isinstance(value, int):
                eos.add(value)
            elif isinstance(value, list | tuple):
                eos.update(int(v) for v in value)
        self.eos_ids = eos
        has_tokenizer = any(
            (path / f).is_file() for f in ("tokenizer.json", "tokenizer_config.json")
        )
        self.tokenizer = _HFTokenizer(path) if has_tokenizer else _ByteTokenizer(self.vocab_size)
        self._raw_last: Tensor | None = None
        self._hook = None

    def _setup_speculation(self) -> None:
        cfg = self.config
        if self.algorithm not in ALGORITHMS:
            raise DoubleStartError(
                f"{TAG} speculative_algorithm {self.algorithm!r} is not modelled "
                f"(one of {', '.join(ALGORITHMS)})"
            )
        if cfg.draft_path is None:
            raise DoubleStartError(f"{TAG} {self.algorithm} needs a draft (draft_path)")
        if cfg.num_steps < 1:
            raise DoubleStartError(f"{TAG} num_steps must be >= 1, got {cfg.num_steps}")
        if cfg.eagle_topk != 1:
            raise DoubleStartError(
                f"{TAG} eagle_topk={cfg.eagle_topk}: tree drafting is not modelled by this "
                "double; use eagle_topk=1 (chain drafting)"
            )
        if cfg.num_draft_tokens != cfg.num_steps + 1:
            self.num_draft_tokens = cfg.num_steps + 1
            self.warnings.append(TOPK1_WARNING)
            log.warning("%s %s", TAG, TOPK1_WARNING)
        try:
            spec, tensors, _report = checkpoint.load(cfg.draft_path, dtype=self.dtype)
        except (InputError, ValueError, OSError) as e:
            raise DoubleStartError(f"{TAG} cannot load the draft: {e}") from None
        if cfg.aux_layer_ids_override is not None:
            spec = replace(
                spec,
                aux_layer_ids=tuple(int(i) for i in cfg.aux_layer_ids_override),
                aux_ids_location="eagle_config",
            )
        self.draft_spec = spec
        N, Ht, H = self.num_layers, self.hidden_size, spec.hidden_size
        if spec.target_hidden_size != Ht:
            raise DoubleStartError(
                f"{TAG} the draft's target_hidden_size {spec.target_hidden_size} != the target's "
                f"hidden_size {Ht}: SGLang would fail at the draft's fc"
            )
        version = parse_version(cfg.sglang_version)
        capture_off = not spec.use_aux_hidden_state and version >= USE_AUX_FLAG_SINCE
        if cfg.capture_taps is not None:
            self.prefill_layout = self.decode_layout = self._explicit_taps(cfg.capture_taps)
            self.feed = "aux"
            self.layout_rule = (
                "eagle3dash double capture_taps: these taps, whatever SGLang's rules say"
            )
            width = len(self.prefill_layout) * Ht
        elif self.algorithm == "EAGLE3" and not capture_off:
            result = serving_layout(spec, N, cfg.sglang_version, self.arch, cfg.cuda_graph)
            if result.error:
                raise DoubleStartError(
                    f"{TAG} SGLang {cfg.sglang_version} would fail to capture the aux hidden "
                    f"states: {result.error}. {result.rule}"
                )
            self.feed = "aux"
            self.prefill_layout = tuple(result.layout)
            self.decode_layout = tuple(result.decode_layout or result.layout)
            self.layout_rule, self.layout_notes = result.rule, list(result.notes)
            width = len(self.prefill_layout) * Ht
        else:
            self.feed = "last"
            self.layout_rule = (
                "eagle_config.use_aux_hidden_state is false: no aux capture"
                if capture_off and self.algorithm == "EAGLE3"
                else f"--speculative-algorithm {self.algorithm}: no aux capture"
            ) + "; the draft gets the final-normed hidden state (width H), fc skipped if H wide."
            width = Ht
        fc_in = spec.num_aux * spec.target_hidden_size
        if width not in (H, fc_in):
            raise DoubleStartError(
                f"{TAG} the draft would get states {width} wide but its fc reads {fc_in}: "
                "SGLang would fail with a shape mismatch at fc"
            )
        self._fc_applies = width != H  # llama_eagle3.py: fc only when widths differ
        tensors = dict(tensors)
        head = self.model.get_output_embeddings()
        if self.algorithm == "EAGLE":
            # eagle_worker.py, non-EAGLE3 branch: set_embed_and_head(target embed, target head),
            # and no d2t (hot_token_id comes only from --speculative-token-map) [inferred]
            if Ht != H or head is None:
                raise DoubleStartError(
                    f"{TAG} EAGLE shares the target's embedding and lm_head, which need the "
                    f"draft's hidden_size {H} to equal the target's {Ht}"
                )
            for name in ("embed_tokens.weight", "d2t", "t2d"):
                tensors.pop(name, None)
            tensors["lm_head.weight"] = head.weight.detach().clone()
            spec = replace(spec, draft_vocab_size=self.vocab_size, has_d2t=False, has_t2d=False)
            self.embed_weight = self.model.get_input_embeddings().weight.detach()
        elif spec.target_hidden_size == H:  # set_embed: the target's embedding replaces the draft's
            tensors.pop("embed_tokens.weight", None)
            self.embed_weight = self.model.get_input_embeddings().weight.detach()
        elif "embed_tokens.weight" not in tensors:
            raise DoubleStartError(
                f"{TAG} target_hidden_size != hidden_size, so SGLang keeps the draft's own "
                "embedding, but the checkpoint has no embed_tokens.weight"
            )
        if "lm_head.weight" not in tensors:
            if spec.draft_vocab_size != self.vocab_size or head is None:
                raise DoubleStartError(f"{TAG} the draft has no lm_head.weight")
            tensors["lm_head.weight"] = head.weight.detach().clone()
        try:
            self.draft = build_draft(spec, tensors, "cpu", self.dtype)
        except ValueError as e:
            raise DoubleStartError(f"{TAG} {e}") from None
        if any(t.depth == N and not t.post_norm for t in self.prefill_layout + self.decode_layout):
            layers = getattr(getattr(self.model, "model", None), "layers", None)
            if layers is None:
                raise DoubleStartError(f"{TAG} cannot hook the last block of {self.arch}")
            self._hook = layers[-1].register_forward_hook(self._grab_last)
        log.info(
            "%s %s draft %s: feed=%s prefill taps [%s] decode taps [%s] (%s)",
            TAG,
            self.algorithm,
            cfg.draft_path,
            self.feed,
            format_layout(self.prefill_layout),
            format_layout(self.decode_layout),
            self.layout_rule,
        )

    def _explicit_taps(self, depths: list[int]) -> Layout:
        """capture_taps as a Layout, in the order given; only EAGLE3 feeds aux states at all."""
        if self.algorithm != "EAGLE3":
            raise DoubleStartError(f"{TAG} capture_taps need EAGLE3 (EAGLE feeds no aux states)")
        N = self.num_layers
        if not depths or any(not 0 <= int(d) <= N for d in depths):
            raise DoubleStartError(
                f"{TAG} capture_taps {list(depths)}: give depths 0..{N} (Tap(d) = after d blocks)"
            )
        return tuple(Tap(int(d)) for d in depths)

    def _grab_last(self, _module, _args, output) -> None:
        self._raw_last = (output[0] if isinstance(output, tuple) else output)[0]

    # -- forwards ---------------------------------------------------------------------------

    @property
    def draft_step_s(self) -> float:
        """The modelled cost of one draft step."""
        step = self.config.draft_step_s
        return self.config.delay_s / 10 if step is None else step

    @torch.inference_mode()
    def _target(self, ids: list[int]) -> tuple[Tensor, list[Tensor]]:
        """One full forward: (logits [L, V] float32, per-depth states [N+1][L, Ht]).

        Entry d < N is the residual after d blocks; entry N is the final-normed state; a raw
        last-block output, when a layout needs it, is in self._raw_last.
        """
        out = self.model(
            input_ids=torch.tensor([ids], dtype=torch.int64),
            output_hidden_states=True,
            use_cache=False,
        )
        return out.logits[0].float(), [h[0] for h in out.hidden_states]

    @torch.inference_mode()
    def _cached(self, ids: list[int], cache: Any) -> tuple[Tensor, list[Tensor], Any]:
        """A forward of the tokens after those in `cache` (None: a prefill that starts one), as
        a server decodes with its KV cache: (logits [len(ids), V], states [N+1][len(ids), Ht],
        the cache, now holding ids too)."""
        out = self.model(
            input_ids=torch.tensor([ids], dtype=torch.int64),
            cache=cache,
            output_hidden_states=True,
            use_cache=True,
        )
        return out.logits[0].float(), [h[0] for h in out.hidden_states], out.cache

    def states(self, ids: list[int]) -> list[Tensor]:
        """The target's per-depth states over ids ([N+1][L, Ht]; entry d < N is the residual
        after d blocks, entry N the final-normed state), one forward under the model's lock."""
        with self._lock:
            return self._target(ids)[1]

    def _tap_rows(self, hs: list[Tensor], layout: Layout, lo: int, hi: int) -> Tensor:
        """Concatenated taps (ascending layer order, as SGLang) for positions lo..hi-1."""
        parts = []
        for tap in layout:
            if tap.depth == self.num_layers and not tap.post_norm:
                assert self._raw_last is not None
                parts.append(self._raw_last[lo:hi])
            else:
                parts.append(hs[tap.depth][lo:hi])
        return torch.cat(parts, dim=-1)

    def _state_rows(self, hs: list[Tensor], layout: Layout, lo: int, hi: int) -> Tensor:
        """What SGLang's logits processor keeps: aux taps when EAGLE-3 capture is on, else the
        final-normed hidden state."""
        if self.feed == "aux":
            return self._tap_rows(hs, layout, lo, hi)
        return hs[self.num_layers][lo:hi]

    @torch.inference_mode()
    def _propose(self, feed_rows: Tensor, seq: list[int]) -> list[int]:
        """num_steps greedy draft tokens after seq[-1] (target ids): the chain of the last row."""
        assert self.draft is not None
        g = self.draft.project(feed_rows) if self._fc_applies else feed_rows.to(self.draft.dtype)
        tokens = torch.tensor(seq[1:], dtype=torch.int64)
        preds, _ = self.draft.chain(g, tokens, self.num_steps, self.embed_weight, last_only=True)
        return [int(t) for t in preds[-1]]

    # -- generation -------------------------------------------------------------------------

    def generate(
        self,
        prompt: list[int],
        max_new_tokens: int,
        stop_ids: set[int],
        want_hidden: bool,
        sampling: Sampling = GREEDY,
    ) -> _Result:
        with self._lock:
            # sampling_seed: a stream of the request's own; else the server's, seeded at start
            rng = (
                self._rng if sampling.seed is None else torch.Generator().manual_seed(sampling.seed)
            )
            return self._generate(prompt, max_new_tokens, stop_ids, want_hidden, sampling, rng)

    def _pick(self, logits: Tensor, s: Sampling, rng: torch.Generator) -> int:
        """The sampler after a prefill or a plain decode: argmax, or a draw from target_probs."""
        if s.greedy:
            return int(logits.argmax())
        coin = float(torch.rand((), generator=rng, dtype=torch.float64))
        return sample_from(target_probs(logits, s), coin)

    def _verify(
        self, logits: Tensor, proposals: list[int], s: Sampling, rng: torch.Generator
    ) -> tuple[int, int]:
        """One verify round over logits [S + 1, V]: (accepted drafts, the token after them)."""
        S, cfg = len(proposals), self.config
        if s.greedy or cfg.cpu_greedy_verify:  # verify_tree_greedy on the argmax
            predicted = [int(t) for t in logits.argmax(dim=-1)]
            accepted = 0
            while accepted < S and proposals[accepted] == predicted[accepted]:
                accepted += 1
            return accepted, predicted[accepted]
        # eagle_info.py: one coin per draft-tree node (S + 1, the last unused by a chain) and
        # one for the final sampling
        coins = torch.rand(S + 2, generator=rng, dtype=torch.float64).tolist()
        return verify_chain(
            target_probs(logits, s),
            proposals,
            coins[: S + 1],
            coins[S + 1],
            cfg.speculative_accept_threshold_single,
            cfg.speculative_accept_threshold_acc,
        )

    def _generate(
        self,
        prompt: list[int],
        max_new: int,
        stop_ids: set[int],
        want_hidden: bool,
        sampling: Sampling,
        rng: torch.Generator,
    ) -> _Result:
        t0 = time.perf_counter()
        n_prompt = len(prompt)
        out: list[int] = []
        hidden_rows: list[Tensor] = []
        result = _Result([], {}, n_prompt, 0.0)

        def emit(token: int) -> dict | None:
            out.append(token)
            if token in stop_ids:
                return {"type": "stop", "matched": token}
            if len(out) >= max_new:
                return {"type": "length", "length": len(out)}
            return None

        seq = list(prompt)
        pace = _Pace(t0)
        # Decoded as a server decodes, on a KV cache holding every token of seq but its last.
        with pace.costs(self.config.delay_s):  # the prefill (eager on a real server)
            logits, hs, cache = self._cached(seq, None)
        # A prompt longer than chunked_prefill_size is prefilled in chunks, and SGLang keeps the
        # hidden-state rows of the last chunk only (batch_result_processor.py, 0.5.23).
        chunk = self.config.chunked_prefill_size
        first_row = (n_prompt - 1) // chunk * chunk if chunk and n_prompt > chunk else 0
        prefill_block = (
            self._state_rows(hs, self.prefill_layout, first_row, n_prompt) if want_hidden else None
        )
        feed_rows = (
            self._tap_rows(hs, self.prefill_layout, 0, n_prompt)
            if self.feed == "aux"
            else (hs[self.num_layers][:n_prompt] if self.feed == "last" else None)
        )
        finish: dict | None = {"type": "length", "length": 0} if max_new <= 0 else None
        if finish is None:
            finish = emit(self._pick(logits[-1], sampling, rng))
            seq.append(out[-1])
        while finish is None:
            tic = time.perf_counter()
            if self.feed is None:  # plain decode: one target forward per token
                with pace.costs(self.config.delay_s):
                    logits, hs, cache = self._cached(seq[-1:], cache)
                    token = self._pick(logits[-1], sampling, rng)
                if want_hidden:
                    hidden_rows.append(hs[self.num_layers][-1:])
                finish = emit(token)
                seq.append(out[-1])
                self._decode_forward_done(1, len(seq), time.perf_counter() - tic)
                continue
            assert feed_rows is not None
            # one round on one deadline: the draft steps, the verify forward (a CUDA-graph
            # replay on a server) and its accept/reject
            with pace.costs(self.config.delay_s + self.num_steps * self.draft_step_s):
                proposals = self._propose(feed_rows, seq)
                # seq[-1] and the drafts: rows 0..S stand at positions n - 1 .. n - 1 + S
                logits, hs, cache = self._cached(seq[-1:] + proposals, cache)
                accepted, following = self._verify(logits, proposals, sampling, rng)
            new = proposals[:accepted] + [following]
            emitted = 0
            for token in new:
                emitted += 1
                finish = emit(token)
                if finish is not None:
                    break
            # the states at the positions that produced the emitted tokens: seq[-1], drafts...
            rows = self._state_rows(hs, self.decode_layout, 0, emitted)
            rejected = len(proposals) + 1 - emitted
            if rejected:  # they leave the cache (transformers 5 crops by a negative count)
                cache.crop(-rejected)
            if want_hidden:
                hidden_rows.append(rows)
            feed_rows = torch.cat([feed_rows, rows], dim=0)
            seq.extend(new[:emitted])
            result.verify_ct += 1
            result.correct_drafts += emitted - 1  # eagle_info.py: accepted drafts, no bonus
            if len(result.histogram) < emitted:
                result.histogram.extend([0] * (emitted - len(result.histogram)))
            result.histogram[emitted - 1] += 1
            self._decode_forward_done(emitted, len(seq), time.perf_counter() - tic)
        result.output_ids = out
        result.finish_reason = finish
        result.latency = time.perf_counter() - t0
        if want_hidden and prefill_block is not None:
            decode_rows = [r.float().tolist() for block in hidden_rows for r in block]
            result.hidden_states = [prefill_block.float().tolist(), *decode_rows]
        return result

    # -- counters and the decode log line ---------------------------------------------------

    def _decode_forward_done(self, accepted: int, seq_len: int, seconds: float) -> None:
        """One decode/verify round of a batch of 1 that took `seconds` and emitted `accepted`
        tokens. Throughput counts busy time only (one request at a time, no idle gaps)."""
        with self._stats_lock:
            iv = self._interval
            iv["forward_ct"] += 1
            iv["accepted"] += accepted
            iv["tokens"] += accepted
            iv["seconds"] += seconds
            self._decode_forward_ct += 1
            if self._decode_forward_ct % max(1, self.config.decode_log_interval):
                return
            throughput = iv["tokens"] / max(iv["seconds"], 1e-9)
            self._last_gen_throughput = throughput
            usage = seq_len / MAX_TOTAL_TOKENS
            graph = self.config.cuda_graph
            if self.feed is not None:
                self._total_accepted += int(iv["accepted"])
                self._total_forward_ct += int(iv["forward_ct"])
                accept_len = iv["accepted"] / iv["forward_ct"]
                if parse_version(self.config.sglang_version) >= (0, 5, 11):
                    correct = iv["accepted"] - iv["forward_ct"]
                    rate = correct / (iv["forward_ct"] * (self.num_draft_tokens - 1))
                else:
                    rate = iv["accepted"] / (iv["forward_ct"] * (self.num_steps + 1))
                log.info(
                    "%s Decode batch, #running-req: 1, #token: %d, token usage: %.2f, "
                    "accept len: %.2f, accept rate: %.2f, cuda graph: %s, "
                    "gen throughput (token/s): %.2f, #queue-req: 0, ",
                    TAG,
                    seq_len,
                    usage,
                    accept_len,
                    rate,
                    graph,
                    throughput,
                )
            else:
                log.info(
                    "%s Decode batch, #running-req: 1, #token: %d, token usage: %.2f, "
                    "cuda graph: %s, gen throughput (token/s): %.2f, #queue-req: 0, ",
                    TAG,
                    seq_len,
                    usage,
                    graph,
                    throughput,
                )
            self._interval = {
                "forward_ct": 0,
                "accepted": 0,
                "tokens": 0,
                "seconds": 0.0,
            }

    # -- responses --------------------------------------------------------------------------

    @property
    def model_path(self) -> str:
        return str(self.config.target_path)

    def meta_info(self, r: _Result) -> dict:
        """0.5.23 meta_info with its spec fields (0.5.23 `managers/tokenizer_manager.py`)."""
        n = len(r.output_ids)
        meta: dict[str, Any] = {
            "id": uuid.uuid4().hex,
            "finish_reason": r.finish_reason,
            "prompt_tokens": r.prompt_tokens,
            "weight_version": "default",
            "num_retractions": 0,
            "reasoning_tokens": 0,
            "completion_tokens": n,
            "cached_tokens": 0,
            "weight_versions": [{"version": "default", "start": 0, "end": n}],
            "cached_tokens_details": {"device": 0, "host": 0},
            "dp_rank": None,
        }
        if r.hidden_states is not None:
            fault = self.config.hidden_states_fault
            meta["hidden_states"] = (
                r.hidden_states if fault is None else HIDDEN_STATES_FAULTS[fault](r.hidden_states)
            )
        if self.feed is not None and r.verify_ct > 0:
            proposed = r.verify_ct * (self.num_draft_tokens - 1)
            meta.update(
                spec_accept_rate=r.correct_drafts / proposed,
                spec_accept_length=n / r.verify_ct,
                spec_num_correct_drafts=r.correct_drafts,
                spec_num_proposed_drafts=proposed,
                spec_verify_ct=r.verify_ct,
                spec_correct_drafts_histogram=list(r.histogram),
            )
        meta["e2e_latency"] = r.latency
        meta["response_sent_to_client_ts"] = time.time()
        return meta

    def drips(self, body: Any) -> bool:
        """Whether the reply to this /generate body is sent DRIP_S seconds a byte (the "drip"
        fault, on a request for hidden states)."""
        wanted = isinstance(body, dict) and bool(body.get("return_hidden_states"))
        return wanted and self.config.hidden_states_fault == "drip"

    @property
    def hidden_states_mode(self) -> str | None:
        """The server's return_hidden_states mode as 0.5.23 resolves it: 'full', 'last' or None."""
        cfg = self.config
        return hidden_states_mode(cfg.enable_return_hidden_states, cfg.return_hidden_states_mode)

    def server_args(self) -> dict:
        """The server-argument fields the double sets on top of the 0.5.23 template."""
        cfg = self.config
        spec_on = self.algorithm is not None
        draft_q = cfg.draft_quantization if cfg.draft_quantization is not None else cfg.quantization
        reported = cfg.draft_path if cfg.reported_draft_path is None else cfg.reported_draft_path
        launch = [
            f"--model-path {self.model_path}",
            f"--device cpu --port {self.port} --host {self.host}",
        ]
        if spec_on:
            launch.append(
                f"--speculative-algorithm {self.algorithm} --speculative-draft-model-path "
                f"{reported} --speculative-num-steps {self.num_steps} "
                f"--speculative-eagle-topk {cfg.eagle_topk} --speculative-num-draft-tokens "
                f"{cfg.num_draft_tokens}"
            )
        if not cfg.cuda_graph:
            launch.append("--disable-cuda-graph")
        if cfg.enable_return_hidden_states:
            launch.append("--enable-return-hidden-states")
        if cfg.return_hidden_states_mode:
            launch.append(f"--return-hidden-states-mode {cfg.return_hidden_states_mode}")
        if cfg.chunked_prefill_size != 4096:
            launch.append(f"--chunked-prefill-size {cfg.chunked_prefill_size or -1}")
        if cfg.quantization:
            launch.append(f"--quantization {cfg.quantization}")
        if cfg.random_seed is not None:
            launch.append(f"--random-seed {cfg.random_seed}")
        for name in ("speculative_accept_threshold_single", "speculative_accept_threshold_acc"):
            if getattr(cfg, name) != 1.0:
                launch.append(f"--{name.replace('_', '-')} {getattr(cfg, name)}")
        return {
            "model_path": self.model_path,
            "tokenizer_path": self.model_path,
            "served_model_name": self.model_path,
            "host": self.host,
            "port": self.port,
            "tp_size": 1,
            "dtype": cfg.dtype,
            "quantization": cfg.quantization,
            "attention_backend": "torch_native",
            "sampling_backend": "pytorch",
            "device": "cpu",
            "disable_cuda_graph": not cfg.cuda_graph,
            "disable_radix_cache": cfg.disable_radix_cache,
            "disable_overlap_schedule": spec_on,  # not implemented for spec decoding on CPU
            # arg_groups/serving_hook.py: a mode turns the flag on; the flag alone means "full"
            "enable_return_hidden_states": cfg.enable_return_hidden_states
            or cfg.return_hidden_states_mode is not None,
            "return_hidden_states_mode": self.hidden_states_mode,
            "chunked_prefill_size": cfg.chunked_prefill_size or -1,
            "decode_log_interval": cfg.decode_log_interval,
            "speculative_algorithm": self.algorithm,
            "speculative_draft_model_path": str(reported) if spec_on else None,
            "speculative_num_steps": self.num_steps if spec_on else None,
            "speculative_eagle_topk": cfg.eagle_topk if spec_on else None,
            "speculative_num_draft_tokens": self.num_draft_tokens if spec_on else None,
            "speculative_draft_model_quantization": draft_q if spec_on else None,
            "speculative_accept_threshold_single": cfg.speculative_accept_threshold_single,
            "speculative_accept_threshold_acc": cfg.speculative_accept_threshold_acc,
            "random_seed": self.random_seed,
            "_speculative_draft_quantization_explicitly_set": cfg.draft_quantization is not None,
            "launch_command": " ".join(launch),
        }

    def server_info(self) -> dict:
        info = copy.deepcopy(self._template)
        args = self.server_args()
        info.update(args)
        internal = info["internal_states"][0]
        internal.update({k: v for k, v in args.items() if k in internal})
        with self._stats_lock:
            internal["last_gen_throughput"] = self._last_gen_throughput
            if self._total_forward_ct:
                internal["avg_spec_accept_length"] = self._total_accepted / self._total_forward_ct
        for where in (info["startup_time"], internal["startup_time"]):
            where["load_weight"] = self.load_seconds
        info["version"] = self.config.sglang_version
        info["status"] = "ready"
        info["eagle3dash_double"] = True
        info["eagle3dash_double_note"] = NOTE
        info["eagle3dash_double_warnings"] = list(self.warnings)
        info["eagle3dash_double_capture"] = {
            "note": "eagle3dash double: the taps its target feeds the draft",
            "feed": self.feed,
            "prefill_layout": format_layout(self.prefill_layout),
            "decode_layout": format_layout(self.decode_layout),
            "rule": self.layout_rule,
            "notes": list(self.layout_notes),
            "num_layers": self.num_layers,
            "capture_taps_override": self.config.capture_taps is not None,
        }
        info["eagle3dash_double_draft_path"] = (
            str(self.config.draft_path) if self.algorithm is not None else None
        )
        # The modelled cost behind its tok/s: the floor of a target forward and of a draft step.
        info["eagle3dash_double_delay_s"] = self.config.delay_s
        info["eagle3dash_double_draft_step_s"] = self.draft_step_s
        # How verification decides at temperature > 0 (a stock server_info does not say)
        info["eagle3dash_double_verification"] = (
            "greedy at any temperature (SGLang's CPU rule)"
            if self.config.cpu_greedy_verify
            else "target-only speculative sampling at temperature > 0 (SGLang on CUDA)"
        )
        return info

    def model_info(self) -> dict:
        return {
            "model_path": self.model_path,
            "tokenizer_path": self.model_path,
            "is_generation": True,
            "preferred_sampling_params": None,
            "weight_version": "default",
            "served_model_name": self.model_path,
            "model_type": getattr(self.hf_config, "model_type", None),
            "architectures": self.architectures,
            "eagle3dash_double": True,
        }

    # -- request parsing --------------------------------------------------------------------

    def _check_ids(self, ids: Any) -> list[int]:
        if not isinstance(ids, list) or not all(
            isinstance(i, int) and not isinstance(i, bool) for i in ids
        ):
            raise RequestError("input_ids must be a list of integers")
        bad = [i for i in ids if not 0 <= i < self.vocab_size]
        if bad:
            raise RequestError(
                f"The input_ids {bad[:5]} are outside the vocabulary (size {self.vocab_size})."
            )
        if not ids:
            raise RequestError("The input is empty: give text or input_ids.")
        return ids

    def handle_generate(self, body: dict) -> dict | list:
        """POST /generate: one result or, for a list of prompts, a list of results."""
        if body.get("stream"):
            raise RequestError("stream=true is not served by the eagle3dash SGLang double")
        if body.get("text") is not None:
            texts = body["text"]
            batch = isinstance(texts, list)
            texts = texts if batch else [texts]
            if not all(isinstance(t, str) for t in texts):
                raise RequestError("text must be a string or a list of strings")
            prompts = [self.tokenizer.encode(t) for t in texts]
        elif body.get("input_ids") is not None:
            ids = body["input_ids"]
            batch = isinstance(ids, list) and bool(ids) and isinstance(ids[0], list)
            prompts = ids if batch else [ids]
        else:
            raise RequestError("Either text, input_ids or input_embeds should be provided.")
        prompts = [self._check_ids(p) for p in prompts]
        want_hidden = bool(body.get("return_hidden_states"))
        if want_hidden and self.hidden_states_mode == "last":
            raise RequestError(HIDDEN_STATES_ABOVE_LAST)
        if want_hidden and self.hidden_states_mode is None:
            raise RequestError(HIDDEN_STATES_DISABLED)
        params = body.get("sampling_params") or {}
        per_prompt = params if isinstance(params, list) else [params] * len(prompts)
        if len(per_prompt) != len(prompts):
            raise RequestError("sampling_params must be one dict or one per prompt")
        samplings = [parse_sampling(sp or {}) for sp in per_prompt]  # refuse before any runs
        results = []
        for ids, sp, sampling in zip(prompts, per_prompt, samplings, strict=True):
            sp = sp or {}
            max_new = sp.get("max_new_tokens")
            max_new = DEFAULT_MAX_NEW_TOKENS if max_new is None else int(max_new)
            stop_ids = set() if sp.get("ignore_eos") else set(self.eos_ids)
            stop_ids |= {int(i) for i in sp.get("stop_token_ids") or ()}
            r = self.generate(ids, max_new, stop_ids, want_hidden, sampling)
            results.append(
                {
                    "text": self.tokenizer.decode(r.output_ids),
                    "output_ids": r.output_ids,
                    "meta_info": self.meta_info(r),
                }
            )
        return results if batch else results[0]

    def handle_chat(self, body: dict) -> dict:
        """POST /v1/chat/completions, minimal: messages in, one choice out."""
        messages = body.get("messages")
        if not isinstance(messages, list) or not messages:
            raise RequestError("messages must be a non-empty list")
        ids = self._check_ids(self.tokenizer.encode(self.tokenizer.chat_prompt(messages)))
        max_new = body.get("max_completion_tokens") or body.get("max_tokens")
        max_new = DEFAULT_MAX_NEW_TOKENS if max_new is None else int(max_new)
        stop_ids = set() if body.get("ignore_eos") else set(self.eos_ids)
        r = self.generate(ids, max_new, stop_ids, False, parse_sampling(body))
        n = len(r.output_ids)
        return {
            "id": uuid.uuid4().hex,
            "object": "chat.completion",
            "created": int(time.time()),
            "model": body.get("model") or self.model_path,
            "choices": [
                {
                    "index": 0,
                    "message": {
                        "role": "assistant",
                        "content": self.tokenizer.decode(r.output_ids),
                        "reasoning_content": None,
                    },
                    "logprobs": None,
                    "finish_reason": r.finish_reason["type"],
                    "matched_stop": r.finish_reason.get("matched"),
                }
            ],
            "usage": {
                "prompt_tokens": len(ids),
                "total_tokens": len(ids) + n,
                "completion_tokens": n,
                "prompt_tokens_details": None,
                "reasoning_tokens": 0,
                "completion_tokens_details": None,
            },
            "metadata": {
                "weight_version": "default",
                "weight_versions": [{"version": "default", "start": 0, "end": n}],
            },
        }

    def close(self) -> None:
        if self._hook is not None:
            self._hook.remove()
            self._hook = None
