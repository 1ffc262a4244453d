"""SGLang's answers to `engines.protocol.EngineRules`, from its rules by release and
architecture (`rules.py`), and its fix worded for a finding: the nested eagle_config ids for
this server, else a release that feeds the taps, else retraining."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from eagle3dash.engines.facts import (
    NESTED_KEY,
    ObservedMapping,
    Version,
    ids_json,
    released_build_only,
)
from eagle3dash.engines.protocol import EngineFix
from eagle3dash.engines.sglang import rules
from eagle3dash.layout import (
    Layout,
    LayoutResult,
    default_layout,
    default_output_of_ids,
    join_words,
    taps_phrase,
)

if TYPE_CHECKING:
    from eagle3dash.engines.serving import ServingEngine
    from eagle3dash.spec import DraftSpec

# What the one-engine rules ask by name (`has`, `first_release`): the first release with it.
RELEASE_FACTS: dict[str, Version] = {
    "draft_quantization_flag": rules.DRAFT_QUANT_FLAG_SINCE,
    "draft_window_flag": rules.DRAFT_WINDOW_FLAG_SINCE,
    "eagle31": rules.EAGLE31_SINCE,  # fc_norm, norm_output
    "norm_before_fc": rules.NORM_BEFORE_FC_SINCE,
    "hidden_states_per_token": rules.HIDDEN_STATES_FIX,
    "spec_v2_topk_refused": rules.SPEC_V2_TOPK_REFUSED_SINCE,
    "spec_v2_topk_fallback": rules.SPEC_V2_TOPK_FALLBACK_SINCE,
    "spec_v2_worker_only": rules.SPEC_V2_WORKER_ONLY_SINCE,
}


class SGLangRules:
    """SGLang's rules for one server (`engine`: its release, None when it did not say)."""

    FIX_KEY = NESTED_KEY  # SGLang reads only the nested key

    def __init__(self, engine: ServingEngine) -> None:
        self.engine = engine

    def _version(self) -> Version | None:
        return rules.try_parse_version(self.engine.version)

    def releases(self) -> tuple[str, ...]:
        """The releases read, oldest first."""
        return rules.KNOWN_SGLANG_VERSIONS

    def parse_version(self, text: str) -> Version | None:
        """'0.5.15.post1' -> (0, 5, 15); None when unparseable or older than the rules."""
        return rules.try_parse_version(text)

    def has(self, feature: str) -> bool | None:
        """Whether this release has a RELEASE_FACTS feature (None: release unknown, or not
        SGLang's)."""
        version, since = self._version(), RELEASE_FACTS.get(feature)
        return None if version is None or since is None else version >= since

    def first_release(self, feature: str) -> str | None:
        """The first release with a RELEASE_FACTS feature."""
        since = RELEASE_FACTS.get(feature)
        return None if since is None else rules.version_text(since)

    def family(self, arch: str) -> str:
        """The architecture's family (models/ file whose id rule applies)."""
        return rules.arch_family(arch)

    def serving_layout(
        self, spec: DraftSpec, num_layers: int, arch: str, cuda_graph: bool = True
    ) -> LayoutResult:
        """The taps this release feeds the draft."""
        return rules.serving_layout(spec, num_layers, self.engine.rules_version(), arch, cuda_graph)

    def default_capture(self, num_layers: int, arch: str) -> Layout:
        """The taps it captures without nested ids."""
        return rules.default_capture(num_layers, arch)

    def read_ids(self, spec: DraftSpec) -> tuple[int, ...] | None:
        """The nested ids."""
        return rules.nested_ids(spec)

    def reads_no_ids(self, spec: DraftSpec) -> bool:
        """No nested ids."""
        return rules.nested_ids(spec) is None

    def config_entry(self, ids: Sequence[int] | None) -> str:
        """The eagle_config entry."""
        return rules.eagle_config_json(ids)

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
        """`rules.find_fix` for this server, worded. A fix never repeats the ids the config
        already holds: a server that departs from its release's rules gets a released build."""
        target = tuple(target)
        if spec is None or num_layers is None:
            return EngineFix(
                target,
                None,
                "Set eagle_config.eagle_aux_hidden_state_layer_ids in the draft's config.json to "
                "the layers training used (SGLang reads id i as the output of layer i); give the "
                "target's layer count for the exact ids.",
            )
        fix = rules.find_fix(target, spec, num_layers, self._version(), arch, cuda_graph, observed)
        current = list(rules.nested_ids(spec) or ()) if spec.use_aux_hidden_state else None
        text, data = _fix_words(fix, spec, num_layers, current, fed, serving)
        writes = fix.ids is not None and fix.ids_from == "rules" and fix.ids != current
        return EngineFix(target, fix.ids, text, data, writes)

    def runs_norm_before_residual(self, spec: DraftSpec) -> bool:
        """Never: models/llama_eagle3.py takes the residual before hidden_norm."""
        return False

    def hidden_states_mode(self, enabled: bool, mode: str | None) -> str | None:
        """`rules.hidden_states_mode`."""
        return rules.hidden_states_mode(enabled, mode)


