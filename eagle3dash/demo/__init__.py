"""The demo: a tiny target and EAGLE-3 drafts that reproduce the layout-shift incident on a CPU.

Shipped in `FIXTURES` (rebuilt by `python -m eagle3dash demo build --out DIR`, see build.py for
the recipe and why the published target has a no-op 4th block):

- `target/`: a 4-block LlamaForCausalLM (3 trained blocks plus an exact no-op block), vocab 256,
  byte-level tokenizer, trained on the segment-repeat language (`language.py`).
- `draft-a/`: trained on [Tap(0), Tap(1), Tap(2)] = [embedding, L1, L2] with config ids [0, 1, 2]
  written in Hugging Face's hidden_states-index convention. SGLang 0.5.23 adds +1 and feeds it
  [Tap(1), Tap(2), Tap(3)]: shifted by one slot, and acceptance collapses.
- `draft-b/`: the control, trained on [Tap(1), Tap(2), Tap(3)] with ids [0, 1, 2] in SGLang's
  (SpecForge's) convention: served exactly what it was trained on.
- `draft-c/`: the format draft: draft B's layout, trained behind the target's chat-template
  prefix (and taught to mispredict without it, standing in for a draft trained only on
  chat-formatted data; build.py says how). It drafts well only when the template is applied.
- `prompts.jsonl`: DEMO_PROMPTS with their categories ("copy-heavy", "novel": language.py).

`deployments()` gives the SGLang-double configurations of the demo: "mismatched" (draft A as its
config says), "correct" (draft B) and "fixed" (draft A with the ids the tool proposes,
`sglang_rules.config_ids_for`, as `aux_layer_ids_override`), the three `demo seed` runs
(DEPLOYMENT_NAMES); and "format" (draft C, served the layout it was trained on), whose finding
is the prompt format: send its prompts raw and through the chat template. `serve.py` serves
them on this machine (`python -m eagle3dash demo seed`, and New run's "Try it on the demo").

The demo's speed is modelled, not measured: each target forward of the SGLang API double takes
at least DELAY_S and each draft step DRAFT_STEP_S (the compute runs inside those floors), so its
tok/s and speedups follow that cost model, whatever else the machine is doing.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from eagle3dash.engines.sglang.rules import DEFAULT_SGLANG_VERSION

from .language import CHAT_PREFIX_IDS, PROMPT_COUNT, PROMPT_LENGTH, demo_prompt_rows

__all__ = [
    "ARCH",
    "CHAT_PREFIX_IDS",
    "CONCURRENCY",
    "DELAY_S",
    "DEMO_CATEGORIES",
    "DRAFT_STEP_S",
    "DEMO_PROMPTS",
    "DEPLOYMENT_NAMES",
    "FIXTURES",
    "MAX_NEW_TOKENS",
    "NUM_DRAFT_TOKENS",
    "NUM_LAYERS",
    "NUM_PROMPTS",
    "NUM_STEPS",
    "PROMPT_COUNT",
    "PROMPT_LENGTH",
    "RANDOM_SEED",
    "SGLANG_VERSION",
    "Deployment",
    "deployments",
    "training_layouts",
]

FIXTURES = Path(__file__).resolve().with_name("fixtures")
# also in FIXTURES / "prompts.jsonl", one {"input_ids", "category"} a line
_ROWS = demo_prompt_rows()
DEMO_CATEGORIES: list[str] = [cat for cat, _ in _ROWS]
DEMO_PROMPTS: list[list[int]] = [ids for _, ids in _ROWS]

SGLANG_VERSION = DEFAULT_SGLANG_VERSION
ARCH = "LlamaForCausalLM"
NUM_LAYERS = 4  # the published target's decoder blocks (the 4th a no-op)
NUM_STEPS = 4  # --speculative-num-steps
EAGLE_TOPK = 1
NUM_DRAFT_TOKENS = 5  # num_steps + 1, chain drafting
DEPLOYMENT_NAMES = ("mismatched", "correct", "fixed")  # the seeded runs; "format" is not one
# The double's cost model, so tok/s and speedup look like serving: a target forward takes at
# least DELAY_S and a draft step DRAFT_STEP_S (DoubleConfig.delay_s, .draft_step_s), the tiny
# models' compute inside those floors. A round of 4 draft steps and a verify costs 1.8 forwards,
# so the mismatched draft (about 1.2 tokens a round) is slower than no speculation.
DELAY_S = 0.01
DRAFT_STEP_S = 0.002
NUM_PROMPTS = 8  # a diagnosis of a demo deployment: its prompts, tokens and requests in flight
MAX_NEW_TOKENS = 64
CONCURRENCY = 1  # the double serves one request at a time
RANDOM_SEED = 0  # --random-seed of the demo's servers: sampling at temperature > 0 repeats


def training_layouts() -> dict[str, tuple]:
    """The taps each draft was trained on: {"draft-a": (Tap(0), Tap(1), Tap(2)), ...}."""
    from ..layout import Tap

    return {
        "draft-a": (Tap(0), Tap(1), Tap(2)),
        "draft-b": (Tap(1), Tap(2), Tap(3)),
        "draft-c": (Tap(1), Tap(2), Tap(3)),
    }


@dataclass(frozen=True)
class Deployment:
    """One SGLang(-double) deployment of a demo draft."""

    name: str  # "mismatched" | "correct" | "fixed" | "format"
    draft: str  # the fixture subdirectory: "draft-a" | "draft-b" | "draft-c"
    description: str
    aux_layer_ids_override: tuple[int, ...] | None  # None: the ids in the draft's config
    training_layout: tuple  # the taps the draft was trained on
    serving_layout: tuple  # the taps SGLang 0.5.23 feeds it in this deployment
    fixtures: Path = FIXTURES

    @property
    def target_path(self) -> Path:
        return self.fixtures / "target"

    @property
    def draft_path(self) -> Path:
        return self.fixtures / self.draft

    def double_config(self, **overrides):
        """A `testing.sglang_double_engine.DoubleConfig` for this deployment (chain drafting, 4
        steps)."""
        from ..testing.sglang_double_engine import DoubleConfig

        kwargs = {
            "target_path": self.target_path,
            "draft_path": self.draft_path,
            "speculative_algorithm": "EAGLE3",
            "num_steps": NUM_STEPS,
            "eagle_topk": EAGLE_TOPK,
            "num_draft_tokens": NUM_DRAFT_TOKENS,
            "sglang_version": SGLANG_VERSION,
            "arch": ARCH,
            "random_seed": RANDOM_SEED,  # the profile's temperature rows, the same every run
            "aux_layer_ids_override": (
                list(self.aux_layer_ids_override)
                if self.aux_layer_ids_override is not None
                else None
            ),
        }
        kwargs.update(overrides)
        return DoubleConfig(**kwargs)


def deployments(fixtures: str | Path = FIXTURES) -> dict[str, Deployment]:
    """The demo's four deployments; the serving layouts and the fix come from layout.py."""
    from dataclasses import replace

    from eagle3dash.engines.sglang.rules import config_ids_for, serving_layout

    from ..checkpoint import inspect

    fixtures = Path(fixtures)
    trained = training_layouts()
    spec_a = inspect(fixtures / "draft-a").spec
    spec_b = inspect(fixtures / "draft-b").spec
    spec_c = inspect(fixtures / "draft-c").spec
    fix = config_ids_for(trained["draft-a"], spec_a, NUM_LAYERS, SGLANG_VERSION, ARCH)
    if fix is None:
        raise RuntimeError("no SGLang ids serve draft A its training layout")
    spec_fixed = replace(spec_a, aux_layer_ids=tuple(fix), aux_ids_location="eagle_config")

    def served(spec) -> tuple:
        result = serving_layout(spec, NUM_LAYERS, SGLANG_VERSION, ARCH)
        return tuple(result.layout)

    return {
        "mismatched": Deployment(
            "mismatched",
            "draft-a",
            "draft A as its config says: ids [0, 1, 2] meant hidden_states indices, SGLang "
            "reads them as outputs of layers 0..2 and feeds every slot one tap too deep",
            None,
            trained["draft-a"],
            served(spec_a),
            fixtures,
        ),
        "correct": Deployment(
            "correct",
            "draft-b",
            "draft B (the control): trained on what SGLang feeds it",
            None,
            trained["draft-b"],
            served(spec_b),
            fixtures,
        ),
        "fixed": Deployment(
            "fixed",
            "draft-a",
            f"draft A with eagle_aux_hidden_state_layer_ids = {fix} (the tool's fix): SGLang "
            "feeds it its training layout again",
            tuple(fix),
            trained["draft-a"],
            served(spec_fixed),
            fixtures,
        ),
        "format": Deployment(
            "format",
            "draft-c",
            "draft C (the format draft), fed its training layout: trained behind the chat "
            "template's header, it drafts well only when the prompts go through the template",
            None,
            trained["draft-c"],
            served(spec_c),
            fixtures,
        ),
    }
