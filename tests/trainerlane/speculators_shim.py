"""speculators 0.9.0 on a CPU: its own training loop, data handling and checkpointer, unchanged,
with what stops them on a machine without an accelerator worked around here. Runs in
`.venv-speculators` (tests/trainerlane/speculators.py starts it through common.run_in_venv):

    python -m speculators_shim hidden-states DATA_PATH VERIFIER ID [ID ...]
    python -m speculators_shim COMMAND ARGS   (`speculators COMMAND ARGS`: prepare-data, train)

`hidden-states` stands in for speculators' offline data generation, whose extractor is vLLM's
(scripts/launch_vllm.py serves the verifier with the `extract_hidden_states` method): vLLM's
extractor dies on a CPU, so transformers computes the same states by the same rule. launch_vllm.py
appends the last layer (num_hidden_layers) to the target layer ids; vLLM numbers a layer id k as
the residual stream after k decoder layers, before the final norm; and each row i of the prepared
dataset gets `hidden_states/hs_{i}.safetensors` holding `hidden_states` [seq, len(ids) + 1,
hidden] and `token_ids` [seq] (hs_connectors/transfer.py FileTransfer, read back by
speculators/train/data.py ArrowDataset, which splits off the last entry as the verifier's last
hidden state).

Any other command is speculators' own CLI (speculators/cli/__init__.py `app`), after the patches
in `run_cli`.
"""

from __future__ import annotations

import sys
from pathlib import Path

# This folder is on the path (common.run_in_venv) and holds the lane's own `speculators.py`: drop
# it, so that `speculators` is the installed package.
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).parent]


def write_hidden_states(data_path: Path, verifier: str, layer_ids: list[int]) -> int:
    """Write hs_{i}.safetensors for every row of the prepared dataset at `data_path`; returns
    the row count."""
    import torch
    from datasets import load_from_disk
    from safetensors.torch import save_file
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(verifier, dtype=torch.float32).eval()
    layers = model.config.num_hidden_layers
    ids = layer_ids if layers in layer_ids else [*layer_ids, layers]  # --include-last-layer
    captured: list[torch.Tensor] = []
    # the final norm's input: the residual stream after the last layer, before the norm
    model.model.norm.register_forward_pre_hook(lambda _, args: captured.append(args[0]))
    rows = load_from_disk(str(data_path)).with_format("torch")
    out = data_path / "hidden_states"
    out.mkdir(exist_ok=True)
    with torch.no_grad():
        for i, row in enumerate(rows):
            captured.clear()
            tokens = row["input_ids"].to(torch.long)
            states = model(tokens[None], output_hidden_states=True).hidden_states
            # states[k] is the stream after k layers for k < layers; states[layers] is normed
            taps = [captured[0][0] if k == layers else states[k][0] for k in ids]
            save_file(
                {"hidden_states": torch.stack(taps, dim=1).contiguous(), "token_ids": tokens},
                str(out / f"hs_{i}.safetensors"),
            )
    return len(rows)


def run_cli(args: list[str]) -> None:
    """`speculators ARGS` with the CPU patches."""
    import speculators.train.trainer as trainer
    import torch
    from speculators.cli import app

    # speculators/train/trainer.py moves the model and every batch to `get_local_rank()` (the
    # integer 0, i.e. cuda:0): on a CPU the device is the CPU.
    trainer.get_local_rank = lambda: "cpu"  # type: ignore[assignment,return-value]
    # speculators/train/trainer.py _StepTimer.mark/now call torch.accelerator.synchronize(),
    # which raises without an accelerator; with none there is nothing to wait for.
    if torch.accelerator.current_accelerator() is None:
        torch.accelerator.synchronize = lambda device=None: None
    app(args)


if __name__ == "__main__":
    if sys.argv[1:2] == ["hidden-states"]:
        data, verifier, *layer_ids = sys.argv[2:]
        count = write_hidden_states(Path(data), verifier, [int(i) for i in layer_ids])
        print(f"hidden states written for {count} rows")
    else:
        run_cli(sys.argv[1:])
