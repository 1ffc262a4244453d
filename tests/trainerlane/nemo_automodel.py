"""The trainers lane's NeMo AutoModel 0.7.0 run: its EAGLE-3 recipe trains a draft for the demo's
target on this CPU (through nemo_automodel_shim.py), and its serve_vllm.py converts a step for
vLLM; the tests read what they wrote, as a user's files.

The recipe (recipes/llm/train_eagle3.py) reads chat rows (`messages`, components/datasets/llm/
chat_dataset.py) through the target's chat template; the demo's byte tokenizer turns a text's
UTF-8 bytes into ids, so a token passes as text only below 128: the demo language's tokens
1..255 are folded onto 1..127 (the same segment-repeat structure, BOS kept).

The capture ids given NeMo, `recipe_args.aux_layer_ids` [0, 1, 2] (a hook on layers[id]: the
output of layers 0, 1 and 2, taps 1, 2, 3), are away from every default: NeMo's
[1, N//2-1, N-4] = [1, 1, 0] (which its eagle/target.py refuses as too shallow for N = 4) and
SGLang's and vLLM's (2, N//2, N-3) = (2, 2, 1).
"""

from __future__ import annotations

import json
import time
from pathlib import Path

from tests.trainerlane.common import TARGET, run_in_venv, training_sequences

AUX_LAYER_IDS = (0, 1, 2)
SEQUENCES = 800  # 50 optimizer steps of 16 rows: about a minute of training on one thread
LENGTH = 96  # demo-language tokens a row (BOS first), after the template's 19-token prefix
BATCH = 16
SAVE_EVERY = 25  # optimizer steps: two step folders, so a sweep has something to rank
SHIM = "nemo_automodel_shim"


def _chat_rows(path: Path) -> None:
    """The demo language as the recipe's chat rows: BOS as the user's turn, the rest the
    assistant's (the supervised tokens)."""
    rows = []
    for sequence in training_sequences(SEQUENCES, LENGTH):
        text = bytes(((t - 1) % 127) + 1 if t else 0 for t in sequence).decode("ascii")
        rows.append(
            {
                "messages": [
                    {"role": "user", "content": text[:1]},
                    {"role": "assistant", "content": text[1:]},
                ]
            }
        )
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))


def _recipe(path: Path, data: Path, output_dir: Path) -> None:
    """The recipe's config yaml (the keys train_eagle3.py reads; gloo for one CPU process)."""
    ids = ", ".join(map(str, AUX_LAYER_IDS))
    path.write_text(
        f"""recipe_args:
  target_model_name_or_path: {TARGET}
  train_data_path: {data}
  output_dir: {output_dir}
  aux_layer_ids: [{ids}]
  seq_length: {LENGTH + 19}
  micro_batch_size: {BATCH}
  num_epochs: 1
  ttt_steps: 3
  ckpt_every_steps: {SAVE_EVERY}
  log_every_steps: 5
  target_attn_implementation: sdpa
optimizer:
  lr: 0.003
dist_env:
  backend: gloo
"""
    )


def train(out: Path) -> dict:
    """Train the lane's NeMo run under `out`; every entry the tool is to read, in a dict."""
    data, recipe, output_dir = out / "data.jsonl", out / "run.yaml", out / "output"
    _chat_rows(data)
    _recipe(recipe, data, output_dir)
    start = time.perf_counter()
    run_in_venv(
        "nemo-automodel", ["-m", SHIM, "train", "--config", str(recipe)], out, out / "train.log"
    )
    seconds = time.perf_counter() - start
    checkpoints = output_dir / "checkpoints"
    steps = sorted(checkpoints.glob("epoch_*_step_*"), key=lambda p: int(p.name.rsplit("_", 1)[1]))
    latest = checkpoints / "LATEST"
    run_in_venv(
        "nemo-automodel",
        ["-m", SHIM, "export-vllm", str(latest.resolve())],
        out,
        out / "export.log",
    )
    consolidated = latest.resolve() / "model" / "consolidated"
    return {
        "output_dir": output_dir,
        "checkpoints": checkpoints,
        "latest": latest,
        "steps": steps,
        "consolidated": consolidated,
        "vllm_export": consolidated / "vllm_export",  # serve_vllm.py _VLLM_EXPORT_DIRNAME
        "aux_layer_ids": AUX_LAYER_IDS,
        "train_seconds": seconds,
    }
