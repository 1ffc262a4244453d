"""A job child's start: a fresh interpreter vs a fork of a server that imported torch and
transformers once (`eagle3dash/preloaded.py`, how `python -m eagle3dash worker` starts jobs).

    python bench/bench_job_start.py            # 5 of each, alternately
    python bench/bench_job_start.py --repeats 9

Each child does what a diagnosis job does before its first request needs the model: imports torch
and transformers' model code, loads the demo's target with `AutoModelForCausalLM` and runs one
forward. The time is from the start call to the child's exit, cold and warm alternately; the warm
server's own start (once per worker process, its imports) is timed apart.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from eagle3dash.preloaded import HEAVY, start_module, warm_up  # noqa: E402


def child() -> None:
    """What a diagnosis job's child does before it needs the target: load it, one forward."""
    import torch
    from transformers import AutoModelForCausalLM

    from eagle3dash.demo import FIXTURES

    model = AutoModelForCausalLM.from_pretrained(FIXTURES / "target")
    with torch.inference_mode():
        model(input_ids=torch.tensor([[1, 2, 3]]))


def one_start(preload: tuple[str, ...], output: str) -> float:
    """Seconds from the start call to the child's exit."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(HERE), str(HERE.parent)])}
    began = time.perf_counter()
    process = start_module(
        "bench_job_start", ["--child"], env=env, cwd=HERE, output=output, preload=preload
    )
    code = process.wait(None)
    elapsed = time.perf_counter() - began
    process.close()
    if code != 0:
        raise SystemExit(f"the child failed ({code}): {Path(output).read_text()[-2000:]}")
    return elapsed


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.child:
        child()
        return 0
    output = tempfile.mkstemp(prefix="bench-job-start-", suffix=".log")[1]
    began = time.perf_counter()
    warm_up(HEAVY)
    one_start(HEAVY, output)  # the first fork waits for the server's imports
    server = time.perf_counter() - began
    cold, warm = [], []
    for _ in range(args.repeats):
        cold.append(one_start((), output))
        warm.append(one_start(HEAVY, output))
    Path(output).unlink(missing_ok=True)
    c, w = statistics.median(cold), statistics.median(warm)
    print(f"job child start to exit, medians of {args.repeats}, alternately:")
    print(f"  cold (a fresh interpreter): {c:.2f} s  ({', '.join(f'{x:.2f}' for x in cold)})")
    print(f"  warm (forked):              {w:.2f} s  ({', '.join(f'{x:.2f}' for x in warm)})")
    print(f"  warm / cold: {w / c:.2f}x")
    print(f"  the server's start with its first child, once per worker: {server:.2f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
