"""The acceptance profile: acceptance per draft position, per prompt category, per prompt format and
per temperature, and which --speculative-num-steps to run.

One number (the accept length) hides the causes users of EAGLE-3 drafts keep hitting: a domain the
draft was not trained on, a chat template it was not trained with, sampling, a flag budget. The
profile splits the measurements a diagnosis already made (its one capture per prompt, its benchmark
requests) by category, and adds a few requests per prompt format and temperature: the same prompts
in each setting, sent in waves (`wave_end`) until no row's noise, beside the benchmark's on the
same prompts, could hide a material gap (`rows_settled`), so that prompts beyond what the
statistics need are not sent. Each such row is then compared with the benchmark on those prompts.

The steps advice (`steps_advice`) predicts the accept length and tok/s of chain drafting (topk 1,
draft tokens = steps + 1) at --speculative-num-steps 1..MAX_ADVICE_STEPS:

- accept length E(s) per round: up to the server's steps S, from the server's own histogram
  (1 + the shares of rounds that accepted at least k drafts, k <= s: "measured"); past S, the
  standalone draft's simulated accept length, its excess over 1 scaled so that it agrees with the
  measurement at S ("simulated"); reported as SGLang counts it, n / rounds with the prefill's
  token, E(s) * n / (n - 1);
- time: a request of n tokens costs `request_fixed_s` (its prefill and overhead: the latency of
  one-token requests) plus (n - 1) / E(s) rounds of `verify_s + s * draft_step_s`. The round cost at
  S is measured (latency minus the fixed cost, over the request's verify rounds); `verify_s` is the
  baseline's time per token (one target forward); the rest of the round is S draft steps. Without
  a baseline nothing in the run tells a verify forward from a draft step, so the advice gives
  accept lengths only;
- tok/s: the measured tok/s at S scaled by the time at S over the time at s, so the prediction at S
  is the measurement.

It stops holding where a round's cost is not one verify forward plus s draft steps: batching
(large concurrency makes the verify forward compute-bound, so extra draft tokens cost more), tree
drafting (topk > 1), adaptive speculation (the server changes its steps), and a baseline served
on other hardware or settings than the speculative server.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

from eagle3dash.noise import (
    MATERIAL_GAIN,
    hides_material_gap,
    noise,
    ratio_noise,
    relative_noise,
)
from eagle3dash.servebench import shares_at_least

if TYPE_CHECKING:
    from eagle3dash.metrics import DraftEval
    from eagle3dash.servebench import BenchResult

MAX_ADVICE_STEPS = 8  # --speculative-num-steps 1..8 are predicted
MIN_ROW_PROMPTS = 4  # the fewest prompts a temperature or prompt-format row is measured on
DEFAULT_TEMPERATURES = (0.0, 0.7)

MEASURED = "measured"  # from the server's spec_correct_drafts_histogram
SIMULATED = "simulated"  # from the standalone draft's evaluation
FROM_BASELINE = "baseline"  # verify cost: the baseline's time per token


@dataclass
class PerPosition:
    """Acceptance per draft position k = 1..S: the share of verify rounds whose first k drafts
    were accepted, replayed (simulated) or counted by the server (measured)."""

    positions: list[int]
    simulated_training: list[float] | None = None
    simulated_serving: list[float] | None = None
    measured: list[float] | None = None


@dataclass
class CategoryRow:
    """One prompt category's accept lengths and speed."""

    category: str
    prompts: int
    measured_accept_length: float | None = None
    sim_accept_training: float | None = None
    sim_accept_serving: float | None = None
    tok_s: float | None = None  # completion tokens over the requests' summed latencies
    baseline_tok_s: float | None = None
    speedup: float | None = None
    speedup_noise: float | None = None  # ± NOISE_SE standard errors of both sides' requests


@dataclass
class FormatRow:
    """The same prompts in one prompt format (raw, through the chat template, ...)."""

    format: str
    prompts: int
    measured_accept_length: float | None = None
    sim_accept_serving: float | None = None
    tok_s: float | None = None  # aggregate output tok/s (tok_s_on_first)
    accept_length_noise: float | None = None  # ± noise.NOISE_SE standard errors over requests


