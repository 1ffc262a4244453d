"""The steps advice checked against the world: `python bench/bench_steps_advice.py`.

Serves the demo's "correct" deployment (draft B) at --speculative-num-steps 4 and its baseline
with the SGLang API double, runs the diagnosis with its profile, and takes the predicted tok/s
for other settings from `profile.steps_advice`. Then serves the same draft at each of those
settings and measures them with the same prompts, concurrency and tokens. Prints predicted,
measured (median of --repeats runs) and their ratio per setting; exits 1 when one is more than
15% off.

The double's speed is a modelled cost (each target forward takes at least DELAY_S, each draft
step DRAFT_STEP_S, the tiny models' compute on this CPU inside those floors): the numbers check
the prediction's arithmetic against a world with that cost, not SGLang's speed on a GPU.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from eagle3dash.demo import DELAY_S, DRAFT_STEP_S, deployments  # noqa: E402
from eagle3dash.demo.serve import demo_options, serve_baseline  # noqa: E402
from eagle3dash.diagnosis.stages import run_diagnosis  # noqa: E402
from eagle3dash.engines.sglang.adapter import SGLangEngine  # noqa: E402
from eagle3dash.servebench import load_prompts, run_bench  # noqa: E402
from eagle3dash.testing.sglang_double import start_double  # noqa: E402

TOLERANCE = 0.15


def measure(plan, steps: int, options, repeats: int) -> tuple[float, float]:
    """Median tok/s and accept length of the deployment served at `steps` draft steps, with the
    diagnosis's requests."""
    config = plan.double_config(
        num_steps=steps,
        num_draft_tokens=steps + 1,
        enable_return_hidden_states=True,
        delay_s=DELAY_S,
        draft_step_s=DRAFT_STEP_S,
    )
    prompts = load_prompts(options.prompts)[: options.num_prompts]
    with start_double(config) as server:
        runs = [
            run_bench(
                SGLangEngine(server.url),
                prompts,
                concurrency=options.concurrency,
                max_new_tokens=options.max_new_tokens,
            )
            for _ in range(repeats)
        ]
    tok_s = statistics.median(r.output_tok_s_aggregate for r in runs)
    return tok_s, statistics.median(r.accept_length or 0.0 for r in runs)


def main(argv: list[str] | None = None) -> int:
    """Predict from one diagnosis at 4 steps, measure three other settings, print the ratios."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument(
        "--settings", default="1,2,4,6", help="the steps settings to measure (4: the anchor)"
    )
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args(argv)
    plan = deployments()["correct"]
    served = plan.double_config().num_steps
    config = plan.double_config(
        enable_return_hidden_states=True, delay_s=DELAY_S, draft_step_s=DRAFT_STEP_S
    )
    # the baseline's time per token prices a verify forward
    with start_double(config) as server, serve_baseline(plan) as baseline:
        options = demo_options(plan.draft_path, server.url, baseline.url)
        diagnosis = run_diagnosis(options)
    profile = diagnosis.profile
    assert profile is not None and profile.step_costs is not None
    predicted = {row.num_steps: row for row in profile.steps_advice}
    costs = profile.step_costs
    print(
        f"served at {served} steps: {diagnosis.measured.output_tok_s_aggregate:.1f} tok/s; costs "
        f"({costs.source}): verify {costs.verify_s * 1000:.1f} ms, draft step "
        f"{costs.draft_step_s * 1000:.2f} ms, request {costs.request_fixed_s * 1000:.1f} ms"
    )
    print(
        f"{'steps':>5} {'source':>9} {'accept length':>21} {'tok/s predicted':>16} "
        f"{'measured':>9} {'ratio':>6}"
    )
    worst = 0.0
    for steps in (int(s) for s in args.settings.split(",")):
        row = predicted[steps]
        tok_s, accept = measure(plan, steps, options, args.repeats)
        ratio = (row.predicted_tok_s or 0.0) / tok_s
        if steps != served:  # the served setting is the prediction's anchor
            worst = max(worst, abs(ratio - 1.0))
        print(
            f"{steps:>5} {row.source:>9} {row.predicted_accept_length:>10.2f} vs {accept:>6.2f} "
            f"{row.predicted_tok_s:>16.1f} {tok_s:>9.1f} {ratio:>6.3f}"
        )
    recommended = profile.recommended
    if recommended is not None:
        print(f"recommended: {recommended.flags}")
    print(f"largest error {worst:.1%} (target <= {TOLERANCE:.0%})")
    return 0 if worst <= TOLERANCE else 1


if __name__ == "__main__":
    raise SystemExit(main())
