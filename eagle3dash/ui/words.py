"""Words for a diagnosis's values: sources, what was not checked, the verdict's sentence.

Plain functions over the typed stored diagnosis (`diagnosis/stored.py` StoredDiagnosis; no
Streamlit), shared by the pages and the CLI: the library returns values, the interfaces say them.
The app names its form fields, the CLI its flags.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from eagle3dash.diagnosis.options import SCHEMA
from eagle3dash.diagnosis.result import NotChecked
from eagle3dash.diagnosis.stored import StoredDiagnosis
from eagle3dash.diagnosis.stored_run import StoredRun
from eagle3dash.engines.rules import EngineWords
from eagle3dash.engines.rules import words as engine_words_of
from eagle3dash.engines.seam import VLLM, ServerReport
from eagle3dash.engines.sglang.rules import eagle_config_json
from eagle3dash.findings import Finding
from eagle3dash.identity import DraftIdentity
from eagle3dash.jobs import BusyServer
from eagle3dash.layout import Layout, describe_layout
from eagle3dash.noise import MATERIAL_ACCEPT_LENGTH
from eagle3dash.profile import FormatRow, NotProfiled, Profile, Recommendation, TemperatureRow
from eagle3dash.ui.fmt import DASH, is_missing, md_escape, num

SOURCE_WORDS = {
    "training-dump": "measured: the training dump's own features",
    "declared": "declared by you (training layout option)",
    "layout-detective": "inferred by the layout detective, from the tensors",
    "config": "assumed from the config",
    "run-record": "the training run's record of its capture ids, under the trainer's convention",
    "observed": "observed: each served slot matched to the target's taps",
    "matched-to-dump": "observed: served slots matched to the training dump by scale",
    "acceptance-matched": "inferred from the measured acceptance: the layout whose simulated "
    "acceptance per draft position matches what the server measured",
    "predicted": "assumed: {engine}'s rules for this version",
}


def engine_name(server: ServerReport | None) -> str:
    """'vLLM' or 'SGLang': whose rules a run's predictions follow (reports stored before engines
    were told apart are SGLang's)."""
    return "vLLM" if server is not None and server.engine == VLLM else "SGLang"


def source_words(source: str | None, server: ServerReport | None) -> str:
    """Where a side's layout comes from, in words (a prediction names the server's engine)."""
    words = SOURCE_WORDS.get(source or "", source or "unknown")
    return words.replace("{engine}", engine_name(server))


def taps_words(layout: Layout | None, num_layers: int | None) -> str:
    """A layout in words: 'embedding output, after block 1'."""
    return describe_layout(layout, num_layers) if layout else DASH


# A check that did not run, in words, by its stored id (diagnosis/stages.py's NotChecked).
CHECK_WORDS = {
    "training-side": "the training side",
    "serving-taps": "which taps the server feeds",
    "serving-states": "the states the server feeds the draft",
    "speedup": "the speedup",
    "draft-identity": "whether the endpoint serves this draft",
    "profile-benchmark": "part of the acceptance profile",
}
_PROFILE_CAPTURE = re.compile(r"profile-(.+)-capture")


def check_words(checks: Sequence[str]) -> str:
    """The checks that did not run, in words: 'the training side, which taps the server feeds'
    (a profile's capture by its prompt format; an id stored by a later version as words)."""
    said = []
    for check in checks:
        capture = _PROFILE_CAPTURE.fullmatch(check)
        if capture:
            said.append(f"the capture of the {capture[1]} prompts")
        else:
            said.append(CHECK_WORDS.get(check, check.replace("-", " ").replace("_", " ")))
    return ", ".join(said)


def not_checked_text(item: NotChecked | NotProfiled, interface: str = "app") -> str:
    """One 'not checked' item with the error that stopped it (when one did) and the one action
    that enables it, in the interface's terms: everything it rests on, in one place."""
    option = SCHEMA.get(item.option or "")
    if option is not None:
        how = (
            f"fill in '{option.label}' on New run" if interface == "app" else f"pass {option.flag}"
        )
        action = f"{how} ({item.action})" if item.action else how
    else:
        action = item.action or ""
    why = f"{item.reason} ({item.error})" if item.error else item.reason
    return f"{why}: {action}" if action else why


