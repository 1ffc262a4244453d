"""The serve benchmark against a small fake /generate server, and prompt loading."""

from __future__ import annotations

import dataclasses
import json
import threading
from pathlib import Path

import pytest

from eagle3dash.engines.seam import GenerateResult, ServedRequests, ServerWideAcceptance
from eagle3dash.engines.sglang.adapter import SGLangEngine
from eagle3dash.engines.sglang.client import EndpointError
from eagle3dash.servebench import (
    BUILTIN_PROMPT_SETS,
    PROMPT_CATEGORIES,
    PROMPTS_DIR,
    BenchHow,
    Prompt,
    PromptFileError,
    RequestStat,
    _measured,
    _summarize,
    bench_pair,
    compare_to_baseline,
    join_benches,
    load_prompts,
    percentile,
    run_bench,
    shares_at_least,
    sum_histograms,
)
from tests.httpserver import Reply, Request, closed_port_url, serve

WARMUP_VERIFY_CT = 1  # what the fake reports for warm-up requests: would skew Σ/Σ if counted

# What the fake answers for each prompt: (completion_tokens, spec_verify_ct). Σ = 110 / 44.
ANSWERS = {
    "p0": (16, 8),  # 2.0
    "p1": (16, 4),  # 4.0
    "p2": (12, 6),  # 2.0
    "p3": (16, 5),  # 3.2
    "p4": (8, 4),  # 2.0
    "p5": (16, 8),  # 2.0
    "p6": (10, 4),  # 2.5
    "p7": (16, 5),  # 3.2
}
# spec_correct_drafts_histogram of p0 and p1 (rounds by accepted drafts, grown to the largest k):
# sum = spec_verify_ct and sum(k * h[k]) = completion_tokens - 1 - spec_verify_ct.
HISTOGRAMS = {
    "p0": [3, 3, 2],  # 8 rounds, 3 + 4 = 7 = 16 - 1 - 8 drafts accepted
    "p1": [0, 0, 1, 3],  # 4 rounds, 2 + 9 = 11 = 16 - 1 - 4
}


class FakeGenerate:
    """Answers /generate with the fixed ANSWERS of each prompt (at most max_new_tokens=16).

    The first `warmup` requests report WARMUP_VERIFY_CT instead. Counts requests in flight to
    check the client's concurrency.
    """

    def __init__(
        self,
        warmup: int,
        delay: float = 0.02,
        spec: bool = True,
        fail: str = "",
        histograms: bool = False,
        temperature: float = 0.0,
    ) -> None:
        self.warmup = warmup
        self.temperature = temperature  # what every request must carry
        self.histograms = histograms  # send HISTOGRAMS (and [1] for warm-up requests)
        self.delay = delay
        self.spec = spec
        self.fail = fail
        self.lock = threading.Lock()
        self.seen = 0
        self.in_flight = 0
        self.max_in_flight = 0

    def __call__(self, req: Request) -> Reply:
        if req.path != "/generate":
            return Reply(404, "not found")
        payload = req.json()
        text = payload["text"]
        n = payload["sampling_params"]["max_new_tokens"]
        assert payload["sampling_params"] == {
            "max_new_tokens": n,
            "temperature": self.temperature,
            "ignore_eos": True,
        }
        with self.lock:
            warm = self.seen < self.warmup
            self.seen += 1
            self.in_flight += 1
            self.max_in_flight = max(self.max_in_flight, self.in_flight)
        try:
            threading.Event().wait(self.delay)
        finally:
            with self.lock:
                self.in_flight -= 1
        if text == self.fail:
            return Reply(500, {"error": {"message": "boom"}})
        completion, verify_ct = ANSWERS[text]
        assert completion <= n
        meta = {
            "prompt_tokens": 3,
            "completion_tokens": completion,
            "finish_reason": {"type": "length", "length": completion},
            "e2e_latency": self.delay,
        }
        if self.spec:
            meta["spec_verify_ct"] = WARMUP_VERIFY_CT if warm else verify_ct
        if self.spec and self.histograms:
            meta["spec_correct_drafts_histogram"] = [1] if warm else HISTOGRAMS[text]
        return Reply(
            body={"text": "y" * completion, "output_ids": [7] * completion, "meta_info": meta}
        )


PROMPTS = [Prompt(f"p{i}") for i in range(8)]


