"""Rules over what was measured: the endpoint's tok/s against a baseline and its accept length
against the draft's simulated accept length.
"""

from __future__ import annotations

from eagle3dash.findings.core import Evidence, Finding, _fmt


def _speedup(e: Evidence) -> float | None:
    m, b = e.measured, e.baseline
    if m is None or b is None:
        return None
    if not m.output_tok_s_aggregate or not b.output_tok_s_aggregate:
        return None
    return m.output_tok_s_aggregate / b.output_tok_s_aggregate


def rule_slower_than_baseline(e: Evidence) -> list[Finding]:
    """Measured tok/s against a baseline without speculation, both from servebench.py."""
    speedup = _speedup(e)
    if speedup is None or speedup >= 1.2:
        return []
    m, b = e.measured, e.baseline
    evidence = (
        f"with the draft {m.output_tok_s_aggregate:.1f} tok/s, baseline "
        f"{b.output_tok_s_aggregate:.1f} tok/s: speedup {speedup:.2f}x"
    )
    if m.accept_length is not None:
        evidence += f"; measured accept length {_fmt(m.accept_length)}"
    concurrency = getattr(m, "concurrency", None)
    if concurrency:
        evidence += f"; concurrency {concurrency}"
    if speedup < 1:
        return [
            Finding(
                "slower-than-baseline",
                "critical",
                f"Speculative decoding makes the endpoint slower: {speedup:.2f}x the baseline's "
                "tok/s.",
                evidence + ".",
                "Fix the critical findings above first (they cap the accept length); if accept "
                "length is already good, lower the batch or draft cost: --speculative-num-steps 3 "
                "--speculative-eagle-topk 1 --speculative-num-draft-tokens 4, and keep "
                "--cuda-graph-max-bs at least the request concurrency.",
                {"speedup": speedup},
            )
        ]
    return [
        Finding(
            "slower-than-baseline",
            "info",
            f"Speculative decoding gains little: {speedup:.2f}x the baseline's tok/s.",
            evidence + ".",
            "Raise the accept length (see the other findings) or try --speculative-num-steps 3 "
            "--speculative-eagle-topk 1 --speculative-num-draft-tokens 4; speculation pays most "
            "at low concurrency.",
            {"speedup": speedup},
        )
    ]


def rule_measured_below_simulated(e: Evidence) -> list[Finding]:
    """Measured accept length well below the serving-layout simulation.

    Causes beyond the layout: dropped tensor names (llama_eagle3.py load_weights), quantization
    (server_args.py), SGLANG_SIMULATE_ACC_LEN, temperature and accept thresholds (eagle_info.py).
    """
    ev = e.serving_eval
    if ev is None:
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
    steps = min(sp.num_steps, ev.steps) if sp is not None and sp.num_steps else ev.steps
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
    unknown = [p for p in e.report.problems if p.startswith("unknown tensor")] if e.report else []
    checks.append(
        f"{len(unknown)} tensors with unknown names, dropped by the loader"
        if unknown
        else "tensor names the loader drops (unknown names load as random weights)"
    )
    checks.append("the benchmark prompts against the capture data the simulation used")
    return [
        Finding(
            "measured-below-simulated",
            "warning",
            f"The endpoint accepts {_fmt(measured)} tokens per step where the serving layout "
            f"simulates {_fmt(simulated)}, so something beyond the layout is wrong.",
            f"measured {_fmt(measured)} from {source}; simulated {_fmt(simulated)} at {steps} "
            f"steps over {getattr(ev, 'num_positions', '?')} positions.",
            "Check: " + "; ".join(checks) + ".",
            {"measured": measured, "simulated": simulated, "steps": steps},
        )
    ]