# How a claim is known (eagle3dash/evidence_levels.py), in words.
EVIDENCE_WORDS = {
    "observed": "observed",
    "training-dump": "from the training dump",
    "declared": "declared by you",
    "recorded": "recorded by the training run",
    "detective": "inferred by the layout detective",
    "acceptance": "inferred from the measured acceptance",
    "predicted": "predicted from {engine}'s rules, not checked",
    "assumed": "assumed from the config, not checked",
    "not-checked": "not checked",
}


def evidence_words(level: str | None, server: ServerReport | None) -> str:
    """An evidence level in words (a prediction names the server's engine)."""
    words = EVIDENCE_WORDS.get(level or "", level or "unknown")
    return words.replace("{engine}", engine_name(server))


def layout_comparison(diagnosis: StoredDiagnosis) -> tuple[str, str | None, str]:
    """The layout comparison's tone, its kind (for a difference) and its sentence: its word
    follows the weaker side. Tones: 'success' (a checked agreement only), 'neutral' (the same,
    but not checked), 'warning' (a difference not checked), 'error' (a checked difference)."""
    diff, server = diagnosis.layout_diff, diagnosis.server
    level = diff.evidence
    checked = diff.checked
    sides = (
        f"training side {evidence_words(diff.training_evidence, server)}, serving side "
        f"{evidence_words(diff.serving_evidence, server)}"
    )
    if diff.kind == "identical":
        if checked:
            return (
                "success",
                None,
                "Training and serving feed the same taps to every slot "
                f"({evidence_words(level, server)}).",
            )
        same = f"Same taps on both sides ({evidence_words(level, server)}): {sides}."
        return "neutral", None, same
    summary = diff.summary.rstrip(".")
    how = f"{summary}. How it is known: {sides}."
    return ("error" if checked else "warning"), diff.kind or "differs", how


def layout_check_action(diagnosis: StoredDiagnosis, interface: str = "app") -> str | None:
    """The one action that would check the layout comparison, when it was not checked."""
    diff = diagnosis.layout_diff
    if diff.checked or not diff.would_check:
        return None
    return not_checked_text(diff.would_check[0], interface)


def slot_word(diagnosis: StoredDiagnosis, same: bool) -> str:
    """A slot's match word: 'same' / 'DIFFERS', with '(predicted, not checked)' when the weaker
    side was not checked."""
    word = "same" if same else "DIFFERS"
    if diagnosis.layout_diff.checked:
        return word
    return f"{word} ({evidence_words(diagnosis.layout_diff.evidence, diagnosis.server)})"


def healthy_lines(diagnosis: StoredDiagnosis) -> list[str]:
    """What a healthy verdict rests on: the taps, the served weights, measured against
    simulated, the speedup."""
    verdict = diagnosis.verdict
    lines = []
    if diagnosis.layout_diff.kind == "identical":
        lines.append(
            "training and serving feed the same taps to every slot "
            f"({evidence_words(diagnosis.layout_diff.evidence, diagnosis.server)})"
        )
    if diagnosis.identity is not None and diagnosis.identity.status == "same":
        lines.append("the endpoint serves this checkpoint's weights (byte-identical)")
    measured, simulated = verdict.measured_accept_length, verdict.sim_accept_serving
    if measured is not None and simulated is not None:
        lines.append(
            f"measured accept length {measured:.2f} against {simulated:.2f} simulated on the "
            "served states"
        )
    if verdict.speedup is not None:
        lines.append(f"{verdict.speedup:.2f}x the baseline's tok/s")
    return lines


@dataclass(frozen=True)
class FixBlock:
    """A fix to paste: a complete JSON object for the draft's config.json, or a complete command
    that serves the model with the fix's flags; the prose that goes beside it, never in it."""

    where: str  # where it goes and what to do with it (shown beside the block)
    code: str  # what to paste, nothing else
    language: str  # "json" | "bash"
    note: str | None = None  # what its values mean ("-1 = the embedding output")


# A server flag in a fix's words, with its value when it has one: a number, a path, a hub id, a
# quoted JSON object, or one of the engines' mode words.
_VALUE = r"(?:'[^']*'|\d[\w.]*|[/~][^\s,;)]*|[\w.-]+/[^\s,;)]+|full|last|unquant|true|false)"
_FLAGS = re.compile(rf"--[a-z][a-z0-9-]+(?: {_VALUE})?(?: --[a-z][a-z0-9-]+(?: {_VALUE})?)*")
EMBEDDING_NOTE = "-1 = the embedding output"


