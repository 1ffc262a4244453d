"""Which engine's rules decide the taps a served draft is fed: SGLang's by release
(`sglang_rules`) or vLLM's by release and model runner (`vllm_rules`), and the dual-key config
that makes one config.json feed the same taps on both.

SGLang reads only eagle_config.eagle_aux_hidden_state_layer_ids (sglang_rules.nested_ids); both
vLLM runners read the top-level eagle_aux_hidden_state_layer_ids first (vllm_rules.config_ids).
So a config with the nested ids in SGLang's numbering and the top-level ids in vLLM's, for the
same taps, is served alike by both.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from eagle3dash import sglang_rules, vllm_rules
from eagle3dash.layout import Layout, LayoutResult
from eagle3dash.spec import DraftSpec

ENGINES = ("sglang", "vllm")


@dataclass(frozen=True)
class ServingEngine:
    """An engine, its release (None: unknown, the newest read is assumed) and, for vLLM, its
    model runner."""

    name: str = "sglang"  # one of ENGINES
    version: str | None = None
    runner: str | None = None  # vLLM: "v1" | "v2" (None: vLLM's default, V2)

    def __post_init__(self) -> None:
        if self.name not in ENGINES:
            raise ValueError(f"unknown serving engine {self.name!r}: use one of {ENGINES}")
        if self.name == "vllm" and self.runner is not None:
            vllm_rules.check_runner(self.runner)

    def rules_version(self) -> str:
        """The release whose rules apply: the given one, else the newest read."""
        default = (
            sglang_rules.DEFAULT_SGLANG_VERSION
            if self.name == "sglang"
            else vllm_rules.DEFAULT_VLLM_VERSION
        )
        return self.version or default

    def vllm_runner(self) -> str:
        """vLLM's model runner (V2 when not given)."""
        return self.runner or vllm_rules.DEFAULT_RUNNER

    def label(self) -> str:
        """'SGLang 0.5.23', 'vLLM 0.33.0 (V2 runner)'."""
        if self.name == "sglang":
            return f"SGLang {self.rules_version()}"
        return f"vLLM {self.rules_version()} ({self.vllm_runner().upper()} runner)"


SGLANG = ServingEngine("sglang")


def serving_layout(
    engine: ServingEngine, spec: DraftSpec, num_layers: int, arch: str, cuda_graph: bool = True
) -> LayoutResult:
    """The taps this engine feeds the draft (its release's rules; vLLM: its runner's)."""
    if engine.name == "vllm":
        return vllm_rules.serving_layout(
            spec, num_layers, engine.rules_version(), engine.vllm_runner(), arch
        )
    return sglang_rules.serving_layout(spec, num_layers, engine.rules_version(), arch, cuda_graph)


def default_capture(engine: ServingEngine, num_layers: int, arch: str) -> Layout:
    """The taps this engine feeds a draft whose config names no ids it reads."""
    if engine.name == "vllm":
        return vllm_rules.default_capture(num_layers)
    return sglang_rules.default_capture(num_layers, arch)


def fix_ids(
    engine: ServingEngine, target: Layout, spec: DraftSpec, num_layers: int, arch: str
) -> list[int] | None:
    """The config ids that make this engine feed `target` (in the key it reads first, see
    `config_entry`); None when no ids do."""
    if engine.name == "vllm":
        ids = vllm_rules.find_fix(
            target, spec, num_layers, engine.rules_version(), engine.vllm_runner(), arch
        ).ids
    else:
        version = sglang_rules.try_parse_version(engine.rules_version())
        ids = sglang_rules.find_fix(target, spec, num_layers, version, arch).ids
    return None if ids is None else list(ids)


def config_entry(engine: ServingEngine, ids: list[int]) -> str:
    """The config.json entry this engine reads the ids from first, to copy: SGLang's nested
    eagle_config list, vLLM's top-level one."""
    if engine.name == "vllm":
        return vllm_rules.top_level_json(ids)
    return sglang_rules.eagle_config_json(ids)


