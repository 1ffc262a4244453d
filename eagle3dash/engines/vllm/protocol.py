"""vLLM's answers to `engines.protocol.EngineRules`, from its rules by release and model runner
(`rules.py`), and its fix worded for a finding: the top-level ids (every runner reads that key
first), else a released build, else retraining."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import fields
from typing import TYPE_CHECKING

from eagle3dash.engines.facts import (
    TOP_LEVEL_KEY,
    ObservedMapping,
    Version,
    ids_from_observed,
    released_build_only,
    top_level_ids,
)
from eagle3dash.engines.protocol import EngineFix
from eagle3dash.engines.vllm import rules
from eagle3dash.layout import Layout, LayoutResult, taps_phrase

if TYPE_CHECKING:
    from eagle3dash.engines.serving import ServingEngine
    from eagle3dash.spec import DraftSpec

# The release facts `has` and `first_release` answer: Release's flags.
_FLAGS = frozenset(f.name for f in fields(rules.Release) if f.type == "bool")


class VLLMRules:
    """vLLM's rules for one server (`engine`: its release, None when it did not say, and its
    model runner, None when not known: the release's default runner's rules apply)."""

    FIX_KEY = TOP_LEVEL_KEY  # both runners read it first

    def __init__(self, engine: ServingEngine) -> None:
        self.engine = engine

    def releases(self) -> tuple[str, ...]:
        """The releases read, oldest first."""
        return rules.KNOWN_VLLM_VERSIONS

    def parse_version(self, text: str) -> Version | None:
        """'0.33.0rc1+cu128' -> (0, 33, 0); None when unparseable."""
        try:
            return rules.parse_version(text)
        except ValueError:
            return None

    def has(self, feature: str) -> bool | None:
        """A `rules.Release` flag of this release (None: release unknown, or no such flag)."""
        if feature not in _FLAGS or self.engine.version is None:
            return None
        return bool(getattr(rules.release(self.engine.version), feature))

    def first_release(self, feature: str) -> str | None:
        """The first release read with a `rules.Release` flag set."""
        return rules.first_release(feature) if feature in _FLAGS else None

    def family(self, arch: str) -> str:
        """'deepseek' or 'llama'."""
        return rules.family(arch)

    def serving_layout(
        self, spec: DraftSpec, num_layers: int, arch: str, cuda_graph: bool = True
    ) -> LayoutResult:
        """The taps this release's runner feeds the draft (no CUDA-graph rule on vLLM)."""
        engine = self.engine
        return rules.serving_layout(
            spec, num_layers, engine.rules_version(), engine.vllm_runner(), arch
        )

    def default_capture(self, num_layers: int, arch: str) -> Layout:
        """(2, N//2, N-3) for every architecture."""
        return rules.default_capture(num_layers)

    def read_ids(self, spec: DraftSpec) -> tuple[int, ...] | None:
        """The top-level ids, when the runner reads that key."""
        read = rules.config_ids(spec, self.engine.vllm_runner())
        return read.stored if read.key == TOP_LEVEL_KEY else None

    def reads_no_ids(self, spec: DraftSpec) -> bool:
        """No key the runner reads names ids."""
        return rules.config_ids(spec, self.engine.vllm_runner()).ids is None

    def config_entry(self, ids: Sequence[int] | None) -> str:
        """The top-level entry."""
        return f'"{TOP_LEVEL_KEY}": [...]' if ids is None else rules.top_level_json(list(ids))

    def find_fix(
        self,
        target: Layout,
        spec: DraftSpec | None,
        num_layers: int | None,
        arch: str,
        cuda_graph: bool = True,
        observed: ObservedMapping | None = None,
        fed: str = "the taps it feeds",
        serving: Layout | None = None,
    ) -> EngineFix:
        """`rules.find_fix` for this release's runner, worded. On a server observed to depart
        from its release's rules (`observed`), the ids it was seen to take; else a released
        build, or retraining: never the config it already holds."""
        target = tuple(target)
        engine = self.engine
        if spec is None or num_layers is None:
            return EngineFix(
                target,
                None,
                f"Set the top-level {TOP_LEVEL_KEY} in the draft's config.json to the taps "
                "training used (vLLM reads id k as the state after k blocks); give the target's "
                "layer count for the exact ids.",
            )
        fix = rules.find_fix(
            target, spec, num_layers, engine.rules_version(), engine.vllm_runner(), arch
        )
        phrase = taps_phrase(target, num_layers)
        if observed is not None or (fix.ids is not None and _holds(spec, fix)):
            # observed to depart, or the rules say the config already feeds `target`: either way
            # this build does not follow its release's rules
            text, data = self._departed_fix(spec, phrase, observed or (), fix, fed)
            return EngineFix(target, fix.ids, text, data)
        if fix.ids is None:
            defaults = taps_phrase(rules.default_capture(num_layers), num_layers)
            return EngineFix(
                target,
                None,
                f"No ids make {engine.label()} feed {phrase}: {fix.why_not}. Retrain the draft on "
                f"taps vLLM can feed (e.g. its defaults, {defaults}).",
            )
        text = (
            f"Set {fix.entry()} at the top level of the draft's config.json and restart vLLM: "
            f"every runner reads that key first, so {engine.label()} then feeds {phrase}."
        )
        if fix.notes:
            text += " " + " ".join(fix.notes)
        data = {
            "top_level_ids": fix.ids,
            **(
                {"num_aux_hidden_states": fix.num_aux_hidden_states}
                if fix.num_aux_hidden_states
                else {}
            ),
            "vllm_version": fix.version,
            "vllm_runner": fix.runner,
        }
        return EngineFix(target, fix.ids, text, data, writes_rules_ids=True)

    def _departed_fix(
        self,
        spec: DraftSpec,
        phrase: str,
        observed: ObservedMapping,
        rules_fix: rules.LayoutFix,
        fed: str,
    ) -> tuple[str, dict]:
        """The fix on a server that feeds other taps than its release's rules say: the top-level
        ids it was observed to take, when they reach the target; else the released build whose
        rules feed it (with its ids, unless the config already holds them), or retraining."""
        engine = self.engine
        ids = ids_from_observed(rules_fix.target, observed)
        if ids is not None and _current(spec).get(TOP_LEVEL_KEY) != ids:
            return (
                f"Set {rules.top_level_json(ids)} at the top level of the draft's config.json "
                f"and restart the server: it departs from {engine.label()}'s rules, and the ids "
                f"it was observed to take make it feed {phrase}.",
                {"top_level_ids": ids, "vllm_version": rules_fix.version, "ids_from": "observed"},
            )
        release = engine.stand_in() or engine.rules_version()
        if rules_fix.ids is not None and _holds(spec, rules_fix):
            return released_build_only(
                f"vLLM {engine.rules_version()}",
                rules_fix.entry(),
                f"vLLM {release}",
                phrase,
                fed,
                {"vllm_version": release},
            )
        if rules_fix.ids is not None:
            return (
                f"No ids are known to make this server feed {phrase}: it departs from "
                f"{engine.label()}'s rules (a patched or unreleased build), and the ids it was "
                f"seen to take do not reach these taps. Either serve with a released build of "
                f"vLLM {release} and set {rules_fix.entry()} at the top level of the draft's "
                f"config.json; or retrain the draft on the taps this build feeds ({fed}).",
                {
                    "top_level_ids": rules_fix.ids,
                    "vllm_version": release,
                    "needs_released_build": True,
                },
            )
        return (
            f"No ids are known to make this server feed {phrase}: it departs from "
            f"{engine.label()}'s rules, and no released build's rules feed these taps either "
            f"({rules_fix.why_not}). Retrain the draft on the taps this build feeds ({fed}).",
            {},
        )

    def runs_norm_before_residual(self, spec: DraftSpec) -> bool:
        """`rules.runs_norm_before_residual`."""
        return rules.runs_norm_before_residual(spec)

    def hidden_states_mode(self, enabled: bool, mode: str | None) -> str | None:
        """None: /generate returns no hidden states on vLLM."""
        return None


def _current(spec: DraftSpec) -> dict:
    """The config keys vLLM's fix sets, as the draft's config holds them now."""
    keys: dict = {}
    top = top_level_ids(spec)
    if top:
        keys[TOP_LEVEL_KEY] = list(top)
    if spec.num_aux_hidden_states is not None:
        keys["num_aux_hidden_states"] = spec.num_aux_hidden_states
    return keys


def _holds(spec: DraftSpec, fix: rules.LayoutFix) -> bool:
    """Whether the draft's config already holds every key this fix sets."""
    current = _current(spec)
    return all(current.get(key) == value for key, value in fix.keys().items())
