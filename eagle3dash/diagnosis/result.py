"""The result of one diagnosis: one typed object for the CLI, the store and the pages."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from eagle3dash.checkpoint import InspectReport
from eagle3dash.diagnosis.options import DiagnoseOptions
from eagle3dash.findings import Finding
from eagle3dash.prediction import LayoutComparison
from eagle3dash.servebench import BenchResult, compare_to_baseline
from eagle3dash.sglang import ServerReport

if TYPE_CHECKING:
    from eagle3dash.metrics import DraftEval


@dataclass
class Diagnosis:
    """Everything one diagnosis found, ready for the CLI, the store and the app."""

    options: DiagnoseOptions
    report: InspectReport
    server: ServerReport
    num_target_layers: int
    arch: str
    layouts: LayoutComparison
    server_steps: int | None = None
    training_eval: DraftEval | None = None
    serving_eval: DraftEval | None = None
    measured: BenchResult | None = None
    baseline: BenchResult | None = None
    detection: dict | None = None  # the layout detective's case (with --target)
    findings: list[Finding] = field(default_factory=list)
    missing: list[str] = field(default_factory=list)  # comparisons not made, and how to supply them
    warnings: list[str] = field(default_factory=list)

    def side(self, name: str) -> dict:
        """One side of the side-by-side table: layout, evaluation and simulated accept length."""
        result = getattr(self.layouts, name)
        ev = self.training_eval if name == "training" else self.serving_eval
        out = {
            "layout": [t.to_dict() for t in result.layout],
            "rule": result.rule,
            "eval": ev.to_dict() if ev else None,
            "top1": ev.accuracy[0] if ev else None,
            "sim_accept_length": self.sim_accept_length(ev),
            "mean_accept_length": ev.accept_length_at(min(self.server_steps or ev.steps, ev.steps))
            if ev
            else None,
        }
        return out

    def sim_accept_length(self, ev: DraftEval | None) -> float | None:
        """Simulated accept length at the server's chain length (or the evaluated steps)."""
        if ev is None:
            return None
        return ev.simulated_accept_length(self.server_steps)

    def to_dict(self) -> dict:
        """The --json contract: findings, training, serving, measured, plus context."""
        speedup = None
        if self.measured and self.baseline:
            speedup = compare_to_baseline(self.measured, self.baseline)
        return {
            "findings": [f.to_dict() for f in self.findings],
            "training": self.side("training"),
            "serving": self.side("serving"),
            "measured": self.measured.to_dict() if self.measured else None,
            "baseline": self.baseline.to_dict() if self.baseline else None,
            "speedup": speedup,
            "layout_diff": self.layouts.diff.to_dict(),
            "detective": self.detection,
            "num_target_layers": self.num_target_layers,
            "arch": self.arch,
            "server_steps": self.server_steps,
            "missing": self.missing,
            "warnings": self.warnings,
            "checkpoint": self.report.to_json(),
            "server": self.server.to_dict(),
        }
