"""Serve benchmark: send prompts to an endpoint through its engine adapter (`engine.EngineAdapter`:
SGLang or vLLM) and measure tok/s, accept length and latency.

Accept length is Σ completion_tokens / Σ spec_verify_ct over the measured requests, from each
answer's meta_info, as SGLang's MT-Bench script `benchmark/mtbench/bench_sglang_eagle.py` does.
The server's `avg_spec_accept_length` is not used: it is cumulative since startup, includes warm-up
and only moves every decode_log_interval steps.

Acceptance per draft position is measured from SGLang's `spec_correct_drafts_histogram` (meta_info,
per finished request): entry k counts the verify rounds that accepted exactly k drafts, the list
grown only to the largest k seen. The histograms of the measured requests are summed, and
per_position[k - 1] = sum(h[j] for j >= k) / sum(h), for k = 1 .. len(h) - 1, is the share of
rounds that accepted at least k drafts: comparable to a simulation's cumulative per-step
acceptance. Positions past the list accepted in no round (share 0). A server that predates the
field (or a request without it) leaves both None, never zeros. With adaptive speculation
(speculative_adaptive) rounds draft different numbers of steps, and a round that drafted fewer
than k never counts as accepting k.

On SGLang, prompts are sent to /generate as text (as token ids for `{"input_ids": [...]}` lines), at
run_bench's `temperature` (0, greedy, unless given; top_p and top_k the server's defaults), with
a fixed number of new tokens (`ignore_eos`), so runs against a speculative and a baseline server
generate the same lengths. Chat prompts (`{"messages": [...]}`) are rendered as plain "role:
content" lines ending with "assistant:", not with the model's chat template: the app has no
tokenizer, and /v1/chat/completions does not report spec_verify_ct before 0.5.20. Accept length on
such prompts can differ a little from real chat traffic.
"""

from __future__ import annotations

import dataclasses
import json
import math
import sys
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TypedDict, Unpack

from eagle3dash.engines.seam import BenchRequests, EngineAdapter, GenerateResult, ServedRequests
from eagle3dash.errors import InputError
from eagle3dash.http_client import EndpointError
from eagle3dash.noise import ratio_noise
from eagle3dash.target import Vocabulary

__all__ = [
    "BUILTIN_PROMPT_SETS",
    "PROMPT_CATEGORIES",
    "BenchResult",
    "Prompt",
    "PromptFileError",
    "RequestStat",
    "compare_to_baseline",
    "load_prompts",
    "parse_prompt_lines",
    "percentile",
    "run_bench",
    "shares_at_least",
    "sum_histograms",
]

# One JSONL file per category in prompts/; "all" interleaves them (load_prompts), but for
# long-context: a capture of its few thousand tokens' hidden states from a large target is
# gigabytes of JSON, so long context is a set of its own, chosen on purpose.
PROMPT_CATEGORIES = (
    "chat",
    "code",
    "math",
    "reasoning",
    "summarisation",
    "translation",
    "json",
    "long-context",
)
LONG_CONTEXT = "long-context"
BUILTIN_PROMPT_SETS = (*PROMPT_CATEGORIES, "all")
PROMPTS_DIR = Path(__file__).parent / "prompts"
_MAX_ERROR_MESSAGES = 5
# A benchmark request's deadline in seconds (an engine adapter's timeout): a long generation at
# full concurrency takes minutes on a large target.
BENCH_TIMEOUT = 300.0

Progress = Callable[[int, int], None]


class PromptFileError(InputError, ValueError):
    """A prompt file that cannot be read; the message names the file and line."""


@dataclass(frozen=True)
class Prompt:
    """One prompt: text (or token ids) for /generate, the chat messages it came from, and the
    category it counts in (a built-in set's name, or a prompt file's "category")."""

    text: str
    messages: tuple[tuple[str, str], ...] | None = None
    input_ids: tuple[int, ...] | None = None  # sent instead of the text when given
    category: str | None = None

    def sent(self) -> str | list[int]:
        """What a request sends: the token ids when given, else the text."""
        return self.text if self.input_ids is None else list(self.input_ids)

    def with_ids(self, ids: Sequence[int]) -> Prompt:
        """This prompt sent as these token ids (its text, messages and category kept)."""
        return dataclasses.replace(self, input_ids=tuple(ids))


