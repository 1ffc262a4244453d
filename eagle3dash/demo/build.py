"""Build the demo: a tiny target and two EAGLE-3 drafts that reproduce the layout-shift incident.

    python -m eagle3dash demo build --out DIR       # 13-17 minutes on 2 CPU cores

Recipe: research/demo-recipe.md (segment-repeat language, 3-layer Llama target, one-layer drafts
with a 4-step TTT unroll). What is written to DIR:

    target/    config.json, model.safetensors, generation_config.json, byte-level tokenizer
    draft-a/   SpecForge format: trained on [Tap(0), Tap(1), Tap(2)], config ids [0, 1, 2]
    draft-b/   SpecForge format: trained on [Tap(1), Tap(2), Tap(3)], config ids [0, 1, 2]
    prompts.jsonl   DEMO_PROMPTS, one {"input_ids": [...]} per line
    build.json      seeds, hyperparameters, wall times, training curves, final metrics, sha256s

Why the published target has 4 blocks. The incident needs the shifted layout to reach the last
block's raw ("logit-ready") output: with a 3-layer target, [emb, L1, L2] -> [L1, L2, L3] collapses
the draft, while shifting inside the residual stream of a deeper target barely hurts (the recipe's
4-layer experiment). But SGLang never captures the last block's output, Tap(N), and the SGLang
double follows SGLang's rules exactly. So the 3-layer model is trained and then published as a
4-layer LlamaForCausalLM whose 4th decoder block is an exact no-op: all its projections (among
them self_attn.o_proj and mlp.down_proj) are zero, so it adds exactly 0.0 to the residual stream
and the model's logits are bit-identical to the 3-layer model's (the build asserts it, and
tests/test_demo.py checks it again). With N = 4, Tap(3), the trained model's raw last-block output,
is the input of block 3, which SGLang can capture. This is honest: the served model computes
exactly what the trained one does; only the block count differs.

The two drafts (N = 4, a Llama target on SGLang 0.5.23, where explicit ids get +1):
- Draft A, the seed's mistake: trained on [Tap(0), Tap(1), Tap(2)] = [embedding, L1, L2], its
  config stores the ids in Hugging Face's hidden_states-index convention, [0, 1, 2] (what a custom
  trainer that indexed `hidden_states[i]` writes; `layout.training_layout(spec, 4,
  trainer="hf-index")`). SGLang reads them as "output of layer i" and serves [Tap(1), Tap(2),
  Tap(3)]: every slot shifted by one, the embedding only in training.
- Draft B, the control: trained on [Tap(1), Tap(2), Tap(3)] with ids [0, 1, 2] in SGLang's own
  convention (SpecForge's), so SGLang serves what it was trained on.
- The fix for A: `layout.config_ids_for((Tap(0), Tap(1), Tap(2)), spec, 4, "0.5.23", "llama")`
  is [-1, 0, 1] (id -1 = the embedding for Llama from SGLang 0.5.22).

Deviation from the recipe: the drafts train for 500 steps, not 250. With 250 steps draft B, the
control, stopped at 65% top-1 / 2.69 simulated accept length (A: 74% / 3.72), a weak control;
with 500 it reaches about 73% / 3.7, close to A on its own layout. Everything else is the recipe's
(weight decay applies to matrices only; learning rates decay by cosine to 10%).

Both drafts have no embed_tokens (SGLang uses the target's), the target's lm_head copied and
frozen, and no d2t (draft vocabulary = target vocabulary). Deterministic: every random number
comes from a fixed numpy or torch seed, so a rebuild with the same thread settings writes
bit-identical safetensors (build.json records their sha256).
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import multiprocessing
import platform
import queue as queue_mod
import shutil
import sys
import time
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import torch

from .language import (
    LENGTH,
    PROMPT_COUNT,
    PROMPT_LENGTH,
    STREAMS,
    demo_prompts,
    gen_batch,
    sequences,
)

__all__ = ["DRAFTS", "build", "evaluate_build", "main"]

EVAL_SEQUENCES = 128  # held-out sequences of the "eval" stream scored in build.json

# name -> (trained taps, ids written to eagle_config, the trainer convention those ids follow)
DRAFTS = {
    "draft-a": ((0, 1, 2), (0, 1, 2), "hf-index"),
    "draft-b": ((1, 2, 3), (0, 1, 2), "specforge"),
}


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _train_drafts(
    out: Path, threads: int, parallel: bool, steps: int | None, progress: Callable[[str], None]
) -> dict[str, dict]:
    from .train import train_draft

    jobs = {
        name: (name, str(out / "target"), depths, ids, str(out / name))
        for name, (depths, ids, _trainer) in DRAFTS.items()
    }
    if not parallel:
        logs = {}
        for name, args in jobs.items():
            logs[name] = train_draft(*args, threads=threads, steps=steps, queue=_Relay(progress))
        return logs
    ctx = multiprocessing.get_context("spawn")
    with ctx.Manager() as manager:
        q = manager.Queue()
        with ProcessPoolExecutor(max_workers=len(jobs), mp_context=ctx) as pool:
            futures = {
                name: pool.submit(train_draft, *args, threads=1, steps=steps, queue=q)
                for name, args in jobs.items()
            }
            while not all(f.done() for f in futures.values()):
                with contextlib.suppress(queue_mod.Empty):
                    progress(q.get(timeout=0.5))
            while True:
                try:
                    progress(q.get_nowait())
                except queue_mod.Empty:
                    break
            return {name: f.result() for name, f in futures.items()}


class _Relay:
    """A queue-like object that hands messages straight to `progress` (sequential training)."""

    def __init__(self, progress: Callable[[str], None]):
        self.progress = progress

    def put(self, msg: str) -> None:
        self.progress(msg)


@torch.no_grad()
def evaluate_build(out: str | Path, count: int = EVAL_SEQUENCES, steps: int = 4) -> dict:
    """Score the built models with the package's own code on `count` held-out sequences.

    capture.capture_with_transformers on the published target (taps 0..3), then for each draft
    draft.evaluate_capture under both layouts: top-1 (step-0 accuracy against the target's greedy
    token) and the simulated accept length with `steps` draft tokens.
    """
    from .. import checkpoint
    from ..capture import capture_with_transformers
    from ..draft import build_draft, evaluate_capture
    from ..layout import Tap

    out = Path(out)
    seqs = sequences(STREAMS["eval"], count, LENGTH)
    _, copy = gen_batch(np.random.default_rng(STREAMS["eval"]), count, LENGTH)
    taps = tuple(Tap(d) for d in range(4))
    cap = capture_with_transformers(out / "target", seqs, taps)
    rows: list[torch.Tensor] = []
    for s in cap.sequences:
        assert s.target_ids is not None  # a transformers capture records the target's tokens
        rows.append(s.target_ids[:-1] == s.input_ids[1:])
    hits = torch.stack(rows).numpy()  # [count, L-1]
    cp = copy[:, 1:]
    result: dict = {
        "sequences": count,
        "stream_seed": STREAMS["eval"],
        "steps": steps,
        "target": {
            "accuracy": float(hits.mean()),
            "copy_accuracy": float(hits[cp].mean()),
            "fresh_accuracy": float(hits[~cp].mean()),
        },
        "drafts": {},
    }
    layouts = {"0,1,2": (Tap(0), Tap(1), Tap(2)), "1,2,3": (Tap(1), Tap(2), Tap(3))}
    for name in DRAFTS:
        spec, tensors, _ = checkpoint.load(out / name)
        draft = build_draft(spec, tensors)
        per_layout = {}
        for key, layout in layouts.items():
            ev = evaluate_capture(draft, cap, layout, steps=steps)
            per_layout[key] = {
                "top1": ev.accuracy[0],
                "accuracy": ev.accuracy,
                "acceptance": ev.acceptance,
                "accept_length": ev.accept_length,
                "positions": ev.num_positions,
            }
        result["drafts"][name] = per_layout
    return result


def build(
    out_dir: str | Path,
    threads: int = 2,
    progress: Callable[[str], None] = print,
    *,
    parallel: bool = True,
    target_steps: int | None = None,
    draft_steps: int | None = None,
) -> dict:
    """Train and save the demo's target and drafts into `out_dir`; return the build.json dict.

    `threads`: torch threads for the target (and for each draft when not `parallel`); parallel
    trains the two drafts in two spawned processes at one thread each (fastest on 2 cores).
    `target_steps`/`draft_steps` override the 1000/500 steps (smoke tests only).
    """
    from transformers import LlamaForCausalLM

    from ..testing.tiny import save_byte_tokenizer
    from .train import (
        DRAFT,
        TARGET,
        _quiet_transformers,
        append_noop_block,
        check_noop_block,
        train_target,
    )

    _quiet_transformers()
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    t_all = time.perf_counter()
    old_threads = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        progress(f"training the target ({TARGET['num_layers']} layers) on {threads} threads")
        model3, target_log = train_target(progress, steps=target_steps)
        model4 = append_noop_block(model3)
        check_tokens, _ = gen_batch(np.random.default_rng(STREAMS["eval"]), 8, LENGTH)
        noop = check_noop_block(model3, model4, check_tokens)
        progress("appended the no-op 4th block: logits and taps 0..3 bit-identical")
        target_dir = out / "target"
        if target_dir.exists():
            shutil.rmtree(target_dir)
        model4.save_pretrained(str(target_dir))
        save_byte_tokenizer(target_dir)
        # the saved model reloads to the same function
        reloaded = LlamaForCausalLM.from_pretrained(str(target_dir), dtype=torch.float32).eval()
        check_noop_block(model3, reloaded, check_tokens)
        del model3, model4, reloaded

        t_drafts = time.perf_counter()
        mode = "parallel" if parallel else "sequential"
        progress(f"training drafts A and B ({mode})")
        draft_logs = _train_drafts(out, threads, parallel, draft_steps, progress)
        drafts_s = time.perf_counter() - t_drafts

        prompts = demo_prompts()
        (out / "prompts.jsonl").write_text(
            "".join(json.dumps({"input_ids": p}) + "\n" for p in prompts)
        )
        progress("evaluating the drafts on held-out sequences")
        t_eval = time.perf_counter()
        metrics = evaluate_build(out)
        eval_s = time.perf_counter() - t_eval
    finally:
        torch.set_num_threads(old_threads)

    files = sorted(str(p.relative_to(out)) for p in out.rglob("*.safetensors") if p.parent != out)
    import transformers

    record: dict[str, Any] = {
        "recipe": "research/demo-recipe.md",
        "streams": STREAMS,
        "target": {
            "trained_layers": TARGET["num_layers"],
            "published_layers": TARGET["num_layers"] + 1,
            "noop_block": {
                "index": TARGET["num_layers"],
                "zero": "q_proj, k_proj, v_proj, o_proj, gate_proj, up_proj, down_proj",
                "check": noop,
            },
            **target_log,
        },
        "drafts": {
            name: {
                "trainer_convention": DRAFTS[name][2],
                "ttt_steps": DRAFT["ttt_steps"],
                **log,
                "out_dir": name,
            }
            for name, log in draft_logs.items()
        },
        "metrics": metrics,
        "prompts": {
            "file": "prompts.jsonl",
            "count": PROMPT_COUNT,
            "length": PROMPT_LENGTH,
            "stream_seed": STREAMS["prompts"],
        },
        "wall_seconds": {
            "target": target_log["seconds"],
            "drafts": drafts_s,
            "evaluation": eval_s,
            "total": time.perf_counter() - t_all,
        },
        "settings": {"threads": threads, "draft_training": mode},
        "sha256": {f: _sha256(out / f) for f in files},
        "versions": {
            "python": platform.python_version(),
            "torch": torch.__version__,
            "transformers": transformers.__version__,
            "numpy": np.__version__,
        },
    }
    (out / "build.json").write_text(json.dumps(record, indent=2) + "\n")
    progress(f"built {out} in {record['wall_seconds']['total']:.0f} s")
    return record


def main(argv: list[str] | None = None) -> int:
    """`python -m eagle3dash demo build --out DIR`: rebuild the fixtures deterministically."""
    p = argparse.ArgumentParser(
        prog="python -m eagle3dash demo build",
        description="Train the demo's tiny target and drafts A and B (13-17 min on 2 cores).",
    )
    p.add_argument("--out", required=True, help="output directory (e.g. eagle3dash/demo/fixtures)")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--sequential", action="store_true", help="train the drafts one after the other")
    p.add_argument("--target-steps", type=int, help="override 1000 (smoke tests only)")
    p.add_argument("--draft-steps", type=int, help="override 500 (smoke tests only)")
    args = p.parse_args(argv)
    record = build(
        args.out,
        threads=args.threads,
        progress=lambda m: print(m, flush=True),
        parallel=not args.sequential,
        target_steps=args.target_steps,
        draft_steps=args.draft_steps,
    )
    m = record["metrics"]["drafts"]
    for name, per in m.items():
        for key, r in per.items():
            top1, accept = r["top1"], r["accept_length"]
            print(f"{name} on [{key}]: top-1 {top1:.3f}, accept length {accept:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
