"""Words for a diagnosis's values: sources, what was not checked, the verdict's sentence.

Plain functions over `Diagnosis.to_dict()` (no Streamlit), shared by the pages and the CLI: the
library returns values, the interfaces say them. The app names its form fields, the CLI its flags.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from eagle3dash.diagnosis.options import SCHEMA
from eagle3dash.layout import Tap, describe_layout
from eagle3dash.ui.fmt import DASH

SOURCE_WORDS = {
    "training-dump": "measured: the training dump's own features",
    "declared": "declared by you (training layout option)",
    "layout-detective": "measured: the layout detective, from the tensors",
    "config": "assumed from the config",
    "observed": "observed: each served slot matched to the target's taps",
    "matched-to-dump": "observed: served slots matched to the training dump by scale",
    "predicted": "assumed: SGLang's rules for this version",
}


def source_words(source: str | None) -> str:
    """Where a side's layout comes from, in words."""
    return SOURCE_WORDS.get(source or "", source or "unknown")


def taps_words(layout: list[Mapping[str, Any]] | None, num_layers: int | None) -> str:
    """A stored layout ([{depth, post_norm}]) in words: 'embedding output, after block 1'."""
    if not layout:
        return DASH
    taps = tuple(Tap(int(t["depth"]), bool(t.get("post_norm"))) for t in layout)
    return describe_layout(taps, num_layers)


def not_checked_text(item: Mapping[str, Any], interface: str = "app") -> str:
    """One 'not checked' item with the one action that enables it, in the interface's terms."""
    option = SCHEMA.get(item.get("option") or "")
    if option is not None:
        how = (
            f"fill in '{option.label}' on New run" if interface == "app" else f"pass {option.flag}"
        )
        action = f"{how} ({item['action']})" if item.get("action") else how
    else:
        action = item.get("action") or ""
    return f"{item['reason']}: {action}" if action else str(item["reason"])


def verdict_sentence(diagnosis: Mapping[str, Any]) -> str:
    """The verdict in one sentence: the root cause, or what was found and what was not checked."""
    verdict = diagnosis.get("verdict") or {}
    root = verdict.get("root_cause")
    if root:
        return str(root["title"])
    missing = verdict.get("not_checked") or []
    if verdict.get("problems_found"):
        head = "No critical problem found; see the warnings below"
    else:
        head = "No problems found" + (" in what was checked" if missing else "")
    return head + (f"; not checked: {', '.join(missing)}." if missing else ".")


def stopped_text(status: str, reason: str | None) -> str:
    """Why a run has no results: a failure with its reason, or a cancel, said neutrally."""
    if status == "cancelled":
        how = reason if reason and reason.startswith("cancelled") else "cancelled"
        return f"This run was {how}, so it has no results. Start it again from New run."
    return f"The run failed: {reason or 'no reason recorded'}"


def run_verdict(run: Mapping[str, Any]) -> str:
    """A run's verdict in the Runs table: the root cause, the worst finding, or that nothing was
    found in what was checked; for a run without a diagnosis, how it ended."""
    verdict = run.get("verdict")
    status = run.get("status")
    if verdict:
        root = verdict.get("root_cause")
        if root:
            return f"🛑 {root['title']}"
        if verdict.get("problems_found"):
            return f"⚠️ {run.get('worst_finding_title') or 'warnings: see the run'}"
        missing = verdict.get("not_checked") or []
        if missing:
            return f"✅ no problems found in what was checked (not checked: {', '.join(missing)})"
        return "✅ no problems found"
    if status == "failed":
        return f"failed: {str(run.get('error') or 'no reason recorded').splitlines()[0]}"
    if status == "cancelled":
        return "cancelled"
    return run.get("worst_finding_title") or DASH


IDENTITY_WORDS = {
    "same": "the endpoint serves this checkpoint's draft",
    "differs": "the endpoint serves ANOTHER draft than this checkpoint",
    "unknown": "not known whether the endpoint serves this checkpoint's draft",
}


def identity_words(identity: Mapping[str, Any] | None) -> str | None:
    """Whether the endpoint serves the checkpoint's draft, and how that was decided; None when
    the diagnosis did not ask."""
    if not identity:
        return None
    status = identity.get("status") or "unknown"
    head = IDENTITY_WORDS.get(status, f"draft identity: {status}")
    return f"{head} ({identity['reason']})" if identity.get("reason") else head


SLOT_MATCH_CAPTION = (
    "Each cell scores how well the states one slot carries match one tap of the target: the mean "
    "cosine similarity of the two (their content) minus half the gap in their scale (|log10| of "
    "the ratio of their RMS). 1 is the same content at the same scale; the brightest cell of a "
    "row is the tap that slot most likely carries."
)


def double_note(server: Mapping[str, Any] | None) -> str | None:
    """Where the tok/s and speedup come from when the endpoint is eagle3dash's SGLang API double
    (its server_info says so); None for any other server."""
    info = (server or {}).get("server_info") or {}
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
    return (
        "This endpoint is eagle3dash's SGLang API double, a test and demo stand-in, not a serving "
        f"engine: its tok/s and the speedup come from {source}, not from measured serving speed."
    )


def per_position_note(diagnosis: Mapping[str, Any]) -> str | None:
    """Why the measured acceptance per position is missing, when it is."""
    measured = diagnosis.get("measured")
    if not measured or measured.get("per_position") is not None:
        return None
    return (
        "Measured acceptance per position: not reported, as the server predates SGLang's "
        "spec_correct_drafts_histogram; only the simulated sides are drawn."
    )
