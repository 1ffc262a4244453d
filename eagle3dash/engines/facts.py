"""The facts every engine's rules share: the id keys a draft's config holds, the target
architecture assumed, the id-to-tap mapping observed on a server, and the fix on a server that
departs from its release's rules. Below every engine room: it imports none."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import TYPE_CHECKING

from eagle3dash.layout import Layout, Tap

if TYPE_CHECKING:
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
