"""Tiny drafts, targets and CLI runs for tests."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from eagle3dash.spec import DraftSpec

ROOT = Path(__file__).resolve().parent.parent


def tiny_spec(**overrides) -> DraftSpec:
    """A tiny SpecForge-format draft spec (hidden 32, 4 heads, 2 KV heads); override any field."""
    fields = dict(
        format="specforge",
        hidden_size=32,
        target_hidden_size=32,
        intermediate_size=64,
        num_layers=1,
        num_heads=4,
        num_kv_heads=2,
        head_dim=8,
        vocab_size=64,
        draft_vocab_size=64,
    )
    fields.update(overrides)
    return DraftSpec(**fields)


# SpecForge's shipped gpt-oss-20B config: nested ids [1, 11, 21], a 24-layer target.
SPECFORGE_GPT_OSS = tiny_spec(aux_layer_ids=(1, 11, 21), aux_ids_location="eagle_config")
# A speculators config: top-level ids in vLLM numbering, norm_before_residual written.
SPECULATORS_TOP = tiny_spec(
    format="speculators",
    aux_layer_ids=(2, 12, 22),
    aux_ids_location="top-level",
    norm_before_residual_key=False,
)


def served_draft_spec(ids: tuple[int, ...] = (0, 1, 2)) -> DraftSpec:
    """A SpecForge draft for `tiny_models`' target (hidden 64, vocab 256), nested ids `ids`."""
    return tiny_spec(
        hidden_size=64,
        target_hidden_size=64,
        intermediate_size=128,
        num_kv_heads=4,
        head_dim=16,
        vocab_size=256,
        draft_vocab_size=256,
        aux_layer_ids=ids,
        aux_ids_location="eagle_config",
    )


def tiny_models(root: Path, ids: tuple[int, ...] = (0, 1, 2)) -> dict[str, Path]:
    """A 4-layer tiny target and a random draft for it, saved under `root`."""
    from eagle3dash.checkpoint import save
    from eagle3dash.testing.tensors import random_tensors
    from eagle3dash.testing.tiny import make_tiny_target

    target = make_tiny_target(root / "target", num_layers=4, hidden_size=64)
    spec = served_draft_spec(ids)
    draft = save(spec, random_tensors(spec, seed=1), root / "draft", "specforge")
    return {"target": target, "draft": draft}


def run_cli(*args: str, timeout: float = 180) -> subprocess.CompletedProcess:
    """Run `python -m eagle3dash ARGS` from the repo root and capture its output."""
    return subprocess.run(
        [sys.executable, "-m", "eagle3dash", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
