"""Rules over the server's settings as /server_info reports them.

Sources: SGLang's server_args.py (0.5.23: arg_groups/speculative_hook.py) for the speculative flags
and their adjustments, batch_result_processor.py for hidden states under speculation.
"""

from __future__ import annotations

import os
import re

from eagle3dash.findings.core import Evidence, Finding, _fmt
from eagle3dash.identity import compare_drafts, is_local_url
from eagle3dash.severity import Severity
from eagle3dash.sglang_rules import (
    DRAFT_QUANT_FLAG_SINCE,
    HIDDEN_STATES_FIX,
    hidden_states_mode,
    version_text,
)


def rule_algorithm_eagle(e: Evidence) -> list[Finding]:
    """The server runs EAGLE (or NEXTN) with an EAGLE-3 draft: no aux capture, fc skipped.

    llama_eagle3.py runs fc only when the widths differ; sglang PR #21272 (closed unmerged).
    """
    if e.engine == "vllm":  # an SGLang server's settings and refusals
        return []
    sp, spec = e.speculative, e.spec
    if sp is None or spec is None:
        return []
    algorithm = str(sp.algorithm or "").upper()
    if algorithm not in ("EAGLE", "NEXTN"):
        return []
    width = spec.num_aux * spec.target_hidden_size
    return [
        Finding(
            "algorithm-eagle",
            Severity.CRITICAL,
            f"The server runs --speculative-algorithm {sp.algorithm} with an EAGLE-3 draft, so "
            "the target captures no aux states, SGLang skips fc and accept length stays near 1.",
            f"speculative_algorithm={sp.algorithm}; the draft's fc takes {spec.num_aux} x "
            f"{spec.target_hidden_size} = {width} inputs (hidden_size {spec.hidden_size}); with "
            "EAGLE the draft gets the last hidden state of width H and `fc` runs only when the "
            "widths differ (sglang PR #21272).",
            "Restart the server with --speculative-algorithm EAGLE3.",
            {"algorithm": sp.algorithm},
        )
    ]


def rule_server_claims_implausible(e: Evidence) -> list[Finding]:
    """The server claims draft steps, topk or draft tokens no SGLang server runs with (a negative
    count, 10**9 steps): those values are not used, and this says which.

    Bounds: sglang.CLAIM_BOUNDS (arg_groups/speculative_hook.py, 0.5.23)."""
    implausible = getattr(e.speculative, "implausible", None)  # stored reports predate it
    if not implausible:
        return []
    claims = ", ".join(implausible)
    return [
        Finding(
            "server-claims-implausible",
            Severity.WARNING,
            f"The server reports speculative settings no SGLang server runs with ({claims}), so "
            "they were not used: the draft steps come from the form or the defaults.",
            f"{e.server.url if e.server else 'the server'} /server_info: {claims}.",
            "Check that the URL points at the SGLang server you started, and give the draft "
            "steps explicitly (--steps).",
            {"implausible": list(implausible)},
        )
    ]


def rule_no_speculation(e: Evidence) -> list[Finding]:
    """The endpoint runs without speculative decoding.

    server_args.py, --speculative-algorithm defaults to None (speculative_algorithm null).
    """
    if e.server is None or e.server.speculative is not None:
        return []
    draft = e.draft_path or (e.report.path if e.report is not None else "<draft>")
    if e.engine == "vllm":
        return [
            Finding(
                "no-speculation",
                Severity.CRITICAL,
                "The endpoint does not run speculative decoding, so no draft is used at all.",
                f"{e.server.url} /metrics: no vllm:spec_decode counters "
                f"(model {e.server.model_path}).",
                "Restart vLLM with --speculative-config "
                f'\'{{"method": "eagle3", "model": "{draft}", "num_speculative_tokens": 3}}\'.',
            )
        ]
    return [
        Finding(
            "no-speculation",
            Severity.CRITICAL,
            "The endpoint does not run speculative decoding, so no draft is used at all.",
            f"{e.server.url} /server_info: speculative_algorithm is null "
            f"(model {e.server.model_path}).",
            "Restart the server with --speculative-algorithm EAGLE3 "
            f"--speculative-draft-model-path {draft}.",
        )
    ]


