"""Trainers' run folders written in the shapes their sources write (SpecForge 0.2.0
training/checkpoint.py and controller.py; speculators 0.9.0 train/checkpointer.py and
config/artifacts.py), never by importing the trainers: for the run-folder and sweep tests."""

from __future__ import annotations

import json
from pathlib import Path

import torch

from eagle3dash.checkpoint import save
from eagle3dash.testing.tensors import random_tensors
from tests.specs import tiny_spec

TARGET_SHA = "ab" * 32


def specforge_run(root: Path, capture_layers=(2, 30, 58)) -> Path:
    """Two steps of a SpecForge 0.2 online run, best = step 10, latest = step 20."""
    provenance = {
        "source_identity_format": "stat-v2",
        "target_model": (
            "directory-stat-v2",
            "/models/DeepSeek-V3",
            (
                ("sha256", "config.json", 1234, TARGET_SHA),
                ("stat", "model.safetensors", 9, 1),
                ("sha256", "tokenizer_config.json", 99, "12" * 32),
            ),
        ),
        "target_revision": "deadbeef",
        "capture_layers": capture_layers,
        "torch_dtype": "bfloat16",
    }
    for step in (10, 20):
        folder = root / f"r1-step{step}"
        folder.mkdir(parents=True)
        payload = {
            "draft_state_dict": {"fc.weight": torch.zeros(2, 6)},
            "global_step": step,
            "epoch": step // 10 - 1,
            "strategy": "eagle3",
            "run_id": "r1",
            "specforge_model_provenance": tuple(sorted(provenance.items())),
        }
        torch.save(payload, folder / "training_state.pt")
    (root / "r1-latest").symlink_to(root / "r1-step20")
    (root / "r1-best").symlink_to(root / "r1-step10")
    meta = {
        "run_id": "r1",
        "step": 10,
        "score": 1.2,
        "metric": "eval/simulated_acc_len",
        "metrics": {
            "eval/per_position_acc": [0.8, 0.5],
            "eval/simulated_acc_len": 1.2,
            "eval/acceptance_rate_0": 0.9,
            "eval/acceptance_rate_1": 0.5,
        },
    }
    (root / "r1.best_meta.json").write_text(json.dumps(meta))
    return root


RUN_YAML = """train:
  verifier:
    verifier_name_or_path: meta-llama/Llama-3.1-8B-Instruct
  draft:
    target_layer_ids:
    - 2
    - 16
    - 29
  speculator_type: eagle3
"""


def speculators_run(root: Path, verifier="meta-llama/Llama-3.1-8B-Instruct") -> Path:
    spec = tiny_spec(
        format="speculators",
        aux_layer_ids=(2, 16, 29),
        aux_ids_location="top-level",
        verifier=verifier,
        norm_before_residual=True,
    )
    for epoch in (0, 1, 2):
        save(spec, random_tensors(spec, seed=epoch), root / str(epoch), "speculators")
    (root / "run.yaml").write_text(RUN_YAML)
    (root / "train_command.txt").write_text(
        "# Timestamp: 2026-11-30T10:00:00+00:00\n# Git SHA: abc\n# World size: 8\n"
        "# speculators: 0.9.0\n# vllm: 0.33.0\npython -m speculators.train --config run.yaml\n"
    )
    metrics = {
        "loss_epoch": 1.5,
        "full_acc_0_epoch": 0.7,
        "full_acc_1_epoch": 0.4,
        "cond_acc_0_epoch": 0.7,
        "cond_acc_1_epoch": 0.5714,
    }
    (root / "1" / "val_metrics.json").write_text(json.dumps(metrics))
    (root / "checkpoint_best").symlink_to(root / "1")
    return root
