"""Words for a diagnosis's values: sources, what was not checked, the verdict's sentence.

Plain functions over `Diagnosis.to_dict()` (no Streamlit), shared by the pages and the CLI: the
library returns values, the interfaces say them. The app names its form fields, the CLI its flags.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from eagle3dash.diagnosis.options import SCHEMA
from eagle3dash.layout import Tap, describe_layout

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
        return "—"
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
