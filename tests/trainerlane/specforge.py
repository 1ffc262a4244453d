"""The trainers lane's SpecForge 0.2.0: two real offline runs on this CPU, and their exports.

SpecForge 0.2.0 captures online through an SGLang server only (config/schema.py); offline it
trains from `.ckpt` feature files (runtime/data_plane/offline_reader.py `_OFFLINE_EAGLE3_KEYS`,
normalized by algorithms/eagle3/data.py): `input_ids` [L], `loss_mask` [L], `hidden_state`
[1, L, H] (the target's last state after its final norm: the teacher) and `aux_hidden_state`
[1, L, 3H] (the captured layers, SGLang numbering: id i = the output of layer i, in layer order).
Its own maker, scripts/prepare_hidden_states.py, runs the target in SGLang
(offline_capture/sglang.py); here transformers computes the same states from the demo target.

Two runs of the real `specforge train -c run.yaml` (through specforge_shim.py), same features:

- `ids-in-draft-config`: the ids in the draft config's `eagle_config` (where SpecForge's
  algorithms/model_providers.py resolve_eagle_capture_layers reads them, and where the export
  keeps them);
- `ids-in-run-yaml`: the ids only as the run yaml's `model.aux_hidden_state_layer_ids`: the run
  trains on them, its export never names them and training_state.pt records capture_layers None
  (an offline run).

The ids, SGLang [0, 1, 2] = taps 1, 2, 3, are away from every default for N = 4: SpecForge's
[1, N//2-1, N-4] = [1, 1, 0], the engines' (2, N//2, N-3) = (2, 2, 1).

The draft config is written as a user would: SpecForge's generated one sets draft_vocab_size
32000 whatever the target (algorithms/eagle3/providers.py), more than the demo's 256 tokens (its
first step fails: the target's 256-way distribution against 32000 draft logits), so it is set to
the target's 256.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

from tests.trainerlane.common import NUM_LAYERS, TARGET, run_in_venv, training_sequences

# SGLang numbering (id i = output of layer i): taps 1, 2, 3 of the demo target.
CAPTURE_IDS = [0, 1, 2]
# Measured on this CPU (one thread): 512 sequences, 6 epochs of batch 16 (192 steps, ~2.5 min)
# give draft top-1 0.63 on the eval set, and on the real vLLM 0.32 an accept length of 1.70 fed
# as trained against 1.18 fed one block early; the run on the run yaml's ids only trains its
# first epoch, its files being what the tests read.
SEQUENCES = 512
EVAL_SEQUENCES = 8
EPOCHS = {"ids-in-draft-config": 6, "ids-in-run-yaml": 1}
BATCH = 16
# SpecForge's default model.torch_dtype; its TargetHead (modeling/target/target_head.py) runs in
# bfloat16 whatever the run says, so the features are stored as a bfloat16 SGLang capture's.
DTYPE = "bfloat16"
RUNS = ("ids-in-draft-config", "ids-in-run-yaml")


def draft_config(ids: list[int] | None) -> dict:
    """The draft's config, the demo target's dims, its vocabulary whole; `ids` in eagle_config."""
    target = json.loads((TARGET / "config.json").read_text())
    eagle = {"use_aux_hidden_state": True}
    if ids is not None:
        eagle["eagle_aux_hidden_state_layer_ids"] = ids
    return {
        "architectures": ["LlamaForCausalLMEagle3"],
        "model_type": "llama",
        "hidden_size": target["hidden_size"],
        "intermediate_size": 512,
        "num_attention_heads": target["num_attention_heads"],
        "num_key_value_heads": target["num_key_value_heads"],
        "head_dim": target["head_dim"],
        "num_hidden_layers": 1,
        "vocab_size": target["vocab_size"],
        "draft_vocab_size": target["vocab_size"],
        "rms_norm_eps": target["rms_norm_eps"],
        "hidden_act": "silu",
        "max_position_embeddings": target["max_position_embeddings"],
        "rope_theta": target["rope_parameters"]["rope_theta"],
        "rope_scaling": None,
        "attention_bias": False,
        "tie_word_embeddings": False,
        "pad_token_id": 0,
        "bos_token_id": target["bos_token_id"],
        "torch_dtype": DTYPE,
        "eagle_config": eagle,
    }


def sharded_target(out: Path) -> Path:
    """The demo target as SpecForge loads one: modeling/target/target_head.py reads the lm_head
    through a `*.index.json` weight map only, so a copy of the folder (links) gains one."""
    from safetensors import safe_open

    out.mkdir(parents=True)
    for f in TARGET.iterdir():
        (out / f.name).symlink_to(f)
    with safe_open(str(TARGET / "model.safetensors"), framework="pt") as weights:
        names = list(weights.keys())
    index = {"metadata": {}, "weight_map": dict.fromkeys(names, "model.safetensors")}
    (out / "model.safetensors.index.json").write_text(json.dumps(index, indent=2) + "\n")
    return out


def write_features(out: Path, rows: list[list[int]], ids: list[int]) -> Path:
    """One `.ckpt` per sequence, as SpecForge's offline reader reads them (module docstring)."""
    import torch
    from transformers import AutoModelForCausalLM

    dtype = getattr(torch, DTYPE)

    out.mkdir(parents=True, exist_ok=True)
    target = AutoModelForCausalLM.from_pretrained(TARGET, dtype=torch.float32).eval()
    with torch.inference_mode():
        for i, row in enumerate(rows):
            input_ids = torch.tensor(row, dtype=torch.long)
            states = target(input_ids[None], output_hidden_states=True).hidden_states
            # HF hidden_states[k] = the stream after k blocks (k < N); [N] is after the final norm
            aux = torch.cat([states[i + 1] for i in sorted(ids)], dim=-1)
            torch.save(
                {
                    "input_ids": input_ids,
                    "loss_mask": torch.ones_like(input_ids),
                    "hidden_state": states[NUM_LAYERS].to(dtype),
                    "aux_hidden_state": aux.to(dtype),
                },
                out / f"data_{i:04d}.ckpt",
            )
    return out


