"""The trainers lane's speculators 0.9.0 runs: a real `speculators train` on this CPU, on the demo
target and its language, leaving the files a user would paste into eagle3dash.

The data goes the way speculators' offline pipeline takes it: rows of `input_ids` and `loss_mask`
through `speculators prepare-data` (offline: such rows need no render endpoint), then the
target's hidden states for each prepared row in speculators' on-disk format. speculators has vLLM
extract those states, and vLLM's extractor dies on a CPU, so transformers computes them by the
same rule (speculators_shim.py `hidden-states`). Then `speculators train` itself, through
speculators_shim.py `train`, twice: a normal run and a `--save-best` run.

The ids are vLLM's numbering (id k = the residual stream after k layers, the engines' Tap(k)):
TARGET_LAYER_IDS (1, 2, 3) on the 4-layer target, away from every default: speculators' and the
engines' (2, N // 2, N - 3) = (2, 2, 1), which speculators refuses on this target (models/utils.py
resolve_target_layer_ids), and NeMo AutoModel's (1, N // 2 - 1, N - 4) = (1, 1, 0). They are the
taps of the demo's draft B, Tap(1), Tap(2), Tap(3), which SGLang's numbering would read one block
later.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

from tests.trainerlane.common import TARGET, run_in_venv, training_sequences

TARGET_LAYER_IDS = (1, 2, 3)
# Sizes for a quick lane, not a good draft: a step of 1024 tokens takes about half a second of one
# CPU thread; 18 steps an epoch, two epochs (the files of each epoch are what the lane reads).
SEQUENCES = 160  # 144 train + 16 validation rows (train_data_ratio 0.9)
LENGTH = 128
EPOCHS = 2
# speculators packs rows into one sequence of total_seq_len tokens per step: 8 rows a step
TOTAL_SEQ_LEN = 8 * LENGTH


def train(out: Path) -> dict:
    """Prepare the data, write its hidden states and train a normal and a --save-best run in
    `out`; returns the entries a user would paste and the seconds each stage took."""
    seconds: dict[str, float] = {}
    rows = out / "rows.jsonl"
    with rows.open("w") as f:
        for sequence in training_sequences(SEQUENCES, LENGTH):
            # every position after BOS is a training target
            f.write(json.dumps({"input_ids": sequence, "loss_mask": [0] + [1] * (LENGTH - 1)}))
            f.write("\n")
    data = out / "data"
    start = time.perf_counter()
    _speculators(
        out,
        "prepare-data",
        "-m", "speculators_shim", "prepare-data", "--model", str(TARGET), "--data", str(rows),
        "--output", str(data), "--seq-length", str(LENGTH), "--num-preprocessing-workers", "1",
    )  # fmt: skip
    seconds["prepare-data"] = time.perf_counter() - start
    start = time.perf_counter()
    ids = [str(i) for i in TARGET_LAYER_IDS]
    _speculators(out, "hidden-states", "-m", "speculators_shim", "hidden-states", str(data),
                 str(TARGET), *ids)  # fmt: skip
    seconds["hidden-states"] = time.perf_counter() - start
    runs = {"run": out / "run", "best_run": out / "best-run"}
    for name, extra in (("run", []), ("best_run", ["--save-best"])):
        start = time.perf_counter()
        _speculators(
            out,
            f"train-{name}",
            "-m", "speculators_shim", "train",
            "--speculator-type", "eagle3",
            "--verifier-name-or-path", str(TARGET),
            "--data-path", str(data),
            "--target-layer-ids", *ids,
            "--save-path", str(runs[name]),
            "--epochs", str(EPOCHS),
            "--total-seq-len", str(TOTAL_SEQ_LEN),
            "--draft-attn-impl", "sdpa",
            "--hidden-states-dtype", "float32",
            "--loss-implementation", "eager",
            "--num-workers", "0",
            # EAGLE-3 uses no mask token, but speculators resolves one for every draft
            # (train/utils.py resolve_mask_token_id) and the byte tokenizer has none to offer
            "--mask-token-id", "0",
            "--log-dir", str(out / f"logs-{name}"),
            *extra,
        )  # fmt: skip
        seconds[f"train-{name}"] = time.perf_counter() - start
    return {
        **runs,
        "target": TARGET,
        "target_layer_ids": TARGET_LAYER_IDS,
        "epochs": EPOCHS,
        "seconds": seconds,
    }


def _speculators(out: Path, stage: str, *args: str) -> None:
    """One stage in the speculators venv, its output in `out/<stage>.log`."""
    run_in_venv("speculators", list(args), cwd=out, log=out / f"{stage}.log")
