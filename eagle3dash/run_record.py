"""A trainer run's record of the layers its training captured, against the run's export.

- The training side a run folder gives every command (`recorded_training`: inspect, layout,
  matrix, detect, diagnose and the pages read it here): the trainer and the ids its capture
  recorded, which stand for the config's.
- The record (SpecForge 0.2's training_state.pt, speculators' run.yaml, NeMo AutoModel's
  config.yaml: `provenance.Provenance.capture_layers`) names other ids than the exported
  config.json: a checkpoint problem naming both (`record_problems`), since the engines read the
  config and the training read the record.
- An export that records its target's depth (NeMo AutoModel's keeps `num_hidden_layers` at the
  target's) can be read without a server: the taps training fed (the record's ids, else the
  trainer's default, assumed) beside the taps each engine's rules feed this config
  (`read_export`): predictions from `engine_rules`, no server asked.
"""

from __future__ import annotations

from dataclasses import dataclass

from eagle3dash.checkpoint_problems import CheckpointProblem, ProblemCode
from eagle3dash.engines import rules as engine_rules
from eagle3dash.engines.facts import FALLBACK_ARCH
from eagle3dash.engines.serving import ServingEngine
from eagle3dash.layout import LayoutResult, default_output_of_ids
from eagle3dash.provenance import Provenance
from eagle3dash.spec import DraftSpec
from eagle3dash.trainers import DEFAULT_TRAINER, TRAINERS, config_ids, training_layout

_KEY_WORDS = {
    "eagle_config": "eagle_config.eagle_aux_hidden_state_layer_ids",
    "top-level": "top-level eagle_aux_hidden_state_layer_ids",
}


def recorded_training(
    card: Provenance | None, trainer: str | None = None
) -> tuple[str | None, tuple[int, ...] | None]:
    """The trainer and capture ids a draft's run folder gives its training side: the trainer
    given, else the run's; the ids the run recorded capturing with (None: none recorded)."""
    if card is None:
        return trainer, None
    return trainer or card.trainer, card.capture_layers


def record_problems(spec: DraftSpec, card: Provenance | None) -> list[CheckpointProblem]:
    """The run's recorded capture ids against the ids its exported config.json holds where the
    trainer's numbering puts them (`trainers.config_ids`); [] when they agree or one is absent."""
    if card is None or card.capture_layers is None or card.trainer not in TRAINERS:
        return []
    exported = config_ids(spec, card.trainer)
    if exported is None or tuple(exported) == tuple(card.capture_layers):
        return []
    data = {
        "record": card.capture_record or "the run folder",
        "recorded": list(card.capture_layers),
        "exported": list(exported),
        "key": _KEY_WORDS[str(TRAINERS[card.trainer].config_key)],
    }
    return [CheckpointProblem(ProblemCode.RECORD_IDS_DIFFER, data)]


def target_depth(spec: DraftSpec) -> int | None:
    """The target's decoder layers as the export records them: NeMo AutoModel's config keeps
    `num_hidden_layers` at the target's (recipes/llm/train_eagle3.py); None for other formats."""
    depth = spec.extra.get("config_num_hidden_layers")
    return depth if spec.format == "nemo-automodel" and isinstance(depth, int) else None


@dataclass(frozen=True)
class EngineFeed:
    """What one engine's rules feed the export's fc slots."""

    engine: ServingEngine
    served: LayoutResult
    reads_ids: bool  # False: it finds no layer ids it reads, so it feeds its defaults


@dataclass(frozen=True)
class ExportReading:
    """The taps training fed an export's slots, and what each engine's rules feed them."""

    num_layers: int  # the target's depth, as the export records it
    trainer: str  # a trainers.TRAINERS key
    training: LayoutResult
    ids: tuple[int, ...] | None  # the ids training used: the record's, else the trainer's default
    record: str | None  # where the training ids were read; None: the trainer's default, assumed
    feeds: tuple[EngineFeed, ...]


def read_export(
    spec: DraftSpec, card: Provenance | None = None, arch: str = FALLBACK_ARCH
) -> ExportReading | None:
    """The training taps and each engine's (the newest SGLang and vLLM read) for an export that
    records its target's depth; None when it does not."""
    n = target_depth(spec)
    if n is None:
        return None
    given, recorded = recorded_training(card)
    trainer = given or DEFAULT_TRAINER[spec.format]
    training = training_layout(spec, n, trainer, arch=arch, recorded_ids=recorded)
    feeds = tuple(
        EngineFeed(
            engine,
            engine_rules.serving_layout(engine, spec, n, arch),
            not engine_rules.rules_for(engine).reads_no_ids(spec),
        )
        # vLLM: each runner of the newest release read, since no server says which runs
        for engine in (ServingEngine("sglang"), *ServingEngine("vllm").readings())
    )
    ids: tuple[int, ...] | None = recorded
    record = card.capture_record if card is not None and recorded is not None else None
    if ids is None and TRAINERS[trainer].output_of_default:
        ids = default_output_of_ids(n)
    return ExportReading(n, trainer, training, ids, record, feeds)
