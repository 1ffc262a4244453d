"""How a claim is known: where each side's layout comes from, and the evidence level it carries.

A diagnosis never states a claim more strongly than its weakest evidence: a comparison of a
predicted side with an observed one is a prediction. Levels, strongest first:

- observed: measured from tensors or requests (served slots matched to the target's taps, a
  benchmark, weight digests);
- training-dump: the training features themselves;
- declared: the user said so (`--training-layout`);
- recorded: the training run's own record of the ids it captured (a run folder's provenance),
  read under its trainer's convention;
- detective: inferred by the layout detective (the layout the draft performs best with);
- acceptance: inferred from the measured acceptance (the serving layout whose simulated
  acceptance per draft position matches what the server measured): stronger than a
  prediction, weaker than an observation;
- predicted: the engine's rules for the server's release, runner and architecture;
- assumed: a config read under a trainer's convention.

Values, not words: `ui/words.py` says them.
"""

from __future__ import annotations

# Where a side's layout comes from (diagnosis.result.Side.source).
TRAINING_DUMP = "training-dump"  # the training features themselves
DECLARED = "declared"  # the user's --training-layout
DETECTIVE = "layout-detective"  # the layout the draft performs best with, from the tensors
CONFIG = "config"  # the config's ids under a trainer's convention: assumed
RUN_RECORD = "run-record"  # the ids the training run recorded, under its trainer's convention
OBSERVED = "observed"  # each served slot matched to the target's taps
DUMP_MATCHED = "matched-to-dump"  # served slots matched to the training dump's slots by scale
ACCEPTANCE_MATCHED = "acceptance-matched"  # the layout whose simulated acceptance per
# draft position matches the server's measured acceptance (no capture of the served states)
PREDICTED = "predicted"  # the engine's rules for the server's release and runner: assumed
MEASURED_SOURCES = frozenset({TRAINING_DUMP, DECLARED, DETECTIVE, OBSERVED, DUMP_MATCHED})

# Evidence levels, strongest first.
LEVEL_OBSERVED = "observed"
LEVEL_DUMP = "training-dump"
LEVEL_DECLARED = "declared"
LEVEL_RECORDED = "recorded"
LEVEL_DETECTIVE = "detective"
LEVEL_ACCEPTANCE = "acceptance"
LEVEL_PREDICTED = "predicted"
LEVEL_ASSUMED = "assumed"
LEVELS = (
    LEVEL_OBSERVED,
    LEVEL_DUMP,
    LEVEL_DECLARED,
    LEVEL_RECORDED,
    LEVEL_DETECTIVE,
    LEVEL_ACCEPTANCE,
    LEVEL_PREDICTED,
    LEVEL_ASSUMED,
)
# Levels at which a claim was not checked against tensors or requests.
UNCHECKED_LEVELS = frozenset({LEVEL_PREDICTED, LEVEL_ASSUMED})

SOURCE_LEVEL = {
    TRAINING_DUMP: LEVEL_DUMP,
    DECLARED: LEVEL_DECLARED,
    DETECTIVE: LEVEL_DETECTIVE,
    CONFIG: LEVEL_ASSUMED,
    RUN_RECORD: LEVEL_RECORDED,
    OBSERVED: LEVEL_OBSERVED,
    DUMP_MATCHED: LEVEL_OBSERVED,
    ACCEPTANCE_MATCHED: LEVEL_ACCEPTANCE,
    PREDICTED: LEVEL_PREDICTED,
}


def source_level(source: str) -> str:
    """The evidence level of a side's layout source (an unknown source is assumed)."""
    return SOURCE_LEVEL.get(source, LEVEL_ASSUMED)


def weaker(*levels: str) -> str:
    """The weakest of these evidence levels: what a claim resting on all of them is worth."""
    return max(levels, key=lambda level: LEVELS.index(level) if level in LEVELS else len(LEVELS))


def checked(level: str) -> bool:
    """Whether a claim at this level rests on tensors, requests, the user's or the run's own word,
    not on a prediction or an assumption."""
    return level not in UNCHECKED_LEVELS
