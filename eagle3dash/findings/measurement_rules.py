"""Rules over what was measured: the endpoint's tok/s against a baseline and its accept length
against the draft's simulated accept length.
"""

from __future__ import annotations

import dataclasses

from eagle3dash.checkpoint_problems import ProblemCode
from eagle3dash.findings.core import Evidence, Finding, _fmt, critical_ids
from eagle3dash.noise import (
    MATERIAL_ACCEPT_LENGTH,
    MATERIAL_TOP1,
    noise,
    ratio_noise,
)
from eagle3dash.prompt_sets import token_spread
from eagle3dash.severity import Severity

# Measured above the serving simulation by at least this much (and beyond the bench's spread).
ABOVE_MIN = 0.3
# Findings that explain a training-serving gap: the sides were fed other states.
EXPLAINS_GAP = (
    "layout-mismatch",
    "capture-error",
    "server-feeds-other-taps",
    "algorithm-eagle",
    "detected-layout",
    "aux-ids-not-read",
    "capture-rule-version",
    "norm-before-residual",
    "eagle31-ignored",
    "norm-output-clash",
    "vllm-no-ids",
    "final-state-id",
    "gpt-oss-boundary-ids",
    "draft-window-ignored",
    "draft-lm-head-quantized",
)


# Findings short of critical that lower the accept length: a critical slowdown they explain is
# their cost, so they become critical with it (`slowdown_causes`) and one of them the root cause.
EXPLAINS_SLOWDOWN = ("prompt-format-gap", "measured-below-simulated", "draft-quantized")


def _speedup(e: Evidence) -> float | None:
    m, b = e.measured, e.baseline
    if m is None or b is None:
        return None
    if not m.output_tok_s_aggregate or not b.output_tok_s_aggregate:
        return None
    return m.output_tok_s_aggregate / b.output_tok_s_aggregate


def _speedup_noise(e: Evidence, speedup: float) -> float:
    """The speedup's noise, from the per-request tok/s of both benchmarks."""
    return ratio_noise(
        speedup,
        getattr(e.measured, "output_tok_s_per_request", None) or [],
        getattr(e.baseline, "output_tok_s_per_request", None) or [],
    )


def rule_slower_than_baseline(e: Evidence, found: list[Finding]) -> list[Finding]:
    """Measured tok/s against a baseline without speculation, both from servebench.py; the fix
    points at the findings that cap the accept length, or says none was found. Critical only
    when the slowdown stands beyond the per-request noise (eagle3dash/noise.py)."""
    speedup = _speedup(e)
    m, b = e.measured, e.baseline
    if speedup is None or speedup >= 1.2 or m is None or b is None:
        return []
    spread = _speedup_noise(e, speedup)
    evidence = (
        f"with the draft {m.output_tok_s_aggregate:.1f} tok/s, baseline "
        f"{b.output_tok_s_aggregate:.1f} tok/s: speedup {speedup:.2f}x"
        + (f" (±{spread:.2f} with the per-request noise)" if spread else "")
    )
    if m.accept_length is not None:
        evidence += f"; measured accept length {_fmt(m.accept_length)}"
    concurrency = getattr(m, "concurrency", None)
    if concurrency:
        evidence += f"; concurrency {concurrency}"
    if speedup + spread < 1:
        causes = _slowdown_causes(found)
        return [
            Finding(
                "slower-than-baseline",
                Severity.CRITICAL,
                f"Speculative decoding makes the endpoint slower: {speedup:.2f}x the baseline's "
                "tok/s.",
                evidence + ".",
                _slowdown_fix(e, causes, found),
                {"speedup": speedup, "noise": spread, "explained_by": causes},
            )
        ]
    title = (
        f"Speculative decoding gains little: {speedup:.2f}x the baseline's tok/s."
        if speedup >= 1
        else f"Speculative decoding may make the endpoint slower ({speedup:.2f}x the baseline's "
        "tok/s), within the per-request noise."
    )
    steps = _steps_change(e)
    return [
        Finding(
            "slower-than-baseline",
            Severity.INFO,
            title,
            evidence + ".",
            f"Raise the accept length{_see(found)}"
            + (f" or try {steps}" if steps else "")
            + "; speculation pays most at low concurrency.",
            {"speedup": speedup, "noise": spread},
        )
    ]


