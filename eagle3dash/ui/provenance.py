"""The provenance card of a trainer's run folder, and the trainer's own acceptance numbers beside
ours: words and rows for the Run and Checkpoints pages (from `provenance.Provenance.to_dict`),
drawn by `reports.provenance_card`."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pandas as pd

from eagle3dash.ui.fmt import DASH

CHOSEN = {
    "best": "the run's best checkpoint",
    "latest": "the run's latest checkpoint (no best recorded)",
    "given": "the step folder given",
}


def card_of(diagnosis_or_report: Mapping[str, Any] | None) -> Mapping[str, Any] | None:
    """The provenance card in a stored diagnosis (its checkpoint report) or an inspect report."""
    found = diagnosis_or_report or {}
    report = found.get("checkpoint") if "checkpoint" in found else found
    return (report or {}).get("provenance")


def trainer_rows(report: Mapping[str, Any] | None) -> list[tuple[str, str, int, None, float]]:
    """The trainer's own acceptance per draft position (from a checkpoint report's provenance),
    converted to ours, as long metric rows (source "trainer", step = the position) for the
    per-position chart and the CSV."""
    metrics = (card_of(report) or {}).get("metrics") or {}
    return [
        ("trainer", "acceptance", k + 1, None, float(v))
        for k, v in enumerate(metrics.get("per_position") or [])
    ]


def trainer_note(diagnosis_or_report: Mapping[str, Any] | None) -> str | None:
    """One sentence: the trainer's own accept length in our definition, and the conversion."""
    metrics = (card_of(diagnosis_or_report) or {}).get("metrics")
    if not metrics:
        return None
    own = metrics.get("trainer_value")
    theirs = f"; the trainer reports {metrics['trainer_name']} = {own:.2f}" if own else ""
    sampled = metrics.get("sampled_per_position")
    at_t1 = (
        f" Under sampled verification (its acceptance_rate_i, temperature 1): accept length "
        f"{1 + sum(sampled):.2f}."
        if sampled
        else ""
    )
    return (
        f"Trainer's eval ({metrics['source']}): accept length {metrics['accept_length']:.2f} "
        f"with the bonus token{theirs}. Converted: {metrics['conversion']}.{at_t1}"
    )


def card_frame(card: Mapping[str, Any]) -> pd.DataFrame:
    """The card as Field / Value rows, unrecorded facts shown as a dash."""
    layers = card.get("capture_layers")
    revision = card.get("target_revision")
    score = card.get("best_score")
    chosen = CHOSEN.get(str(card.get("chosen_by")), "")
    rows = [
        ("Trainer", f"{card.get('trainer')} {card.get('trainer_version') or ''}".strip()),
        ("Checkpoint read", f"{card.get('checkpoint')} ({chosen})"),
        ("Step / epoch", f"{_text(card.get('step'))} / {_text(card.get('epoch'))}"),
        ("Strategy", _text(card.get("strategy"))),
        ("Target", _text(card.get("target_path")) + (f" @ {revision}" if revision else "")),
        ("Target config.json sha256", _text(card.get("target_config_sha256"))),
        ("Capture layers", ", ".join(map(str, layers)) if layers else "not recorded"),
        ("Chat template", _text(card.get("chat_template"))),
        (
            "Best metric",
            f"{card.get('best_metric')} = {score:.4g}" if score is not None else DASH,
        ),
    ]
    return pd.DataFrame(rows, columns=["Field", "Value"])


def _text(value: object) -> str:
    return DASH if value is None or value == "" else str(value)