def fix_block(finding: Finding, server: ServerReport | None = None) -> FixBlock | None:
    """The fix to paste: the dual-key config for SGLang and vLLM, else the top-level key (vLLM),
    else the eagle_config entry (SGLang), each a complete JSON object; else the whole command
    that serves the model with the fix's flags over the server's speculative ones (when the
    server's model is known); None when the fix is prose only."""
    data = finding.data or {}
    dual = data.get("dual_key")
    if dual:
        nested = dual.get("eagle_config", {}).get("eagle_aux_hidden_state_layer_ids") or []
        where = "Merge into the draft's config.json, for SGLang and vLLM alike."
        return FixBlock(where, json.dumps(dual), "json", _embedding_note(nested))
    top = data.get("top_level_ids")
    if top is not None:
        version = data.get("vllm_version")
        where = "Merge into the draft's config.json (its top level)" + (
            f", served by vLLM {version}." if version else "."
        )
        return FixBlock(where, json.dumps({"eagle_aux_hidden_state_layer_ids": top}), "json")
    ids = data.get("config_ids")
    if ids is not None:
        version = data.get("sglang_version")
        where = "Merge into the draft's config.json" + (
            f", served by SGLang {version}." if version else "."
        )
        code = "{" + eagle_config_json(ids) + "}"
        return FixBlock(where, code, "json", _embedding_note(ids))
    flags = _FLAGS.search(finding.fix or "")
    return None if flags is None else command_block(flags.group(0), server)


def command_block(flags: str, server: ServerReport | None) -> FixBlock | None:
    """The whole command that serves the server's model with these flags over its speculative
    ones; None when the server's model is not known (no command can be made whole)."""
    if server is None or not server.model_path:
        return None
    command = server_words(server).launch_command(
        server.model_path, _with_speculation(flags, server)
    )
    where = "Restart the server with this command, adding your own other flags (port, parallelism)."
    return FixBlock(where, command, "bash")


CONFIG_FIX_KEYS = ("dual_key", "top_level_ids", "config_ids")  # a fix that edits config.json


def config_fix(findings: Sequence[Finding], root: Finding | None) -> Finding | None:
    """The finding whose fix edits the draft's config.json: the verdict's root cause when it
    does, else the first critical or warning one that does; None when none does."""
    ranked = [root] if root is not None else []
    ranked += [f for f in findings if f.severity in ("critical", "warning")]
    return next(
        (f for f in ranked if any((f.data or {}).get(k) is not None for k in CONFIG_FIX_KEYS)),
        None,
    )


def layout_issue(finding: Finding, problems: bool) -> str:
    """What the Checkpoint tab says when the run's fix edits this checkpoint's config: its files
    are read (with the problems listed above, if any), and its layout is the issue."""
    files = (
        "Its files are readable, with the problems above"
        if problems
        else "The checkpoint's files are readable: its config and weights load as they are"
    )
    return (
        f"{files}. Its layout is the issue: {finding.title.rstrip('.')} ({finding.id}). The fix "
        "edits its config.json: see the fix under the verdict."
    )


def _embedding_note(ids: Sequence[int]) -> str | None:
    """SGLang's id -1, when the ids hold it: the embedding output (the tap before block 0)."""
    return EMBEDDING_NOTE if -1 in ids else None


def _with_speculation(flags: str, server: ServerReport) -> str:
    """The fix's flags after the server's speculative ones (a flag of the fix replaces the same
    flag of the server's), so the command keeps serving its draft."""
    spec = server.speculative
    words = server_words(server)
    base = (
        words.speculation_flags(spec.draft_model_path, spec.num_steps or 3)
        if spec is not None and spec.draft_model_path
        else ""
    )
    merged = dict(_flag_pairs(base))
    merged.update(_flag_pairs(flags))
    return " ".join(flag if value is None else f"{flag} {value}" for flag, value in merged.items())


def _flag_pairs(flags: str) -> list[tuple[str, str | None]]:
    """'--a 1 --b --c x' as [('--a', '1'), ('--b', None), ('--c', 'x')], quoted values kept."""
    pairs: list[tuple[str, str | None]] = []
    for token in re.findall(r"'[^']*'|\S+", flags):
        if token.startswith("--"):
            pairs.append((token, None))
        elif pairs and pairs[-1][1] is None:
            pairs[-1] = (pairs[-1][0], token)
    return pairs


