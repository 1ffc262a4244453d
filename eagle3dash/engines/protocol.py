"""What the findings and the layout detective ask of the run's engine (`EngineRules`) and the
fix each room answers with (`EngineFix`).

Each engine room answers `EngineRules` in its `protocol.py` (`sglang/protocol.py` SGLangRules,
`vllm/protocol.py` VLLMRules); `engines.rules.rules_for(engine)` picks the room, and
`findings.core.Evidence.rules()` asks it for the run's engine. Nothing here imports a room's
protocol; the facts the rooms share are `engines/facts.py`, the engine a reading is of
`engines/serving.py`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

from eagle3dash.engines.facts import ObservedMapping, Version
from eagle3dash.layout import Layout, LayoutResult

if TYPE_CHECKING:
    from eagle3dash.engines.serving import ServingEngine
    from eagle3dash.spec import DraftSpec


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
