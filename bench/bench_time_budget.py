"""Where a demo diagnosis's time goes: `python bench/bench_time_budget.py [--seed] [--deployment]`.

Serves the demo's mismatched deployment (or --deployment's) and its baseline (each double a process
of its own) and runs the seeded run's diagnosis (8 prompts, 64 tokens, the local target) without
and with the acceptance profile, alternately, --repeats times each: the median wall time of each
(targets on a quiet 2-core machine: 20 s and 40 s), their ratio (target 1.5x), the median of each
stage (the diagnosis's own `timings`), and the noise and prompts of each profile row beside the
material gap it is read against: what the profile's requests buy; and its floor, the ratio had the
profile cost nothing but its benchmarks' requests (the rows' prompts x tokens at their tok/s),
which only fewer prompts per row or requests served together would lower. With --seed it also
times what `make run` does once installed, into a fresh home each time: a worker with two slots and
`demo seed` started together, until the three demo runs have succeeded (target 90 s). Prints the
load average before each part: the machine is shared, so the ratios are what to read when it is
busy.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from eagle3dash.demo.serve import DEMO_NAMES, start_demo  # noqa: E402
from eagle3dash.diagnosis.result import Diagnosis  # noqa: E402
from eagle3dash.diagnosis.stages import TIMING_KEYS, run_diagnosis  # noqa: E402
from eagle3dash.noise import MATERIAL_ACCEPT_LENGTH  # noqa: E402
from eagle3dash.prompt_format import RAW  # noqa: E402
from eagle3dash.ui.timings import STAGE_WORDS  # noqa: E402

PROFILE_KEYS = [key for key in TIMING_KEYS.values() if key.startswith("profile_")]


def diagnoses(repeats: int, deployment: str) -> dict[bool, list[dict[str, float]]]:
    """Each diagnosis's timings, by whether it ran the profile (whose rows' noise it prints; its
    timings gain "floor": its total had the profile cost no more than its benchmarks' requests,
    `profile_requests_s`)."""
    timings: dict[bool, list[dict[str, float]]] = {False: [], True: []}
    demo = start_demo(deployment)
    try:
        options = demo.options()
        for _ in range(repeats):
            for profile in (False, True):
                d = run_diagnosis(dataclasses.replace(options, profile=profile))
                timings[profile].append(dict(d.timings))
                print(f"  profile={profile}: {d.timings['total']:.1f} s", flush=True)
                if profile:
                    print_row_noise(d)
                    parts = sum(d.timings.get(key, 0.0) for key in PROFILE_KEYS)
                    requests = profile_requests_s(d, options.max_new_tokens)
                    timings[True][-1]["floor"] = d.timings["total"] - parts + requests
    finally:
        demo.stop()
    return timings


def print_row_noise(d: Diagnosis) -> None:
    """Each profile row's measured accept length, noise (NOISE_SE standard errors over its
    requests) and prompts: the rows stop once no row's noise beside the benchmark's could hide
    the material gap."""
    assert d.profile is not None
    rows = [
        *(
            (
                f"temperature {r.temperature:g}",
                r.measured_accept_length,
                r.accept_length_noise,
                r.prompts,
            )
            for r in d.profile.temperature
        ),
        *(
            (f"format {r.format}", r.measured_accept_length, r.accept_length_noise, r.prompts)
            for r in d.profile.prompt_format
        ),
    ]
    cells = [
        f"{name} {value:.2f} +- {noise:.2f} ({prompts} prompts)"
        for name, value, noise, prompts in rows
        if value is not None and noise is not None
    ]
    print(f"    rows (material gap {MATERIAL_ACCEPT_LENGTH}): " + "; ".join(cells), flush=True)


def profile_requests_s(d: Diagnosis, max_new_tokens: int) -> float:
    """Seconds the profile's own benchmarks took (its rows beyond temperature 0 and raw, which are
    the diagnosis's benchmark): each row's prompts x tokens at its aggregate tok/s, the wall time
    of requests of equal length sent in order."""
    assert d.profile is not None
    rows = [
        *((r.prompts, r.tok_s) for r in d.profile.temperature if r.temperature != 0),
        *((r.prompts, r.tok_s) for r in d.profile.prompt_format if r.format != RAW),
    ]
    return sum(n * max_new_tokens / tok_s for n, tok_s in rows if n and tok_s)


def seeding(repeats: int) -> list[float]:
    """Seconds from starting a worker and `demo seed` in a fresh home to three succeeded runs."""
    out = []
    for _ in range(repeats):
        with tempfile.TemporaryDirectory() as home:
            env = {**os.environ, "EAGLE3DASH_HOME": home}
            py = [sys.executable, "-m", "eagle3dash"]
            start = time.perf_counter()
            worker = subprocess.Popen([*py, "worker", "--slots", "2"], env=env, cwd=ROOT)
            try:
                subprocess.run([*py, "demo", "seed"], env=env, cwd=ROOT, check=True)
                out.append(time.perf_counter() - start)
            finally:
                worker.terminate()
                worker.wait()
        print(f"  make run's seeding: {out[-1]:.1f} s", flush=True)
    return out


def main(argv: list[str] | None = None) -> int:
    """Time the demo diagnosis with and without its profile (and the seeding with --seed)."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--seed", action="store_true", help="also time make run's seeding")
    parser.add_argument("--deployment", choices=DEMO_NAMES, default="mismatched")
    args = parser.parse_args(argv)
    print(f"diagnoses: load average {os.getloadavg()}", flush=True)
    timings = diagnoses(args.repeats, args.deployment)
    seeded = None
    if args.seed:
        print(f"seeding: load average {os.getloadavg()}", flush=True)
        seeded = seeding(args.repeats)
    print(f"demo diagnosis ({args.deployment}, 8 prompts x 64 tokens, medians of {args.repeats})")
    print(f"  {'stage':46}{'--no-profile':>13}{'profile':>10}")
    for key, words in [*STAGE_WORDS.items(), ("total", "total")]:
        cells = [
            statistics.median(t.get(key, 0.0) for t in timings[profile])
            for profile in (False, True)
        ]
        if any(cells):
            print(f"  {words:46}{cells[0]:12.1f}s{cells[1]:9.1f}s")
    without = statistics.median(t["total"] for t in timings[False])
    with_profile = statistics.median(t["total"] for t in timings[True])
    print(f"  the profile's cost: {with_profile / without:.2f}x (target 1.5x)")
    floor = statistics.median(t["floor"] for t in timings[True])
    print(
        f"  the profile's floor: {floor / without:.2f}x ({floor:.1f} s), its benchmarks' "
        "requests alone, with its captures, evaluations and step-cost requests free"
    )
    print(f"  --no-profile <= 20 s: {without <= 20}; profile <= 40 s: {with_profile <= 40}")
    if seeded is not None:
        median = statistics.median(seeded)
        print(f"make run to three succeeded demo runs: median {median:.1f} s (target 90 s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