def server_words(server: ServerReport) -> EngineWords:
    """How the server's engine is told things (its flags and launcher)."""
    return engine_words_of(server.engine)


def _first_warning(diagnosis: StoredDiagnosis) -> str | None:
    return next((f.title for f in diagnosis.findings if f.severity == "warning"), None)


def verdict_sentence(diagnosis: StoredDiagnosis) -> str:
    """The verdict in one sentence, by its status: the root cause (or the first warning) for a
    problem; what was not checked for an incomplete run; what it rests on for a healthy one."""
    verdict = diagnosis.verdict
    if verdict.root_cause is not None:
        return verdict.root_cause.title
    status = verdict.status
    missing = verdict.not_checked
    warning = _first_warning(diagnosis)
    if status == "healthy":
        lines = healthy_lines(diagnosis)
        return "Healthy" + (": " + "; ".join(lines) if lines else "") + "."
    if status == "problem" and warning:
        return warning
    head = "No critical problem found in what was checked"
    if warning:
        head += f"; warning: {warning.rstrip('.')}"
    return head + (f"; not checked: {check_words(missing)}." if missing else ".")


def stopped_text(status: str, reason: str | None) -> str:
    """Why a run has no results: a failure with its reason, or a cancel, said neutrally."""
    if status == "cancelled":
        how = reason if reason and reason.startswith("cancelled") else "cancelled"
        return f"This run was {how}, so it has no results. Start it again from New run."
    return f"The run failed: {reason or 'no reason recorded'}"


def run_verdict(run: StoredRun) -> str:
    """A run's verdict in the Runs table, in words that open with how bad it is (a table cell
    draws no icon): the root cause or the worst warning (never an info note), what was not
    checked, or healthy; for a run without a diagnosis, how it ended."""
    status, verdict = run.status, run.verdict
    if verdict is not None:
        if verdict.root_cause is not None:
            return f"critical: {verdict.root_cause.title}"
        missing = verdict.not_checked
        # problems_found counts warnings and worse only, so the worst finding is one of them.
        worst = run.worst_finding_title if verdict.problems_found else None
        state = verdict.status
        if state == "healthy":
            return "healthy: every check ran and found nothing at warning or worse"
        if state == "problem":
            return f"warning: {worst or 'see the run'}"
        head = (
            f"warning: {worst}" if worst else "incomplete: no critical problem in what was checked"
        )
        return head + (f" (not checked: {check_words(missing)})" if missing else "")
    if status == "failed":
        return f"failed: {(run.error or 'no reason recorded').splitlines()[0]}"
    if status == "cancelled":
        return "cancelled"
    return DASH


# Where a finding's evidence text ends its first sentence: a full stop before a capital (not
# "0.5.23", "e.g. x" or "(+1). training"), or its first semicolon.
_FIRST_SENTENCE_END = re.compile(r"(?<=\.)\s+(?=[A-Z\[(])|;\s+")


def evidence_parts(evidence: str) -> tuple[str, str]:
    """A finding's evidence as its first sentence and the rest (the numbers), '' when it is one
    sentence: the page says the first and keeps the rest behind an expander."""
    text = evidence.strip()
    end = _FIRST_SENTENCE_END.search(text)
    if end is None:
        return text, ""
    lead = text[: end.start()].rstrip(";")
    return (lead if lead.endswith(".") else lead + "."), text[end.end() :]


IDENTITY_WORDS = {
    "same": "the endpoint serves this checkpoint's draft",
    "differs": "the endpoint serves ANOTHER draft than this checkpoint",
    "unknown": "not known whether the endpoint serves this checkpoint's draft",
}


def identity_words(identity: DraftIdentity | None) -> str | None:
    """Whether the endpoint serves the checkpoint's draft, and how that was decided; None when
    the diagnosis did not ask."""
    if identity is None:
        return None
    status = identity.status or "unknown"
    head = IDENTITY_WORDS.get(status, f"draft identity: {status}")
    return f"{head} ({identity.reason})" if identity.reason else head