def test_bench_accept_length_concurrency_progress_warmup() -> None:
    fake = FakeGenerate(warmup=2, delay=0.05)
    calls: list[tuple[int, int]] = []
    with serve(fake) as s:
        result = run_bench(
            SGLangEngine(s.url),
            PROMPTS,
            concurrency=3,
            max_new_tokens=16,
            warmup=2,
            progress=lambda done, total: calls.append((done, total)),
        )
    assert fake.seen == 8 + 2  # warm-up was sent...
    assert result.num_requests == 8  # ...and not counted
    assert result.warmup == 2
    assert fake.max_in_flight == 3  # concurrency honoured, never exceeded
    assert calls == [(i, 8) for i in range(1, 9)]
    assert result.errors == 0 and result.error_messages == []
    assert result.completion_tokens == 110
    # Σ completion / Σ spec_verify_ct over measured requests only (not the mean of the
    # per-request ratios, 20.9 / 8 = 2.6125; not with the warm-up's 142 / 46).
    assert result.accept_length == 2.5  # 110 / 44
    assert [r.accept_length for r in result.requests] == [2.0, 4.0, 2.0, 3.2, 2.0, 2.0, 2.5, 3.2]
    assert [r.completion_tokens for r in result.requests] == [16, 16, 12, 16, 8, 16, 10, 16]
    assert [r.spec_verify_ct for r in result.requests] == [8, 4, 6, 5, 4, 8, 4, 5]
    # Timing is the client's own; 8 requests held 0.05 s each, 3 at a time, need 3 waves.
    assert result.wall_s >= 0.15
    assert result.output_tok_s_aggregate * result.wall_s == pytest.approx(110)
    assert all(r.latency_s >= 0.05 for r in result.requests)
    assert [r.output_tok_s * r.latency_s for r in result.requests] == pytest.approx(
        [16, 16, 12, 16, 8, 16, 10, 16]
    )
    assert len(result.output_tok_s_per_request) == 8
    assert 0.05 <= result.latency_p50 <= result.latency_p90 <= result.latency_p99
    assert result.server_latency_p50 == pytest.approx(0.05)
    assert [r.index for r in result.requests] == list(range(8))
    assert result.temperature == 0.0  # greedy unless asked
    json.dumps(result.to_dict())


def test_bench_sends_its_temperature_and_records_it() -> None:
    fake = FakeGenerate(warmup=1, temperature=0.7)  # asserts 0.7 in every request it gets
    with serve(fake) as s:
        result = run_bench(
            SGLangEngine(s.url),
            PROMPTS[:3],
            concurrency=2,
            max_new_tokens=16,
            warmup=1,
            temperature=0.7,
        )
    assert fake.seen == 4 and result.errors == 0  # warm-up included: the same temperature
    assert result.temperature == 0.7
    assert result.to_dict()["temperature"] == 0.7


def test_bench_without_speculation_has_no_accept_length() -> None:
    with serve(FakeGenerate(warmup=0, spec=False)) as s:
        result = run_bench(
            SGLangEngine(s.url), PROMPTS[:4], concurrency=2, max_new_tokens=16, warmup=0
        )
    assert result.accept_length is None
    assert result.accept_length_per_request == [None] * 4
    assert result.correct_drafts_histogram is None and result.per_position is None
    assert result.completion_tokens == 16 + 16 + 12 + 16


def test_bench_sums_the_histograms_into_acceptance_per_position() -> None:
    with serve(FakeGenerate(warmup=1, histograms=True)) as s:
        result = run_bench(
            SGLangEngine(s.url), PROMPTS[:2], concurrency=2, max_new_tokens=16, warmup=1
        )
    assert [r.correct_drafts_histogram for r in result.requests] == [[3, 3, 2], [0, 0, 1, 3]]
    # [3, 3, 2] + [0, 0, 1, 3], the warm-up's [1] left out; 12 rounds: >= 1 draft accepted in
    # 9, >= 2 in 6, >= 3 in 3
    assert result.correct_drafts_histogram == [3, 3, 3, 3]
    assert result.per_position == [0.75, 0.5, 0.25]
    d = result.to_dict()
    assert d["per_position"] == [0.75, 0.5, 0.25]
    assert d["correct_drafts_histogram"] == [3, 3, 3, 3]
    json.dumps(d)


