"""The result of one diagnosis: one typed object for the CLI, the store and the pages.

Each side (training, serving) records its layout AND where that layout comes from, in this order
of evidence, strongest first:

- training: a training dump (`--train-states`) > a layout the user declares (`--training-layout`)
  > the layout detective's best layout from the tensors (target at hand) > the config under a
  trainer's convention (assumed);
- serving: the states the server returned, each slot identified by slot matching against the
  target's taps (target at hand), or matched to a training dump's slots by scale; else, with no
  served state to capture, the layout whose simulated acceptance per draft position matches the
  server's measured one (target at hand); else the engine's rules for the server's release and
  runner (predicted). The prediction is kept beside the
  observation, never instead of it.

`Diagnosis.to_dict()` is the one JSON form, with a `schema` number: the store keeps it, and
`diagnosis/stored.py` reads it (any schema) back into typed objects for the pages and the CLI.
Acceptance per draft position is there twice, comparable entry by entry: simulated on each side
(`training.eval.acceptance[k - 1]`, the share of chains whose first k drafts are all right) and
measured on the server (`measured.per_position[k - 1]`, the share of verify rounds that accepted
at least k drafts, from SGLang's spec_correct_drafts_histogram; None when the server predates it).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from eagle3dash.checkpoint import InspectReport
from eagle3dash.diagnosis.options import DiagnoseOptions
from eagle3dash.engines.seam import ServerReport
from eagle3dash.evidence_levels import (
    ACCEPTANCE_MATCHED,
    CONFIG,
    DECLARED,
    DETECTIVE,
    DUMP_MATCHED,
    MEASURED_SOURCES,
    OBSERVED,
    PREDICTED,
    RUN_RECORD,
    TRAINING_DUMP,
    checked,
    source_level,
    weaker,
)
from eagle3dash.findings import Finding
from eagle3dash.identity import DraftIdentity
from eagle3dash.layout import Layout, LayoutDiff, diff
from eagle3dash.prediction import LayoutComparison
from eagle3dash.profile import Profile
from eagle3dash.servebench import BenchResult, compare_to_baseline
from eagle3dash.severity import Severity

if TYPE_CHECKING:
    from eagle3dash.detective import AcceptanceMatch
    from eagle3dash.metrics import DraftEval


__all__ = [
    "ACCEPTANCE_MATCHED",
    "CONFIG",
    "DECLARED",
    "DETECTIVE",
    "DUMP_MATCHED",
    "OBSERVED",
    "PREDICTED",
    "RUN_RECORD",
    "TRAINING_DUMP",
    "Diagnosis",
    "NotChecked",
    "Side",
]

# The verdict's three statuses.
PROBLEM = "problem"  # a critical finding (or, every check having run, a warning)
HEALTHY = "healthy"  # every check ran and nothing at warning or worse was found
INCOMPLETE = "incomplete"  # no critical finding, but something was not checked
# The stored document's schema (Diagnosis.to_dict); eagle3dash/diagnosis/stored.py reads every
# earlier one.
SCHEMA = 4
# The checks that would turn an unchecked side of the layout comparison into an observed one.
LAYOUT_CHECKS = ("serving-states", "serving-taps", "training-side")


@dataclass
class Side:
    """One side of the comparison: the taps it fed the fc slots, where that comes from, and the
    standalone draft's evaluation on its states."""

    name: str  # "training" | "serving"
    layout: Layout
    source: str  # one of the source constants above
    detail: str  # the rule, the dump, the margins: how the layout was found
    prediction: Layout | None = None  # what the config (training) or SGLang's rules (serving) say
    eval: DraftEval | None = None
    steps: int | None = None  # draft steps the accept length is simulated at
    slot_margins: list[float] | None = None  # slot matching: best minus second-best score per slot
    capture_error: str | None = None  # why no states of this side could be evaluated
    # Serving, inferred from the measured acceptance: every candidate against the measurement.
    acceptance_match: AcceptanceMatch | None = None

    @property
    def measured(self) -> bool:
        """Whether the layout comes from tensors rather than from a config or a rule."""
        return self.source in MEASURED_SOURCES

    @property
    def evidence(self) -> str:
        """How this side's layout is known: an evidence level (eagle3dash/evidence_levels.py)."""
        return source_level(self.source)

    @property
    def top1(self) -> float | None:
        """Draft accuracy at step 1."""
        return self.eval.accuracy[0] if self.eval is not None and self.eval.accuracy else None

    @property
    def sim_accept_length(self) -> float | None:
        """The accept length serving rounds would get with these states, at `steps`."""
        return None if self.eval is None else self.eval.simulated_accept_length(self.steps)

    def to_dict(self) -> dict:
        """JSON form."""
        return {
            "name": self.name,
            "layout": [t.to_dict() for t in self.layout],
            "source": self.source,
            "measured": self.measured,
            "evidence": self.evidence,
            "detail": self.detail,
            "prediction": None
            if self.prediction is None
            else [t.to_dict() for t in self.prediction],
            "eval": None if self.eval is None else self.eval.to_dict(),
            "steps": self.steps,
            "top1": self.top1,
            "sim_accept_length": self.sim_accept_length,
            "slot_margins": self.slot_margins,
            "capture_error": self.capture_error,
            "acceptance_match": None
            if self.acceptance_match is None
            else self.acceptance_match.to_dict(),
        }