SWEEP_RANKING = (
    "Ranked by simulated accept length at the server's draft steps (serving rounds replayed on "
    "the capture's sequences), not by top-1: a runner-up can have the higher top-1 (step-1 "
    "accuracy over the positions scored at the server's draft steps) and still accept fewer "
    "tokens per round."
)
# Said only where the sides' table is drawn above the sweep (a run with its diagnosis).
SIDES_BESIDE_SWEEP = (
    "The sides' numbers in Training vs serving above come from their own evaluations, which "
    "score the positions of the longest chain the run simulates, so their top-1 can differ "
    "slightly."
)

SLOT_MATCH_CAPTION = (
    "Each cell scores how well the states one slot carries match one tap of the target: the mean "
    "cosine similarity of the two (their content) minus half the gap in their scale (|log10| of "
    "the ratio of their RMS). 1 is the same content at the same scale; the brightest cell of a "
    "row is the tap that slot most likely carries."
)


def double_note(server: ServerReport | None) -> str | None:
    """Where the tok/s and speedup come from when the endpoint is one of eagle3dash's API doubles
    (SGLang's or vLLM's: its server_info says so); None for any other server."""
    return None if server is None else _double_note_of(server.server_info)


def _double_note_of(info: Mapping[str, Any]) -> str | None:
    """double_note from the server's raw server_info (the double's own keys)."""
    if not info.get("eagle3dash_double"):
        return None
    delay = info.get("eagle3dash_double_delay_s")
    step = info.get("eagle3dash_double_draft_step_s")
    if isinstance(delay, int | float) and delay > 0:
        step_words = (
            f"each draft step {step * 1000:g} ms"
            if isinstance(step, int | float)
            else f"each draft step {delay * 100:g} ms"
        )
        source = (
            f"the double's modelled cost (each target forward takes at least {delay * 1000:g} ms "
            f"and {step_words}, the tiny models' compute inside those floors)"
        )
    elif delay == 0:
        source = "the double's tiny models computing on this machine (no modelled cost set)"
    else:
        source = (
            "the double's modelled cost (each target forward takes at least a set delay and "
            "each draft step a tenth of it)"
        )
    engine = "vLLM" if "vllm_config" in info else "SGLang"  # vLLM's server_info shape
    return (
        f"This endpoint is eagle3dash's {engine} API double, a test and demo stand-in, not a "
        f"serving engine: its tok/s and the speedup come from {source}, not from measured "
        "serving speed."
    )


def runs_double_note(rows: Sequence[StoredRun]) -> list[str]:
    """The Runs table's captions: for the listed runs whose endpoint was one of eagle3dash's API
    doubles, which columns its modelled cost shaped, once per note (as the double's server info
    states it)."""
    by_note: dict[str, list[int]] = {}
    for row in rows:
        note = _double_note_of(row.server_info)
        if note is not None:
            by_note.setdefault(note, []).append(row.id)
    return [
        f"Runs {', '.join(f'#{i}' for i in sorted(ids))}: their tok/s and speedup are shaped by "
        f"the demo double (the accept lengths count tokens: its cost does not touch them). {note}"
        for note, ids in by_note.items()
    ]


def per_position_note(diagnosis: StoredDiagnosis) -> str | None:
    """Why the measured acceptance per position is missing, when it is."""
    measured = diagnosis.measured
    if measured is None or measured.per_position is not None:
        return None
    return (
        "Measured acceptance per position: not reported, as the server predates SGLang's "
        "spec_correct_drafts_histogram; only the simulated sides are drawn."
    )


def per_request_note(diagnosis: StoredDiagnosis) -> str | None:
    """Why the accept length per request has no bars, when it has none: the server counted
    acceptance over all requests only."""
    measured = diagnosis.measured
    if measured is None or not all(map(is_missing, measured.accept_length_per_request)):
        return None
    return (
        "No bars: the server counts accepted drafts over all requests only (its /metrics "
        "counters around the benchmark), not per request; its accept length over the run is in "
        "the verdict above. The lines are the standalone draft's."
    )


# --- the steps advice ---------------------------------------------------------------------


def gain_interval_text(rec: Recommendation) -> str | None:
    """'+19% (+7% to +31%)': the fastest setting's predicted gain and its interval."""
    gain = rec.gain
    if gain is None and rec.predicted_tok_s is not None and rec.current_tok_s:
        gain = rec.predicted_tok_s / rec.current_tok_s - 1  # stored before the interval
    if gain is None:
        return None
    low, high = rec.gain_low, rec.gain_high
    interval = "" if low is None or high is None else f" ({low:+.0%} to {high:+.0%})"
    return f"{gain:+.0%}{interval}"


