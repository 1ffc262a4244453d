"""What the draft's config predicts each side feeds: a trainer's convention for training, the
serving engine's rules for serving (SGLang's, or vLLM's by runner: engine_rules), and their diff.
A prediction, checked in a diagnosis against what was measured.
"""

from __future__ import annotations

from dataclasses import dataclass

from eagle3dash.engines import rules as engine_rules
from eagle3dash.engines.facts import FALLBACK_ARCH
from eagle3dash.engines.serving import ServingEngine
from eagle3dash.engines.sglang.rules import DEFAULT_SGLANG_VERSION
from eagle3dash.layout import Layout, LayoutDiff, LayoutResult, diff
from eagle3dash.spec import DraftSpec
from eagle3dash.trainers import training_layout


@dataclass
class LayoutComparison:
    """Training and serving layouts of a draft as its config predicts them, and their diffs."""

    training: LayoutResult
    serving: LayoutResult
    diff: LayoutDiff
    decode_diff: LayoutDiff | None = None  # CUDA-graph replays, when they capture other taps

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
    arch: str = FALLBACK_ARCH,
    cuda_graph: bool = True,
    training_override: Layout | None = None,
    training_sglang_version: str | None = None,
    training_ids: tuple[int, ...] | None = None,
    engine: ServingEngine | None = None,
) -> LayoutComparison:
    """Training and serving layouts of a draft and their diff (and the decode diff, if any);
    `training_ids`: the ids a run recorded capturing with (they stand for the config's);
    `engine`: the serving engine (None: SGLang at `sglang_version`)."""
    training = training_layout(
        spec,
        num_layers,
        trainer,
        layout=training_override,
        sglang_version=training_sglang_version,
        arch=arch,
        recorded_ids=training_ids,
    )
    if engine is None:
        engine = ServingEngine("sglang", sglang_version)
    serving = engine_rules.serving_layout(engine, spec, num_layers, arch, cuda_graph)
    rules = engine_rules.rules_for(engine)
    defaults, fell_back = rules.default_capture(num_layers, arch), rules.reads_no_ids(spec)
    decode = serving.decode_layout
    return LayoutComparison(
        training=training,
        serving=serving,
        diff=diff(training.layout, serving.layout, defaults if fell_back else None),
        decode_diff=diff(training.layout, decode, defaults) if decode is not None else None,
    )
