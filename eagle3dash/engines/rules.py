"""Which engine's rules decide the taps a served draft is fed: SGLang's by release
(`sglang_rules`) or vLLM's by release and model runner (`vllm_rules`), asked through one
protocol (`rules_for(engine)`, an `engines.protocol.EngineRules`), and the dual-key config that
makes one config.json feed the same taps on both.

SGLang reads only eagle_config.eagle_aux_hidden_state_layer_ids (sglang_rules.nested_ids); both
vLLM runners read the top-level eagle_aux_hidden_state_layer_ids first (vllm_rules.config_ids).
So a config with the nested ids in SGLang's numbering and the top-level ids in vLLM's, for the
same taps, is served alike by both.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Protocol

from eagle3dash.engines.facts import TOP_LEVEL_KEY
from eagle3dash.engines.protocol import EngineRules
from eagle3dash.engines.serving import ServingEngine
from eagle3dash.engines.sglang import rules as sglang_rules
from eagle3dash.engines.sglang import words as sglang_words
from eagle3dash.engines.sglang.protocol import SGLangRules
from eagle3dash.engines.vllm import rules as vllm_rules
from eagle3dash.engines.vllm import words as vllm_words
from eagle3dash.engines.vllm.protocol import VLLMRules
from eagle3dash.layout import Layout, LayoutResult, ids_text
from eagle3dash.spec import DraftSpec


class EngineWords(Protocol):
    """How an engine is told things: each engine room's `words.py` module answers these, so a
    finding on a vLLM server never names an SGLang flag (and the other way round)."""

    ENGINE: str  # "SGLang" | "vLLM"
    STEPS_KNOB: str  # the setting a user of the engine knows the draft steps by
    DRAFT_PATH_SETTING: str  # where the server is told which draft to load
    FAKE_ACCEPT_ENV: str | None  # an environment variable that fakes the acceptance, if any
    DISAGGREGATION_SETTING: str  # what splits a server into prefill and decode instances

    def steps_flags(self, num_steps: int, draft: str | None = None) -> str:
        """Chain drafting with `num_steps` draft steps."""
        ...

    def speculation_flags(self, draft: str, num_steps: int = 3) -> str:
        """Speculative decoding with this EAGLE-3 draft."""
        ...

    def draft_flags(self, draft: str, num_steps: int | None = None) -> str:
        """What makes the server load this draft."""
        ...

    def capture_flags(self) -> str:
        """What lets the states the server feeds its draft be captured."""
        ...

    def capture_action(self, device: str | None = None) -> str:
        """That as a step to take (on this device)."""
        ...

    def batch_cost_flags(self, concurrency: int | None) -> str | None:
        """The flag that keeps a batch of this size cheap, None when the engine has none."""
        ...

    def launch_command(self, model: str, flags: str) -> str:
        """The whole command that serves `model` with these flags."""
        ...

    def unquantized_draft_flags(self) -> str | None:
        """The flag that loads the draft unquantized, None when it needs none."""
        ...

    def kv_cache_flags(self) -> str:
        """The flag that keeps the KV cache in the model's dtype (no FP8)."""
        ...

    def draft_window_flags(self, window: int) -> str | None:
        """The flag that gives the draft a sliding attention window, None when the engine
        takes it from the draft's config."""
        ...


def words(engine: str) -> EngineWords:
    """The words module of an engine ("sglang" | "vllm")."""
    if engine == "vllm":
        return vllm_words
    return sglang_words


def rules_for(engine: ServingEngine) -> EngineRules:
    """The rules of this engine's room, for this reading of it: what every finding, the
    layout detective and the predictions ask of a served engine. A third engine is one more
    branch here."""
    if engine.name == "vllm":
        return VLLMRules(engine)
    return SGLangRules(engine)


def serving_readings(
    engine: ServingEngine, spec: DraftSpec, num_layers: int, arch: str, cuda_graph: bool = True
) -> list[tuple[ServingEngine, LayoutResult]]:
    """What each reading of this engine feeds the draft (one, unless vLLM's runner is not
    known: then one per runner of its release)."""
    return [
        (r, rules_for(r).serving_layout(spec, num_layers, arch, cuda_graph))
        for r in engine.readings()
    ]


def serving_layout(
    engine: ServingEngine, spec: DraftSpec, num_layers: int, arch: str, cuda_graph: bool = True
) -> LayoutResult:
    """The taps this engine feeds the draft (its release's rules; vLLM: its runner's). With the
    runner not known and the readings disagreeing, the one reading that can serve the draft
    (a server that serves it is not the other), else the release's default runner's; the other
    readings are its `alternatives`, so no verdict rests on one assumed runner."""
    readings = serving_readings(engine, spec, num_layers, arch, cuda_graph)
    first = readings[0][1]
    if all(r.layout == first.layout and r.error == first.error for _, r in readings):
        return first
    serving = [(e, r) for e, r in readings if r.error is None]
    chosen, result = serving[0] if len(serving) == 1 else readings[-1]
    others = tuple((e.label(), r.layout) for e, r in readings if e != chosen)
    why = (
        "the only reading that can serve this draft"
        if len(serving) == 1
        else "the release's default runner"
    )
    note = (
        f"{engine.label()}: read as the {chosen.vllm_runner().upper()} runner ({why}); "
        + "; ".join(
            f"the {e.vllm_runner().upper()} runner would feed taps "
            f"{ids_text([t.depth for t in r.layout])}" + (f" ({r.error})" if r.error else "")
            for e, r in readings
            if e != chosen
        )
        + "."
    )
    return replace(result, notes=[note, *result.notes], alternatives=others)


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
    num_aux_hidden_states: int | None = None  # set beside the ids when vLLM's fc needs it

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
            keys[TOP_LEVEL_KEY] = list(self.top_level_ids)
        if self.num_aux_hidden_states is not None:
            keys["num_aux_hidden_states"] = self.num_aux_hidden_states
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
            "num_aux_hidden_states": self.num_aux_hidden_states,
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
    (`sglang_rules.find_fix` on this SGLang release, `vllm_rules.find_fix` for every runner of
    this vLLM release)."""
    s_version = sglang_rules.try_parse_version(sglang_version)
    s_fix = sglang_rules.find_fix(target, spec, num_layers, s_version, arch)
    v_text = vllm_version or vllm_rules.DEFAULT_VLLM_VERSION
    v_fixes = [
        vllm_rules.find_fix(target, spec, num_layers, v_text, runner, arch)
        for runner in vllm_rules.runners_of(v_text)
    ]
    same = all(f.keys() == v_fixes[0].keys() for f in v_fixes)
    top = v_fixes[0].ids if same else None
    return DualKeyFix(
        tuple(target),
        sglang_rules.version_text(s_fix.version),
        v_text,
        s_fix.ids,
        top,
        s_fix.why_not,
        next((f.why_not for f in v_fixes if f.why_not), None),
        v_fixes[0].num_aux_hidden_states if same else None,
    )


def with_dual_keys(spec: DraftSpec, fix: DualKeyFix) -> DraftSpec:
    """The spec as the dual-key config writes it (what `checkpoint.save` then puts on disk)."""
    if fix.num_aux_hidden_states is not None:
        spec = replace(spec, num_aux_hidden_states=fix.num_aux_hidden_states)
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