def render_messages(messages: Sequence[tuple[str, str]]) -> str:
    """Chat messages as plain "role: content" lines, ending with "assistant:" for the reply."""
    return "\n".join([f"{role}: {content}" for role, content in messages] + ["assistant:"])


# A prompt file's bounds, the same for a typed path and an upload: 64 MiB, 100,000 prompts, and
# 2 MiB a line (about half a million tokens of text, past any served context; a 24 MiB line took a
# diagnosis to 3.5 GB). A category is a short printable label.
MAX_PROMPT_FILE_BYTES = 64 << 20
MAX_PROMPTS = 100_000
MAX_PROMPT_LINE_BYTES = 2 << 20
MAX_CATEGORY_CHARS = 64


# The largest token id any server takes: SGLang and vLLM hold input ids as int64 tensors.
MAX_TOKEN_ID = 2**63 - 1


def _parse_line(obj: object, where: str, vocab: Vocabulary | None) -> Prompt:
    forms = (
        'expected {"prompt": "..."}, {"messages": [{"role": ..., "content": ...}, ...]} '
        'or {"input_ids": [int, ...]}, each with an optional "category": "..."'
    )
    if not isinstance(obj, dict):
        raise PromptFileError(f"{where}: {forms}, got {type(obj).__name__}")
    category = obj.get("category")
    if category is not None and (not isinstance(category, str) or not category.strip()):
        raise PromptFileError(
            f'{where}: "category" must be a non-empty string (the category this prompt counts '
            f"in), got {json.dumps(category)[:MAX_CATEGORY_CHARS]}"
        )
    if category is not None and (not category.isprintable() or len(category) > MAX_CATEGORY_CHARS):
        raise PromptFileError(
            f'{where}: "category" must be a label of at most {MAX_CATEGORY_CHARS} printable '
            "characters (no control or terminal escape characters)"
        )
    return dataclasses.replace(_parse_form(obj, where, forms, vocab), category=category)


def _parse_form(obj: dict, where: str, forms: str, vocab: Vocabulary | None) -> Prompt:
    if "prompt" in obj:
        text = obj["prompt"]
        if not isinstance(text, str) or not text.strip():
            raise PromptFileError(f'{where}: "prompt" must be a non-empty string')
        return Prompt(text=text)
    if "messages" in obj:
        msgs = obj["messages"]
        if not isinstance(msgs, list) or not msgs:
            raise PromptFileError(f'{where}: "messages" must be a non-empty list')
        pairs = []
        for i, m in enumerate(msgs):
            ok = isinstance(m, dict) and isinstance(m.get("role"), str)
            if not ok or not isinstance(m.get("content"), str):
                raise PromptFileError(
                    f'{where}: messages[{i}] must be {{"role": str, "content": str}}'
                )
            pairs.append((m["role"], m["content"]))
        return Prompt(text=render_messages(pairs), messages=tuple(pairs))
    if "input_ids" in obj:
        ids = obj["input_ids"]
        ok = isinstance(ids, list) and bool(ids)
        if not ok or not all(type(i) is int and i >= 0 for i in ids):  # a bool is no token id
            raise PromptFileError(f'{where}: "input_ids" must be a non-empty list of token ids')
        _check_ids(ids, where, vocab)
        return Prompt(text="", input_ids=tuple(ids))
    raise PromptFileError(f"{where}: {forms}")