def _releases_text(fix: rules.LayoutFix) -> str:
    """'SGLang 0.5.23 (and every release read from 0.5.16 on)' or 'SGLang 0.5.12'."""
    head = f"SGLang {fix.release}"
    known = list(rules.KNOWN_SGLANG_VERSIONS)
    if len(fix.releases) > 1 and fix.releases == known[known.index(fix.releases[0]) :]:
        return f"{head} (every release read from {fix.releases[0]} on feeds them)"
    if len(fix.releases) > 1:
        return f"{head} (the releases read that feed them: {join_words(fix.releases)})"
    return head


def _fix_words(
    fix: rules.LayoutFix,
    spec: DraftSpec,
    n: int,
    current: list[int] | None,
    fed: str,
    serving: Layout | None,
) -> tuple[str, dict]:
    """The fix as a finding says it, and its data: config_ids and the sglang_version they hold
    on; needs_released_build when the server departs from its release's rules and the ids are
    stock SGLang's; empty when only retraining helps."""
    assumed = " (assumed: the server's version is unknown)" if fix.version_assumed else ""
    v = rules.version_text(fix.version)
    phrase = taps_phrase(fix.target, n)

    def cfg(ids: list[int]) -> str:
        return rules.eagle_config_json(ids, aux_on=not spec.use_aux_hidden_state)

    if fix.ids is not None and fix.ids_from == "observed":
        stock = ""
        if fix.release_ids is not None:
            stock = f" On a released build ({_releases_text(fix)}) the ids are "
            stock += f"{ids_json(fix.release_ids)}."
        return (
            f"Set {cfg(fix.ids)} in the draft's config.json and restart the server: this server "
            f"departs from SGLang {v}'s rules, and the ids it was observed to take make it feed "
            f"{phrase}.{stock}",
            {"config_ids": fix.ids, "sglang_version": v, "ids_from": "observed"},
        )
    if fix.ids is not None and fix.ids == current:
        # SGLang's rules say the config already feeds the target: this server does not follow them
        return released_build_only(
            f"SGLang {v}",
            rules.eagle_config_json(fix.ids),
            f"SGLang {v}",
            phrase,
            fed,
            {"sglang_version": v},
        )
    if fix.ids is not None:
        return (
            f"Set {cfg(fix.ids)} in the draft's config.json and restart the server: SGLang {v}"
            f"{assumed} then captures {phrase}.",
            {"config_ids": fix.ids, "sglang_version": v},
        )
    if fix.departs and fix.release is not None and fix.release_ids == current:
        return released_build_only(
            f"SGLang {v}",
            rules.eagle_config_json(fix.release_ids),
            _releases_text(fix),
            phrase,
            fed,
            {"sglang_version": fix.release},
        )
    retrain = (
        f"retrain the draft on the layers serving can feed ({taps_phrase(serving, n)})"
        if serving
        else "retrain the draft on layers SGLang captures, e.g. its defaults "
        f"({taps_phrase(default_layout(n), n)}; SpecForge ids "
        f"{ids_json(default_output_of_ids(n))})"
    )
    data: dict = {}
    options = []
    if fix.release is not None and fix.release_ids is not None:
        build = "a released build of " if fix.departs else ""
        options.append(
            f"serve with {build}{_releases_text(fix)} and set {cfg(fix.release_ids)} in the "
            "draft's config.json"
        )
        data = {"config_ids": fix.release_ids, "sglang_version": fix.release}
        if fix.departs:
            data["needs_released_build"] = True
    if fix.eager_ids is not None:
        options.append(
            f"keep SGLang {v} but restart with --disable-cuda-graph (slow) and "
            f"{rules.eagle_config_json(fix.eager_ids)} in config.json"
        )
    options.append(retrain)
    if fix.departs:
        text = (
            f"No ids are known to make this server feed the training taps: {fix.why_not}, so "
            "stock SGLang's ids hold only on a released build. "
        )
    elif fix.release is None:
        text = (
            f"No release of SGLang read ({rules.KNOWN_SGLANG_VERSIONS[0]} to "
            f"{rules.KNOWN_SGLANG_VERSIONS[-1]}) feeds these taps; on SGLang {v}{assumed}: "
            f"{fix.why_not}. "
        )
        return text + "Only retraining helps: " + retrain + ".", data
    else:
        text = f"No ids reproduce the training taps on SGLang {v}{assumed}: {fix.why_not}. "
    text += "Either " + "; or ".join(options) + "."
    return text, data
