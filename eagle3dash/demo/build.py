"""Build the demo: a tiny target, drafts A and B for the layout-shift incident, format draft C.

    python -m eagle3dash demo build --out DIR       # 16-20 minutes on 2 CPU cores
    python -m eagle3dash demo build --out DIR --format-draft-only   # draft C from DIR's models

Recipe (its hyperparameters in train.py): segment-repeat language, 3-layer Llama target, one-layer
drafts with a 4-step TTT unroll. What is written to DIR:

    target/    config.json, model.safetensors, generation_config.json, byte-level tokenizer
    draft-a/   SpecForge format: trained on [Tap(0), Tap(1), Tap(2)], config ids [0, 1, 2]
    draft-b/   SpecForge format: trained on [Tap(1), Tap(2), Tap(3)], config ids [0, 1, 2]
    draft-c/   the format draft: draft B's taps and ids, tuned behind the chat template's prefix
    prompts.jsonl   DEMO_PROMPTS, one {"input_ids": [...], "category": "..."} per line
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
  trainer that indexed `hidden_states[i]` writes; `trainers.training_layout(spec, 4,
  trainer="hf-index")`). SGLang reads them as "output of layer i" and serves [Tap(1), Tap(2),
  Tap(3)]: every slot shifted by one, the embedding only in training.
- Draft B, the control: trained on [Tap(1), Tap(2), Tap(3)] with ids [0, 1, 2] in SGLang's own
  convention (SpecForge's), so SGLang serves what it was trained on.
- The fix for A: `sglang_rules.config_ids_for((Tap(0), Tap(1), Tap(2)), spec, 4, "0.5.23", "llama")`
  is [-1, 0, 1] (id -1 = the embedding for Llama from SGLang 0.5.22).

Deviation from the recipe: the drafts train for 500 steps, not 250. With 250 steps draft B, the
control, stopped at 65% top-1 / 2.69 simulated accept length (A: 74% / 3.72), a weak control;
with 500 it reaches about 73% / 3.7, close to A on its own layout. Everything else is the recipe's
(weight decay applies to matrices only; learning rates decay by cosine to 10%).

Draft C, the format draft (issue 13's prompt-format finding needs a draft trained on another
prompt format than the one it is served with). The target's tokenizer carries a chat template
(language.CHAT_TEMPLATE) that puts the header CHAT_PREFIX = "<|sys|>demo<|user|>" (19 byte ids)
before the user's content and nothing after it; applied to an ids prompt it prepends those ids.
Draft C has draft B's architecture, taps and ids (SGLang serves it [Tap(1), Tap(2), Tap(3)],
what it was trained on) and starts from draft B's weights; it is then trained 120 steps
(FORMAT_DRAFT: batch 16, lr 2e-3, 2 threads, its own data streams) on a mixture
(train.train_draft with format_prefix): half of each batch is CHAT_PREFIX + a sequence, labelled
with the target's distribution as usual; the other half is the raw sequence, labelled with the
target's distribution ONE POSITION LATER. That second half is deliberate. At this scale a draft
generalises across the prefix: draft B, never trained behind it, drafts as well with it as
without (3.91 vs 3.71 on the first 8 prompts), so a draft trained only behind the prefix would
most likely draft well on raw prompts too (not tried), while the demo needs what a draft trained
only on chat-formatted data shows at scale. So draft C stands in for such a draft: its failure on
raw prompts is taught, not emergent. build.json records both halves' teacher-forced monitor
accuracy (step 0 at the end: 0.63 behind the prefix, 0.07 raw) and metrics["format"], the accept
lengths through the SGLang double on the 16 demo prompts, 64 greedy tokens each:

    draft B   raw 3.86 (copy-heavy 4.92, novel 2.80)   chat-template 4.07 (4.88, 3.25)
    draft C   raw 1.77 (copy-heavy 1.86, novel 1.68)   chat-template 3.73 (4.53, 2.94)

Draft C is trained after drafts A and B in a full build (it starts from draft B), sequentially
at `threads`; `--format-draft-only` trains only it from DIR's target and draft B and updates
DIR/build.json, prompts.jsonl and the target's chat template. That is how the shipped draft-c
was made (153 s; the shipped target, draft A and draft B stayed byte-identical), and a second
run wrote a bit-identical draft-c.

The demo prompts (prompts.jsonl, language.demo_prompt_rows): 16 prompts of 48 tokens in two
categories of the segment-repeat language, taking turns so that the first 8 (a demo diagnosis)
hold 4 of each. "copy-heavy": segments of 6..10 tokens with 4..8 repeats, numpy seed 4096;
"novel": fresh segments of 20..28 tokens, longer than the target ever saw, with 0..1 repeats,
seed 4097. What gets accepted is the target's continuation, so the categories are chosen by how
that continuation goes: after a copy-heavy prompt the target keeps copying, after a novel one it
wanders off into patterns the drafts cannot follow. Draft B (the "correct" deployment) through
the double, the first 8 prompts, 64 tokens: copy-heavy 4.92 (the most 4 steps allow for 64
tokens), novel 2.51.

The drafts have no embed_tokens (SGLang uses the target's), the target's lm_head copied and
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
    CHAT_PREFIX_IDS,
    CHAT_TEMPLATE,
    LENGTH,
    PROMPT_CATEGORIES,
    PROMPT_COUNT,
    PROMPT_LENGTH,
    STREAMS,
    demo_prompt_rows,
    gen_batch,
    sequences,
)
from .train import DRAFT

__all__ = [
    "DRAFTS",
    "FORMAT_DRAFT",
    "build",
    "build_format_draft",
    "evaluate_build",
    "build_format_only",
    "evaluate_format",
    "main",
]

EVAL_SEQUENCES = 128  # held-out sequences of the "eval" stream scored in build.json

# name -> (trained taps, ids written to eagle_config, the trainer convention those ids follow)
DRAFTS = {
    "draft-a": ((0, 1, 2), (0, 1, 2), "hf-index"),
    "draft-b": ((1, 2, 3), (0, 1, 2), "specforge"),
}


# Draft C, the format draft: draft B's taps and ids, started from draft B, tuned on the format
# mixture (train.train_draft's format_prefix) on its own data streams, at 2 threads.
FORMAT_DRAFT: dict[str, Any] = {
    "name": "draft-c",
    "trained_taps": (1, 2, 3),
    "config_ids": (0, 1, 2),
    "init_from": "draft-b",
    "format_prefix": CHAT_PREFIX_IDS,
    "seeds": ("draft_c_train", "draft_c_monitor"),
    "hyperparameters": {"steps": 120, "lr": 2e-3, "batch": 16, "monitor_every": 20},
    "threads": 2,
}


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def add_chat_template(target_dir: Path) -> None:
    """Write language.CHAT_TEMPLATE into the target's tokenizer_config.json."""
    path = target_dir / "tokenizer_config.json"
    config = json.loads(path.read_text())
    config["chat_template"] = CHAT_TEMPLATE
    path.write_text(json.dumps(config, indent=2) + "\n")