def _see(found: list[Finding]) -> str:
    """' (see <the critical findings, which cap the accept length>)' when there are any, else
    nothing: the pointer names findings that are there."""
    causes = critical_ids(found)
    return f" (see {', '.join(causes)})" if causes else ""


def _slowdown_causes(found: list[Finding]) -> list[str]:
    """The findings that explain a slowdown: the critical ones, and those that lower the accept
    length (EXPLAINS_SLOWDOWN), in the order found."""
    return list(
        dict.fromkeys(
            f.id for f in found if f.severity is Severity.CRITICAL or f.id in EXPLAINS_SLOWDOWN
        )
    )


def slowdown_causes(found: list[Finding]) -> list[Finding]:
    """The findings with a critical slowdown's causes made critical: the slowdown is their cost,
    so the verdict's root cause is one of them, never the slowdown they explain."""
    causes = {
        cause
        for f in found
        if f.id == "slower-than-baseline" and f.severity is Severity.CRITICAL
        for cause in f.data.get("explained_by") or ()
    }
    return [
        dataclasses.replace(
            f,
            severity=Severity.CRITICAL,
            evidence=f"{f.evidence.rstrip('.')}; with it the endpoint is slower than without "
            "speculation (slower-than-baseline).",
        )
        if f.id in causes and f.severity is not Severity.CRITICAL
        else f
        for f in found
    ]


def _steps_change(e: Evidence) -> str | None:
    """The steps setting to try, in the serving engine's flags: the steps advice's
    recommendation when it changes the served setting (None when the advice keeps it: no remedy
    asks for what the server already runs); without the advice, a chain shallower than the
    served one (None at one step)."""
    advice = e.profile.recommended if e.profile is not None else None
    if advice is not None:
        return f"{advice.flags} (the steps advice's recommendation)" if advice.changes else None
    served = e.simulation_steps()
    if served is not None and served <= 1:
        return None
    sp = e.speculative
    draft = sp.draft_model_path if sp is not None else e.draft_path
    return e.words().steps_flags(min(3, served - 1) if served else 3, draft)


def _slowdown_fix(e: Evidence, causes: list[str], found: list[Finding]) -> str:
    """What to do about a slowdown: the findings that cap the accept length first; when there are
    none, say whether the accept length or the cost is the problem, and ask only for evidence the
    run does not have. A difference between the sides that the run found (short of critical) is
    named as not explaining it, never denied."""
    concurrency = getattr(e.measured, "concurrency", None)
    batch = e.words().batch_cost_flags(concurrency)
    steps = _steps_change(e)
    costs = [
        *([steps] if steps else []),
        *([f"{batch} (the request concurrency)"] if batch else []),
    ]
    cost = (
        f"lower the batch or draft cost: {' and '.join(costs)}"
        if costs
        else "the steps advice keeps the served setting, so the cost is the engine's"
    )
    if causes:
        # The steps advice rests on today's acceptance, which the fix changes: no setting to
        # paste until then, only the order to work in.
        caps = "they cap" if len(causes) > 1 else "it caps"
        return (
            f"Fix {', '.join(causes)} first ({caps} the accept length), then run the diagnosis "
            "again: its steps advice rests on the acceptance that fix changes."
        )
    accept, served = e.measured.accept_length if e.measured else None, e.simulation_steps()
    if accept is not None and served and accept < 0.5 * (served + 1):
        low = f"The accept length is the cause ({_fmt(accept)} of at most {served + 1})"
        if e.training_eval is None:
            return (
                f"{low} and no check that ran explains it: measure the training side (a local "
                "copy of the target, or a training dump) to see whether serving feeds the draft "
                "other states than training did, then run the diagnosis again."
            )
        differ = [f.id for f in found if f.id in EXPLAINS_GAP]
        sides = (
            f"training and serving feed the draft different taps ({', '.join(differ)}), but "
            "at a cost that does not explain it"
            if differ
            else "training and serving feed the draft alike"
        )
        return (
            f"{low}, and no check that ran explains it: {sides}, so it accepts this little on "
            "these prompts. Compare the prompts' domain and rendering with the draft's training "
            "data, and whether it was trained for this target."
        )
    return f"The accept length is not the cause; {cost}."


