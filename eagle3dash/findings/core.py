"""What every rule shares: the Finding it returns, the Evidence it reads, and number wording.

The server and benchmark objects (`sglang.ServerReport`, `servebench.BenchResult`) and the
`metrics.DraftEval` are read by attribute only, so the findings import neither torch nor an HTTP
client, and stand-ins with the same attribute names work.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from eagle3dash.engines.facts import target_arch
from eagle3dash.engines.protocol import EngineRules
from eagle3dash.engines.rules import EngineWords, rules_for
from eagle3dash.engines.rules import words as engine_words
from eagle3dash.engines.serving import ServingEngine
from eagle3dash.evidence_levels import LEVEL_PREDICTED, source_level, weaker
from eagle3dash.layout import Layout
from eagle3dash.severity import Severity

if TYPE_CHECKING:
    from eagle3dash.checkpoint import InspectReport
    from eagle3dash.detective import Detection
    from eagle3dash.engines.seam import ServerReport
    from eagle3dash.identity import DraftIdentity
    from eagle3dash.metrics import DraftEval
    from eagle3dash.prediction import LayoutComparison
    from eagle3dash.profile import Profile
    from eagle3dash.servebench import BenchResult
    from eagle3dash.spec import DraftSpec

SEVERITIES = tuple(Severity)  # worst first


class SideView(Protocol):
    """What the rules read of one side of a diagnosis (diagnosis.result.Side)."""

    layout: Layout
    source: str
    detail: str
    prediction: Layout | None
    slot_margins: list[float] | None

    @property
    def measured(self) -> bool:
        """Whether the layout comes from tensors rather than from a config or a rule."""

    @property
    def top1(self) -> float | None:
        """Draft accuracy at step 1."""

    @property
    def sim_accept_length(self) -> float | None:
        """The simulated accept length at the server's steps."""


@dataclass(frozen=True)
class Finding:
    """One problem found: rule id, severity, a one-sentence title, the evidence and the fix."""

    id: str
    severity: Severity  # a rule may give its value ("critical"); it is read as a Severity
    title: str  # one sentence
    evidence: str  # the numbers and config values that show it
    fix: str  # a concrete config key to set or a flag to change
    data: dict = field(default_factory=dict, compare=False, hash=False)  # machine-readable extras
    # How the finding is known: an evidence level (eagle3dash/evidence_levels.py); a rule over
    # a prediction or an assumption says so.
    basis: str = "observed"

    def __post_init__(self) -> None:
        severity = Severity.read(self.severity)
        if severity is None or severity != self.severity:
            known = ", ".join(SEVERITIES)
            raise ValueError(f"severity {self.severity!r} is not one of {known}")
        object.__setattr__(self, "severity", severity)

    def to_dict(self) -> dict:
        """JSON-ready dict of every field."""
        return {
            "id": self.id,
            "severity": self.severity.value,
            "title": self.title,
            "evidence": self.evidence,
            "fix": self.fix,
            "data": dict(self.data),
            "basis": self.basis,
        }