def _check_ids(ids: list[int], where: str, vocab: Vocabulary | None) -> None:
    """Token ids a server can take: within int64 always, and within the target's vocabulary
    where it is known (a server answers an id past either with a bare 400)."""
    past = max(ids)
    if past > MAX_TOKEN_ID:
        raise PromptFileError(
            f'{where}: "input_ids" holds {past}, past int64 (at most {MAX_TOKEN_ID}): no '
            "tokenizer makes such an id; give the target's token ids"
        )
    if vocab is not None and past >= vocab.size:
        raise PromptFileError(
            f'{where}: "input_ids" holds {past}, outside the target\'s vocabulary of '
            f"{vocab.size} tokens (ids 0..{vocab.size - 1}, {vocab.source}): give the target's "
            "token ids"
        )


def parse_prompt_lines(
    lines: Sequence[str], name: str, vocab: Vocabulary | None = None
) -> list[Prompt]:
    """Parse JSONL prompt lines (blank lines skipped), token ids checked against int64 and
    `vocab` when known; errors name `name` and the line number."""
    prompts: list[Prompt] = []
    for lineno, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        where = f"{name}, line {lineno}"
        if len(line) > MAX_PROMPT_LINE_BYTES // 4 and len(line.encode()) > MAX_PROMPT_LINE_BYTES:
            raise PromptFileError(
                f"{where}: longer than {MAX_PROMPT_LINE_BYTES >> 20} MiB, more than any context "
                "length takes; shorten the prompt"
            )
        if len(prompts) == MAX_PROMPTS:
            raise PromptFileError(
                f"{name}: more than {MAX_PROMPTS:,} prompts; use fewer (a diagnosis uses the "
                "first few hundred)"
            )
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as exc:
            raise PromptFileError(f"{where}: not valid JSON ({exc.msg})") from None
        except RecursionError:
            raise PromptFileError(f"{where}: nested too deeply to be a prompt") from None
        except ValueError:  # Python's int parsing refuses a number of over 4300 digits
            raise PromptFileError(
                f"{where}: holds a number of more than {sys.get_int_max_str_digits()} digits, "
                f"past int64 (at most {MAX_TOKEN_ID}) and any token id"
            ) from None
        prompts.append(_parse_line(obj, where, vocab))
    if not prompts:
        raise PromptFileError(f"{name}: no prompts (one JSON object per line)")
    return prompts


def _builtin_set(name: str) -> list[Prompt]:
    text = (PROMPTS_DIR / f"{name}.jsonl").read_text("utf-8")
    return parse_prompt_lines(text.splitlines(), f"built-in prompt set {name!r}")


def _round_robin(sets: Sequence[Sequence[Prompt]]) -> list[Prompt]:
    """The first of each set, then the second of each, ...: any first N cover the sets evenly."""
    longest = max((len(s) for s in sets), default=0)
    return [s[i] for i in range(longest) for s in sets if i < len(s)]


def load_prompts(name_or_path: str | Path, vocab: Vocabulary | None = None) -> list[Prompt]:
    """A built-in prompt set (BUILTIN_PROMPT_SETS; "all" interleaves every category but long
    context) or a JSONL file of prompts, its token ids within `vocab` when the target's is
    known."""
    name = str(name_or_path)
    if name == "all":
        return _round_robin([_builtin_set(c) for c in PROMPT_CATEGORIES if c != LONG_CONTEXT])
    if name in BUILTIN_PROMPT_SETS:
        return _builtin_set(name)
    path = Path(name_or_path).expanduser()
    if not path.is_file():
        builtins = ", ".join(BUILTIN_PROMPT_SETS)
        raise PromptFileError(f"{name}: no such prompt file, and not a built-in set ({builtins})")
    try:
        with path.open("rb") as f:
            data = f.read(MAX_PROMPT_FILE_BYTES + 1)
    except OSError as exc:
        raise PromptFileError(
            f"{path}: cannot read ({exc.strerror or type(exc).__name__})"
        ) from None
    return parse_prompt_bytes(data, str(path), vocab)