@dataclass(frozen=True)
class NotChecked:
    """A check that could not run, and the one action that enables it."""

    check: str  # short id: "training-side", "serving-states", "speedup", "draft-identity", ...
    reason: str  # why it could not run
    option: str | None = None  # the DiagnoseOptions field that enables it (the CLI names the flag,
    #                            the app its form field)
    action: str | None = None  # what to do when no option does it (a server flag, a path)
    error: str | None = None  # the error that stopped it (a server's bad reply), shown with it

    def to_dict(self) -> dict:
        """JSON form."""
        return {
            "check": self.check,
            "reason": self.reason,
            "option": self.option,
            "action": self.action,
            "error": self.error,
        }


def verdict_status(findings: list[Finding], anything_unchecked: bool) -> str:
    """The verdict's status from the findings and whether some check did not run."""
    if any(f.severity is Severity.CRITICAL for f in findings):
        return PROBLEM
    if anything_unchecked:
        return INCOMPLETE
    if any(f.severity is Severity.WARNING for f in findings):
        return PROBLEM
    return HEALTHY


@dataclass
class Diagnosis:
    """Everything one diagnosis found."""

    options: DiagnoseOptions
    report: InspectReport
    server: ServerReport
    num_target_layers: int
    arch: str
    steps: int  # draft steps per round the sides are simulated at (the server's, when it says)
    prediction: LayoutComparison  # what the config and SGLang's rules predict
    training: Side
    serving: Side
    measured: BenchResult | None = None  # with per_position, measured acceptance per draft
    baseline: BenchResult | None = None
    detection: Any = None  # detective.Detection (with the target at hand)
    identity: DraftIdentity | None = None
    findings: list[Finding] = field(default_factory=list)
    not_checked: list[NotChecked] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    profile: Profile | None = None  # None: --no-profile
    # wall seconds per stage (diagnosis/stages.py TIMING_KEYS) and "total"
    timings: dict[str, float] = field(default_factory=dict)

    @property
    def layout_diff(self) -> LayoutDiff:
        """The two sides' layouts, slot by slot."""
        return diff(self.training.layout, self.serving.layout)

    @property
    def layout_evidence(self) -> str:
        """How the comparison of the sides is known: the weaker side's evidence level."""
        return weaker(self.training.evidence, self.serving.evidence)

    def layout_diff_dict(self) -> dict:
        """The layout diff's JSON form with its evidence: the level (the weaker side's), whether
        it was checked, and the checks that did not run and would check it."""
        level = self.layout_evidence
        d = self.layout_diff.to_dict()
        d["evidence"] = level
        d["checked"] = checked(level)
        d["training_evidence"] = self.training.evidence
        d["serving_evidence"] = self.serving.evidence
        for slot in d["slots"]:
            slot["evidence"] = level
        d["would_check"] = [n.to_dict() for n in self.not_checked if n.check in LAYOUT_CHECKS]
        return d

    def identity_dict(self) -> dict | None:
        """The draft identity's JSON form with its evidence level: observed when the weights'
        digests were compared, else not checked."""
        if self.identity is None:
            return None
        d = self.identity.to_dict()
        d["evidence"] = "observed" if self.identity.status != "unknown" else "not-checked"
        return d

    @property
    def status(self) -> str:
        """problem (a critical finding; or, every check having run, a warning), incomplete (no
        critical finding but something was not checked), healthy (every check ran, nothing at
        warning or worse)."""
        return verdict_status(self.findings, bool(self.not_checked))

    @property
    def speedup(self) -> dict | None:
        """Measured tok/s against the baseline's, when both were benchmarked."""
        if self.measured is None or self.baseline is None:
            return None
        return compare_to_baseline(self.measured, self.baseline)

    @property
    def root_cause(self) -> Finding | None:
        """The first critical finding: the verdict's one sentence."""
        return next((f for f in self.findings if f.severity is Severity.CRITICAL), None)

    def verdict(self) -> dict:
        """The verdict banner's values: root cause (or none), the accept lengths, speedup, and
        what was not checked."""
        speedup = self.speedup or {}
        root = self.root_cause
        return {
            "root_cause": None if root is None else root.to_dict(),
            "status": self.status,
            "problems_found": any(f.severity is not Severity.INFO for f in self.findings),
            "layout_evidence": self.layout_evidence,
            "identity": None if self.identity is None else self.identity.status,
            "all_checked": not self.not_checked,
            "measured_accept_length": None
            if self.measured is None
            else self.measured.accept_length,
            "sim_accept_training": self.training.sim_accept_length,
            "sim_accept_serving": self.serving.sim_accept_length,
            "training_source": self.training.source,
            "serving_source": self.serving.source,
            "speedup": speedup.get("speedup"),
            "speedup_noise": speedup.get("speedup_noise"),
            "not_checked": [n.check for n in self.not_checked],
        }

    def to_dict(self) -> dict:
        """The one JSON form: the --json contract, what the store keeps and the pages read."""
        return {
            "schema": SCHEMA,
            "verdict": self.verdict(),
            "findings": [f.to_dict() for f in self.findings],
            "training": self.training.to_dict(),
            "serving": self.serving.to_dict(),
            "layout_diff": self.layout_diff_dict(),
            "prediction": self.prediction.to_dict(),
            "measured": self.measured.to_dict() if self.measured else None,
            "baseline": self.baseline.to_dict() if self.baseline else None,
            "speedup": self.speedup,
            "detective": None if self.detection is None else self.detection.to_dict(),
            "draft_identity": self.identity_dict(),
            "num_target_layers": self.num_target_layers,
            "arch": self.arch,
            "steps": self.steps,
            "not_checked": [n.to_dict() for n in self.not_checked],
            "warnings": self.warnings,
            "profile": None if self.profile is None else self.profile.to_dict(),
            "timings": {key: round(seconds, 3) for key, seconds in self.timings.items()},
            "options": self.options.to_json(),
            "checkpoint": self.report.to_json(),
            "server": self.server.to_dict(),
        }