def test_a_server_without_the_histogram_has_no_per_position() -> None:
    """A server that predates spec_correct_drafts_histogram: None, not zeros."""
    with serve(FakeGenerate(warmup=0)) as s:
        result = run_bench(
            SGLangEngine(s.url), PROMPTS[:2], concurrency=2, max_new_tokens=16, warmup=0
        )
    assert result.accept_length == 32 / 12  # speculation is measured...
    assert result.correct_drafts_histogram is None  # ...per position it is not
    assert result.per_position is None and result.to_dict()["per_position"] is None


def test_summed_histograms_by_hand() -> None:
    assert sum_histograms([[3, 1, 2], [0, 4]]) == [3, 5, 2]
    assert shares_at_least([3, 5, 2]) == [7 / 10, 2 / 10]
    assert shares_at_least([4]) == []  # no round accepted a draft: no position reached
    assert shares_at_least([]) == []
    assert sum_histograms([]) == []
    stats = [
        # 6 rounds, 1 + 4 = 5 drafts: 1 + 6 + 5 tokens; 4 rounds, 4 drafts: 1 + 4 + 4
        RequestStat(0, completion_tokens=12, spec_verify_ct=6, correct_drafts_histogram=[3, 1, 2]),
        RequestStat(1, completion_tokens=9, spec_verify_ct=4, correct_drafts_histogram=[0, 4]),
        RequestStat(2, completion_tokens=7),  # no verify round: no spec fields, not counted
        RequestStat(3, error="HTTP 500: boom"),
    ]
    r = _summarize("http://x", stats, concurrency=1, max_new_tokens=16, warmup=0, wall_s=1.0)
    assert r.correct_drafts_histogram == [3, 5, 2]
    assert r.per_position == [0.7, 0.2]
    # one speculative request without the field: the sum would undercount, so there is none
    stats[1] = RequestStat(1, completion_tokens=9, spec_verify_ct=4)
    r = _summarize("http://x", stats, concurrency=1, max_new_tokens=16, warmup=0, wall_s=1.0)
    assert r.correct_drafts_histogram is None and r.per_position is None


def test_bench_counts_failed_requests() -> None:
    with serve(FakeGenerate(warmup=1, fail="p4")) as s:
        result = run_bench(SGLangEngine(s.url), PROMPTS, concurrency=4, max_new_tokens=16, warmup=1)
    assert result.num_requests == 8 and result.errors == 1
    assert "HTTP 500" in result.error_messages[0] and "boom" not in result.error_messages[0]
    assert result.completion_tokens == 110 - 8
    assert result.accept_length == pytest.approx(102 / 40)  # p4's (8, 4) left out: 2.55


def test_bench_all_failed_is_one_error() -> None:
    with serve(FakeGenerate(warmup=0, fail="p0")) as s, pytest.raises(EndpointError) as info:
        run_bench(SGLangEngine(s.url), PROMPTS[:1], warmup=0)
    assert "all 1 benchmark requests failed" in str(info.value)


def test_bench_server_down_fails_fast() -> None:
    url = closed_port_url()
    with pytest.raises(EndpointError) as info:
        run_bench(SGLangEngine(url, retries=1), PROMPTS, warmup=2)
    assert info.value.kind == EndpointError.DOWN
    assert "is the server running?" in str(info.value)


def test_bench_rejects_bad_settings() -> None:
    with pytest.raises(ValueError):
        run_bench(SGLangEngine("http://127.0.0.1:1"), [], warmup=0)
    with pytest.raises(ValueError):
        run_bench(SGLangEngine("http://127.0.0.1:1"), PROMPTS, concurrency=0)
    with pytest.raises(ValueError, match="temperature must be a finite number >= 0, got -0.5"):
        run_bench(SGLangEngine("http://127.0.0.1:1"), PROMPTS, temperature=-0.5)