def rule_measured_below_simulated(e: Evidence) -> list[Finding]:
    """Measured accept length well below the serving-layout simulation.

    Causes beyond the layout: dropped tensor names (llama_eagle3.py load_weights), quantization
    (server_args.py), SGLANG_SIMULATE_ACC_LEN, temperature and accept thresholds (eagle_info.py).
    """
    ev = e.serving_eval
    if ev is None or e.adaptive_steps():  # no fixed steps to simulate at
        return []
    if e.measured is not None and e.measured.accept_length is not None:
        measured, source = e.measured.accept_length, "benchmark (sum of completion tokens / sum "
        source += "of spec_verify_ct)"
    elif e.server is not None and e.server.avg_spec_accept_length is not None:
        measured = e.server.avg_spec_accept_length
        source = "the server's cumulative avg_spec_accept_length"
    else:
        return []
    sp = e.speculative
    steps = min(e.simulation_steps() or ev.steps, ev.steps)
    simulated = ev.simulated_accept_length(steps)
    gap = simulated - measured
    if gap <= 0.5 or gap <= 0.15 * simulated:
        return []
    words = e.words()
    checks = ["requests at temperature 0 (target-only sampling at temperature > 0 accepts fewer)"]
    if words.FAKE_ACCEPT_ENV:
        checks.append(
            f"{words.FAKE_ACCEPT_ENV} unset in the server's environment (it fakes the accept "
            "length)"
        )
    server = e.server
    unquantized = words.unquantized_draft_flags()
    if server is not None and server.quantization:
        dq = sp.draft_quantization if sp is not None else None
        # SGLang's draft inherits the target's; vLLM's loads as its checkpoint says
        inherited = "same" if unquantized is not None else "as its checkpoint says"
        checks.append(f"quantization: target {server.quantization}, draft {dq or inherited}")
    elif unquantized is not None:
        checks.append(f"draft quantization ({unquantized.split()[0]})")
    if sp is not None:
        th = [
            f"{name}={val}"
            for name, val in (
                ("accept_threshold_single", sp.accept_threshold_single),
                ("accept_threshold_acc", sp.accept_threshold_acc),
            )
            if val is not None and val < 1
        ]
        if th:
            checks.append("accept thresholds below 1 (" + ", ".join(th) + ")")
    problems = e.report.problems if e.report else []
    unknown = [p for p in problems if p.code is ProblemCode.UNKNOWN_TENSOR]
    checks.append(
        f"{len(unknown)} tensors with unknown names, dropped by the loader"
        if unknown
        else "tensor names the loader drops (unknown names load as random weights)"
    )
    checks.append("the benchmark prompts against the capture data the simulation used")
    return [
        Finding(
            "measured-below-simulated",
            Severity.WARNING,
            f"The endpoint accepts {_fmt(measured)} tokens per step where the serving layout "
            f"simulates {_fmt(simulated)}, so something beyond the layout is wrong.",
            f"measured {_fmt(measured)} from {source}; simulated {_fmt(simulated)} at {steps} "
            f"steps over {getattr(ev, 'num_positions', '?')} positions.",
            "Check: " + "; ".join(checks) + ".",
            {"measured": measured, "simulated": simulated, "steps": steps},
        )
    ]