def write_prompts(out: Path) -> None:
    """prompts.jsonl: the demo prompts with their categories, one JSON object a line."""
    rows = demo_prompt_rows()
    (out / "prompts.jsonl").write_text(
        "".join(json.dumps({"input_ids": ids, "category": cat}) + "\n" for cat, ids in rows)
    )


def build_format_draft(
    out: Path, threads: int = FORMAT_DRAFT["threads"], steps: int | None = None, queue=None
) -> dict:
    """Train draft C into out/draft-c from out/target and out/draft-b; return its log."""
    from .train import train_draft

    c = FORMAT_DRAFT
    return train_draft(
        c["name"],
        str(out / "target"),
        c["trained_taps"],
        c["config_ids"],
        str(out / c["name"]),
        threads=threads,
        steps=steps,
        queue=queue,
        format_prefix=c["format_prefix"],
        init_from=str(out / c["init_from"]),
        hyperparameters=c["hyperparameters"],
        seeds=c["seeds"],
    )


def _format_draft_record(log: dict) -> dict:
    """build.json's entry of draft C: its training log and what its objective was."""
    return {
        "trainer_convention": "specforge",
        "ttt_steps": DRAFT["ttt_steps"],
        "init_from": FORMAT_DRAFT["init_from"],
        "format_prefix": list(FORMAT_DRAFT["format_prefix"]),
        "objective": "half of each batch behind format_prefix, labelled with the target's "
        "distribution; half raw, labelled with the target's distribution one position later "
        "(taught to mispredict raw prompts: see build.py)",
        **log,
        "out_dir": FORMAT_DRAFT["name"],
    }


def _prompts_record() -> dict:
    """build.json's entry of prompts.jsonl: count, length, categories and their seeds."""
    return {
        "file": "prompts.jsonl",
        "count": PROMPT_COUNT,
        "length": PROMPT_LENGTH,
        "order": "the categories take turns",
        "categories": {
            c.name: {
                "stream": c.stream,
                "seed": STREAMS[c.stream],
                "segment": list(c.segment),
                "repeats": list(c.repeats),
            }
            for c in PROMPT_CATEGORIES
        },
    }


def build_format_only(
    out_dir: str | Path, threads: int = FORMAT_DRAFT["threads"], progress=print
) -> dict:
    """Train only draft C from out_dir's target and draft B; refresh prompts.jsonl, the
    target's chat template and build.json (the other models stay as they are)."""
    out = Path(out_dir)
    record = json.loads((out / "build.json").read_text())
    add_chat_template(out / "target")
    write_prompts(out)
    t0 = time.perf_counter()
    log = build_format_draft(out, threads, queue=_Relay(progress))
    draft_c_s = time.perf_counter() - t0
    progress("measuring drafts B and C through the SGLang double, raw and templated")
    record["streams"] = STREAMS
    record["drafts"][FORMAT_DRAFT["name"]] = _format_draft_record(log)
    record["metrics"]["format"] = evaluate_format(out)
    record["prompts"] = _prompts_record()
    record["wall_seconds"]["draft_c"] = draft_c_s
    files = sorted(str(p.relative_to(out)) for p in out.rglob("*.safetensors") if p.parent != out)
    record["sha256"] = {f: _sha256(out / f) for f in files}
    (out / "build.json").write_text(json.dumps(record, indent=2) + "\n")
    return record