def test_summarize_aggregates_by_hand() -> None:
    """The aggregates of fixed request rows: client latencies and wall time chosen by hand."""
    stats = [
        RequestStat(
            0, completion_tokens=16, spec_verify_ct=8, latency_s=0.5, server_e2e_latency=0.4
        ),
        RequestStat(
            1, completion_tokens=12, spec_verify_ct=4, latency_s=0.25, server_e2e_latency=0.2
        ),
        # 0.5.23 leaves spec_verify_ct out when it is 0: not in the accept length
        RequestStat(2, completion_tokens=10, latency_s=1.0, server_e2e_latency=0.9),
        RequestStat(3, error="HTTP 500: boom"),
        RequestStat(
            4, completion_tokens=20, spec_verify_ct=4, latency_s=0.4, server_e2e_latency=0.3
        ),
        RequestStat(5, error="HTTP 500: boom"),
    ]
    r = _summarize("http://x", stats, concurrency=2, max_new_tokens=32, warmup=0, wall_s=2.0)
    assert (r.num_requests, r.errors, r.error_messages) == (6, 2, ["HTTP 500: boom"])
    assert r.completion_tokens == 58  # 16 + 12 + 10 + 20
    assert r.output_tok_s_aggregate == pytest.approx(29.0)  # 58 tokens / 2 s
    assert r.output_tok_s_per_request == pytest.approx([32.0, 48.0, 10.0, 50.0])
    assert r.output_tok_s_per_request_mean == pytest.approx(35.0)
    assert r.accept_length == pytest.approx(3.0)  # (16 + 12 + 20) / (8 + 4 + 4)
    assert r.accept_length_per_request == [2.0, 3.0, None, 5.0]
    # client latencies sorted 0.25 0.4 0.5 1.0; server 0.2 0.3 0.4 0.9
    assert [r.latency_p50, r.latency_p90, r.latency_p99] == pytest.approx([0.45, 0.85, 0.985])
    assert [r.server_latency_p50, r.server_latency_p90, r.server_latency_p99] == pytest.approx(
        [0.35, 0.75, 0.885]
    )


def test_two_waves_join_into_one_benchmark() -> None:
    """The second wave's requests follow the first's, the wall times add up."""
    first = _summarize(
        "http://x",
        [RequestStat(0, completion_tokens=16, spec_verify_ct=8, latency_s=0.5)],
        concurrency=1,
        max_new_tokens=16,
        warmup=1,
        wall_s=0.5,
        temperature=0.7,
    )
    then = _summarize(
        "http://x",
        [
            RequestStat(0, completion_tokens=16, spec_verify_ct=4, latency_s=0.25),
            RequestStat(1, error="HTTP 500: boom"),
        ],
        concurrency=1,
        max_new_tokens=16,
        warmup=0,
        wall_s=1.5,
        temperature=0.7,
    )
    joined = join_benches(first, then)
    assert [r.index for r in joined.requests] == [0, 1, 2]
    assert (joined.num_requests, joined.errors, joined.warmup) == (3, 1, 1)
    assert joined.accept_length == pytest.approx(32 / 12)
    assert joined.accept_length_per_request == [2.0, 4.0]
    assert joined.output_tok_s_aggregate == pytest.approx(16.0)  # 32 tokens / 2 s
    assert joined.temperature == 0.7


def test_the_endpoint_and_its_baseline_alternate_in_waves() -> None:
    """Each side's warmup before its first wave, then waves of 3 prompts in turn (the endpoint's
    first), each side one benchmark of its waves: a load on the machine meets both alike."""
    arrivals: list[tuple[str, str]] = []

    def logged(name: str, fake: FakeGenerate):
        def app(req: Request) -> Reply:
            arrivals.append((name, req.json()["text"]))
            return fake(req)

        return app

    calls: list[tuple[str, int, int]] = []
    endpoint, plain = (
        FakeGenerate(warmup=1, delay=0.0),
        FakeGenerate(warmup=1, delay=0.0, spec=False),
    )
    with serve(logged("endpoint", endpoint)) as e, serve(logged("baseline", plain)) as b:
        measured, answers, baseline = bench_pair(
            SGLangEngine(e.url),
            SGLangEngine(b.url),
            PROMPTS[:7],
            wave=3,
            paired=lambda side, done, total: calls.append((side, done, total)),
            concurrency=1,
            max_new_tokens=16,
            warmup=1,
        )
    waves = [
        ("endpoint", ["p0", "p0", "p1", "p2"]),  # a warmup request, then the first wave
        ("baseline", ["p0", "p0", "p1", "p2"]),
        ("endpoint", ["p3", "p4", "p5"]),
        ("baseline", ["p3", "p4", "p5"]),
        ("endpoint", ["p6"]),
        ("baseline", ["p6"]),
    ]
    assert arrivals == [(side, text) for side, texts in waves for text in texts]
    assert [r.index for r in measured.requests] == list(range(7))
    assert measured.num_requests == baseline.num_requests == 7 and measured.warmup == 1
    assert measured.accept_length == pytest.approx(94 / 39)  # p0..p6: Σ completion / Σ verify
    assert baseline.accept_length is None and baseline.completion_tokens == 94
    assert [len(a.output_ids) for a in answers] == [16, 16, 12, 16, 8, 16, 10]
    assert calls[-1] == ("baseline", 14, 14) and [c[1] for c in calls] == list(range(1, 15))
    assert [c[0] for c in calls][:6] == ["endpoint"] * 3 + ["baseline"] * 3