@dataclass
class TemperatureRow:
    """The same prompts sampled at one temperature."""

    temperature: float
    measured_accept_length: float | None = None
    tok_s: float | None = None  # aggregate output tok/s (tok_s_on_first)
    accept_length_noise: float | None = None  # ± noise.NOISE_SE standard errors over requests
    prompts: int | None = None  # None: stored before rows could stop early (every prompt)


@dataclass
class StepsRow:
    """The predicted accept length and tok/s at one --speculative-num-steps."""

    num_steps: int
    predicted_accept_length: float
    predicted_tok_s: float | None
    source: str  # MEASURED or SIMULATED: where the accept length comes from
    # ± the measured per-request tok/s noise, scaled to the prediction (None: not known)
    tok_s_noise: float | None = None


@dataclass
class StepCosts:
    """What one request and one round cost, from the run's own timings (seconds)."""

    verify_s: float
    draft_step_s: float
    request_fixed_s: float
    source: str  # FROM_BASELINE: where verify_s comes from


@dataclass
class Recommendation:
    """The setting to run and the flags that run it: the fastest predicted one when its gain
    stands above the noise (`changes`), else the served one."""

    num_steps: int
    predicted_accept_length: float
    predicted_tok_s: float | None
    current_num_steps: int
    current_tok_s: float | None
    flags: str
    fastest_num_steps: int | None = None  # the fastest predicted setting, changed to or not
    gain: float | None = None  # the fastest setting's predicted tok/s over the served one's - 1
    gain_low: float | None = None  # the gain's interval: ± the per-request tok/s noise
    gain_high: float | None = None
    changes: bool = False  # the gain is at least MATERIAL_GAIN and its lower bound above 0


@dataclass(frozen=True)
class NotProfiled:
    """A part of the profile that could not be measured, and what enables it."""

    part: str  # "per_category", "prompt_format", "temperature", "steps_advice"
    reason: str
    option: str | None = None  # the DiagnoseOptions field that enables it
    action: str | None = None
    error: str | None = None  # the error that stopped it, shown with it


@dataclass
class Profile:
    """The acceptance profile of one diagnosis (`Diagnosis.to_dict()["profile"]`)."""

    steps: int
    per_position: PerPosition
    per_category: list[CategoryRow] = field(default_factory=list)
    prompt_format: list[FormatRow] = field(default_factory=list)
    temperature: list[TemperatureRow] = field(default_factory=list)
    steps_advice: list[StepsRow] = field(default_factory=list)
    recommended: Recommendation | None = None
    step_costs: StepCosts | None = None
    not_profiled: list[NotProfiled] = field(default_factory=list)

    def to_dict(self) -> dict:
        """The JSON form (documented in eagle3dash/profile_export.py)."""
        return asdict(self)

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Profile:
        """Inverse of to_dict."""

        def some(kind: Any, value: Any) -> Any:
            return None if value is None else kind(**value)

        return cls(
            steps=int(d["steps"]),
            per_position=PerPosition(**d["per_position"]),
            per_category=[CategoryRow(**r) for r in d.get("per_category") or []],
            prompt_format=[FormatRow(**r) for r in d.get("prompt_format") or []],
            temperature=[TemperatureRow(**r) for r in d.get("temperature") or []],
            steps_advice=[StepsRow(**r) for r in d.get("steps_advice") or []],
            recommended=some(Recommendation, d.get("recommended")),
            step_costs=some(StepCosts, d.get("step_costs")),
            not_profiled=[NotProfiled(**r) for r in d.get("not_profiled") or []],
        )


def parse_temperatures(text: str) -> tuple[float, ...]:
    """'0,0.7' -> (0.0, 0.7): sorted, distinct, each in [0, 2]; ValueError names the bad entry."""
    values = set()
    for part in text.split(","):
        part = part.strip()
        if not part:
            continue
        try:
            value = float(part)
        except ValueError:
            raise ValueError(f"{part!r} is not a number") from None
        if not 0.0 <= value <= 2.0:
            raise ValueError(f"temperature {part} is outside 0..2")
        values.add(value)
    if not values:
        raise ValueError("give at least one temperature, e.g. 0,0.7")
    return tuple(sorted(values))


