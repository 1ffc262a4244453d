"""What the trainers lane's three trainers share: their venvs, one-thread subprocesses, the target
they train for (the demo's) and its language.

Each trainer runs in a venv of its own (`make trainers`), never imported here: a lane module starts
the trainer's own entry point in that venv, through the trainer's shim (`*_shim.py` beside this
file), and the tests read what it wrote, as a user's files.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from eagle3dash.demo import FIXTURES
from eagle3dash.demo.language import sequences

ROOT = Path(__file__).resolve().parents[2]
LANE = Path(__file__).resolve().parent
# The demo's target: a trained 4-block Llama (3 trained blocks and an exact no-op 4th), vocab 256,
# its byte tokenizer and chat template. Its language makes drafts depend on the taps they are fed
# (draft B one block early: 2.83 -> 1.30 on the real vLLM). With N = 4 the engines' default ids
# (2, N//2, N-3) collapse to (2, 2, 1), so every draft of the lane names its ids.
TARGET = FIXTURES / "target"
NUM_LAYERS = 4
# The venv each trainer is installed in ($EAGLE3DASH_<NAME>_VENV names another).
VENVS = {
    "speculators": ".venv-speculators",
    "specforge": ".venv-specforge",
    "nemo-automodel": ".venv-nemo-automodel",
}
# A numpy seed of the demo language of its own, away from the demo build's streams.
DATA_SEED = 40_000


def venv_python(trainer: str) -> Path:
    """The python of `trainer`'s venv; skips the test, saying why, when it is not installed."""
    variable = "EAGLE3DASH_" + trainer.upper().replace("-", "_") + "_VENV"
    named = os.environ.get(variable)
    venv = Path(named) if named else ROOT / VENVS[trainer]
    python = venv / "bin" / "python"
    if not python.is_file():
        pytest.skip(f"no {trainer} venv at {venv}: `make trainers` installs it")
    if not named and not any(venv.glob(".installed-*")):
        pytest.skip(f"{venv} has no install stamp (`make trainers` did not finish)")
    return python


def run_in_venv(
    trainer: str, args: list[str], cwd: Path, log: Path, timeout: float = 900
) -> subprocess.CompletedProcess:
    """Run `python ARGS` in `trainer`'s venv on one CPU thread, no GPU and no hub, its output in
    `log`; fails the test with the log's tail when it exits non-zero."""
    env = {
        **os.environ,
        "OMP_NUM_THREADS": "1",
        "MKL_NUM_THREADS": "1",
        "CUDA_VISIBLE_DEVICES": "",
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
        "HF_DATASETS_OFFLINE": "1",
        "WANDB_MODE": "disabled",
        "TOKENIZERS_PARALLELISM": "false",
        "PYTHONPATH": str(LANE),
    }
    env.pop("VIRTUAL_ENV", None)
    command = [str(venv_python(trainer)), *args]
    with log.open("w") as out:
        done = subprocess.run(
            command, cwd=cwd, env=env, stdout=out, stderr=subprocess.STDOUT, timeout=timeout
        )
    if done.returncode != 0:
        tail = log.read_text(errors="replace")[-4000:]
        pytest.fail(f"{trainer}: {' '.join(command)} exited {done.returncode}:\n{tail}", False)
    return done


def training_sequences(count: int, length: int = 128, seed: int = DATA_SEED) -> list[list[int]]:
    """`count` sequences of the demo language (BOS first), the lane's training data."""
    return sequences(seed, count, length)


def main_python() -> str:
    """This suite's python (the project's venv), for steps that need eagle3dash."""
    return sys.executable
