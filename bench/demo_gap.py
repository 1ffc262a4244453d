"""The demo's gaps, measured by the project's own diagnose: `python bench/demo_gap.py`.

Seeds the demo into a temporary home (the three deployments served by the SGLang API double,
each diagnosed end to end) and prints, per deployment, top-1 and the simulated accept length under
the training and the serving layout, the measured accept length, tok/s against the baseline and
the first finding, then each target of the demo issue with the number that meets or misses it.
Also prints the seeding time and the fixture build time recorded in build.json.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from eagle3dash.demo import FIXTURES  # noqa: E402
from eagle3dash.demo.seed import MAX_NEW_TOKENS, NUM_PROMPTS, seed  # noqa: E402
from eagle3dash.diagnosis.stored import StoredDiagnosis  # noqa: E402


def checks(
    runs: dict[str, StoredDiagnosis], seed_s: float, build_s: float
) -> list[tuple[str, str, bool]]:
    """(target, measured, met) for each target of the demo issue."""
    mis, cor = runs["mismatched"], runs["correct"]
    assert mis.measured is not None and cor.measured is not None  # seeded with a baseline
    top1_gap = (mis.training.top1 or 0.0) - (mis.serving.top1 or 0.0)
    sim_gap = (mis.training.sim_accept_length or 0.0) - (mis.serving.sim_accept_length or 0.0)
    mis_err = abs((mis.measured.accept_length or 0.0) - (mis.serving.sim_accept_length or 0.0))
    cor_err = abs((cor.measured.accept_length or 0.0) - (cor.training.sim_accept_length or 0.0))
    first = mis.findings[0].id if mis.findings else "none"
    correct_ids = [f.id for f in cor.findings]
    return [
        ("mismatched: top-1 gap >= 15 points", f"{top1_gap * 100:.1f} points", top1_gap >= 0.15),
        ("mismatched: simulated accept gap >= 0.5", f"{sim_gap:.2f}", sim_gap >= 0.5),
        ("mismatched: |measured - serving sim| <= 0.15", f"{mis_err:.3f}", mis_err <= 0.15),
        ("mismatched: layout finding first", first, first == "layout-mismatch"),
        (
            "correct: no layout finding",
            ", ".join(correct_ids) or "no findings",
            "layout-mismatch" not in correct_ids,
        ),
        ("correct: |measured - training sim| <= 0.15", f"{cor_err:.3f}", cor_err <= 0.15),
        ("seeding from the fixtures < 120 s", f"{seed_s:.0f} s", seed_s < 120),
        ("building the fixtures < 1800 s (build.json)", f"{build_s:.0f} s", build_s < 1800),
    ]


def main(argv: list[str] | None = None) -> int:
    """Seed into a temp home, print the table and the checks; exit 1 if a target is missed."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--num-prompts", type=int, default=NUM_PROMPTS)
    parser.add_argument("--max-new-tokens", type=int, default=MAX_NEW_TOKENS)
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as home:
        start = time.perf_counter()
        seeded = seed(
            home,
            progress=lambda m: print(m, file=sys.stderr),
            num_prompts=args.num_prompts,
            max_new_tokens=args.max_new_tokens,
            worker=True,  # no `make run` worker here: the seed runs its queued diagnoses itself
        )
        seed_s = time.perf_counter() - start
    failed = [f"{r.deployment}: {r.status}" for r in seeded if r.diagnosis is None]
    if failed:
        print(f"demo runs that did not succeed: {', '.join(failed)}", file=sys.stderr)
        return 1
    runs = {r.deployment: r.diagnosis for r in seeded if r.diagnosis is not None}
    build = json.loads((FIXTURES / "build.json").read_text())
    build_s = float(build["wall_seconds"]["total"])
    results = checks(runs, seed_s, build_s)
    if args.json:
        json.dump(
            {
                "runs": {
                    name: {k: d.document[k] for k in ("training", "serving", "measured", "speedup")}
                    for name, d in runs.items()
                },
                "checks": [{"target": t, "value": v, "met": m} for t, v, m in results],
                "seed_seconds": seed_s,
                "build_seconds": build_s,
            },
            sys.stdout,
            indent=2,
            default=str,
        )
        print()
    else:
        header = f"{'deployment':<11}{'top-1 train/serve':>20}{'sim accept train/serve':>25}"
        print(header + f"{'measured':>10}{'tok/s':>8}{'baseline':>10}{'speedup':>9}  first finding")
        for name, d in runs.items():
            t, s, m, sp = d.training, d.serving, d.measured, d.speedup
            assert m is not None and sp is not None  # seeded with a baseline
            noise = f" ±{sp.speedup_noise:.2f}" if sp.speedup_noise is not None else ""
            print(
                f"{name:<11}{t.top1 or 0:>11.1%} / {s.top1 or 0:<6.1%}"
                f"{t.sim_accept_length or 0:>16.2f} / {s.sim_accept_length or 0:<6.2f}"
                f"{m.accept_length or 0:>10.2f}{m.output_tok_s_aggregate:>8.1f}"
                f"{sp.baseline_output_tok_s or 0:>10.1f}{sp.speedup or 0:>8.2f}x{noise}"
                f"  {d.findings[0].id if d.findings else '-'}"
            )
        print()
        for target, value, met in results:
            print(f"{'met   ' if met else 'MISSED'} {target:<48} {value}")
    return 0 if all(m for _, _, m in results) else 1


if __name__ == "__main__":
    sys.exit(main())
