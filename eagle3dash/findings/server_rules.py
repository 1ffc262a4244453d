"""Rules over the server's settings as /server_info reports them.

Sources: SGLang's server_args.py (0.5.23: arg_groups/speculative_hook.py) for the speculative flags
and their adjustments, batch_result_processor.py for hidden states under speculation.
"""

from __future__ import annotations

import os
import re

from eagle3dash.evidence_levels import LEVEL_PREDICTED
from eagle3dash.findings.core import Evidence, Finding, _fmt
from eagle3dash.identity import compare_drafts, is_local_url
from eagle3dash.severity import Severity


def rule_algorithm_eagle(e: Evidence) -> list[Finding]:
    """The server runs EAGLE (or NEXTN) with an EAGLE-3 draft: no aux capture, fc skipped.

    llama_eagle3.py runs fc only when the widths differ; sglang PR #21272 (closed unmerged).
    """
    if e.engine != "sglang":  # an SGLang server's settings and refusals
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
            f"The server reports speculative settings no {e.words().ENGINE} server runs with "
            f"({claims}), so "
            "they were not used: the draft steps come from the form or the defaults.",
            f"{e.server.url if e.server else 'the server'} /server_info: {claims}.",
            "Check that the URL points at the SGLang server you started, and give the draft "
            "steps explicitly (--steps).",
            {"implausible": list(implausible)},
        )
    ]


def rule_no_speculation(e: Evidence) -> list[Finding]:
    """The endpoint runs without speculative decoding.

    SGLang server_args.py: --speculative-algorithm defaults to None (speculative_algorithm null);
    vLLM: no speculative config, so /metrics exports no vllm:spec_decode counters.
    """
    if e.server is None or e.server.speculative is not None:
        return []
    draft = e.draft_path or (e.report.path if e.report is not None else "<draft>")
    shown = (
        "/metrics: no vllm:spec_decode counters"
        if e.engine == "vllm"
        else "/server_info: speculative_algorithm is null"
    )
    return [
        Finding(
            "no-speculation",
            Severity.CRITICAL,
            "The endpoint does not run speculative decoding, so no draft is used at all.",
            f"{e.server.url} {shown} (model {e.server.model_path}).",
            e.words().speculation_flags(draft),
        )
    ]


def rule_draft_tokens_capped(e: Evidence) -> list[Finding]:
    """topk == 1 forces num_draft_tokens = num_steps + 1: a short chain whatever was asked.

    server_args.py (0.5.23 arg_groups/speculative_hook.py) adjusts num_draft_tokens when topk == 1.
    SGLang's flags only: vLLM's one num_speculative_tokens is the chain, with nothing to cap.
    """
    if e.engine != "sglang":
        return []
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

    server_args.py, --speculative-draft-model-quantization (0.5.8+; default = the target's; sglang
    PR #28196, open, would load a draft without a quant config unquantized). An engine whose
    drafts load as their own checkpoint says (vLLM, `words.unquantized_draft_flags` None) has
    nothing to say here: rule_vllm_draft_quantization says what vLLM loads.
    """
    sp, server = e.speculative, e.server
    if sp is None or server is None or e.words().unquantized_draft_flags() is None:
        return []
    quant = server.quantization
    if not quant or str(quant).lower() in ("none", "unquant"):
        return []
    draft_q = sp.draft_quantization
    if draft_q is not None and draft_q != quant:
        return []
    if e.rules().has("draft_quantization_flag") is False:
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


def _serve(e: Evidence, draft: str) -> str:
    """The serving engine's flags that load this draft (at the served steps)."""
    return e.words().draft_flags(draft, e.simulation_steps())


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
                f"Restart the server with {_serve(e, mine)} (or diagnose the "
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
            f"Restart the server with {_serve(e, mine)} (or diagnose the "
            f"checkpoint at {sp.draft_model_path}).",
            {"server_path": sp.draft_model_path, "checkpoint_path": mine},
        )
    ]


