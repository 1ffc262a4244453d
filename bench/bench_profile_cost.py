"""What the acceptance profile costs: `python bench/bench_profile_cost.py`.

Serves the demo's mismatched deployment and its baseline with the SGLang API double and runs the
same diagnosis (the seeded run's options: 8 prompts, 64 tokens, the local target) with and without
the profile, alternately, --repeats times each. Prints the median wall time of each and their ratio.

The double's speed is a modelled cost (each target forward sleeps DELAY_S, each draft step a tenth
of it); the profile's extra requests (one benchmark per extra temperature, one benchmark and one
capture per extra prompt format, three one-token requests) are priced by that model too.
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from eagle3dash.demo import deployments  # noqa: E402
from eagle3dash.demo.serve import demo_options, serve_baseline, serve_deployment  # noqa: E402
from eagle3dash.diagnosis.stages import run_diagnosis  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    """Time the demo diagnosis with and without its profile; print medians and the ratio."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args(argv)
    plan = deployments()["mismatched"]
    times: dict[bool, list[float]] = {True: [], False: []}
    with serve_deployment(plan) as server, serve_baseline(plan) as baseline:
        options = demo_options(plan.draft_path, server.url, baseline.url)
        for _ in range(args.repeats):
            for profile in (False, True):
                start = time.perf_counter()
                run_diagnosis(dataclasses.replace(options, profile=profile))
                times[profile].append(time.perf_counter() - start)
    without, with_profile = statistics.median(times[False]), statistics.median(times[True])
    print(f"demo diagnosis (mismatched, {options.num_prompts} prompts, medians of {args.repeats})")
    print(f"  --no-profile   {without:6.1f} s")
    print(f"  with profile   {with_profile:6.1f} s   ({with_profile / without:.2f}x)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