# --- from measurements -----------------------------------------------------------------------


def padded_shares(measured: BenchResult | None, steps: int) -> list[float] | None:
    """The measured per-position shares for k = 1..steps: SGLang's histogram stops at the
    largest k any round accepted, and no round accepted more (share 0)."""
    shares = None if measured is None else measured.per_position
    if shares is None:
        return None
    return [shares[k] if k < len(shares) else 0.0 for k in range(steps)]


def per_position(
    steps: int,
    training: DraftEval | None,
    serving: DraftEval | None,
    measured: BenchResult | None,
) -> PerPosition:
    """Acceptance per draft position 1..steps, on each side and on the server, all per round: the
    sides' serving rounds replayed as the server's are (else, without the per-row chains, per
    position: every position a chain starts at)."""

    def cut(e: DraftEval | None) -> list[float] | None:
        if e is None:
            return None
        histogram = e.served_histogram_at(min(steps, e.steps))
        if histogram is None or not sum(histogram):
            return list(e.acceptance[:steps])
        shares = shares_at_least(histogram)
        return [shares[k] if k < len(shares) else 0.0 for k in range(steps)]

    return PerPosition(
        positions=list(range(1, steps + 1)),
        simulated_training=cut(training),
        simulated_serving=cut(serving),
        measured=padded_shares(measured, steps),
    )


def request_accept_lengths(bench: BenchResult, n: int | None = None) -> list[float]:
    """The accept length of each answered request (of the first n prompts), where it has one."""
    return [
        v
        for r in bench.requests
        if r.error is None and (n is None or r.index < n) and (v := r.accept_length) is not None
    ]


def accept_length_noise(bench: BenchResult | None, n: int | None = None) -> float | None:
    """± noise.NOISE_SE standard errors of a benchmark's per-request accept lengths (of the
    first n prompts); None without a benchmark or with fewer than two requests."""
    if bench is None:
        return None
    values = request_accept_lengths(bench, n)
    return noise(values) if len(values) >= 2 else None


def accept_length_on_first(bench: BenchResult, n: int) -> float | None:
    """A benchmark's accept length on its first n prompts (all of them: its own, which on vLLM
    comes from the server's counters)."""
    if n >= bench.num_requests:
        return bench.accept_length
    return requests_accept_length(bench, set(range(n)))


def tok_s_on_first(bench: BenchResult | None, n: int) -> float | None:
    """A benchmark's aggregate output tok/s on its first n prompts: its own over all of them;
    else their completion tokens over their summed latencies, times the requests it kept in
    flight (exact at concurrency 1; beyond, its requests of equal length were sent in order,
    `concurrency` at a time)."""
    if bench is None:
        return None
    if n >= bench.num_requests:
        return bench.output_tok_s_aggregate
    per_request = requests_tok_s(bench, set(range(n)))
    return None if per_request is None else per_request * min(bench.concurrency, n)


def wave_end(sent: int, total: int, concurrency: int) -> int:
    """How many prompts the profile's rows have been sent after their next wave: at least
    MIN_ROW_PROMPTS and a full batch of the run's concurrency first, then twice as many as
    before; at most `total`."""
    return min(total, max(MIN_ROW_PROMPTS, concurrency, 2 * sent))


def rows_settled(rows: Sequence[BenchResult], reference: BenchResult, n: int) -> bool:
    """Whether each row and the reference benchmark, on the same first n prompts, are measured
    closely enough that no material gap between them could hide in their noise."""
    ref = request_accept_lengths(reference, n)
    return not any(hides_material_gap(request_accept_lengths(r, n), ref) for r in rows)


def _ratio(tokens: float, verify_rounds: float) -> float | None:
    return tokens / verify_rounds if verify_rounds else None


def requests_accept_length(bench: BenchResult, indices: set[int] | None = None) -> float | None:
    """Σ completion tokens / Σ spec_verify_ct over the requests (of these prompt indices)."""
    picked = [
        r
        for r in bench.requests
        if r.error is None and r.spec_verify_ct and (indices is None or r.index in indices)
    ]
    return _ratio(
        sum(r.completion_tokens or 0 for r in picked), sum(r.spec_verify_ct or 0 for r in picked)
    )