def rule_measured_above_simulated(e: Evidence) -> list[Finding]:
    """Measured accept length well above what the captured states simulate: the endpoint runs
    another draft, or feeds the draft other states than the capture returned (measured as
    servebench.py does, Σcompletion_tokens / Σspec_verify_ct)."""
    ev = e.serving_eval
    if ev is None or e.measured is None or e.measured.accept_length is None:
        return []
    if e.adaptive_steps():  # no fixed steps to simulate at
        return []
    steps = min(e.simulation_steps() or ev.steps, ev.steps)
    simulated = ev.simulated_accept_length(steps)
    measured = e.measured.accept_length
    spread = noise(getattr(e.measured, "accept_length_per_request", None) or [])
    if measured - simulated < max(ABOVE_MIN, spread):
        return []
    return [
        Finding(
            "measured-above-simulated",
            Severity.CRITICAL,
            f"The endpoint accepts {_fmt(measured)} tokens per round, more than the "
            f"{_fmt(simulated)} the draft reaches on the states the server returned, so the "
            "server runs another draft or feeds it other states than it returns.",
            f"measured {_fmt(measured)} (Σcompletion_tokens / Σspec_verify_ct over "
            f"the benchmark's requests, spread ±{_fmt(spread)}); "
            f"simulated {_fmt(simulated)} at {steps} steps on the serving capture.",
            f"Check that the server's {e.words().DRAFT_PATH_SETTING} holds this very checkpoint "
            "(not another epoch behind the same path), and that it returns the states it feeds "
            "(no patched capture); then run the diagnosis again.",
            {"measured": measured, "simulated": simulated, "spread": spread},
        )
    ]


def rule_training_serving_gap(e: Evidence, found: list[Finding]) -> list[Finding]:
    """A gap between the sides is a finding, whatever explains it: the training side's simulated
    accept length above the serving side's by MATERIAL_ACCEPT_LENGTH, or its top-1 by MATERIAL_TOP1.
    Reads the other rules' findings to cite the ones that explain it (metrics.py, draft.py)."""
    if e.training is None or e.serving is None:
        return []
    t, s = e.training, e.serving
    if t.sim_accept_length is None or s.sim_accept_length is None:
        return []
    accept_gap = t.sim_accept_length - s.sim_accept_length
    top1_gap = (t.top1 or 0.0) - (s.top1 or 0.0)
    if accept_gap < MATERIAL_ACCEPT_LENGTH and top1_gap < MATERIAL_TOP1:
        return []
    explained = [f.id for f in found if f.id in EXPLAINS_GAP]
    evidence = (
        f"training side ({t.source}): simulated accept length {_fmt(t.sim_accept_length)}, top-1 "
        f"{(t.top1 or 0):.1%}; serving side ({s.source}): {_fmt(s.sim_accept_length)}, top-1 "
        f"{(s.top1 or 0):.1%}; gap {_fmt(accept_gap)} tokens per round, "
        f"{100 * top1_gap:.1f} points."
    )
    if explained:  # named, not placed: a warning among them is listed after this critical one
        fixes = "the fixes of findings " if len(explained) > 1 else "the fix of finding "
        fix = f"Apply {fixes}{', '.join(explained)}, then run the diagnosis again."
    else:
        checked = (
            "layouts (training vs serving taps), the server's capture against "
            f"{e.words().ENGINE}'s rules, "
            "the speculative algorithm, the draft's norm options and tensor names"
        )
        evidence += f" Checked without a cause: {checked}."
        fix = _next_evidence(e)
    return [
        Finding(
            "training-serving-gap",
            Severity.CRITICAL,
            f"The draft does far worse on what serving feeds it than on its training side: "
            f"{_fmt(t.sim_accept_length)} vs {_fmt(s.sim_accept_length)} simulated accept length.",
            evidence,
            fix,
            {"accept_gap": accept_gap, "top1_gap": top1_gap, "explained_by": explained},
        )
    ]


def _next_evidence(e: Evidence) -> str:
    """What to collect next about a gap no check explains: only what the run does not have."""
    missing = []
    if e.training is None or e.training.source != "training-dump":
        missing.append("a training dump (the features training really used)")
    if e.target_json_sha256 is None:
        missing.append("a local copy of the target")
    formats = e.profile.prompt_format if e.profile is not None else []
    measured = [r for r in formats if r.measured_accept_length is not None]
    compare = "sampling" if len(measured) >= 2 else "prompt format and sampling"
    collect = (
        f"Collect the next evidence: {' and '.join(missing)}, so both sides are measured on the "
        "same taps; "
        if missing
        else ""
    )
    text = f"{collect}compare the {compare} of training and serving."
    return text[0].upper() + text[1:]


