"""The provenance card of a trainer's run folder, and the trainer's own acceptance numbers beside
ours: words and rows for the Run and Checkpoints pages (from a stored checkpoint report's
`provenance.Provenance`, diagnosis/stored.py StoredCheckpoint), drawn by
`reports.provenance_card`."""

from __future__ import annotations

import pandas as pd

from eagle3dash.diagnosis.stored import StoredCheckpoint
from eagle3dash.layout import describe_layout, format_layout, ids_text
from eagle3dash.provenance import Provenance
from eagle3dash.run_record import read_export
from eagle3dash.spec import DraftSpec
from eagle3dash.ui.fmt import DASH

TRAINER_NAMES = {"nemo-automodel": "NeMo AutoModel"}  # else the trainers.TRAINERS key itself
FORMAT_NAMES = {"nemo-automodel": "nemo-automodel (NeMo AutoModel's consolidated export)"}

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
    revision = card.target_revision
    score = card.best_score
    chosen = CHOSEN.get(str(card.chosen_by), "")
    rows = [
        ("Trainer", f"{trainer_name(card.trainer)} {card.trainer_version or ''}".strip()),
        ("Checkpoint read", f"{card.checkpoint} ({chosen})"),
        ("Step / epoch", f"{_text(card.step)} / {_text(card.epoch)}"),
        ("Strategy", _text(card.strategy)),
        ("Target", _text(card.target_path) + (f" @ {revision}" if revision else "")),
        ("Target config.json sha256", _text(card.target_config_sha256)),
        ("Capture layers", layers_text(card)),
        ("Chat template", _text(card.chat_template)),
        (
            "Best metric",
            f"{card.best_metric} = {score:.4g}" if score is not None else DASH,
        ),
    ]
    return pd.DataFrame(rows, columns=["Field", "Value"])


def layers_text(card: Provenance) -> str:
    """The recorded capture ids and the record they came from (unknown in early reports)."""
    if not card.capture_layers:
        return "not recorded"
    ids = ", ".join(map(str, card.capture_layers))
    return f"{ids} ({card.capture_record})" if card.capture_record else ids


def _text(value: object) -> str:
    return DASH if value is None or value == "" else str(value)


def trainer_name(trainer: str) -> str:
    """A trainer's name for people: 'NeMo AutoModel' for 'nemo-automodel'."""
    return TRAINER_NAMES.get(trainer, trainer)


def format_name(fmt: str) -> str:
    """A checkpoint format with the trainer it names, where it names one."""
    return FORMAT_NAMES.get(fmt, fmt)


def export_lines(spec: DraftSpec, card: Provenance | None) -> list[str]:
    """For an export that records its target's depth (NeMo AutoModel's): the taps training fed
    and what each engine's rules feed this config.json, in sentences; [] for other exports."""
    reading = read_export(spec, card)
    if reading is None:
        return []
    n, training = reading.num_layers, reading.training.layout
    trainer = trainer_name(reading.trainer)
    ids = ids_text(reading.ids) if reading.ids is not None else "none"
    if reading.record is not None:
        how = f"ids {ids} from the run's {reading.record}"
    else:
        how = f"ids {ids}, {trainer}'s default, assumed: nothing here records the ids it used"
    lines = [
        f"Training fed {format_layout(training)} ({describe_layout(training, n)}) on the "
        f"{n}-layer target (config.json num_hidden_layers): {how}; {reading.training.rule}"
    ]
    for feed in reading.feeds:
        served = feed.served.layout
        reads = (
            "reads the layer ids in this config.json"
            if feed.reads_ids
            else "finds no layer ids it reads in config.json, so it feeds its defaults"
        )
        verdict = "the training taps" if served == training else "not the training taps"
        lines.append(
            f"{feed.engine.label()} {reads}: {format_layout(served)} "
            f"({describe_layout(served, n)}), {verdict} (predicted from its rules)."
        )
    return lines