def rule_hidden_states_off(e: Evidence) -> list[Finding]:
    """A speculative server started without --enable-return-hidden-states: the states it feeds
    the draft cannot be captured, so the serving side is predicted, not measured
    (tokenizer_manager.py refuses return_hidden_states)."""
    if e.engine != "sglang":  # an SGLang server's settings and refusals
        return []
    server = e.server
    if server is None or server.speculative is None:
        return []
    if e.rules().hidden_states_mode(
        server.enable_return_hidden_states, server.return_hidden_states_mode
    ):
        return []
    return [
        Finding(
            "hidden-states-off",
            Severity.WARNING,
            "The server does not return hidden states, so what it feeds the draft cannot be "
            "captured: the serving side is at best inferred from the measured acceptance.",
            f"{server.url} /server_info: enable_return_hidden_states is false.",
            "Restart the server with --enable-return-hidden-states (SGLang 0.5.20+: or "
            "--return-hidden-states-mode full, not last), then run the diagnosis again.",
        )
    ]


def rule_hidden_states_last_only(e: Evidence) -> list[Finding]:
    """A speculative server started with --return-hidden-states-mode last: hidden states look
    enabled, but /generate refuses return_hidden_states=true ("exceeds the server maximum"), so
    the states it feeds the draft cannot be captured (tokenizer_manager.py, 0.5.20+)."""
    if e.engine != "sglang":  # an SGLang server's settings and refusals
        return []
    server = e.server
    if server is None or server.speculative is None:
        return []
    mode = e.rules().hidden_states_mode(
        server.enable_return_hidden_states, server.return_hidden_states_mode
    )
    if mode != "last":
        return []
    return [
        Finding(
            "hidden-states-last-only",
            Severity.WARNING,
            "The server returns only the last token's hidden state, so what it feeds the draft "
            "cannot be captured: the serving side is at best inferred from the measured "
            "acceptance.",
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
    if e.engine != "sglang":  # an SGLang server's settings and refusals
        return []
    server, rules = e.server, e.rules()
    fixed = rules.has("hidden_states_per_token")
    if server is None or server.speculative is None or fixed is None:
        return []
    mode = rules.hidden_states_mode(
        server.enable_return_hidden_states, server.return_hidden_states_mode
    )
    if fixed or mode != "full":
        return []
    release = rules.first_release("hidden_states_per_token")
    return [
        Finding(
            "hidden-states-truncated",
            Severity.INFO,
            f"On SGLang {e.version()} the hidden states returned under speculative decoding are "
            "truncated or misattributed after the prompt, so only the prefill block of a capture "
            "can be trusted.",
            f"SGLang {e.version()} with --enable-return-hidden-states and "
            f"{server.speculative.algorithm}: decode rows are indexed per request, not per "
            f"accepted token (sglang issue #26163, fixed by {release}).",
            "Read only the prefill block (meta_info.hidden_states[0], as this tool's endpoint "
            f"capture does), or upgrade SGLang to {release} or later.",
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


def rule_engine_release_not_read(e: Evidence) -> list[Finding]:
    """The server runs a release newer than (or, on vLLM, between) the releases whose rules were
    read: another release's rules stand in, so what it feeds the draft is a prediction at best
    (EngineRules.releases: engines/sglang/rules.py KNOWN_SGLANG_VERSIONS, engines/vllm/rules.py
    KNOWN_VLLM_VERSIONS)."""
    if e.server is None:
        return []
    engine = e.serving_engine()
    stand_in = engine.stand_in()
    if stand_in is None or engine.version is None:
        return []
    words = e.words()
    read = e.rules().releases()
    newer = stand_in == read[-1]  # an older or in-between vLLM stands in by its own release
    how = "newer than" if newer else "not one of"
    what = (
        f"the newest release read, {stand_in}"
        if newer
        else f"the releases read ({', '.join(read)})"
    )
    return [
        Finding(
            "engine-release-not-read",
            Severity.INFO,
            f"{words.ENGINE} {engine.version} is {how} {what}: {stand_in}'s rules stand in for "
            "it, so what it feeds the draft is predicted, not known.",
            f"{e.server.url} reports {words.ENGINE} {engine.version}; the rules of "
            f"{words.ENGINE} {stand_in} decide the taps predicted for it.",
            f"Measure what it feeds: {words.capture_action(e.server.device)}.",
            {"version": engine.version, "rules_release": stand_in},
            LEVEL_PREDICTED,
        )
    ]


def rule_spec_v2_tree(e: Evidence) -> list[Finding]:
    """EAGLE-3 trees (--speculative-eagle-topk > 1) on SGLang's spec v2 (overlap) worker.

    Read in the wheels: before 0.5.9 (0.5.6's server_args.py) SGLANG_ENABLE_SPEC_V2=1 turns the
    overlap worker on for EAGLE3 with no topk check, which assumed a chain (sglang issue #14077:
    tensor errors, then gibberish); 0.5.9 refuses topk > 1 at start under spec v2; 0.5.11 and
    0.5.12 fall back to the v1 worker for topk > 1 ("spec v2 currently only supports topk = 1";
    PR #26866), whatever the page size; from 0.5.13 (arg_groups/speculative_hook.py) every EAGLE
    server runs the v2 worker, trees included, topk > 1 with page size > 1 only on the flashinfer,
    fa3 and triton backends (refused at start on others)."""
    sp, server, rules = e.speculative, e.server, e.rules()
    refused = rules.has("spec_v2_topk_refused")
    if e.engine != "sglang" or sp is None or server is None or refused is None:
        return []
    if str(sp.algorithm or "").upper() != "EAGLE3" or not sp.eagle_topk or sp.eagle_topk <= 1:
        return []
    v = e.version()
    if not refused and server.disable_overlap_schedule is False:
        return [
            Finding(
                "spec-v2-tree",
                Severity.CRITICAL,
                f"SGLang {v} runs a tree of topk {sp.eagle_topk} on its spec v2 (overlap) worker, "
                "which assumes a chain: drafts fail with tensor errors or decode gibberish, and "
                "the accept length measured here is not the draft's.",
                f"speculative_eagle_topk={sp.eagle_topk}, disable_overlap_schedule=false: spec v2 "
                f"is on (SGLANG_ENABLE_SPEC_V2), which SGLang {v} does not check against topk "
                "(server_args.py; sglang issue #14077). 0.5.9 refuses it at start, 0.5.11 falls "
                "back to the v1 worker (PR #26866).",
                f"Restart without SGLANG_ENABLE_SPEC_V2, or with {e.words().steps_flags(3)}.",
                {"eagle_topk": sp.eagle_topk},
            )
        ]
    if rules.has("spec_v2_topk_fallback") and not rules.has("spec_v2_worker_only"):
        return [
            Finding(
                "spec-v2-tree",
                Severity.INFO,
                f"SGLang {v} serves the topk {sp.eagle_topk} tree on its v1 worker without the "
                "overlap scheduler (spec v2 runs chains only), so its speed is the v1 worker's.",
                f"speculative_eagle_topk={sp.eagle_topk}: server_args.py falls back to spec v1 "
                '("spec v2 currently only supports topk = 1", PR #26866), whatever the page '
                "size; from 0.5.13 the v2 worker drafts trees too.",
                f"Upgrade SGLang to {rules.first_release('spec_v2_worker_only')} or later for "
                f"trees on the v2 worker, or draft a chain ({e.words().steps_flags(3)}).",
                {"eagle_topk": sp.eagle_topk},
            )
        ]
    return []


def rule_disaggregated(e: Evidence) -> list[Finding]:
    """A prefill/decode-disaggregated server: with EAGLE-3 the decode side's first round needs
    the aux states the prefill side captured, whose transfer sglang issue #10059 (open) leaves
    unconfirmed (PR #9976 only stopped the error; PR #13590 sized the buffers by the draft)."""
    server = e.server
    if server is None or server.speculative is None or server.disaggregation_mode is None:
        return []
    words = e.words()
    return [
        Finding(
            "pd-disaggregated",
            Severity.WARNING,
            f"This server is the {server.disaggregation_mode} side of a prefill/decode split: "
            "whether its decode node drafts from the right states is unconfirmed, so its "
            "acceptance may not be the draft's.",
            f"{server.url}: {words.DISAGGREGATION_SETTING} puts it on the "
            f"{server.disaggregation_mode} side. sglang issue #10059 (PD with EAGLE-3) is open: "
            "the prefill side's aux states went to a decode buffer of another size, and the "
            "fix that stopped the error (PR #9976) was merged 'only to avoid raising an error'.",
            f"Diagnose the same draft on a colocated server (no {words.DISAGGREGATION_SETTING}) "
            "and compare the accept lengths; a first round that accepts less than the later "
            "ones points at the transferred states.",
            {"disaggregation_mode": server.disaggregation_mode},
        )
    ]


def rule_vllm_draft_quantization(e: Evidence) -> list[Finding]:
    """What a vLLM server loads the draft as: its own checkpoint's quantization, never the
    target's (model_executor/models/utils.py get_draft_quant_config, 0.32.0-0.34.0; vllm PR #40849,
    open, would pass online quantization on to external drafts); and a draft lm_head quantized by
    --speculative-config draft_lm_head_quantization (0.33.0+), which config/speculative.py says
    changes the acceptance length."""
    sp, server = e.speculative, e.server
    if e.engine != "vllm" or sp is None or server is None:
        return []
    out: list[Finding] = []
    head = getattr(sp, "draft_lm_head_quantization", None)  # stored reports predate it
    draft = sp.draft_model_path or "<draft>"
    if head:
        out.append(
            Finding(
                "draft-lm-head-quantized",
                Severity.WARNING,
                f"The draft's lm_head runs quantized ({head}), which changes its acceptance: "
                "the draft measured here is not the one trained.",
                f"--speculative-config draft_lm_head_quantization={head} (vLLM "
                f"{e.rules().first_release('draft_lm_head_quantization')} and later, "
                "config/speculative.py: 'acceptance length can change').",
                "Restart with the speculative config without draft_lm_head_quantization: "
                f"{e.words().speculation_flags(draft, sp.num_steps or 3)}.",
                {"draft_lm_head_quantization": head},
            )
        )
    quant = server.quantization
    if quant and str(quant).lower() not in ("none", "unquant"):
        loaded = sp.draft_quantization or "its checkpoint's dtype (no quantization config)"
        out.append(
            Finding(
                "draft-not-quantized-like-target",
                Severity.INFO,
                f"vLLM loads the draft as its own checkpoint says ({loaded}), not with the "
                f"target's {quant}: its acceptance is the trained draft's; its memory is not "
                "the target's saving.",
                f"quantization={quant} on the target; vLLM builds an external draft with its own "
                "quantization config (models/utils.py get_draft_quant_config), where SGLang "
                "would inherit the target's (server_args.py; sglang PR #28196). vllm PR #40849 "
                "(open) would pass online quantization on.",
                "Nothing to change for acceptance.",
                {"target_quantization": quant, "draft_quantization": sp.draft_quantization},
            )
        )
    return out


def rule_draft_window_ignored(e: Evidence) -> list[Finding]:
    """A sliding-window draft (layer_types) served as full attention: SGLang's llama_eagle3.py
    takes the window from --speculative-draft-window-size alone (0.5.12+), never from the draft's
    config; vLLM (models/llama.py, qwen3_eagle3.py, 0.32.0-0.34.0) follows layer_types. A draft
    trained with a window loses acceptance with context when served without it (speculators PR
    #684: accept length 2.30 at 2k tokens, 1.08 at 20k)."""
    spec, sp = e.spec, e.speculative
    if spec is None or spec.sliding_window is None or sp is None:
        return []
    words = e.words()
    flags = words.draft_window_flags(spec.sliding_window)
    if flags is None or sp.draft_window_size == spec.sliding_window:
        return []
    served = f"a window of {sp.draft_window_size}" if sp.draft_window_size else "full attention"
    fix = f"Restart with {flags}."
    if e.rules().has("draft_window_flag") is False:
        fix = (
            f"SGLang {e.version()} has no flag for it: upgrade to "
            f"{e.rules().first_release('draft_window_flag')} or later and restart with {flags}."
        )
    return [
        Finding(
            "draft-window-ignored",
            Severity.WARNING,
            f"The draft was trained with a sliding window of {spec.sliding_window} tokens "
            f"(layer_types), and {words.ENGINE} serves it with {served}: its acceptance falls "
            "as the context grows.",
            f"config.json layer_types: sliding_attention, sliding_window={spec.sliding_window}; "
            f"{words.ENGINE}'s EAGLE-3 draft takes its window from the server's flag only. "
            "speculators PR #684: a draft served without its window accepted 2.30 tokens a "
            "round at 2k tokens of context and 1.08 at 20k.",
            fix,
            {"sliding_window": spec.sliding_window, "served_window": sp.draft_window_size},
        )
    ]
