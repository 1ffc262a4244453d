"""Whether the demo's numbers repeat: `python bench/bench_steadiness.py [--deployment NAME]`.

Serves a demo deployment (the mismatched one unless --deployment names another New run offers,
e.g. vllm-v1) and its baseline (each double a process of its own, as `make run` and New run serve
them) and runs the same diagnosis (the seeded run's options, without the profile, which does not
touch the speedup) --repeats times: the speedup of each run, its spread around the median
(target: within +-10%) and, for the deployments whose story is a slowdown (mismatched, vllm-v1),
whether every run is slower than no speculation (target: all < 1.0x, the incident's story). Then
again --hog-repeats times while a CPU hog (one busy process per core, stopped after the runs or
after --hog-limit seconds) loads the machine. Prints the load average before each part.

`--pairing` measures only the two benchmarks a diagnosis sends (the endpoint's and the
baseline's, the seeded run's prompts), three ways in turn: in alternating waves (as a diagnosis
sends them, `servebench.bench_pair`), one after the other, and at the same time, --repeats times
each: the speedup's spread and the wall time of each way, side by side in one run (`--hog`:
beside the CPU hog).

`--ceilings` runs the seeded demo's three deployments (mismatched, correct, fixed) with their
seeded options beside the CPU hog, --hog-repeats times each, and prints each speedup with its
noise beside the speedup the doubles' modelled cost allows at its accept length
(`modelled_cost.py`); it exits 1 when one lies above it beyond its noise.

The doubles' tok/s are a modelled cost, a floor per forward with the tiny models' compute inside
it (eagle3dash/testing/sglang_double_engine.py), so they repeat while that compute fits in the
floor.
"""

from __future__ import annotations

import argparse
import dataclasses
import multiprocessing
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from eagle3dash.demo.serve import DEMO_NAMES, start_demo  # noqa: E402
from eagle3dash.diagnosis.stages import run_diagnosis  # noqa: E402

SLOWER = ("mismatched", "vllm-v1")  # the deployments whose story is slower than no speculation


def _spin(until: float) -> None:
    """Busy-loop until the monotonic deadline (one core's worth of load)."""
    x = 0
    while time.monotonic() < until:
        x += 1


def speedups(options, repeats: int) -> list[float]:
    """The speedup of `repeats` diagnoses, in order."""
    out = []
    for _ in range(repeats):
        d = run_diagnosis(options)
        assert d.speedup is not None  # the demo has a baseline
        out.append(float(d.speedup["speedup"]))
        print(f"    {out[-1]:.3f}x  ({d.timings['total']:.1f} s)", flush=True)
    return out


def pairing(options, repeats: int) -> None:
    """The endpoint's and the baseline's benchmarks in alternating waves, one after the other,
    and at the same time, in turn: each way's speedups, their spread, and its median wall time."""
    from concurrent.futures import ThreadPoolExecutor

    from eagle3dash.diagnosis.stages import BENCH_WARMUP, PAIR_WAVE_BATCHES
    from eagle3dash.engines.endpoints import open_engine
    from eagle3dash.servebench import BENCH_TIMEOUT, bench_pair, load_prompts, run_bench

    prompts = load_prompts(options.prompts)[: options.num_prompts]
    how = {"concurrency": options.concurrency, "max_new_tokens": options.max_new_tokens}

    def endpoint():
        return run_bench(open_engine(options.endpoint, BENCH_TIMEOUT), prompts, warmup=0, **how)

    def baseline():
        engine = open_engine(options.baseline, BENCH_TIMEOUT)
        return run_bench(engine, prompts, warmup=BENCH_WARMUP, **how)

    def waves():
        mine = open_engine(options.endpoint, BENCH_TIMEOUT)
        theirs = open_engine(options.baseline, BENCH_TIMEOUT)
        wave = PAIR_WAVE_BATCHES * options.concurrency
        measured, _, base = bench_pair(mine, theirs, prompts, wave=wave, warmup=BENCH_WARMUP, **how)
        return measured, base

    endpoint()  # warm, as the serving capture leaves it
    ways: dict[str, tuple[list[float], list[float]]] = {"in alternating waves": ([], [])}
    ways["one after the other"] = ([], [])
    ways["at the same time"] = ([], [])
    for _ in range(repeats):
        for way, (ratios, seconds) in ways.items():
            start = time.perf_counter()
            if way == "at the same time":
                with ThreadPoolExecutor(1) as pool:
                    beside = pool.submit(baseline)
                    mine, theirs = endpoint(), beside.result()
            elif way == "in alternating waves":
                mine, theirs = waves()
            else:
                mine, theirs = endpoint(), baseline()
            seconds.append(time.perf_counter() - start)
            ratios.append(mine.output_tok_s_aggregate / theirs.output_tok_s_aggregate)
            print(f"    {way}: {ratios[-1]:.3f}x ({seconds[-1]:.1f} s)", flush=True)
    for way, (ratios, seconds) in ways.items():
        report(f"{way}, median {statistics.median(seconds):.1f} s", ratios)


