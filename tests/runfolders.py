"""Trainers' run folders written in the shapes their sources write (SpecForge 0.2.0
training/checkpoint.py and controller.py; speculators 0.9.0 train/checkpointer.py and
config/artifacts.py; NeMo AutoModel 0.7.0 recipes/llm/train_eagle3.py save_checkpoint and
components/checkpoint/), never by importing the trainers: for the run-folder and sweep tests."""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
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
    return _speculators_files(root)


def speculators_run_of(root: Path, checkpoints: list[Path]) -> Path:
    """A speculators 0.9 run folder whose epochs 0, 1, ... are copies of these checkpoint
    folders (e.g. the demo's drafts, for a sweep on the demo's capture); best = epoch 1."""
    for epoch, checkpoint in enumerate(checkpoints):
        shutil.copytree(checkpoint, root / str(epoch))
    return _speculators_files(root)


def _speculators_files(root: Path) -> Path:
    """What speculators writes beside its epoch folders: run.yaml, the train command, epoch 1's
    validation metrics and the `checkpoint_best` link to it."""
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


# meta-llama/Llama-3.1-8B-Instruct's config.json (LlamaConfig.to_dict() keys, transformers 4.x).
LLAMA_8B = {
    "architectures": ["LlamaForCausalLM"],
    "attention_bias": False,
    "attention_dropout": 0.0,
    "bos_token_id": 128000,
    "eos_token_id": [128001, 128008, 128009],
    "head_dim": 128,
    "hidden_act": "silu",
    "hidden_size": 4096,
    "initializer_range": 0.02,
    "intermediate_size": 14336,
    "max_position_embeddings": 131072,
    "mlp_bias": False,
    "model_type": "llama",
    "num_attention_heads": 32,
    "num_hidden_layers": 32,
    "num_key_value_heads": 8,
    "pretraining_tp": 1,
    "rms_norm_eps": 1e-05,
    "rope_scaling": {
        "factor": 8.0,
        "high_freq_factor": 4.0,
        "low_freq_factor": 1.0,
        "original_max_position_embeddings": 8192,
        "rope_type": "llama3",
    },
    "rope_theta": 500000.0,
    "tie_word_embeddings": False,
    "torch_dtype": "bfloat16",
    "transformers_version": "4.43.0.dev0",
    "use_cache": True,
    "vocab_size": 128256,
}


def nemo_config(target: dict, draft_vocab_size: int, norm_output: bool = False) -> dict:
    """A draft config.json as NeMo AutoModel 0.7.0 writes it (train_eagle3.py `setup`): the
    target's text config with the draft's keys over it; num_hidden_layers stays the target's."""
    return {
        **target,
        "draft_vocab_size": draft_vocab_size,
        "target_hidden_size": target["hidden_size"],
        "architectures": ["LlamaEagle3DraftModel"],
        "tie_word_embeddings": False,
        "attn_implementation": "eager",
        "fc_norm": False,
        "norm_output": norm_output,
        "parallel_drafting": False,
    }


def llama_8b_weights(export: Path, draft_vocab_size: int = 32000) -> None:
    """The weights of an 8B-target NeMo draft as headers over a sparse hole (eagle/draft_llama.py
    names): unfused, under `model.`, lm_head, and d2t/t2d for the compressed vocabulary."""
    from eagle3dash.testing.tensors import write_headers_only

    h, q, kv, ffn, vocab = 4096, 4096, 1024, 14336, 128256
    layer = {
        "input_layernorm.weight": [h],
        "hidden_norm.weight": [h],
        "post_attention_layernorm.weight": [h],
        "self_attn.q_proj.weight": [q, 2 * h],
        "self_attn.k_proj.weight": [kv, 2 * h],
        "self_attn.v_proj.weight": [kv, 2 * h],
        "self_attn.o_proj.weight": [h, q],
        "mlp.gate_proj.weight": [ffn, h],
        "mlp.up_proj.weight": [ffn, h],
        "mlp.down_proj.weight": [h, ffn],
    }
    tensors = {
        "model.embed_tokens.weight": ([vocab, h], "BF16"),
        "model.fc.weight": ([h, 3 * h], "BF16"),
        **{f"model.layers.0.{n}": (shape, "BF16") for n, shape in layer.items()},
        "model.norm.weight": ([h], "BF16"),
        "lm_head.weight": ([draft_vocab_size, h], "BF16"),
        "d2t": ([draft_vocab_size], "I64"),
        "t2d": ([vocab], "BOOL"),
    }
    write_headers_only(export / "model.safetensors", tensors)


def nemo_recipe(target: str, aux_layer_ids: list[int] | None, **more: object) -> str:
    """config.yaml as NeMo AutoModel writes the recipe snapshot (checkpointing.py save_config:
    yaml.dump, sort_keys=False, block style)."""
    lines = ["recipe_args:", f"  target_model_name_or_path: {target}"]
    if aux_layer_ids is not None:
        lines += ["  aux_layer_ids:", *(f"  - {i}" for i in aux_layer_ids)]
    lines += [f"  {k}: {json.dumps(v)}" for k, v in more.items()]
    lines += ["  ttt_steps: 7", "checkpoint:", "  enabled: true", "  save_consolidated: final"]
    return "\n".join(lines) + "\n"


def nemo_step(
    run: Path,
    epoch: int,
    step: int,
    config: dict,
    weights: Callable[[Path], None],
    recipe: str | None,
    val_loss: float | None = None,
) -> Path:
    """One `epoch_{E}_step_{S}` folder: model/consolidated (config.json + weights), config.yaml,
    eagle_meta.pt, and losses.json when an eval ran."""
    folder = run / f"epoch_{epoch}_step_{step}"
    export = folder / "model" / "consolidated"
    export.mkdir(parents=True)
    (export / "config.json").write_text(json.dumps(config, indent=2))
    weights(export)
    if recipe is not None:
        (folder / "config.yaml").write_text(recipe)
    if val_loss is not None:
        losses = {"val_loss": val_loss, "val_accuracy": 0.61}
        (folder / "losses.json").write_text(json.dumps(losses))
    meta = {  # train_eagle3.py _save_extra_state; eagle3dash never reads it
        "global_step": step,
        "epoch": epoch,
        "selected_token_ids": torch.arange(4),
        "selected_token_mask": torch.ones(4, dtype=torch.bool),
    }
    torch.save(meta, folder / "eagle_meta.pt")
    return folder