@dataclass
class Evidence:
    """Everything a rule may look at; every field is optional."""

    report: InspectReport | None = None  # the inspected draft checkpoint
    draft_path: str | None = None  # the checkpoint path as the user named it
    num_target_layers: int | None = None  # N, the target's decoder blocks
    arch: str | None = None  # target architecture ("kimi", "DeepseekV3ForCausalLM", ...)
    server: ServerReport | None = None
    # The layouts as the rules read them: in a diagnosis, each side's strongest evidence (see
    # diagnosis.result); standalone, the config's prediction.
    layouts: LayoutComparison | None = None
    prediction: LayoutComparison | None = None  # the config's and SGLang's rules' prediction
    training: SideView | None = None  # the training side of a diagnosis, with its source
    serving: SideView | None = None  # the serving side, observed or predicted
    identity: DraftIdentity | None = None  # is the served draft this checkpoint, by content
    training_eval: DraftEval | None = None  # draft over the training layout
    serving_eval: DraftEval | None = None  # draft over the serving layout
    measured: BenchResult | None = None  # the endpoint under diagnosis
    baseline: BenchResult | None = None  # the same target without speculation
    # The serving engine's version `layouts` were computed for; defaults to server.version.
    sglang_version: str | None = None
    engine: str = "sglang"  # the serving engine: "sglang" | "vllm" (engines.serving.ENGINES)
    vllm_runner: str | None = None  # vLLM's model runner, "v1" | "v2" (None: V2, the default)
    trainer: str | None = None  # a layout.TRAINERS key, when known
    training_sglang_version: str | None = None  # SpecForge >= 0.2: the SGLang it trained through
    target_json_sha256: dict | None = None  # the local target's JSON files -> sha256, when given
    detection: Detection | None = None  # the layout detective's case: what the tensors say
    profile: Profile | None = None  # acceptance by category, prompt format, temperature, steps
    prompt_tokens: list[list[int]] | None = None  # the benchmark's prompts as the server saw them

    @property
    def spec(self) -> DraftSpec | None:
        """The draft's spec, if a checkpoint was inspected."""
        return self.report.spec if self.report is not None else None

    @property
    def speculative(self) -> Any:
        """The server's SpeculativeSettings, None without a server or without speculation."""
        return self.server.speculative if self.server is not None else None

    def version(self) -> str | None:
        """The serving engine's version as text, None when unknown or its rules cannot read it."""
        text = self.sglang_version or (self.server.version if self.server is not None else None)
        if not text or rules_for(ServingEngine(self.engine)).parse_version(text) is None:
            return None
        return text

    def version_tuple(self) -> tuple[int, int, int] | None:
        """The serving SGLang version, parsed (None on vLLM)."""
        text = self.version()
        return self.rules().parse_version(text) if text and self.engine == "sglang" else None

    def serving_engine(self) -> ServingEngine:
        """The engine whose rules decide what the server feeds, with its version and runner."""
        runner = self.vllm_runner if self.engine == "vllm" else None
        return ServingEngine(self.engine, self.version(), runner)

    def rules(self) -> EngineRules:
        """What the rules ask of the serving engine: its room's answers for its release and
        runner (engines.protocol.EngineRules)."""
        return rules_for(self.serving_engine())

    def words(self) -> EngineWords:
        """How the serving engine is told things: its flags, for every fix."""
        return engine_words(self.engine)

    def engine_label(self) -> str:
        """'SGLang 0.5.23', 'SGLang (version unknown)', 'vLLM 0.33.0 (V2 runner)', 'vLLM (version
        unknown, V2 runner)' (whose rules assumed are the newest read)."""
        engine = self.serving_engine()
        if engine.version is not None:
            return engine.label()
        if engine.name == "sglang":
            return "SGLang (version unknown)"
        return f"vLLM (version unknown, {engine.vllm_runner().upper()} runner)"

    def arch_name(self) -> str:
        """The target architecture: given, else the server's, else the rules' fallback."""
        if self.server is None:
            return target_arch(self.arch)
        return target_arch(self.arch, self.server.architectures, self.server.model_type)

    def claimed_training(self) -> Layout | None:
        """The training layout the config implies (the prediction's, else the layouts')."""
        source = self.prediction or self.layouts
        return None if source is None else tuple(source.training.layout)

    def simulation_steps(self) -> int | None:
        """Draft steps per round to simulate at: the server's, when it says."""
        sp = self.speculative
        return sp.num_steps if sp is not None and sp.num_steps else None

    def adaptive_steps(self) -> bool:
        """Whether the server changes its draft steps at runtime (--speculative-adaptive)."""
        sp = self.speculative
        return bool(sp is not None and sp.adaptive)

    def cuda_graph(self) -> bool:
        """Whether the server runs CUDA graphs (SGLang's default)."""
        return not (self.server is not None and self.server.disable_cuda_graph)


def critical_ids(found: list[Finding], among: tuple[str, ...] | None = None) -> list[str]:
    """The ids of the critical findings (of these rule ids, when given)."""
    return [
        f.id for f in found if f.severity is Severity.CRITICAL and (among is None or f.id in among)
    ]


def layouts_basis(e: Evidence) -> str:
    """How a claim over both sides' layouts is known: the weaker side's evidence level; a rule
    run on the config's prediction alone is predicted."""
    if e.training is None or e.serving is None:
        return LEVEL_PREDICTED
    return weaker(source_level(e.training.source), source_level(e.serving.source))


def _fmt(x: float) -> str:
    return f"{x:.2f}"