def requests_tok_s(bench: BenchResult | None, indices: set[int]) -> float | None:
    """Completion tokens over the summed latencies of the requests of these prompt indices."""
    if bench is None:
        return None
    picked = [r for r in bench.requests if r.error is None and r.index in indices]
    seconds = sum(r.latency_s or 0.0 for r in picked)
    return _ratio(sum(r.completion_tokens or 0 for r in picked), seconds)


def _per_request_tok_s(bench: BenchResult | None, indices: set[int]) -> list[float]:
    """The tok/s of each answered request of these prompt indices."""
    picked = [] if bench is None else [r for r in bench.requests if r.index in indices]
    return [t for t in (r.output_tok_s for r in picked if r.error is None) if t is not None]


def category_rows(
    categories: Sequence[str | None],
    steps: int,
    measured: BenchResult | None,
    baseline: BenchResult | None = None,
    training: DraftEval | None = None,
    serving: DraftEval | None = None,
) -> list[CategoryRow]:
    """One row per category, in first-seen order: `categories[i]` is prompt i's (None: none).

    The simulated accept lengths replay the rounds of that category's sequences only, so an
    evaluation's sequences must be the prompts in order (a training dump's are not: pass None).
    """
    order: dict[str, set[int]] = {}
    for i, category in enumerate(categories):
        order.setdefault(category or "uncategorised", set()).add(i)
    rows = []
    for category, indices in order.items():
        tok_s = requests_tok_s(measured, indices)
        base = requests_tok_s(baseline, indices)
        speedup = None if tok_s is None or not base else tok_s / base
        rows.append(
            CategoryRow(
                category=category,
                prompts=len(indices),
                measured_accept_length=None
                if measured is None
                else requests_accept_length(measured, indices),
                sim_accept_training=None
                if training is None
                else training.simulated_accept_length_over(indices, steps),
                sim_accept_serving=None
                if serving is None
                else serving.simulated_accept_length_over(indices, steps),
                tok_s=tok_s,
                baseline_tok_s=base,
                speedup=speedup,
                speedup_noise=None
                if speedup is None
                else ratio_noise(
                    speedup,
                    _per_request_tok_s(measured, indices),
                    _per_request_tok_s(baseline, indices),
                ),
            )
        )
    return rows


# --- the steps advice ------------------------------------------------------------------------


def step_costs(
    measured: BenchResult,
    one_token_latencies: Sequence[float],
    steps: int,
    baseline: BenchResult | None,
) -> StepCosts | None:
    """The fixed cost of a request, one verify forward and one draft step, from the run's own
    timings (the module docstring); None when they do not tell (no baseline, no timings)."""
    if baseline is None or not one_token_latencies:
        return None
    fixed = statistics.median(one_token_latencies)
    rounds = [
        (r.latency_s - fixed) / r.spec_verify_ct
        for r in measured.requests
        if r.error is None and r.latency_s and r.spec_verify_ct
    ]
    per_token = [
        (r.latency_s - fixed) / (r.completion_tokens - 1)
        for r in baseline.requests
        if r.error is None and r.latency_s and r.completion_tokens and r.completion_tokens > 1
    ]
    if not rounds or not per_token:
        return None
    round_s = max(statistics.median(rounds), 0.0)
    verify = min(max(statistics.median(per_token), 0.0), round_s)
    return StepCosts(
        verify_s=verify,
        draft_step_s=(round_s - verify) / steps,
        request_fixed_s=fixed,
        source=FROM_BASELINE,
    )


