"""What to diagnose and how hard to look: the options of one diagnosis."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class DiagnoseOptions:
    """What to diagnose and how hard to look."""

    draft: str
    endpoint: str
    baseline: str | None = None
    prompts: str = "chat"  # a built-in set name or a JSONL path
    num_prompts: int = 16
    max_new_tokens: int = 64
    concurrency: int = 4
    train_states: str | None = None  # SpecForge or speculators dump made with the training layout
    target: str | None = None  # local Hugging Face target, for training-side states
    target_layers: int | None = None  # target depth N, when no config tells it
    arch: str | None = None  # target architecture for SGLang's capture rules
    trainer: str | None = None
    training_layout: str | None = None  # taps the training data really used, e.g. "0,3,31"
    steps: int = 5  # draft steps evaluated (the server's own steps are reported too)
    device: str = "cpu"
    dtype: str = "float32"
    capture_dir: str | None = None  # where the serving capture is kept
    timeout: float = 120.0
