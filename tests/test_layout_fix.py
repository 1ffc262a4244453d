"""sglang_rules.config_ids_for: the eagle_config ids that make an SGLang version capture a layout.

Each case is checked by feeding the ids back through serving_layout (SGLang's
`set_eagle3_layers_to_capture` rules as sglang_rules.py cites them).
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from eagle3dash.engines.sglang.rules import config_ids_for, serving_layout
from eagle3dash.layout import Tap, default_layout
from tests.specs import tiny_spec

SPEC = tiny_spec(aux_layer_ids=(2, 30, 58), aux_ids_location="eagle_config")


def taps(*depths: int) -> tuple[Tap, ...]:
    return tuple(Tap(d) for d in depths)


def reproduces(ids, layout, n, version, arch, cuda_graph=True) -> bool:
    spec = replace(SPEC, aux_layer_ids=tuple(ids), aux_ids_location="eagle_config")
    result = serving_layout(spec, n, version, arch, cuda_graph)
    return result.error is None and result.layout == layout


@pytest.mark.parametrize(
    "layout, n, version, arch, expected",
    [
        # Llama: +1 always (models/llama.py, every version)
        (taps(2, 16, 29), 32, "0.5.23", "llama", [1, 15, 28]),
        (taps(2, 16, 29), 32, "0.5.4", "llama", [1, 15, 28]),  # the defaults: CUDA graph agrees
        (taps(3, 17, 30), 32, "0.5.11", "llama", [2, 16, 29]),
        # Llama embedding: id -1 -> index 0 captures it from 0.5.22 (layer_boundary refactor)
        (taps(0, 16, 29), 32, "0.5.22", "llama", [-1, 15, 28]),
        # DeepSeek/Kimi 0.5.5-0.5.12: +1 always
        (taps(3, 31, 59), 61, "0.5.12", "kimi", [2, 30, 58]),
        # DeepSeek/Kimi >= 0.5.13: first id 1 -> +1, else verbatim (PR #25454)
        # (the config's own ids [2, 30, 58] come first when they feed the layout)
        (taps(2, 30, 58), 61, "0.5.13", "DeepseekV3ForCausalLM", [2, 30, 58]),
        (taps(3, 31, 59), 61, "0.5.13", "kimi", [3, 31, 59]),
        (taps(2, 30, 57), 61, "0.5.23", "kimi", [1, 29, 56]),
        # ... and the embedding (index 0) from 0.5.16 (communicator residual = hidden_states)
        (taps(0, 3, 31), 61, "0.5.16", "kimi", [0, 3, 31]),
        (taps(0, 3, 31), 61, "0.5.23", "kimi", [0, 3, 31]),
        # gpt-oss 0.5.17+: ids kept when max(ids) == N (the final boundary, PR #32334)
        (taps(24, 30, 36), 36, "0.5.20", "GptOssForCausalLM", [23, 29, 35]),
    ],
)
def test_config_ids_for_finds_ids_that_reproduce_the_layout(
    layout, n, version, arch, expected
) -> None:
    ids = config_ids_for(layout, SPEC, n, version, arch)
    assert ids == expected
    assert reproduces(ids, layout, n, version, arch)


@pytest.mark.parametrize(
    "layout, n, version, arch",
    [
        (taps(0, 16, 29), 32, "0.5.21", "llama"),  # embedding crashes before 0.5.22
        (taps(0, 3, 31), 61, "0.5.12", "kimi"),  # embedding crashes before 0.5.16 (DeepSeek)
        (taps(0, 3, 31), 61, "0.5.15", "kimi"),
        (taps(1, 30, 58), 61, "0.5.13", "kimi"),  # first id 1 means +1, 0 means the embedding
        (taps(3, 16, 32), 32, "0.5.23", "llama"),  # the last block's output is never captured
        ((Tap(2), Tap(16), Tap(32, True)), 32, "0.5.23", "llama"),  # post-norm: never
        (taps(16, 2, 29), 32, "0.5.23", "llama"),  # not in layer order
        (taps(3, 17, 30), 32, "0.5.10", "llama"),  # CUDA-graph decode uses the defaults
        (taps(2, 30, 58), 61, "0.5.4", "kimi"),  # no EAGLE-3 for DeepSeek before 0.5.5
    ],
)
def test_config_ids_for_impossible_is_none(layout, n, version, arch) -> None:
    assert config_ids_for(layout, SPEC, n, version, arch) is None


def test_config_ids_for_eager_server_on_old_cuda_graph_versions() -> None:
    layout = taps(3, 17, 30)
    assert config_ids_for(layout, SPEC, 32, "0.5.10", "llama", cuda_graph=False) == [2, 16, 29]
    # the defaults are what the CUDA graphs capture anyway
    assert config_ids_for(default_layout(32), SPEC, 32, "0.5.10", "llama") == [1, 15, 28]


def test_config_ids_for_keeps_existing_behaviour() -> None:
    """The search does not mutate the spec or change serving_layout for the original ids."""
    before = serving_layout(SPEC, 61, "0.5.12", "kimi")
    config_ids_for(taps(0, 3, 31), SPEC, 61, "0.5.16", "kimi")
    assert SPEC.aux_layer_ids == (2, 30, 58)
    assert serving_layout(SPEC, 61, "0.5.12", "kimi").layout == before.layout == taps(3, 31, 59)