def ceilings(repeats: int) -> bool:
    """The seeded deployments' speedups (with their noise) against the speedup the doubles'
    modelled cost allows at each run's accept length; whether every one lies within it."""
    from eagle3dash.demo import DEPLOYMENT_NAMES
    from eagle3dash.modelled_cost import ModelledCost

    within = True
    home = Path(tempfile.mkdtemp(prefix="ceilings-"))
    for name in DEPLOYMENT_NAMES:
        demo = start_demo(name, home)
        try:
            options = dataclasses.replace(demo.options(), profile=False)  # not the speedup's
            for _ in range(repeats):
                d = run_diagnosis(options)
                speedup = d.speedup or {}
                ratio, noise = speedup["speedup"], speedup["speedup_noise"] or 0.0
                accept = d.measured.accept_length if d.measured else None
                cost = ModelledCost.read(d.server.server_info)
                assert cost is not None and accept is not None
                ceiling = cost.speedup_ceiling(accept, d.steps)
                ok = ratio - noise <= ceiling
                within = within and ok
                print(
                    f"  {name:10} speedup {ratio:.2f}x ±{noise:.2f}, accept length {accept:.2f}, "
                    f"modelled ceiling {ceiling:.2f}x: {'within' if ok else 'ABOVE'} "
                    f"({d.timings['total']:.0f} s)",
                    flush=True,
                )
        finally:
            demo.stop()
    return within


def hogging(limit: float) -> list[multiprocessing.Process]:
    """One busy process per core, started, each stopping by itself after `limit` seconds."""
    hogs = [
        multiprocessing.Process(target=_spin, args=(time.monotonic() + limit,))
        for _ in range(os.cpu_count() or 2)
    ]
    for hog in hogs:
        hog.start()
    time.sleep(2.0)
    print(f"with {len(hogs)} busy processes: load average {os.getloadavg()}", flush=True)
    return hogs


def stop(hogs: list[multiprocessing.Process]) -> None:
    """Stop the busy processes."""
    for hog in hogs:
        hog.terminate()
        hog.join()


def report(name: str, values: list[float], story_slower: bool = True) -> bool:
    """Print median, spread and the < 1.0x check; whether the targets hold (the < 1.0x one only
    for a deployment whose story is a slowdown)."""
    median = statistics.median(values)
    spread = max(abs(v - median) for v in values) / median
    slower = all(v < 1.0 for v in values)
    print(
        f"  {name}: median {median:.3f}x, spread +-{spread:.1%} of the median, "
        f"min {min(values):.3f}x, max {max(values):.3f}x; every run < 1.0x: {slower}"
    )
    return (slower or not story_slower) and spread <= 0.10


def main(argv: list[str] | None = None) -> int:
    """Run the steadiness benchmark; exit 1 when a target is missed."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--hog-repeats", type=int, default=3)
    parser.add_argument("--hog-limit", type=float, default=600.0, help="seconds, at most")
    parser.add_argument("--pairing", action="store_true", help="only the two benchmarks")
    parser.add_argument("--hog", action="store_true", help="--pairing beside the CPU hog")
    parser.add_argument(
        "--ceilings", action="store_true", help="the seeded runs against their modelled ceilings"
    )
    parser.add_argument("--deployment", choices=DEMO_NAMES, default="mismatched")
    args = parser.parse_args(argv)
    if args.ceilings:
        hogs = hogging(args.hog_limit)
        try:
            return 0 if ceilings(args.hog_repeats) else 1
        finally:
            stop(hogs)
    demo = start_demo(args.deployment, Path(tempfile.mkdtemp(prefix="steadiness-")))
    try:
        options = dataclasses.replace(demo.options(), profile=False)
        if args.pairing:
            hogs = hogging(args.hog_limit) if args.hog else []
            try:
                print(f"load average {os.getloadavg()}", flush=True)
                pairing(options, args.repeats)
                print(f"load average {os.getloadavg()}", flush=True)
            finally:
                stop(hogs)
            return 0
        print(f"quiet part: load average {os.getloadavg()}", flush=True)
        quiet = speedups(options, args.repeats)
        hogs = hogging(args.hog_limit)
        try:
            hogged = speedups(options, args.hog_repeats)
        finally:
            stop(hogs)
    finally:
        demo.stop()
    slower = args.deployment in SLOWER
    print(
        f"demo {args.deployment} deployment, {options.num_prompts} prompts x "
        f"{options.max_new_tokens}"
    )
    met = report(f"{len(quiet)} runs", quiet, slower)
    report(f"{len(hogged)} runs under the CPU hog", hogged, slower)
    return 0 if met and (not slower or all(v < 1.0 for v in hogged)) else 1


if __name__ == "__main__":
    raise SystemExit(main())