def parse_prompt_bytes(data: bytes, name: str, vocab: Vocabulary | None = None) -> list[Prompt]:
    """A prompt file's bytes (read up to MAX_PROMPT_FILE_BYTES + 1) as prompts: the one bound
    for a typed path and an upload."""
    if len(data) > MAX_PROMPT_FILE_BYTES:
        raise PromptFileError(
            f"{name}: larger than {MAX_PROMPT_FILE_BYTES >> 20} MiB; use fewer prompts"
        )
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise PromptFileError(f"{name}: not UTF-8 text (byte {e.start})") from None
    return parse_prompt_lines(text.splitlines(), name, vocab)


# --- results --------------------------------------------------------------------------------------


def percentile(values: Sequence[float], q: float) -> float | None:
    """The q-th percentile (0-100), linearly interpolated like numpy's default; None if empty."""
    if not values:
        return None
    xs = sorted(values)
    pos = (len(xs) - 1) * q / 100.0
    lo = math.floor(pos)
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (pos - lo)


def _mean(values: Sequence[float]) -> float | None:
    return sum(values) / len(values) if values else None


def sum_histograms(histograms: Sequence[Sequence[int]]) -> list[int]:
    """Entry-wise sum of histograms of different lengths (the missing entries count 0)."""
    total = [0] * max((len(h) for h in histograms), default=0)
    for h in histograms:
        for k, count in enumerate(h):
            total[k] += count
    return total


def shares_at_least(histogram: Sequence[int]) -> list[float]:
    """The share of rounds that accepted at least k drafts, k = 1 .. len(histogram) - 1, from a
    histogram of rounds by accepted drafts; [] when it counts no round."""
    rounds = sum(histogram)
    if not rounds:
        return []
    shares, at_least = [], rounds
    for count in histogram[:-1]:
        at_least -= count  # rounds that accepted more than k - 1, i.e. at least k
        shares.append(at_least / rounds)
    return shares


@dataclass
class RequestStat:
    """One measured request: what the server reported and what the client timed."""

    index: int
    completion_tokens: int | None = None
    prompt_tokens: int | None = None
    spec_verify_ct: int | None = None
    # verify rounds by accepted drafts (SGLang's spec_correct_drafts_histogram); None when absent
    correct_drafts_histogram: list[int] | None = None
    latency_s: float | None = None  # client-side, request sent to answer parsed
    server_e2e_latency: float | None = None
    error: str | None = None

    @property
    def output_tok_s(self) -> float | None:
        """Completion tokens over the client-side latency."""
        if not self.completion_tokens or not self.latency_s:
            return None
        return self.completion_tokens / self.latency_s

    @property
    def accept_length(self) -> float | None:
        """completion_tokens / spec_verify_ct for this request, None without speculation."""
        if not self.spec_verify_ct or self.completion_tokens is None:
            return None
        return self.completion_tokens / self.spec_verify_ct


@dataclass
class BenchResult:
    """Aggregates of one benchmark run; per-request rows in `requests`."""

    url: str
    num_requests: int
    concurrency: int
    max_new_tokens: int
    warmup: int
    wall_s: float
    completion_tokens: int
    output_tok_s_aggregate: float
    output_tok_s_per_request: list[float]
    output_tok_s_per_request_mean: float | None
    accept_length: float | None
    accept_length_per_request: list[float | None]
    # The measured requests' spec_correct_drafts_histogram summed, and per_position[k - 1]: the
    # share of rounds that accepted at least k drafts (module docstring). None: no speculation,
    # or a server that predates the field.
    correct_drafts_histogram: list[int] | None
    latency_p50: float | None
    latency_p90: float | None
    latency_p99: float | None
    server_latency_p50: float | None
    server_latency_p90: float | None
    server_latency_p99: float | None
    errors: int
    temperature: float = 0.0  # sent with every request; accept length falls as it rises
    # Where accept length and the histogram come from: "per-request" (each answer's statistics)
    # or "metrics-delta" (a vLLM server's /metrics counters around the benchmark: server-wide,
    # so they are ours only while nothing else uses the server).
    acceptance_source: str = "per-request"
    error_messages: list[str] = field(default_factory=list)
    requests: list[RequestStat] = field(default_factory=list, repr=False)

    @property
    def per_position(self) -> list[float] | None:
        """Measured acceptance per draft position, from the summed histogram (None without)."""
        h = self.correct_drafts_histogram
        return None if h is None else shares_at_least(h)

    def to_dict(self) -> dict:
        """A JSON-ready dict of every field, per-request rows and per_position included."""
        return {**asdict(self), "per_position": self.per_position}


