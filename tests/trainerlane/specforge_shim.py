"""What stops SpecForge 0.2.0 on this CPU, patched, then its own CLI (`specforge train|export`).

Run inside `.venv-specforge` as `python -m specforge_shim <specforge args>` (PYTHONPATH holds this
folder). SpecForge's loop, data plane, checkpoint manager and exporters run unchanged; the patches:

- algorithms/eagle3/model.py imports `LogSoftmaxLoss` from core/loss.py, a Triton kernel that
  cannot launch without a GPU driver: the same file's pure-torch `_compute_loss` (the reference
  the kernel is benchmarked against, benchmarks/benchmark_loss.py) takes its place, uncompiled.
- its @torch.compile helpers run eagerly (`_eager`): inductor's C++ builds take minutes here.
- training.fsdp_sharding NO_SHARD (the run yaml) and SpecForge's own CPU device type
  (utils.py get_device_type -> "cpu", distributed.py -> gloo) need no patch.
"""

from __future__ import annotations

import sys
from pathlib import Path

# This folder is on PYTHONPATH and holds the lane's own specforge.py, which would shadow the
# installed package of the same name.
_LANE = Path(__file__).resolve().parent
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != _LANE]


def _reference_loss() -> None:
    """core/loss.py: LogSoftmaxLoss (Triton) -> its pure-torch `_compute_loss`, eager."""
    from specforge.algorithms.eagle3 import model
    from specforge.core import loss

    # `_compute_loss` is wrapped by @torch.compile; the original function needs no compiler
    reference = getattr(loss._compute_loss, "_torchdynamo_orig_callable", loss._compute_loss)

    class ReferenceLogSoftmaxLoss:
        """`LogSoftmaxLoss.apply(logits, target_p, position_mask)` with the same mean loss."""

        @staticmethod
        def apply(logits, target_p, position_mask):
            return reference(logits, target_p, position_mask)

    model.LogSoftmaxLoss = ReferenceLogSoftmaxLoss  # algorithms/eagle3/model.py


def _eager() -> None:
    """algorithms/eagle3/model.py and modeling/draft/llama3_eagle.py @torch.compile their
    helpers: on a CPU inductor compiles C++ for each new shape (minutes on one thread), so they
    run eagerly, the same math."""
    import torch._dynamo

    torch._dynamo.config.disable = True


def main(argv: list[str]) -> int:
    """Patch, then run SpecForge's own CLI with `argv`."""
    _eager()
    _reference_loss()
    from specforge.cli import main as specforge_main

    return specforge_main(argv)


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
