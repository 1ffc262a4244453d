"""The layout sweep's cost: one capture of every tap vs many layouts evaluated on it.

    python bench/bench_detective.py                 # the demo target and draft A, 16 prompts
    python bench/bench_detective.py --json

Captures every tap 0..N (and the final-normed state) of the demo target once, timed, then
evaluates draft A under all 20 three-slot layouts of those 6 taps on that one capture, with the
target loader blocked so a second target forward would fail. Prints the capture time, the time
per layout, their ratio, and the top of the ranking.
"""

from __future__ import annotations

import argparse
import itertools
import json
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from eagle3dash import capture as capture_mod  # noqa: E402
from eagle3dash.demo import DEMO_PROMPTS, FIXTURES  # noqa: E402
from eagle3dash.detective import capture_all_taps, sweep  # noqa: E402
from eagle3dash.layout import bracketed  # noqa: E402


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--draft", default=str(FIXTURES / "draft-a"))
    p.add_argument("--target", default=str(FIXTURES / "target"))
    p.add_argument("--prompts", type=int, default=16, help="demo prompts captured")
    p.add_argument("--steps", type=int, default=4)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--json", action="store_true", help="print one JSON object instead of text")
    return p.parse_args(argv)


def main(argv=None) -> int:
    args = parse_args(argv)
    torch.set_num_threads(args.threads)
    start = time.perf_counter()
    capture = capture_all_taps(args.target, DEMO_PROMPTS[: args.prompts])
    capture_s = time.perf_counter() - start

    def refuse(*_args, **_kwargs):
        raise RuntimeError("the sweep tried to run the target again")

    capture_mod.capture_with_transformers = refuse  # the sweep must reuse the capture
    layouts = {
        f"c{i}": c for i, c in enumerate(itertools.combinations(capture.taps, 3))
    }  # C(6, 3) = 20 for the demo
    start = time.perf_counter()
    rows = sweep(args.draft, capture, layouts, steps=args.steps)
    sweep_s = time.perf_counter() - start
    per_layout = sweep_s / len(rows)
    result = {
        "sequences": len(capture.sequences),
        "tokens": sum(len(s) for s in capture.sequences),
        "taps": bracketed(capture.taps),
        "capture_s": capture_s,
        "layouts": len(rows),
        "draft_evaluations": len(rows),
        "target_forwards_during_sweep": 0,
        "sweep_s": sweep_s,
        "per_layout_s": per_layout,
        "capture_over_per_layout": capture_s / per_layout,
        "top": [
            {"layout": bracketed(r.layout), "top1": r.top1, "sim_accept": r.sim_accept_length}
            for r in rows[:5]
        ],
    }
    if args.json:
        print(json.dumps(result, indent=2))
        return 0
    print(
        f"capture of every tap {result['taps']}: {capture_s:.3f} s "
        f"({result['sequences']} sequences, {result['tokens']} tokens, target loaded once)"
    )
    print(
        f"sweep of {len(rows)} layouts: {sweep_s:.3f} s = {per_layout * 1000:.1f} ms per layout "
        f"({len(rows)} draft evaluations, no target forward)"
    )
    print(f"one capture costs {result['capture_over_per_layout']:.0f}x one layout evaluation")
    for r in result["top"]:
        print(f"  {r['layout']:<10} top-1 {r['top1']:6.1%}  sim accept {r['sim_accept']:.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