def _summarize(
    url: str,
    stats: list[RequestStat],
    concurrency: int,
    max_new_tokens: int,
    warmup: int,
    wall_s: float,
    temperature: float = 0.0,
) -> BenchResult:
    ok = [s for s in stats if s.error is None]
    completion = sum(s.completion_tokens or 0 for s in ok)
    # Σ/Σ over the requests that report spec_verify_ct (0.5.23 omits it when verify_ct is 0).
    spec = [s for s in ok if s.spec_verify_ct]
    accept = (
        sum(s.completion_tokens or 0 for s in spec) / sum(s.spec_verify_ct or 0 for s in spec)
        if spec
        else None
    )
    hists = [s.correct_drafts_histogram for s in spec]
    histogram = (
        sum_histograms([h for h in hists if h is not None])
        if spec and all(h is not None for h in hists)
        else None
    )
    per_req = [r for r in (s.output_tok_s for s in ok) if r is not None]
    lat = [s.latency_s for s in ok if s.latency_s is not None]
    server_lat = [s.server_e2e_latency for s in ok if s.server_e2e_latency is not None]
    errors = [s.error for s in stats if s.error is not None]
    return BenchResult(
        url=url,
        num_requests=len(stats),
        concurrency=concurrency,
        max_new_tokens=max_new_tokens,
        warmup=warmup,
        wall_s=wall_s,
        completion_tokens=completion,
        output_tok_s_aggregate=completion / wall_s if wall_s > 0 else 0.0,
        output_tok_s_per_request=per_req,
        output_tok_s_per_request_mean=_mean(per_req),
        accept_length=accept,
        accept_length_per_request=[s.accept_length for s in ok],
        correct_drafts_histogram=histogram,
        latency_p50=percentile(lat, 50),
        latency_p90=percentile(lat, 90),
        latency_p99=percentile(lat, 99),
        server_latency_p50=percentile(server_lat, 50),
        server_latency_p90=percentile(server_lat, 90),
        server_latency_p99=percentile(server_lat, 99),
        errors=len(errors),
        temperature=temperature,
        error_messages=list(dict.fromkeys(errors))[:_MAX_ERROR_MESSAGES],
        requests=stats,
    )


def _stat(index: int, answer: GenerateResult | EndpointError) -> RequestStat:
    if isinstance(answer, EndpointError):
        return RequestStat(index=index, error=str(answer))
    return RequestStat(
        index=index,
        completion_tokens=answer.completion_tokens,
        prompt_tokens=answer.prompt_tokens,
        spec_verify_ct=answer.spec_verify_ct,
        correct_drafts_histogram=answer.spec_correct_drafts_histogram,
        latency_s=answer.client_latency_s,
        server_e2e_latency=answer.e2e_latency,
    )


class BenchHow(TypedDict, total=False):
    """How a benchmark sends its requests (the keyword arguments of `bench_with_answers`)."""

    concurrency: int
    max_new_tokens: int
    warmup: int
    progress: Progress | None
    temperature: float


def run_bench(
    engine: EngineAdapter, prompts: Sequence[Prompt], **how: Unpack[BenchHow]
) -> BenchResult:
    """Send every prompt once to the engine's server at the given concurrency (after `warmup`
    unmeasured requests), at `temperature` (0: greedy). Accept length comes from each answer's
    statistics; where none carries them and the engine reads its server's counters (vLLM's
    /metrics), from those (acceptance_source "metrics-delta": server-wide).

    Raises EndpointError when a warm-up request fails or every measured request fails.
    """
    return bench_with_answers(engine, prompts, **how)[0]


