"""What the findings and the layout detective ask of the run's engine (`EngineRules`), and the
facts every engine's rules share.

Each engine room answers `EngineRules` in its `protocol.py` (`sglang/protocol.py` SGLangRules,
`vllm/protocol.py` VLLMRules); `engines.rules.rules_for(engine)` picks the room, and
`findings.core.Evidence.rules()` asks it for the run's engine. Nothing here imports a room.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

from eagle3dash.layout import Layout, LayoutResult, Tap

if TYPE_CHECKING:
    from eagle3dash.engines.rules import ServingEngine
    from eagle3dash.spec import DraftSpec

Version = tuple[int, int, int]

# The target architecture assumed when neither the user nor the server names one.
FALLBACK_ARCH = "llama"
# Where a draft's config keeps its layer ids: SGLang (and SpecForge) read only the nested key;
# both vLLM runners read the top-level key first.
NESTED_KEY = "eagle_config.eagle_aux_hidden_state_layer_ids"
TOP_LEVEL_KEY = "eagle_aux_hidden_state_layer_ids"
# The id-to-tap mapping a server was observed to apply: (config id, the tap that slot carried).
ObservedMapping = tuple[tuple[int, Tap], ...]


def target_arch(
    given: str | None, architectures: Sequence[str] | None = None, model_type: str | None = None
) -> str:
    """The target architecture the rules apply: the one given, else the server's
    architectures[0], else its model_type, else FALLBACK_ARCH."""
    served = str(architectures[0]) if architectures else None
    return given or served or (str(model_type) if model_type else None) or FALLBACK_ARCH


def top_level_ids(spec: DraftSpec) -> tuple[int, ...] | None:
    """The config's top-level eagle_aux_hidden_state_layer_ids (alone, or beside nested ids)."""
    if spec.aux_ids_location == "top-level":
        return spec.aux_layer_ids
    return spec.dual_top_level_ids


def ids_from_observed(target: Layout, observed: ObservedMapping) -> list[int] | None:
    """The ids that make a server with this observed id-to-tap mapping feed `target`: each
    target tap's id where the server was seen to feed it, else through the server's constant
    offset (tap depth minus id, the same for every observed pre-norm slot); None when the
    mapping does not tell, or the ids would not be in layer order."""
    seen = {tap: i for i, tap in observed}
    offsets = {tap.depth - i for i, tap in observed}
    pre_norm = all(not tap.post_norm for _, tap in observed)
    offset = offsets.pop() if len(offsets) == 1 and pre_norm else None
    ids = []
    for tap in target:
        if tap in seen:
            ids.append(seen[tap])
        elif offset is not None and not tap.post_norm:
            ids.append(tap.depth - offset)
        else:
            return None
    return ids if ids == sorted(ids) and len(set(ids)) == len(ids) else None


def ids_json(ids: Sequence[int]) -> str:
    """'[1, 2, 3]'."""
    return json.dumps(list(ids))


def released_build_only(
    server: str, entry: str, releases: str, phrase: str, fed: str, data: dict
) -> tuple[str, dict]:
    """The fix on a server observed to depart from its release's rules, whose config already
    holds the ids a released build reads as the wanted taps: no config change is the fix; a
    released build or retraining on what this build feeds is."""
    return (
        f"No config change fixes it: the draft's config.json already holds {entry}, which "
        f"released {releases} reads as {phrase}, but this {server} server departs from those "
        f"rules (a patched or unreleased build) and feeds {fed}. What would change the outcome: "
        f"serve with a released build of {releases}, or retrain the draft on the taps this "
        f"build feeds ({fed}).",
        {**data, "needs_released_build": True, "config_unchanged": True},
    )


@dataclass(frozen=True)
class EngineFix:
    """The fix search's answer on one engine: the ids that make this server feed `target` (by
    its release's rules, or by the id-to-tap mapping it was observed to apply), and the fix as a
    finding says it: the config entry to write, a released build, or retraining."""

    target: Layout
    ids: list[int] | None  # the ids the search found for this server, in the engine's FIX_KEY
    text: str
    data: dict = field(default_factory=dict)  # machine-readable: the ids, the release they hold on
    # The fix writes ids this release's rules give, which the config does not hold yet.
    writes_rules_ids: bool = False


class EngineRules(Protocol):
    """What a rule asks of the served engine, for one reading of it (its release and, on vLLM,
    its model runner: `engine`). A question that is another engine's returns nothing (None)."""

    engine: ServingEngine
    FIX_KEY: str  # the config key its fix writes the ids to (the one it reads first)

    def releases(self) -> tuple[str, ...]:
        """The releases whose rules were read, oldest first."""
        ...

    def parse_version(self, text: str) -> Version | None:
        """A release as numbers, None when this engine's rules cannot read it."""
        ...

    def has(self, feature: str) -> bool | None:
        """Whether this release has a feature a one-engine rule checks (a flag, a fix); None
        when the release is not known or the feature is not this engine's."""
        ...

    def first_release(self, feature: str) -> str | None:
        """The first release read that has the feature, None when none (or not this engine's)."""
        ...

    def family(self, arch: str) -> str:
        """The capture family of a target architecture: whose id rule applies."""
        ...

    def serving_layout(
        self, spec: DraftSpec, num_layers: int, arch: str, cuda_graph: bool = True
    ) -> LayoutResult:
        """The taps this reading feeds the draft for a target of `num_layers` blocks."""
        ...

    def default_capture(self, num_layers: int, arch: str) -> Layout:
        """The taps it feeds a draft whose config names no ids it reads."""
        ...

    def read_ids(self, spec: DraftSpec) -> tuple[int, ...] | None:
        """The ids it reads from FIX_KEY, as stored (None: that key names none)."""
        ...

    def reads_no_ids(self, spec: DraftSpec) -> bool:
        """Whether it finds no layer ids it reads in the config (so it feeds its defaults)."""
        ...

    def config_entry(self, ids: Sequence[int] | None) -> str:
        """The FIX_KEY entry to copy into config.json ('[...]' for None)."""
        ...

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
        """The one fix search: what makes this server feed `target`. `observed`: the id-to-tap
        mapping of a server that departs from its release's rules; `fed`: what it was seen to
        feed, in words; `serving`: the taps it feeds, for retraining on them."""
        ...

    def runs_norm_before_residual(self, spec: DraftSpec) -> bool:
        """Whether it runs the draft with norm_before_residual."""
        ...

    def hidden_states_mode(self, enabled: bool, mode: str | None) -> str | None:
        """What a request for hidden states gets from a server with these settings: 'full', 'last'
        (refused) or None (refused, or an engine without the request)."""
        ...