def answer(tokens: int) -> GenerateResult:
    """An answer without per-request speculative statistics (vLLM with them off)."""
    return GenerateResult(
        [7] * tokens, "", 3, tokens, None, None, None, "length", None, None, None, None, {}, 0.5
    )


def test_waves_read_from_server_counters_join_by_their_rounds() -> None:
    """Two waves whose acceptance only the server's counters tell: 20 tokens at 2.0 (10 rounds)
    and 30 at 3.0 (10 rounds) are 50 tokens in 20 rounds, 2.5; their histograms add up."""
    waves = [
        ServedRequests([answer(20)], 1.0, lambda: ServerWideAcceptance(2.0, [1, 2])),
        ServedRequests([answer(30)], 1.0, lambda: ServerWideAcceptance(3.0, [3])),
    ]
    result = _measured("http://x", waves, BenchHow(concurrency=1, warmup=0))
    assert result.accept_length == pytest.approx(2.5)
    assert result.correct_drafts_histogram == [4, 2]
    assert result.acceptance_source == "metrics-delta"
    assert result.output_tok_s_aggregate == pytest.approx(25.0)  # 50 tokens in 2 s


def test_percentile_interpolates_like_numpy() -> None:
    xs = [float(x) for x in range(1, 11)]
    assert percentile(xs, 50) == pytest.approx(5.5)
    assert percentile(xs, 90) == pytest.approx(9.1)
    assert percentile(xs, 99) == pytest.approx(9.91)
    assert percentile([3.0], 99) == 3.0
    assert percentile([], 50) is None


def test_compare_to_baseline() -> None:
    with serve(FakeGenerate(warmup=0)) as s:
        spec = run_bench(
            SGLangEngine(s.url), PROMPTS[:2], concurrency=2, max_new_tokens=16, warmup=0
        )
    spec = dataclasses.replace(spec, output_tok_s_aggregate=300.0, latency_p50=1.0)
    base = dataclasses.replace(
        spec, output_tok_s_aggregate=120.0, latency_p50=2.5, accept_length=None
    )
    cmp = compare_to_baseline(spec, base)
    assert cmp["speedup"] == pytest.approx(2.5)
    assert cmp["latency_p50_speedup"] == pytest.approx(2.5)
    assert cmp["comparable"] is True and cmp["warnings"] == []
    other = compare_to_baseline(spec, dataclasses.replace(base, max_new_tokens=64))
    assert other["comparable"] is False
    assert "max_new_tokens differs" in other["warnings"][0]
    hot = compare_to_baseline(spec, dataclasses.replace(base, temperature=0.7))
    assert hot["comparable"] is False
    assert hot["warnings"] == ["temperature differs: 0.0 vs baseline 0.7"]
    assert (
        compare_to_baseline(spec, dataclasses.replace(base, output_tok_s_aggregate=0.0))["speedup"]
        is None
    )


# --- prompts --------------------------------------------------------------------------------------


def test_jsonl_every_form(tmp_path: Path) -> None:
    path = tmp_path / "mine.jsonl"
    lines = [
        json.dumps({"prompt": "Tell me a joke."}),
        "",
        json.dumps(
            {
                "messages": [
                    {"role": "system", "content": "Be brief."},
                    {"role": "user", "content": "Hi!"},
                ]
            }
        ),
        json.dumps({"input_ids": [1, 17, 42]}),
    ]
    path.write_text("\n".join(lines) + "\n")
    first, second, third = load_prompts(path)
    assert first == Prompt("Tell me a joke.")
    assert first.sent() == "Tell me a joke."
    assert third.sent() == [1, 17, 42]
    assert second.text == "system: Be brief.\nuser: Hi!\nassistant:"
    assert second.messages == (("system", "Be brief."), ("user", "Hi!"))


