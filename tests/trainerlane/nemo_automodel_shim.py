"""Run NeMo AutoModel 0.7.0's own EAGLE-3 recipe and vLLM export on a CPU (inside its venv).

    python -m nemo_automodel_shim train --config run.yaml [--dotted.key value ...]
    python -m nemo_automodel_shim export-vllm DRAFT

`train` runs `recipes/llm/train_eagle3.py` `main` (its own setup, data, training loop and
checkpointer) with one patch; `export-vllm` runs `components/speculative/serve_vllm.py`'s own
`resolve_draft_artifacts`, the step its `main` takes before launching vLLM, and prints the folder
it wrote. What stops them here, and nothing else, is patched:

- `_transformers/auto_model.py` `NeMoAutoModelForCausalLM.from_pretrained` places the model with
  `torch.cuda.current_device()`: the recipe's frozen target is loaded with transformers instead
  (the colocated target then hooks `layers[id]` exactly as on a GPU, eagle/target.py).
- `serve_vllm.py` `main` exits without vLLM in this venv and execs the server after exporting:
  the export step alone is called; vLLM serves the folder from its own venv.

The `automodel` CLI is not used: `components/launcher/interactive.py` asks for GPUs.
"""

from __future__ import annotations

import sys
from pathlib import Path

# The lane's own nemo_automodel.py sits beside this file (on PYTHONPATH): out of the way of the
# package of that name.
_LANE = Path(__file__).resolve().parent
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != _LANE]


class _TransformersTarget:
    """Stands for `NeMoAutoModelForCausalLM` in the recipe (train_eagle3.py
    `_setup_colocated_target`): the same checkpoint, loaded on the CPU by transformers."""

    @staticmethod
    def from_pretrained(path: str, **kwargs: object) -> object:
        """The target as the recipe asks for it (its dtype and attention), on the CPU."""
        from transformers import AutoModelForCausalLM

        keep = {k: kwargs[k] for k in ("torch_dtype", "attn_implementation") if k in kwargs}
        if "torch_dtype" in keep:
            keep["dtype"] = keep.pop("torch_dtype")
        return AutoModelForCausalLM.from_pretrained(path, **keep)


def train(argv: list[str]) -> None:
    """The recipe's main with the target loaded by transformers."""
    from nemo_automodel.recipes.llm import train_eagle3

    train_eagle3.NeMoAutoModelForCausalLM = _TransformersTarget  # type: ignore[attr-defined]
    sys.argv = ["train_eagle3", *argv]
    train_eagle3.main()


def export_vllm(draft: str) -> None:
    """serve_vllm.py's export of `draft` for vLLM; prints the folder vLLM is to load."""
    from nemo_automodel.components.speculative.serve_vllm import resolve_draft_artifacts

    path, _ = resolve_draft_artifacts(draft)
    print(path)


if __name__ == "__main__":
    command, *rest = sys.argv[1:]
    if command == "train":
        train(rest)
    elif command == "export-vllm":
        export_vllm(rest[0])
    else:
        raise SystemExit(f"unknown command {command!r}: train | export-vllm")
