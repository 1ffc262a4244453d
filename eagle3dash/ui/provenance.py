"""The provenance card of a trainer's run folder, and the trainer's own acceptance numbers beside
ours: words and rows for the Run and Checkpoints pages (from a stored checkpoint report's
`provenance.Provenance`, diagnosis/stored.py StoredCheckpoint), drawn by
`reports.provenance_card`."""

from __future__ import annotations

import pandas as pd

from eagle3dash.diagnosis.stored import StoredCheckpoint
from eagle3dash.provenance import Provenance
from eagle3dash.ui.fmt import DASH

CHOSEN = {
    "best": "the run's best checkpoint",
    "latest": "the run's latest checkpoint (no best recorded)",
    "given": "the step folder given",
}


def card_of(report: StoredCheckpoint | None) -> Provenance | None:
    """The provenance card of a stored checkpoint report, when it came from a run folder."""
    return None if report is None else report.provenance


def trainer_rows(report: StoredCheckpoint | None) -> list[tuple[str, str, int, None, float]]:
    """The trainer's own acceptance per draft position (from a checkpoint report's provenance),
    converted to ours, as long metric rows (source "trainer", step = the position) for the
    per-position chart and the CSV."""
    card = card_of(report)
    metrics = None if card is None else card.metrics
    return [
        ("trainer", "acceptance", k + 1, None, float(v))
        for k, v in enumerate([] if metrics is None else metrics.per_position or [])
    ]


def trainer_note(report: StoredCheckpoint | None) -> str | None:
    """One sentence: the trainer's own accept length in our definition, and the conversion."""
    card = card_of(report)
    metrics = None if card is None else card.metrics
    if metrics is None:
        return None
    own = metrics.trainer_value
    theirs = f"; the trainer reports {metrics.trainer_name} = {own:.2f}" if own else ""
    sampled = metrics.sampled_per_position
    at_t1 = (
        f" Under sampled verification (its acceptance_rate_i, temperature 1): accept length "
        f"{1 + sum(sampled):.2f}."
        if sampled
        else ""
    )
    return (
        f"Trainer's eval ({metrics.source}): accept length {metrics.accept_length:.2f} "
        f"with the bonus token{theirs}. Converted: {metrics.conversion}.{at_t1}"
    )


def card_frame(card: Provenance) -> pd.DataFrame:
    """The card as Field / Value rows, unrecorded facts shown as a dash."""
    layers = card.capture_layers
    revision = card.target_revision
    score = card.best_score
    chosen = CHOSEN.get(str(card.chosen_by), "")
    rows = [
        ("Trainer", f"{card.trainer} {card.trainer_version or ''}".strip()),
        ("Checkpoint read", f"{card.checkpoint} ({chosen})"),
        ("Step / epoch", f"{_text(card.step)} / {_text(card.epoch)}"),
        ("Strategy", _text(card.strategy)),
        ("Target", _text(card.target_path) + (f" @ {revision}" if revision else "")),
        ("Target config.json sha256", _text(card.target_config_sha256)),
        ("Capture layers", ", ".join(map(str, layers)) if layers else "not recorded"),
        ("Chat template", _text(card.chat_template)),
        (
            "Best metric",
            f"{card.best_metric} = {score:.4g}" if score is not None else DASH,
        ),
    ]
    return pd.DataFrame(rows, columns=["Field", "Value"])


def _text(value: object) -> str:
    return DASH if value is None or value == "" else str(value)
