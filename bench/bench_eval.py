"""Batched draft evaluation vs the naive per-position serving loop, side by side.

    python bench/bench_eval.py                      # CPU: 2048 tokens, hidden 256, S=5, both paths
    python bench/bench_eval.py --skip-naive --device cuda --dtype bfloat16
                                                    # GPU: Kimi-like draft, batched only, plus the
                                                    # agreement of bf16 with float32

Both paths run the same random draft on the same random capture; the script checks they agree
(identical matches, logits within float tolerance) and prints both times and the speedup.
With --skip-naive the default dims are Kimi-K2-like (hidden 7168, 64 heads, 8 KV heads,
intermediate 18432, draft vocab 32000 over a 163840 target vocab) and the batched path is timed
at --dtype, then compared with a float32 run: fraction of identical argmax tokens per step and the
largest absolute logit difference.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from eagle3dash.draft import build_draft, evaluate  # noqa: E402
from eagle3dash.spec import DraftSpec, expected_shapes  # noqa: E402

SMALL = dict(hidden=256, heads=4, kv_heads=4, intermediate=688, vocab=32000, draft_vocab=8000)
KIMI = dict(hidden=7168, heads=64, kv_heads=8, intermediate=18432, vocab=163840, draft_vocab=32000)


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--tokens", type=int, default=2048)
    p.add_argument("--hidden", type=int, default=None, help="draft and target hidden size")
    p.add_argument("--heads", type=int, default=None)
    p.add_argument("--kv-heads", type=int, default=None)
    p.add_argument("--intermediate", type=int, default=None)
    p.add_argument("--vocab", type=int, default=None, help="target vocab V")
    p.add_argument("--draft-vocab", type=int, default=None, help="draft vocab Vd (d2t if < V)")
    p.add_argument("--steps", type=int, default=5)
    p.add_argument("--device", default="cpu")
    p.add_argument("--dtype", default="float32", choices=["float32", "bfloat16", "float16"])
    p.add_argument("--chunk", type=int, default=256, help="query rows per attention block")
    p.add_argument("--repeats", type=int, default=3, help="timed batched runs (min is reported)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--skip-naive", action="store_true", help="batched only (Kimi-like defaults)")
    p.add_argument("--json", action="store_true", help="print one JSON object instead of text")
    args = p.parse_args(argv)
    preset = KIMI if args.skip_naive else SMALL
    for key, value in preset.items():
        if getattr(args, key) is None:
            setattr(args, key, value)
    return args


def make_spec(a: argparse.Namespace) -> DraftSpec:
    return DraftSpec(
        format="specforge",
        hidden_size=a.hidden,
        target_hidden_size=a.hidden,
        intermediate_size=a.intermediate,
        num_layers=1,
        num_heads=a.heads,
        num_kv_heads=a.kv_heads,
        head_dim=a.hidden // a.heads,
        vocab_size=a.vocab,
        draft_vocab_size=a.draft_vocab,
        has_d2t=a.draft_vocab < a.vocab,
        has_t2d=a.draft_vocab < a.vocab,
        max_position_embeddings=max(4096, a.tokens + a.steps + 1),
        rope_theta=50000.0,
    )


def random_draft_tensors(spec: DraftSpec, device: str, seed: int) -> dict[str, torch.Tensor]:
    """float32 random weights (linears ~ N(0, 1/fan_in), norms near 1) made on `device`."""
    gen = torch.Generator(device=device).manual_seed(seed)
    out = {}
    for name, shape in expected_shapes(spec).items():
        if name in ("d2t", "t2d", "embed_tokens.weight"):
            continue
        x = torch.randn(shape, generator=gen, device=device)
        if "norm" in name:
            x = 1.0 + 0.1 * x
        else:
            x /= math.sqrt(shape[-1])
        out[name] = x
    if spec.has_d2t:
        cpu = torch.Generator().manual_seed(seed)
        hot = torch.randperm(spec.vocab_size, generator=cpu)[: spec.draft_vocab_size].sort().values
        out["d2t"] = (hot - torch.arange(spec.draft_vocab_size)).to(device)
        t2d = torch.zeros(spec.vocab_size, dtype=torch.bool)
        t2d[hot] = True
        out["t2d"] = t2d.to(device)
    return out


def sync(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def timed(fn, device: str):
    sync(device)
    t0 = time.perf_counter()
    out = fn()
    sync(device)
    return time.perf_counter() - t0, out


def main(argv=None) -> dict:
    a = parse_args(argv)
    dtype = getattr(torch, a.dtype)
    spec = make_spec(a)
    torch.manual_seed(a.seed)
    tensors = random_draft_tensors(spec, a.device, a.seed)
    gen = torch.Generator(device=a.device).manual_seed(a.seed + 1)
    T, S = a.tokens, a.steps
    aux = torch.randn(T, spec.num_aux * a.hidden, generator=gen, device=a.device)
    embed = torch.randn(a.vocab, a.hidden, generator=gen, device=a.device)
    ids = torch.randint(0, a.vocab, (T,), generator=gen, device=a.device).cpu()
    target = torch.randint(0, a.vocab, (T,), generator=gen, device=a.device).cpu()

    draft = build_draft(spec, tensors, device=a.device, dtype=dtype)
    emb = embed.to(dtype)

    def batched(logits: bool = False):
        return evaluate(
            draft, aux, ids, S, emb, target_ids=target, chunk=a.chunk, return_logits=logits
        )

    first_s, _ = timed(batched, a.device)  # warm-up (allocator, kernels)
    times = [timed(batched, a.device)[0] for _ in range(max(1, a.repeats))]
    batched_s = min(times)
    result = {
        "device": a.device,
        "dtype": a.dtype,
        "tokens": T,
        "steps": S,
        "dims": {k: getattr(a, k) for k in SMALL},
        "params": sum(t.numel() for t in tensors.values()),
        "torch_threads": torch.get_num_threads(),
        "naive_threads": None if a.skip_naive else 1,
        "batched_first_call_s": round(first_s, 4),
        "batched_s": round(batched_s, 4),
        "batched_positions_per_s": round((T - S) / batched_s, 1),
    }
    if a.device.startswith("cuda"):
        result["gpu"] = torch.cuda.get_device_name()
        result["peak_gpu_mem_gib"] = round(torch.cuda.max_memory_allocated() / 2**30, 2)

    if not a.skip_naive:
        from tests.reference import naive_matches

        m_b, lg_b = batched(logits=True)
        # The naive loop's ops are tiny: OpenMP hand-offs would dominate it, so it runs on one
        # thread (its fastest setting; this makes the reported speedup smaller, not larger).
        threads = torch.get_num_threads()
        torch.set_num_threads(1)
        naive_s, (m_n, lg_n) = timed(
            lambda: (
                naive_matches(draft, aux.cpu(), ids, S, emb.cpu(), target, return_logits=True)
                if a.device == "cpu"
                else naive_matches(
                    build_draft(spec, {k: v.cpu() for k, v in tensors.items()}, "cpu", dtype),
                    aux.cpu(),
                    ids,
                    S,
                    emb.cpu(),
                    target,
                    return_logits=True,
                )
            ),
            "cpu",
        )
        torch.set_num_threads(threads)
        same_tok = (lg_b.argmax(-1) == lg_n.argmax(-1)).float().mean(0)
        result.update(
            naive_s=round(naive_s, 2),
            speedup=round(naive_s / batched_s, 1),
            agree_matches=bool(torch.equal(m_b, m_n)),
            agree_argmax_per_step=[round(x, 6) for x in same_tok.tolist()],
            max_abs_logit_diff=float((lg_b - lg_n).abs().max()),
            positions=int(m_b.shape[0]),
        )
    elif dtype != torch.float32:
        _, lg_low = batched(logits=True)
        del draft
        ref = build_draft(spec, tensors, device=a.device, dtype=torch.float32)
        _, lg_32 = evaluate(
            ref, aux, ids, S, embed, target_ids=target, chunk=a.chunk, return_logits=True
        )
        diff = (lg_low - lg_32).abs()
        same = lg_low.argmax(-1) == lg_32.argmax(-1)  # [P, S]
        # rows whose steps < k drafted the same tokens, so step k had the same inputs
        prefix = torch.cat([torch.ones_like(same[:, :1]), same[:, :-1].long().cumprod(1).bool()], 1)
        result.update(
            vs_float32_same_prefix_rows_per_step=[
                round(x, 4) for x in prefix.float().mean(0).tolist()
            ],
            vs_float32_max_abs_logit_diff_same_prefix_per_step=[
                round(float(diff[prefix[:, k], k].max()), 4) if prefix[:, k].any() else None
                for k in range(S)
            ],
            vs_float32_same_argmax_per_step=[round(x, 4) for x in same.float().mean(0).tolist()],
            vs_float32_max_abs_logit_diff_per_step=[
                round(x, 4) for x in diff.amax((0, 2)).tolist()
            ],
            float32_logit_std=round(float(lg_32.std()), 4),
        )
        if a.device.startswith("cuda"):
            result["peak_gpu_mem_gib"] = round(torch.cuda.max_memory_allocated() / 2**30, 2)

    if a.json:
        print(json.dumps(result))
    else:
        for key, value in result.items():
            print(f"{key:>40}: {value}")
        if "speedup" in result:
            print(
                f"\nbatched {result['batched_s']:.3f} s vs naive {result['naive_s']:.1f} s "
                f"-> {result['speedup']}x faster; agree: {result['agree_matches']}"
            )
    return result


if __name__ == "__main__":
    main()