def rule_draft_tokens_capped(e: Evidence) -> list[Finding]:
    """topk == 1 forces num_draft_tokens = num_steps + 1: a short chain whatever was asked.

    server_args.py (0.5.23 arg_groups/speculative_hook.py) adjusts num_draft_tokens when topk == 1.
    """
    sp = e.speculative
    if sp is None or sp.eagle_topk != 1 or sp.num_steps is None or sp.num_draft_tokens is None:
        return []
    if e.adaptive_steps():
        return []  # the steps change at runtime: rule_speculative_adaptive says so
    steps = sp.num_steps
    if sp.num_draft_tokens != steps + 1 or steps > 2:
        return []
    evidence = (
        f"effective speculative_num_steps={steps}, speculative_eagle_topk=1, "
        f"speculative_num_draft_tokens={sp.num_draft_tokens} (SGLang: "
        '"speculative_num_draft_tokens is adjusted to speculative_num_steps + 1 when '
        'speculative_eagle_topk == 1"); the accept length cannot exceed '
        f"{steps + 1}."
    )
    data: dict = {"num_steps": steps, "num_draft_tokens": sp.num_draft_tokens}
    ev, label = (
        (e.serving_eval, "serving layout")
        if e.serving_eval is not None
        else (e.training_eval, "training layout")
    )
    if ev is not None:
        at = {s: ev.simulated_accept_length(s) for s in sorted({steps, 3, 5}) if s <= ev.steps}
        if len(at) > 1:
            evidence += (
                f" Simulated accept length ({label}): "
                + ", ".join(f"{_fmt(x)} at {s} steps" for s, x in at.items())
                + "."
            )
            data["simulated_accept_length"] = at
    return [
        Finding(
            "draft-tokens-capped",
            Severity.WARNING,
            f"The server drafts a chain of only {steps} token{'s' if steps > 1 else ''} "
            f"(topk 1 caps --speculative-num-draft-tokens at num_steps + 1 = {steps + 1}), "
            "whatever --speculative-num-draft-tokens said.",
            evidence,
            "Restart with --speculative-num-steps 3 --speculative-eagle-topk 1 "
            "--speculative-num-draft-tokens 4 (or more steps; draft tokens only matter with "
            "topk > 1).",
            data,
        )
    ]


def rule_draft_quantized(e: Evidence) -> list[Finding]:
    """The draft inherits the target's --quantization.

    server_args.py, --speculative-draft-model-quantization (0.5.8+; default = the target's).
    """
    sp, server = e.speculative, e.server
    if sp is None or server is None:
        return []
    quant = server.quantization
    if not quant or str(quant).lower() in ("none", "unquant"):
        return []
    draft_q = sp.draft_quantization
    if draft_q is not None and draft_q != quant:
        return []
    version = e.version_tuple()
    if version is not None and version < DRAFT_QUANT_FLAG_SINCE:
        fix = (
            f"SGLang {e.version()} has no flag for it: upgrade to 0.5.8 or later and restart with "
            "--speculative-draft-model-quantization unquant."
        )
    else:
        fix = "Restart the server with --speculative-draft-model-quantization unquant."
    return [
        Finding(
            "draft-quantized",
            Severity.WARNING,
            f"The draft runs quantized ({quant}) like the target, which lowers its accuracy.",
            f"quantization={quant}, speculative_draft_model_quantization="
            f"{draft_q if draft_q is not None else 'unset (the target quantization applies)'}"
            + (f", SGLang {e.version()}" if e.version() else "")
            + ".",
            fix,
        )
    ]


def _norm_path(p: str) -> str:
    return os.path.normpath(os.path.expanduser(p.strip())).rstrip("/") or "/"


def rule_draft_differs(e: Evidence) -> list[Finding]:
    """The endpoint serves another draft than the checkpoint under diagnosis, by the content of
    the weight files (server_args.py --speculative-draft-model-path, reported by /server_info).

    Same config and same file sizes prove nothing (another epoch of the same run has both), so
    local drafts are compared by a digest of their weights (identity.py); a server elsewhere can
    only be compared by the last path component.
    """
    sp, server = e.speculative, e.server
    mine = e.draft_path or (e.report.path if e.report is not None else None)
    if sp is None or server is None or not sp.draft_model_path or not mine:
        return []
    local = is_local_url(server.url)
    identity = e.identity or compare_drafts(mine, sp.draft_model_path, local)
    if identity.status == "same":
        return []
    if identity.status == "differs":
        return [
            Finding(
                "draft-differs",
                Severity.CRITICAL,
                "The endpoint serves another draft than the checkpoint under diagnosis: their "
                "weights differ.",
                f"server speculative_draft_model_path={sp.draft_model_path}; checkpoint={mine}; "
                f"{identity.reason} (weights {(identity.served_digest or '')[:12]} vs "
                f"{(identity.checkpoint_digest or '')[:12]}).",
                f"Restart the server with --speculative-draft-model-path {mine} (or diagnose the "
                f"checkpoint at {sp.draft_model_path}).",
                {"server_path": sp.draft_model_path, "checkpoint_path": mine},
            )
        ]
    theirs_n, mine_n = _norm_path(sp.draft_model_path), _norm_path(mine)
    if theirs_n == mine_n:
        return []
    if local and os.path.isabs(theirs_n) and os.path.isabs(mine_n):
        how = f"both paths are on this machine and differ, and {identity.reason}"
    else:
        a, b = os.path.basename(theirs_n), os.path.basename(mine_n)
        if a == b or re.fullmatch(r"[0-9a-f]{64}", b):  # an upload is stored under its sha256
            return []
        how = (
            f"{identity.reason}, so only the final path components can be compared: {a!r} vs {b!r}"
        )
    return [
        Finding(
            "draft-path-differs",
            Severity.WARNING,
            "The endpoint names another draft than the checkpoint under diagnosis.",
            f"server speculative_draft_model_path={sp.draft_model_path}; checkpoint={mine}; {how}.",
            f"Restart the server with --speculative-draft-model-path {mine} (or diagnose the "
            f"checkpoint at {sp.draft_model_path}).",
            {"server_path": sp.draft_model_path, "checkpoint_path": mine},
        )
    ]