def bench_with_answers(
    engine: EngineAdapter,
    prompts: Sequence[Prompt],
    **how: Unpack[BenchHow],
) -> tuple[BenchResult, list[GenerateResult | EndpointError]]:
    """`run_bench`, and each measured request's answer (or its error) in the order sent: a
    greedy benchmark's completions are what a serving capture would generate again."""
    served = engine.serve_requests(_requests(prompts, how, how.get("progress")))
    return _measured(engine.url, [served], how), served.answers


def _requests(prompts: Sequence[Prompt], how: BenchHow, progress: Progress | None) -> BenchRequests:
    """What the engine is sent for these prompts (`run_bench`'s settings checked), with a
    callback that counts the measured requests done."""
    full = _filled(how)
    concurrency, max_new_tokens = full["concurrency"], full["max_new_tokens"]
    warmup, temperature = full["warmup"], full["temperature"]
    if not prompts:
        raise ValueError("run_bench needs at least one prompt")
    if concurrency < 1 or max_new_tokens < 1 or warmup < 0:
        raise ValueError("concurrency and max_new_tokens must be >= 1, warmup >= 0")
    if not math.isfinite(temperature) or temperature < 0:
        raise ValueError(f"temperature must be a finite number >= 0, got {temperature}")
    total, done = len(prompts), 0

    def one_done() -> None:
        nonlocal done
        done += 1
        if progress is not None:
            progress(done, total)

    sent = [p.sent() for p in prompts]
    return BenchRequests(sent, concurrency, max_new_tokens, warmup, temperature, one_done)


def _measured(url: str, waves: Sequence[ServedRequests], how: BenchHow) -> BenchResult:
    """One benchmark from the waves of requests it was sent in (the warmup before the first):
    the requests numbered in the order sent, the waves' wall times added. Accept length comes
    from each answer's statistics; where none carries them and the engine reads its server's
    counters, from those (per wave, its rounds are its completion tokens over its accept length).

    Raises EndpointError when every measured request failed."""
    full = _filled(how)
    answers = [a for served in waves for a in served.answers]
    result = _summarize(
        url,
        [_stat(i, answer) for i, answer in enumerate(answers)],
        full["concurrency"],
        full["max_new_tokens"],
        full["warmup"],
        sum(served.wall_s for served in waves),
        full["temperature"],
    )
    if result.errors == result.num_requests:
        raise EndpointError(
            f"all {result.num_requests} benchmark requests failed; first error: "
            f"{result.error_messages[0]}",
            url=url,
            kind=EndpointError.SERVER_ERROR,
        )
    counters = [served.server_wide for served in waves]
    if result.accept_length is None and all(c is not None for c in counters):
        counted = [c() for c in counters if c is not None]
        tokens = [_completion_tokens(served) for served in waves]
        lengths = [c.accept_length for c in counted]
        rounds = sum(t / a for t, a in zip(tokens, lengths, strict=True) if a)
        known = rounds and all(lengths)
        result.accept_length = sum(tokens) / rounds if known else None
        hists = [c.histogram for c in counted]
        whole = [h for h in hists if h is not None]
        result.correct_drafts_histogram = (
            sum_histograms(whole) if len(whole) == len(hists) else None
        )
        result.acceptance_source = "metrics-delta"
    return result


def _completion_tokens(served: ServedRequests) -> int:
    """The tokens a wave's answered requests generated."""
    return sum(a.completion_tokens or 0 for a in served.answers if isinstance(a, GenerateResult))


BENCH_DEFAULTS = BenchHow(concurrency=4, max_new_tokens=128, warmup=2, temperature=0.0)


def _filled(how: BenchHow) -> dict:
    """A benchmark's settings, each one not given its BENCH_DEFAULTS value."""
    return {**BENCH_DEFAULTS, **how}


# A pair's progress: (the side a wave was sent to, requests done on both sides, requests in all).
PairProgress = Callable[[str, int, int], None]
ENDPOINT_SIDE, BASELINE_SIDE = "endpoint", "baseline"