def run_yaml(root: Path, name: str, target: Path, config: Path, features: Path, evals: Path) -> str:
    """SpecForge's run config (config/schema.py Config) for one offline CPU run."""
    yaml_ids = f"\n  aux_hidden_state_layer_ids: {CAPTURE_IDS}" if name == RUNS[1] else ""
    steps = SEQUENCES // BATCH * EPOCHS[name]
    return f"""\
run_id: {name}
output_dir: {root / "output"}
model:
  target_model_path: {target}
  draft_model_config: {config}
  torch_dtype: bfloat16{yaml_ids}
data:
  hidden_states_path: {features}
  eval_hidden_states_path: {evals}
  max_length: 128
  chat_template: llama3
  dataloader_num_workers: 0
  cache_dir: {root / "cache"}
training:
  num_epochs: {EPOCHS[name]}
  batch_size: {BATCH}
  learning_rate: 0.01
  lr_scheduler: constant
  warmup_ratio: 0.0
  ttt_length: 4
  attention_backend: sdpa
  fsdp_sharding: NO_SHARD
  save_interval: {steps // 2}
  eval_interval: {steps // 2}
  log_interval: {steps // 4}
  seed: 0
"""


def train(out: Path) -> dict:
    """Both runs trained and exported under `out`; every path the tests read, and the timings."""
    rows = training_sequences(SEQUENCES + EVAL_SEQUENCES)
    features = write_features(out / "features" / "train", rows[:SEQUENCES], CAPTURE_IDS)
    evals = write_features(out / "features" / "eval", rows[SEQUENCES:], CAPTURE_IDS)
    target = sharded_target(out / "target")
    result: dict = {"ids": list(CAPTURE_IDS), "target": target, "seconds": {}}
    for name in RUNS:
        root = out / name
        root.mkdir()
        config = root / "draft_config.json"
        ids = CAPTURE_IDS if name == RUNS[0] else None
        config.write_text(json.dumps(draft_config(ids), indent=2) + "\n")
        (root / "run.yaml").write_text(run_yaml(root, name, target, config, features, evals))
        start = time.monotonic()
        run_in_venv(
            "specforge",
            ["-m", "specforge_shim", "train", "-c", "run.yaml"],
            root,
            root / "train.log",
        )
        result["seconds"][name] = round(time.monotonic() - start, 1)
        run = root / "output"
        steps = sorted(run.glob(f"{name}-step*"), key=lambda p: int(p.name.rsplit("step", 1)[1]))
        step = steps[-1]
        exports = {}
        for to in ("sglang", "hf"):
            exported = root / f"export-{to}"
            args = ["--to", to, "--checkpoint", str(step), "--draft-config", str(config)]
            if to == "hf":
                args += ["--embedding-source", str(target)]
            run_in_venv(
                "specforge",
                ["-m", "specforge_shim", "export", *args, "--output-dir", str(exported)],
                root,
                root / f"export-{to}.log",
            )
            exports[to] = exported
        result[name] = {
            "run_yaml": root / "run.yaml",
            "draft_config": config,
            "run": run,
            "steps": steps,
            "step": step,
            "latest": run / f"{name}-latest",
            "state": step / "training_state.pt",
            "exports": exports,
        }
    return result