def rule_hidden_states_off(e: Evidence) -> list[Finding]:
    """A speculative server started without --enable-return-hidden-states: the states it feeds
    the draft cannot be captured, so the serving side is predicted, not measured
    (tokenizer_manager.py refuses return_hidden_states)."""
    if e.engine == "vllm":  # an SGLang server's settings and refusals
        return []
    server = e.server
    if server is None or server.speculative is None:
        return []
    if hidden_states_mode(server.enable_return_hidden_states, server.return_hidden_states_mode):
        return []
    return [
        Finding(
            "hidden-states-off",
            Severity.WARNING,
            "The server does not return hidden states, so what it feeds the draft cannot be "
            "captured and the serving side is only predicted.",
            f"{server.url} /server_info: enable_return_hidden_states is false.",
            "Restart the server with --enable-return-hidden-states (SGLang 0.5.20+: or "
            "--return-hidden-states-mode full, not last), then run the diagnosis again.",
        )
    ]


def rule_hidden_states_last_only(e: Evidence) -> list[Finding]:
    """A speculative server started with --return-hidden-states-mode last: hidden states look
    enabled, but /generate refuses return_hidden_states=true ("exceeds the server maximum"), so
    the states it feeds the draft cannot be captured (tokenizer_manager.py, 0.5.20+)."""
    if e.engine == "vllm":  # an SGLang server's settings and refusals
        return []
    server = e.server
    if server is None or server.speculative is None:
        return []
    mode = hidden_states_mode(server.enable_return_hidden_states, server.return_hidden_states_mode)
    if mode != "last":
        return []
    return [
        Finding(
            "hidden-states-last-only",
            Severity.WARNING,
            "The server returns only the last token's hidden state, so what it feeds the draft "
            "cannot be captured and the serving side is only predicted.",
            f"{server.url} /server_info: enable_return_hidden_states="
            f"{str(server.enable_return_hidden_states).lower()}, return_hidden_states_mode=last; "
            "SGLang refuses return_hidden_states=true above the server's mode (\"The requested "
            'return_hidden_states mode exceeds the server maximum `last`").',
            "Restart the server with --return-hidden-states-mode full, then run the diagnosis "
            "again.",
            {"return_hidden_states_mode": "last"},
        )
    ]


def rule_hidden_states_truncated(e: Evidence) -> list[Finding]:
    """return_hidden_states under speculation is truncated before 0.5.14.

    sglang issue #26163; 0.5.14+ managers/scheduler_components/batch_result_processor.py keeps
    one row per emitted token of a verify round.
    """
    if e.engine == "vllm":  # an SGLang server's settings and refusals
        return []
    server, version = e.server, e.version_tuple()
    if server is None or server.speculative is None or version is None:
        return []
    mode = hidden_states_mode(server.enable_return_hidden_states, server.return_hidden_states_mode)
    if version >= HIDDEN_STATES_FIX or mode != "full":
        return []
    return [
        Finding(
            "hidden-states-truncated",
            Severity.INFO,
            f"On SGLang {e.version()} the hidden states returned under speculative decoding are "
            "truncated or misattributed after the prompt, so only the prefill block of a capture "
            "can be trusted.",
            f"SGLang {e.version()} with --enable-return-hidden-states and "
            f"{server.speculative.algorithm}: decode rows are indexed per request, not per "
            f"accepted token (sglang issue #26163, fixed by {version_text(HIDDEN_STATES_FIX)}).",
            "Read only the prefill block (meta_info.hidden_states[0], as this tool's endpoint "
            f"capture does), or upgrade SGLang to {version_text(HIDDEN_STATES_FIX)} or later.",
        )
    ]


def rule_speculative_adaptive(e: Evidence) -> list[Finding]:
    """--speculative-adaptive: the draft steps change at runtime per batch size, down to 0, so
    num_steps + 1 is no ceiling and a fixed-steps simulation is not the server's.

    speculative/eagle_worker_v2.py AdaptiveController; speculative/adaptive_spec_params.py
    DEFAULT_ADAPTIVE_CONFIG (0.5.23).
    """
    sp = e.speculative
    if not e.adaptive_steps():
        return []
    return [
        Finding(
            "speculative-adaptive",
            Severity.WARNING,
            "The server adapts its number of draft steps at runtime (--speculative-adaptive), "
            "so its accept length mixes step counts and is neither capped at num_steps + 1 nor "
            "comparable with a simulation at fixed steps.",
            f"speculative_adaptive=true; speculative_num_steps={sp.num_steps} is only where the "
            "steps start: SGLang picks them from candidate_steps per batch size by the observed "
            "acceptance (by default [1, 3, 5, 7] at batch size 1, [0, 1, 3] from 8, [0, 1] from "
            "32, [0] from 64; 0 means no drafting).",
            "Restart the server without --speculative-adaptive, with a fixed "
            "--speculative-num-steps, to diagnose the draft; turn it back on afterwards.",
            {"num_steps": sp.num_steps},
        )
    ]