def _likely_causes(e: Evidence) -> list[tuple[str, str]]:
    """The likely causes of a low accept length on this deployment, most likely first, each with
    the evidence that settles it; a cause a check already ruled out is left out."""
    causes: list[tuple[int, str, str]] = []
    serving = e.serving
    observed = serving is not None and serving.source in ("observed", "matched-to-dump")
    causes.append(
        (
            1 if observed else 0,
            "layout: serving feeds the draft other taps than training did",
            "a local copy of the target (or a training dump) measures the training side and "
            "matches each served slot to the target's taps",
        )
    )
    identity = e.identity.status if e.identity is not None else None
    if identity != "same":
        causes.append(
            (
                1,
                "wrong draft: the server runs another checkpoint than this one",
                f"running the diagnosis where the server's {e.words().DRAFT_PATH_SETTING} is "
                "readable compares the weights' digests",
            )
        )
    spec = e.spec
    causes.append(
        (
            2,
            "wrong target: the draft was trained for another target model than the one served",
            "the draft's config (target_hidden_size "
            f"{spec.target_hidden_size if spec is not None else '?'}, its verifier) against the "
            "served model's config and tokenizer",
        )
    )
    formats = e.profile.prompt_format if e.profile is not None else []
    if len([r for r in formats if r.measured_accept_length is not None]) < 2:
        causes.append(
            (
                2,
                "prompt format: the prompts reach the draft in another format (raw, chat "
                "template, thinking on or off) than it was trained on",
                "the acceptance profile's prompt-format rows (the target's tokenizer at hand)",
            )
        )
    server = e.server
    quantized = server is not None and bool(server.quantization)
    unquantized = e.words().unquantized_draft_flags()
    causes.append(
        (
            1 if quantized else 3,
            "quantization: the draft or the target runs quantized"
            + (f" ({server.quantization})" if quantized and server is not None else ""),
            f"a run with {unquantized} (and the target unquantized, if you can)"
            if unquantized
            else "a run with the target unquantized, if you can (the draft loads as its own "
            "checkpoint says)",
        )
    )
    return [(c, how) for _, c, how in sorted(causes, key=lambda x: x[0])]


def rule_low_acceptance(e: Evidence, found: list[Finding]) -> list[Finding]:
    """The endpoint accepts few drafts (under half of what its steps allow; or it is slower than
    its baseline) and no finding explains it, with no training side to compare: the likely
    causes for this deployment, ranked, each with the evidence that settles it (servebench.py
    accept length; speculative decoding's causes as in rule_measured_below_simulated)."""
    if e.training_eval is not None or critical_ids(found):
        return []
    m = e.measured
    accept = m.accept_length if m is not None else None
    steps = e.simulation_steps()
    speedup = _speedup(e)
    low = accept is not None and steps is not None and accept < 0.5 * (steps + 1)
    slow = speedup is not None and speedup < 1
    if not (low or slow) or accept is None:
        return []
    causes = _likely_causes(e)
    how = f"{_fmt(accept)} of at most {steps + 1}" if steps else _fmt(accept)
    if slow and speedup is not None:
        how += f"; {speedup:.2f}x the baseline's tok/s"
    return [
        Finding(
            "low-acceptance",
            Severity.WARNING,
            f"The endpoint accepts few drafts ({how}), and the training side was not measured "
            "to tell why.",
            "Likely causes for this deployment, most likely first: "
            + " ".join(
                f"{i}. {cause} (settled by {ev})." for i, (cause, ev) in enumerate(causes, 1)
            ),
            f"Check the first: {causes[0][1]}; then run the diagnosis again.",
            {"accept_length": accept, "causes": [c for c, _ in causes]},
        )
    ]