def bench_pair(
    engine: EngineAdapter,
    baseline: EngineAdapter,
    prompts: Sequence[Prompt],
    *,
    wave: int,
    paired: PairProgress | None = None,
    **how: Unpack[BenchHow],
) -> tuple[BenchResult, list[GenerateResult | EndpointError], BenchResult]:
    """The endpoint and its baseline on the same prompts, in alternating waves of `wave` prompts
    (the endpoint's first): a machine or an accelerator shared with other work then loads both
    alike, so their ratio keeps to what the two servers do. Each side is one benchmark of all
    its waves (`_measured`), its warmup requests sent before its first wave only; returns (the
    endpoint's benchmark, its answers in the order sent, the baseline's benchmark)."""
    if wave < 1:
        raise ValueError("a wave holds at least one prompt")
    total, done = 2 * len(prompts), 0
    waves: dict[str, list[ServedRequests]] = {ENDPOINT_SIDE: [], BASELINE_SIDE: []}
    for start in range(0, len(prompts), wave):
        for side, adapter in ((ENDPOINT_SIDE, engine), (BASELINE_SIDE, baseline)):

            def one(_done: int, _total: int, side: str = side) -> None:
                nonlocal done
                done += 1
                if paired is not None:
                    paired(side, done, total)

            sent = BenchHow(**how)
            if start:
                sent["warmup"] = 0
            requests = _requests(prompts[start : start + wave], sent, one)
            waves[side].append(adapter.serve_requests(requests))
    measured = _measured(engine.url, waves[ENDPOINT_SIDE], how)
    answers = [a for served in waves[ENDPOINT_SIDE] for a in served.answers]
    return measured, answers, _measured(baseline.url, waves[BASELINE_SIDE], how)


def join_benches(first: BenchResult, then: BenchResult) -> BenchResult:
    """One benchmark from two waves of it sent one after the other: then's requests numbered
    after first's, the wall times added (per-request statistics; first's warmup and settings)."""
    stats = [
        *first.requests,
        *(dataclasses.replace(s, index=s.index + first.num_requests) for s in then.requests),
    ]
    return _summarize(
        first.url,
        stats,
        first.concurrency,
        first.max_new_tokens,
        first.warmup,
        first.wall_s + then.wall_s,
        first.temperature,
    )


def compare_to_baseline(spec_result: BenchResult, baseline_result: BenchResult) -> dict:
    """Speedup (aggregate tok/s ratio) of a speculative run over a baseline run, with context."""
    s, b = spec_result, baseline_result
    speedup = (
        s.output_tok_s_aggregate / b.output_tok_s_aggregate if b.output_tok_s_aggregate else None
    )
    spread = (
        None
        if speedup is None
        else ratio_noise(speedup, s.output_tok_s_per_request, b.output_tok_s_per_request)
    )
    p50 = b.latency_p50 / s.latency_p50 if s.latency_p50 and b.latency_p50 else None
    warnings = [
        f"{name} differs: {getattr(s, name)} vs baseline {getattr(b, name)}"
        for name in ("num_requests", "concurrency", "max_new_tokens", "temperature")
        if getattr(s, name) != getattr(b, name)
    ]
    if s.errors or b.errors:
        warnings.append(f"failed requests: {s.errors} speculative, {b.errors} baseline")
    return {
        "speedup": speedup,
        # ± noise.NOISE_SE standard errors, from both sides' per-request tok/s
        "speedup_noise": spread,
        "spec_output_tok_s": s.output_tok_s_aggregate,
        "baseline_output_tok_s": b.output_tok_s_aggregate,
        "latency_p50_speedup": p50,
        "spec_latency_p50": s.latency_p50,
        "baseline_latency_p50": b.latency_p50,
        "accept_length": s.accept_length,
        "baseline_accept_length": b.accept_length,
        "comparable": not warnings,
        "warnings": warnings,
    }