def recommendation_text(profile: Profile, diagnosis: StoredDiagnosis | None = None) -> str | None:
    """The steps advice in words, with the gain's interval from the per-request noise: a change
    only above the noise, and labelled 'after fixing' while a critical finding stands."""
    rec = profile.recommended
    if rec is None:
        return None
    n = rec.num_steps
    predicted = (
        f"predicted {num(rec.predicted_tok_s, 1)} tok/s, accept length "
        f"{num(rec.predicted_accept_length)}"
    )
    current, fastest = rec.current_num_steps, rec.fastest_num_steps
    gain = gain_interval_text(rec)
    root = None if diagnosis is None else diagnosis.verdict.root_cause
    after = "After fixing the root cause the acceptance changes: measure again. " if root else ""
    if current is None:
        return f"{after}Recommended: {_steps(n)} ({predicted})."
    if current == n:
        if fastest is not None and fastest != n and gain:
            return (
                f"{after}Keep {_steps(n)}: the fastest predicted setting, {_steps(fastest)}, "
                f"gains {gain}, which is not above the per-request noise and 5%."
            )
        return f"{after}The server already runs the recommended {_steps(n)} ({predicted})."
    return (
        f"{after}Recommended: {_steps(n)} ({predicted}, {gain or 'gain unknown'}) instead of the "
        f"current {current} ({num(rec.current_tok_s, 1)} tok/s)"
        + (" — holds only while that finding stands." if root else ".")
    )


def _steps(n: int) -> str:
    return f"{n} draft step" + ("" if n == 1 else "s")


def engine_words(server: ServerReport | None) -> str:
    """The serving engine of a server report: 'SGLang 0.5.23', 'vLLM 0.32.0 (V1 runner)',
    'vLLM 0.32.0 (runner not known)'; reports stored before engines were told apart are
    SGLang's (ServerReport.from_dict), before the runner was read, '(V2 runner, assumed)'."""
    if server is None:
        return "unknown engine"
    version = server.version or "(version unknown)"
    if server.engine == VLLM:
        settings = server.vllm
        if settings is None or settings.runner is None:
            return f"vLLM {version} (runner not known)"
        assumed = ", assumed" if settings.runner_source == "assumed" else ""
        return f"vLLM {version} ({settings.runner.upper()} runner{assumed})"
    return f"SGLang {version}"


def runner_words(server: ServerReport | None) -> str | None:
    """How a vLLM server's model runner is known, in one line; None on another engine."""
    settings = server.vllm if server is not None and server.engine == VLLM else None
    if settings is None:
        return None
    if settings.runner is None:
        return (
            f"not known ({settings.runner_detail}): each runner's reading is kept and the "
            "measurements decide; start the server with VLLM_SERVER_DEV_MODE=1 to show it"
        )
    how = {
        "env": "its environment says",
        "release": "its release says",
        "feature": "its config needs it",
        "platform": "its device decides",
        "config": "its config, nothing turning V2 off",
        "assumed": "assumed (stored before the runner was read from the server)",
    }.get(settings.runner_source, settings.runner_source)
    return f"{settings.runner.upper()}: {how} ({settings.runner_detail})"


_HIDDEN_STATES = {"full": "on, every token", "last": "last token only: no capture", None: "off"}