def reads_no_ids(engine: ServingEngine, spec: DraftSpec) -> bool:
    """Whether this engine finds no layer ids it reads in the config (so it feeds defaults)."""
    if engine.name == "vllm":
        return vllm_rules.config_ids(spec, engine.vllm_runner()).ids is None
    return sglang_rules.nested_ids(spec) is None


# ---------------------------------------------------------------------------------------------
# The dual-key fix.


@dataclass
class DualKeyFix:
    """One config.json for both engines: nested ids for SGLang, top-level ids for vLLM (both
    runners), each making its engine feed `target`; a side is None when no ids do."""

    target: Layout
    sglang_version: str
    vllm_version: str
    nested_ids: list[int] | None  # eagle_config.eagle_aux_hidden_state_layer_ids
    top_level_ids: list[int] | None  # eagle_aux_hidden_state_layer_ids
    sglang_why_not: str | None = None
    vllm_why_not: str | None = None

    @property
    def complete(self) -> bool:
        """Whether both engines can be made to feed the target."""
        return self.nested_ids is not None and self.top_level_ids is not None

    def config(self) -> dict:
        """The config.json keys to set (the ids found), as JSON-ready values."""
        keys: dict = {}
        if self.nested_ids is not None:
            keys["eagle_config"] = {"eagle_aux_hidden_state_layer_ids": list(self.nested_ids)}
        if self.top_level_ids is not None:
            keys[vllm_rules.TOP_LEVEL_KEY] = list(self.top_level_ids)
        return keys

    def to_dict(self) -> dict:
        """JSON form."""
        return {
            "target": [t.to_dict() for t in self.target],
            "sglang_version": self.sglang_version,
            "vllm_version": self.vllm_version,
            "nested_ids": self.nested_ids,
            "top_level_ids": self.top_level_ids,
            "sglang_why_not": self.sglang_why_not,
            "vllm_why_not": self.vllm_why_not,
        }


def dual_key_fix(
    target: Layout,
    spec: DraftSpec,
    num_layers: int,
    arch: str,
    sglang_version: str | None = None,
    vllm_version: str | None = None,
) -> DualKeyFix:
    """The nested SGLang ids and the top-level vLLM ids that feed `target` on both engines
    (`sglang_rules.find_fix` on this SGLang release, `vllm_rules.find_fix` for both runners)."""
    s_version = sglang_rules.try_parse_version(sglang_version)
    s_fix = sglang_rules.find_fix(target, spec, num_layers, s_version, arch)
    v_text = vllm_version or vllm_rules.DEFAULT_VLLM_VERSION
    v_fixes = [
        vllm_rules.find_fix(target, spec, num_layers, v_text, runner, arch)
        for runner in vllm_rules.RUNNERS
    ]
    top = v_fixes[0].ids if all(f.ids == v_fixes[0].ids for f in v_fixes) else None
    return DualKeyFix(
        tuple(target),
        sglang_rules.version_text(s_fix.version),
        v_text,
        s_fix.ids,
        top,
        s_fix.why_not,
        next((f.why_not for f in v_fixes if f.why_not), None),
    )


def with_dual_keys(spec: DraftSpec, fix: DualKeyFix) -> DraftSpec:
    """The spec as the dual-key config writes it (what `checkpoint.save` then puts on disk)."""
    if fix.nested_ids is None:
        return replace(
            spec,
            aux_layer_ids=tuple(fix.top_level_ids) if fix.top_level_ids is not None else None,
            aux_ids_location="top-level" if fix.top_level_ids is not None else "missing",
            dual_top_level_ids=None,
            use_aux_hidden_state=True,
        )
    return replace(
        spec,
        aux_layer_ids=tuple(fix.nested_ids),
        aux_ids_location="eagle_config",
        dual_top_level_ids=tuple(fix.top_level_ids) if fix.top_level_ids is not None else None,
        use_aux_hidden_state=True,
    )