def rule_fp8_kv_cache(e: Evidence) -> list[Finding]:
    """The KV cache is FP8. sglang PR #14466 (Mistral-Large-3 with EAGLE): "low AR for FP8 kv
    cache", worked around with --kv-cache-dtype auto; the cause was not found. Before the
    acceptance is compared with the training side's simulation (a probe, Before you submit), a
    note; after, a hint only where the measurement is materially below it, nothing where it is
    not. The KV cache's dtype is SGLang's --kv-cache-dtype (/server_info), vLLM's cache_dtype
    (/server_info, or /metrics `vllm:cache_config_info`)."""
    server, ev, measured = e.server, e.training_eval, e.measured
    dtype = getattr(server, "kv_cache_dtype", None) if server is not None else None
    if not dtype or "fp8" not in str(dtype).lower() or e.adaptive_steps():
        return []
    flags = e.words().kv_cache_flags()
    known = (
        "sglang PR #14466: 'low AR for FP8 kv cache' with an EAGLE draft (cause not found), "
        "worked around with the model's dtype."
    )
    if ev is None or measured is None or measured.accept_length is None:
        return [
            Finding(
                "fp8-kv-cache",
                Severity.INFO,
                f"The KV cache is {dtype}: an FP8 KV cache is known to lower an EAGLE draft's "
                "acceptance.",
                f"kv cache dtype {dtype} (the server's report); the acceptance is not compared "
                f"with the training side yet. {known}",
                f"If the run measures acceptance below the training side, restart with {flags} "
                "and measure again.",
                {"kv_cache_dtype": dtype},
            )
        ]
    steps = min(e.simulation_steps() or ev.steps, ev.steps)
    trained = ev.simulated_accept_length(steps)
    if trained - measured.accept_length < MATERIAL_ACCEPT_LENGTH:
        return []
    return [
        Finding(
            "fp8-kv-cache",
            Severity.INFO,
            f"The KV cache is {dtype} and the measured accept length "
            f"{_fmt(measured.accept_length)} is below the training side's "
            f"{_fmt(trained)}: an FP8 KV cache is known to lower acceptance.",
            f"kv cache dtype {dtype}; measured {_fmt(measured.accept_length)} against "
            f"{_fmt(trained)} simulated on the training layout at {steps} steps. {known}",
            f"Restart with {flags} and measure again: acceptance that recovers names the KV cache "
            "as the cause.",
            {"kv_cache_dtype": dtype, "measured": measured.accept_length, "trained": trained},
        )
    ]


def rule_random_token_prompts(e: Evidence) -> list[Finding]:
    """The benchmark's prompts are random tokens (prompt_sets.token_spread): every draft accepts
    about nothing on them (sglang PR #25359: accept rate 0.755 on GSM8K, 0.13-0.27 on
    `random 1024/1024`; InferenceX PR #1737: raw prompts "collapse acceptance to ~1"), so the
    measurement says nothing about the draft."""
    spec, tokens = e.spec, e.prompt_tokens
    if spec is None or not tokens:
        return []
    spread = token_spread(tokens, spec.vocab_size)
    if spread is None or not spread.random:
        return []
    return [
        Finding(
            "random-token-prompts",
            Severity.WARNING,
            "The prompts are random tokens, on which any draft accepts almost nothing: the "
            "accept length measured here says nothing about this draft.",
            f"{spread.tokens} prompt ids over a vocabulary of {spread.vocab_size}: "
            f"{spread.uniform_distance:.3f} from uniform (Kolmogorov-Smirnov) and "
            f"{spread.distinct_share:.0%} of the distinct ids uniform draws give; text repeats "
            "a few ids and leans to the frequent ones. sglang PR #25359: accept rate 0.755 on "
            "GSM8K, 0.13-0.27 on random 1024/1024 prompts.",
            "Benchmark on real prompts of the kind the draft was trained on, in the chat format "
            "it was trained with (a built-in set, or a JSONL file of real conversations).",
            {
                "tokens": spread.tokens,
                "uniform_distance": spread.uniform_distance,
                "distinct_share": spread.distinct_share,
            },
        )
    ]