def server_rows(server: ServerReport) -> list[tuple[str, object]]:
    """What a probe shows of a server, as (setting, value) rows: each engine's own settings (no
    SGLang row on a vLLM server), then its speculative settings."""
    spec = server.speculative
    rows: list[tuple[str, object]] = [
        ("tp / dtype / quantization", f"{server.tp_size} / {server.dtype} / {server.quantization}")
    ]
    if server.engine == VLLM:
        settings = server.vllm
        rows += [
            ("device", server.device or "not said"),
            ("model runner", runner_words(server)),
            (
                "dev endpoints (/server_info)",
                "on" if settings and settings.dev_endpoints else "off",
            ),
            (
                "per-request spec metrics",
                (settings.per_request_spec_metrics if settings else None) or "not said",
            ),
        ]
    else:
        rows += [
            ("attention backend", server.attention_backend),
            (
                "return hidden states",
                f"{_HIDDEN_STATES[server.hidden_states]} (enable_return_hidden_states "
                f"{server.enable_return_hidden_states}, return_hidden_states_mode "
                f"{server.return_hidden_states_mode})",
            ),
            ("chunked prefill size", server.chunked_prefill_size or "off"),
            ("CUDA graph disabled", server.disable_cuda_graph),
            ("radix cache disabled", server.disable_radix_cache),
        ]
    rows.append(("healthy", server.healthy))
    if spec is None:
        return [*rows, ("speculative algorithm", None)]
    if server.engine == VLLM:
        steps = spec.num_steps
        # without /server_info the steps are the count of /metrics' per-position counters
        from_metrics = server.vllm is not None and not server.vllm.dev_endpoints
        rows += [
            ("speculative method", spec.algorithm.lower() or "on (/metrics counts drafts)"),
            ("draft", spec.draft_model_path or "not said"),
            (
                "num_speculative_tokens",
                f"{steps}"
                + (" (counted from /metrics' per-position counters)" if from_metrics else ""),
            ),
        ]
        return rows
    return [
        *rows,
        ("speculative algorithm", spec.algorithm),
        ("draft", spec.draft_model_path),
        (
            "steps / topk / draft tokens",
            f"{spec.num_steps} / {spec.eagle_topk} / {spec.num_draft_tokens}",
        ),
        ("adaptive steps", spec.adaptive),
        ("draft quantization", spec.draft_quantization),
        ("server's avg accept length (since start)", server.avg_spec_accept_length),
    ]


def steps_knob(server: ServerReport | None) -> str:
    """The setting a user of the server's engine knows the draft steps by (SGLang's
    --speculative-num-steps, vLLM's num_speculative_tokens)."""
    return engine_words_of(server.engine if server is not None else "sglang").STEPS_KNOB


def unsaid_by_server(server: ServerReport | None) -> str | None:
    """What the New-run form must ask because a vLLM server does not say it (dev endpoints
    off: no /server_info), else None."""
    if server is None or server.engine != VLLM or server.speculative is None:
        return None
    speculative = server.speculative
    missing = []
    if not speculative.draft_model_path:
        missing.append("which draft it serves (check that your checkpoint is that draft)")
    if not speculative.num_steps:
        missing.append(
            "its draft steps (give num_speculative_tokens of its --speculative-config as "
            "'Draft steps evaluated')"
        )
    if server.vllm is not None and server.vllm.runner is None:
        missing.append(
            "its model runner (each runner's reading is kept; the measured acceptance picks "
            "one when the target is given)"
        )
    if not missing:
        return None
    return (
        "This vLLM server does not say "
        + " or ".join(missing)
        + ": start it with VLLM_SERVER_DEV_MODE=1 to let /server_info tell."
    )


def waiting_behind_words(busy: Sequence[BusyServer]) -> str:
    """Why a queued run has not started: the runs that measure its servers now (Markdown)."""
    behind: dict[str, list[str]] = {}
    for b in busy:
        who = f"run #{b.run_id}" if b.run_id is not None else f"job {b.job_id}"
        behind.setdefault(who, []).append(md_escape(b.server))
    which = "; ".join(
        f"{who}, which is measuring {' and '.join(servers)}" for who, servers in behind.items()
    )
    ends = "that one ends" if len(behind) == 1 else "they end"
    return (
        f"Queued behind {which} now. A server is measured by one run at a time, so that no "
        f"run's numbers include another's requests; this run starts when {ends}."
    )


def rows_prompts_note(rows: list[FormatRow] | list[TemperatureRow], sent: int | None) -> str | None:
    """Why a table's rows cover fewer prompts than the benchmark sent (None when they cover them
    all, or the table is empty)."""
    counts = {row.prompts for row in rows if row.prompts is not None}
    if sent is None or len(counts) != 1 or (n := counts.pop()) >= sent:
        return None
    return (
        f"Every row on the same first {n} of the {sent} prompts (the first row: the benchmark's "
        "own requests on them). The profile sends its prompts in waves and stops once no row's "
        f"noise, beside the first row's, could hide a gap of {MATERIAL_ACCEPT_LENGTH:g} tokens "
        "per round."
    )