@pytest.mark.parametrize(
    ("line", "needle"),
    [
        ('{"prompt": "unterminated', "not valid JSON"),
        ('["a list"]', "expected"),
        ('{"text": "wrong key"}', "expected"),
        ('{"prompt": ""}', "non-empty string"),
        ('{"messages": []}', "non-empty list"),
        ('{"messages": [{"role": "user"}]}', "messages[0]"),
        ('{"input_ids": [1, -2]}', "list of token ids"),
    ],
)
def test_jsonl_malformed_line_names_file_and_line(tmp_path: Path, line: str, needle: str) -> None:
    path = tmp_path / "bad.jsonl"
    path.write_text('{"prompt": "ok"}\n\n' + line + "\n")
    with pytest.raises(ValueError) as info:
        load_prompts(path)
    assert isinstance(info.value, PromptFileError)
    assert f"{path}, line 3" in str(info.value)
    assert needle in str(info.value)


def test_missing_or_empty_prompt_file(tmp_path: Path) -> None:
    with pytest.raises(PromptFileError, match="not a built-in set"):
        load_prompts(tmp_path / "nope.jsonl")
    empty = tmp_path / "empty.jsonl"
    empty.write_text("\n\n")
    with pytest.raises(PromptFileError, match="no prompts"):
        load_prompts(empty)


def test_a_deeply_nested_prompt_line_is_one_message() -> None:
    from eagle3dash.servebench import PromptFileError, parse_prompt_lines

    with pytest.raises(PromptFileError, match="prompts.jsonl, line 2: nested too deeply"):
        parse_prompt_lines(['{"prompt": "hi"}', "[" * 100_000 + "]" * 100_000], "prompts.jsonl")


# --- prompt categories ------------------------------------------------------------------------


@pytest.mark.parametrize("name", PROMPT_CATEGORIES)
def test_every_builtin_set_is_its_category(name: str) -> None:
    prompts = load_prompts(name)
    assert 12 <= len(prompts) <= 20
    assert {p.category for p in prompts} == {name}
    assert all(p.text.strip() for p in prompts)
    assert len({p.text for p in prompts}) == len(prompts)


def test_the_builtin_sets() -> None:
    assert BUILTIN_PROMPT_SETS == (
        "chat",
        "code",
        "math",
        "reasoning",
        "summarisation",
        "translation",
        "json",
        "long-context",
        "all",
    )
    long = load_prompts("long-context")
    assert min(len(p.text) for p in long) >= 2000  # a few thousand characters each
    assert (PROMPTS_DIR / "long-context.jsonl").stat().st_size < 150_000


def test_all_interleaves_the_categories() -> None:
    everything = load_prompts("all")
    assert [p.category for p in everything[:9]] == [
        "chat",
        "code",
        "math",
        "reasoning",
        "summarisation",
        "translation",
        "json",
        "chat",
        "code",
    ]
    chat, code = load_prompts("chat"), load_prompts("code")
    assert everything[0] == chat[0] and everything[1] == code[0] and everything[7] == chat[1]
    # every prompt of every set but long-context once, shorter sets simply running out
    sets = {name: load_prompts(name) for name in PROMPT_CATEGORIES if name != "long-context"}
    assert sorted(p.text for p in everything) == sorted(p.text for s in sets.values() for p in s)


def test_a_prompt_file_carries_categories(tmp_path: Path) -> None:
    path = tmp_path / "mine.jsonl"
    lines = [
        {"prompt": "Copy this: abc abc", "category": "copy-heavy"},
        {"messages": [{"role": "user", "content": "Hi!"}], "category": "chat"},
        {"input_ids": [5, 6], "category": "novel"},
        {"prompt": "No category"},
    ]
    path.write_text("\n".join(json.dumps(line) for line in lines) + "\n")
    prompts = load_prompts(path)
    assert [p.category for p in prompts] == ["copy-heavy", "chat", "novel", None]
    assert prompts[1].text == "user: Hi!\nassistant:" and prompts[2].input_ids == (5, 6)
    assert prompts[0].sent() == "Copy this: abc abc"  # the category is not sent


@pytest.mark.parametrize(
    ("value", "shown"), [("3", "3"), ('""', '""'), ('"  "', '"  "'), ('["a"]', '["a"]')]
)
def test_a_category_that_is_not_a_name(tmp_path: Path, value: str, shown: str) -> None:
    path = tmp_path / "bad.jsonl"
    path.write_text('{"prompt": "ok"}\n\n{"prompt": "x", "category": ' + value + "}\n")
    with pytest.raises(PromptFileError) as info:
        load_prompts(path)
    assert str(info.value) == (
        f'{path}, line 3: "category" must be a non-empty string (the category this prompt '
        f"counts in), got {shown}"
    )
