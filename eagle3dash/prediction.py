"""What the draft's config predicts each side feeds: a trainer's convention for training, SGLang's
rules for serving, and their diff. A prediction, checked in a diagnosis against what was measured.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from eagle3dash.engine import ServingPrediction
from eagle3dash.layout import Layout, LayoutDiff, LayoutResult, diff
from eagle3dash.sglang_rules import (
    DEFAULT_SGLANG_VERSION,
    default_capture,
    nested_ids,
    serving_layout,
)
from eagle3dash.spec import DraftSpec
from eagle3dash.trainers import training_layout


@dataclass
class LayoutComparison:
    """Training and serving layouts of a draft as its config predicts them, and their diffs."""

    training: LayoutResult
    serving: LayoutResult
    diff: LayoutDiff
    decode_diff: LayoutDiff | None = None  # CUDA-graph replays, when they capture other taps
    # The engine's default taps the serving side fell back to (no ids it reads), else None.
    fell_back_to: Layout | None = None

    def to_dict(self) -> dict:
        """JSON form."""
        return {
            "training": self.training.to_dict(),
            "serving": self.serving.to_dict(),
            "diff": self.diff.to_dict(),
            "decode_diff": None if self.decode_diff is None else self.decode_diff.to_dict(),
        }


def predict_layouts(
    spec: DraftSpec,
    num_layers: int,
    trainer: str | None = None,
    sglang_version: str = DEFAULT_SGLANG_VERSION,
    arch: str = "llama",
    cuda_graph: bool = True,
    training_override: Layout | None = None,
    training_sglang_version: str | None = None,
    training_ids: tuple[int, ...] | None = None,
    served: ServingPrediction | None = None,
) -> LayoutComparison:
    """Training and serving layouts of a draft and their diff (and the decode diff, if any);
    `training_ids`: the ids a run recorded capturing with, when they differ from the config's;
    `served`: the serving side by the server's engine's rules (`ServingEngine.predict_serving`),
    else SGLang's for `sglang_version`."""
    trained = spec
    if training_ids is not None:
        trained = replace(spec, aux_layer_ids=tuple(training_ids), aux_ids_location="eagle_config")
    training = training_layout(
        trained,
        num_layers,
        trainer,
        layout=training_override,
        sglang_version=training_sglang_version,
        arch=arch,
    )
    if served is None:
        serving = serving_layout(spec, num_layers, sglang_version, arch, cuda_graph)
        fell_back_to = default_capture(num_layers, arch) if nested_ids(spec) is None else None
    else:
        serving, fell_back_to = served.result, served.fell_back_to
    defaults = default_capture(num_layers, arch)
    decode = serving.decode_layout
    return LayoutComparison(
        training=training,
        serving=serving,
        diff=diff(training.layout, serving.layout, fell_back_to),
        decode_diff=diff(training.layout, decode, defaults) if decode is not None else None,
        fell_back_to=fell_back_to,
    )