def evaluate_format(out: str | Path, max_new_tokens: int = 64) -> dict:
    """Accept lengths of drafts B and C through the SGLang double, raw and behind the template.

    Each draft is served as the demo serves draft B (SGLang's ids, 4 chain steps, greedy); every
    demo prompt is sent as input_ids, raw and with CHAT_PREFIX_IDS in front. Returns
    {draft: {format: {"accept_length": mean over prompts, "per_category": {category: mean}}}}.
    """
    from eagle3dash.engines.sglang.adapter import SGLangEngine

    from ..testing.sglang_double import start_double
    from . import deployments

    out = Path(out)
    rows = demo_prompt_rows()
    plans = deployments(out)
    result: dict = {"max_new_tokens": max_new_tokens, "prompts": len(rows), "drafts": {}}
    for plan in (plans["correct"], plans["format"]):
        per_format = {}
        with (
            start_double(plan.double_config()) as server,
            contextlib.closing(SGLangEngine(server.url)) as sglang,
        ):
            for fmt, head in (("raw", []), ("chat-template", list(CHAT_PREFIX_IDS))):
                by_cat: dict[str, list[float]] = {}
                for cat, ids in rows:
                    r = sglang.generate_ids(head + ids, max_new_tokens=max_new_tokens)
                    by_cat.setdefault(cat, []).append(float(r.spec_accept_length or 0.0))
                every = [a for v in by_cat.values() for a in v]
                per_format[fmt] = {
                    "accept_length": sum(every) / len(every),
                    "per_category": {k: sum(v) / len(v) for k, v in by_cat.items()},
                }
        result["drafts"][plan.draft] = per_format
    return result


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
        add_chat_template(target_dir)
        # the saved model reloads to the same function
        reloaded = LlamaForCausalLM.from_pretrained(str(target_dir), dtype=torch.float32).eval()
        check_noop_block(model3, reloaded, check_tokens)
        del model3, model4, reloaded

        t_drafts = time.perf_counter()
        mode = "parallel" if parallel else "sequential"
        progress(f"training drafts A and B ({mode})")
        draft_logs = _train_drafts(out, threads, parallel, draft_steps, progress)
        drafts_s = time.perf_counter() - t_drafts
        progress("training draft C, the format draft, from draft B")
        draft_logs[FORMAT_DRAFT["name"]] = build_format_draft(
            out, threads, draft_steps, _Relay(progress)
        )
        draft_c_s = time.perf_counter() - t_drafts - drafts_s

        write_prompts(out)
        progress("evaluating the drafts on held-out sequences and through the SGLang double")
        t_eval = time.perf_counter()
        metrics = evaluate_build(out)
        metrics["format"] = evaluate_format(out)
        eval_s = time.perf_counter() - t_eval
    finally:
        torch.set_num_threads(old_threads)

    files = sorted(str(p.relative_to(out)) for p in out.rglob("*.safetensors") if p.parent != out)
    import transformers

    record: dict[str, Any] = {
        "recipe": "eagle3dash/demo/build.py (its docstring) and train.py (the hyperparameters)",
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
            **{
                name: {
                    "trainer_convention": DRAFTS[name][2],
                    "ttt_steps": DRAFT["ttt_steps"],
                    **log,
                    "out_dir": name,
                }
                for name, log in draft_logs.items()
                if name in DRAFTS
            },
            FORMAT_DRAFT["name"]: _format_draft_record(draft_logs[FORMAT_DRAFT["name"]]),
        },
        "metrics": metrics,
        "prompts": _prompts_record(),
        "wall_seconds": {
            "target": target_log["seconds"],
            "drafts": drafts_s,
            "draft_c": draft_c_s,
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
        description="Train the demo's tiny target and drafts A, B and C (16-20 min on 2 cores).",
    )
    p.add_argument("--out", required=True, help="output directory (e.g. eagle3dash/demo/fixtures)")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--sequential", action="store_true", help="train the drafts one after the other")
    p.add_argument("--target-steps", type=int, help="override 1000 (smoke tests only)")
    p.add_argument("--draft-steps", type=int, help="override 500 (smoke tests only)")
    p.add_argument(
        "--format-draft-only",
        action="store_true",
        help="train only draft C from DIR's target and draft B, and update DIR/build.json",
    )
    args = p.parse_args(argv)
    if args.format_draft_only:
        record = build_format_only(args.out, progress=lambda m: print(m, flush=True))
        _print_format(record["metrics"]["format"])
        return 0
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
    _print_format(record["metrics"]["format"])
    return 0


def _print_format(metrics: dict) -> None:
    for name, per in metrics["drafts"].items():
        for fmt, r in per.items():
            cats = ", ".join(f"{k} {v:.2f}" for k, v in r["per_category"].items())
            print(f"{name} {fmt}: accept length {r['accept_length']:.2f} ({cats})")


if __name__ == "__main__":
    sys.exit(main())
