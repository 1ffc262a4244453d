"""Whether the SGLang API double pays its modelled floor on every path: `python
bench/bench_floors.py [--repeats 5] [--hog]`.

Starts `python -m eagle3dash double --target <demo target> --delay 0.01 --draft-step-delay 0.002`
twice, as a user would (the command line, with its own torch threads): once with the demo's draft
A (3 draft steps, the command's default) and once without a draft. Each repeat sends both the
same requests, one at a time (the demo's first 4 prompts x 48 new tokens), the two doubles in
turn, so a loaded machine loads both alike. Prints, per path, the median over the repeats of the
time a forward takes (the prefill and each decode forward without a draft; the prefill and each
speculative round with one) over its modelled floor (--delay a forward; --delay + steps x
--draft-step-delay a round): 1.00 is the model, above it the machine's compute showed through.
`--hog` runs the repeats beside one busy process per core, stopped when they end.

A path above its floor bends every speedup the demo shows: a plain path slower than its floor makes
a draft read faster than it is (issue 36: 14.4 ms a token against 10 ms, so a draft accepting 1.35
tokens a round read 1.17x faster than no speculation).
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from eagle3dash.demo import DEMO_PROMPTS, FIXTURES  # noqa: E402
from eagle3dash.engines.endpoints import open_engine  # noqa: E402
from eagle3dash.servebench import Prompt, run_bench  # noqa: E402

DELAY_S = 0.01
DRAFT_STEP_S = 0.002
NUM_STEPS = 3  # `double`'s default --num-steps
PROMPTS = 4
NEW_TOKENS = 48
START_S = 120.0


def _spin(until: float) -> None:
    """Busy-loop until the monotonic deadline (one core's worth of load)."""
    x = 0
    while time.monotonic() < until:
        x += 1


def start(draft: Path | None) -> tuple[subprocess.Popen, str]:
    """`python -m eagle3dash double` on a free port; (the process, its URL) once it serves."""
    command = [
        sys.executable,
        "-m",
        "eagle3dash",
        "double",
        "--target",
        str(FIXTURES / "target"),
        "--port",
        "0",
        "--delay",
        str(DELAY_S),
        "--draft-step-delay",
        str(DRAFT_STEP_S),
        *(["--draft", str(draft)] if draft is not None else []),
    ]
    process = subprocess.Popen(
        command, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    deadline = time.monotonic() + START_S
    assert process.stdout is not None
    for line in process.stdout:
        found = re.search(r"(http://127\.0\.0\.1:\d+)", line)
        if found and "Ctrl-C" in line:
            return process, found.group(1)
        if time.monotonic() > deadline:
            break
    process.kill()
    raise SystemExit(f"the double did not start: {' '.join(command)}")


def over_floor(url: str) -> float:
    """One benchmark (4 prompts x 48 tokens, one at a time): its requests' time over the floors
    of the forwards they ran."""
    prompts = [Prompt(text="", input_ids=tuple(ids)) for ids in DEMO_PROMPTS[:PROMPTS]]
    engine = open_engine(url)
    try:
        bench = run_bench(engine, prompts, concurrency=1, max_new_tokens=NEW_TOKENS, warmup=1)
    finally:
        engine.close()
    seconds = floor = 0.0
    for r in bench.requests:
        assert r.error is None and r.latency_s and r.completion_tokens
        seconds += r.latency_s
        if r.spec_verify_ct:  # the prefill, then one round a verify
            floor += DELAY_S + r.spec_verify_ct * (DELAY_S + NUM_STEPS * DRAFT_STEP_S)
        else:  # the prefill gives the first token, one forward each after it
            floor += r.completion_tokens * DELAY_S
    return seconds / floor


def main(argv: list[str] | None = None) -> int:
    """Print each path's median time over its floor; exit 0."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--hog", action="store_true", help="beside one busy process per core")
    args = parser.parse_args(argv)
    paths = {"no draft (a forward)": None, "draft A (a round)": FIXTURES / "draft-a"}
    started = {name: start(draft) for name, draft in paths.items()}
    hogs = []
    if args.hog:
        limit = time.monotonic() + 900
        hogs = [
            multiprocessing.Process(target=_spin, args=(limit,)) for _ in range(os.cpu_count() or 2)
        ]
        for hog in hogs:
            hog.start()
        time.sleep(2.0)
    try:
        print(f"load average {os.getloadavg()}", flush=True)
        ratios: dict[str, list[float]] = {name: [] for name in paths}
        for i in range(args.repeats):
            for name, (_, url) in started.items():
                ratios[name].append(over_floor(url))
            line = ", ".join(f"{name} {values[-1]:.2f}" for name, values in ratios.items())
            print(f"  repeat {i + 1}: time over floor: {line}", flush=True)
        print(f"load average {os.getloadavg()}", flush=True)
    finally:
        for hog in hogs:
            hog.terminate()
            hog.join()
        for process, _ in started.values():
            process.terminate()
            process.wait(timeout=30)
    floors = {
        "no draft (a forward)": DELAY_S,
        "draft A (a round)": DELAY_S + NUM_STEPS * DRAFT_STEP_S,
    }
    print(
        f"`double --delay {DELAY_S} --draft-step-delay {DRAFT_STEP_S}`, {PROMPTS} prompts x "
        f"{NEW_TOKENS} tokens one at a time, {args.repeats} repeats"
        + (f", beside {len(hogs)} busy processes" if hogs else "")
        + ":"
    )
    for name, values in ratios.items():
        median = statistics.median(values)
        print(
            f"  {name:22} median {median:.2f}x its floor ({median * floors[name] * 1000:.1f} ms "
            f"against {floors[name] * 1000:.0f} ms; min {min(values):.2f}, max {max(values):.2f})"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