def accept_lengths_by_steps(
    steps: int,
    measured: BenchResult | None,
    serving: DraftEval | None,
    max_steps: int = MAX_ADVICE_STEPS,
) -> list[tuple[int, float, str]]:
    """(num_steps, accept length, source) for 1..max_steps where the evidence reaches.

    Measured from the histogram up to the server's steps; past them (or without a histogram) the
    simulation, its excess over 1 scaled to the measured accept length at the server's steps.
    """
    shares = padded_shares(measured, steps)
    anchor: float | None = None
    if shares is not None:
        anchor = 1.0 + sum(shares)
    elif measured is not None and measured.accept_length is not None:
        anchor = measured.accept_length
    sim_at = None
    if serving is not None:
        sim_at = {s: serving.simulated_accept_length(s) for s in range(1, serving.steps + 1)}
    scale = 1.0
    if anchor is not None and sim_at and steps in sim_at and sim_at[steps] > 1.0:
        scale = (anchor - 1.0) / (sim_at[steps] - 1.0)
    rows = []
    for s in range(1, max_steps + 1):
        if shares is not None and s <= steps:
            rows.append((s, 1.0 + sum(shares[:s]), MEASURED))
        elif sim_at and s in sim_at:
            rows.append((s, 1.0 + (sim_at[s] - 1.0) * scale, SIMULATED))
    return rows


def request_seconds(costs: StepCosts, tokens: float, accept_length: float, num_steps: int) -> float:
    """The predicted time of one request of `tokens` tokens at `num_steps` draft steps."""
    rounds = max(tokens - 1.0, 0.0) / accept_length
    return costs.request_fixed_s + rounds * (costs.verify_s + num_steps * costs.draft_step_s)


def steps_advice(
    steps: int,
    measured: BenchResult | None,
    serving: DraftEval | None,
    costs: StepCosts | None,
    *,
    flags: Callable[[int], str],
    max_steps: int = MAX_ADVICE_STEPS,
) -> tuple[list[StepsRow], Recommendation | None]:
    """Predicted accept length and tok/s per draft-steps setting, and the fastest setting;
    `flags(n)`: the serving engine's flags that run n steps (engines.rules.words)."""
    lengths = accept_lengths_by_steps(steps, measured, serving, max_steps)
    by_steps = {s: e for s, e, _ in lengths}
    measured_tok_s = None if measured is None else measured.output_tok_s_aggregate
    tokens = None
    if measured is not None:
        ok = [r.completion_tokens for r in measured.requests if r.error is None]
        tokens = statistics.mean(t or 0 for t in ok) if ok else None
    now = None
    if costs is not None and tokens and steps in by_steps and measured_tok_s:
        now = request_seconds(costs, tokens, by_steps[steps], steps)
    # Reported as SGLang counts it (completion tokens over verify rounds, the prefill's token
    # included), so the served setting's row reads as the measured accept length.
    counted = tokens / (tokens - 1) if tokens and tokens > 1 else 1.0
    # The prediction scales the measured tok/s, so it is as uncertain as that measurement.
    spread = None if measured is None else relative_noise(measured.output_tok_s_per_request)
    rows = []
    for s, length, source in lengths:
        tok_s = None
        if now is not None and costs is not None and tokens and measured_tok_s:
            tok_s = measured_tok_s * now / request_seconds(costs, tokens, length, s)
        noise_at = None if tok_s is None or spread is None else tok_s * spread
        rows.append(StepsRow(s, length * counted, tok_s, source, noise_at))
    priced = [r for r in rows if r.predicted_tok_s is not None]
    if not priced or measured is None or not measured_tok_s:
        return rows, None
    # The fastest; a setting within 1% of it with fewer steps wins (less draft work, less risk).
    top = max(r.predicted_tok_s or 0.0 for r in priced)
    best = min(
        (r for r in priced if (r.predicted_tok_s or 0.0) >= 0.99 * top), key=lambda r: r.num_steps
    )
    gain = (best.predicted_tok_s or 0.0) / measured_tok_s - 1.0
    low = None if spread is None else gain - (1.0 + gain) * spread
    high = None if spread is None else gain + (1.0 + gain) * spread
    changes = best.num_steps != steps and low is not None and low > 0 and gain >= MATERIAL_GAIN
    served = next((r for r in rows if r.num_steps == steps), None)
    chosen = best if changes or served is None else served
    return rows, Recommendation(
        num_steps=chosen.num_steps,
        predicted_accept_length=chosen.predicted_accept_length,
        predicted_tok_s=chosen.predicted_tok_s,
        current_num_steps=steps,
        current_tok_s=measured_tok_s,
        flags=flags(chosen.num_steps),
        fastest_num_steps=best.num_steps,
        gain=gain,
        gain_low=low,
        gain_high=high,
        changes=changes,
    )
