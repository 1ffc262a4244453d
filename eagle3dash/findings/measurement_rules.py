"""Rules over what was measured: the endpoint's tok/s against a baseline and its accept length
against the draft's simulated accept length.
"""

from __future__ import annotations

import math

from eagle3dash.checkpoint_problems import ProblemCode
from eagle3dash.findings.core import Evidence, Finding, _fmt, critical_ids
from eagle3dash.noise import MATERIAL_ACCEPT_LENGTH, MATERIAL_TOP1, noise, relative_noise
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
)


def _speedup(e: Evidence) -> float | None:
    m, b = e.measured, e.baseline
    if m is None or b is None:
        return None
    if not m.output_tok_s_aggregate or not b.output_tok_s_aggregate:
        return None
    return m.output_tok_s_aggregate / b.output_tok_s_aggregate


def _speedup_noise(e: Evidence, speedup: float) -> float:
    """The speedup's noise: its relative noise over the per-request tok/s of both benchmarks."""
    parts = [
        relative_noise(getattr(bench, "output_tok_s_per_request", None) or []) or 0.0
        for bench in (e.measured, e.baseline)
    ]
    return speedup * math.hypot(*parts)


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
        return [
            Finding(
                "slower-than-baseline",
                Severity.CRITICAL,
                f"Speculative decoding makes the endpoint slower: {speedup:.2f}x the baseline's "
                "tok/s.",
                evidence + ".",
                _slowdown_fix(e, found),
                {"speedup": speedup, "noise": spread},
            )
        ]
    title = (
        f"Speculative decoding gains little: {speedup:.2f}x the baseline's tok/s."
        if speedup >= 1
        else f"Speculative decoding may make the endpoint slower ({speedup:.2f}x the baseline's "
        "tok/s), within the per-request noise."
    )
    return [
        Finding(
            "slower-than-baseline",
            Severity.INFO,
            title,
            evidence + ".",
            f"Raise the accept length (see the other findings) or try {_steps_flags(e)}; "
            "speculation pays most at low concurrency.",
            {"speedup": speedup, "noise": spread},
        )
    ]


def _steps_flags(e: Evidence) -> str:
    """The steps setting to try: the profile's fastest predicted one, else a shallower chain."""
    best = e.profile.recommended if e.profile is not None else None
    if best is not None:
        return f"{best.flags} (the steps advice's fastest setting)"
    return "--speculative-num-steps 3 --speculative-eagle-topk 1 --speculative-num-draft-tokens 4"


def _slowdown_fix(e: Evidence, found: list[Finding]) -> str:
    """What to do about a slowdown: the critical findings that cap the accept length first; when
    there are none, say whether the accept length or the cost is the problem."""
    cost = (
        f"lower the batch or draft cost: {_steps_flags(e)}, and keep --cuda-graph-max-bs at "
        "least the request concurrency"
    )
    critical = critical_ids(found)
    if critical:
        caps = "they cap" if len(critical) > 1 else "it caps"
        return (
            f"Fix {', '.join(critical)} first ({caps} the accept length); if accept length is "
            f"already good, {cost}."
        )
    accept, steps = e.measured.accept_length if e.measured else None, e.simulation_steps()
    if accept is not None and steps and accept < 0.5 * (steps + 1):
        return (
            f"The accept length is the cause ({_fmt(accept)} of at most {steps + 1}) and no check "
            "that ran explains it: measure the training side (a local copy of the target, or a "
            "training dump) to see whether serving feeds the draft other states than training "
            "did, then run the diagnosis again."
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
    checks = [
        "requests at temperature 0 (target-only sampling at temperature > 0 accepts fewer)",
        "SGLANG_SIMULATE_ACC_LEN unset in the server's environment (it fakes the accept length)",
    ]
    server = e.server
    if server is not None and server.quantization:
        dq = sp.draft_quantization if sp is not None else None
        checks.append(f"quantization: target {server.quantization}, draft {dq or 'same'}")
    else:
        checks.append("draft quantization (--speculative-draft-model-quantization)")
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
            "Check that the server's --speculative-draft-model-path holds this very checkpoint "
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
    if explained:
        fix = "Apply the fix of " + ", ".join(explained) + " above, then run the diagnosis again."
    else:
        checked = (
            "layouts (training vs serving taps), the server's capture against SGLang's rules, "
            "the speculative algorithm, the draft's norm options and tensor names"
        )
        evidence += f" Checked without a cause: {checked}."
        fix = (
            "Collect the next evidence: a training dump (the features training really used) and "
            "a local copy of the target, so both sides are measured on the same taps; compare "
            "the prompt format and sampling of training and serving."
        )
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
                "running the diagnosis where the server's --speculative-draft-model-path is "
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
    causes.append(
        (
            1 if quantized else 3,
            "quantization: the draft or the target runs quantized"
            + (f" ({server.quantization})" if quantized and server is not None else ""),
            "a run with --speculative-draft-model-quantization unquant (and the target "
            "unquantized, if you can)",
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
