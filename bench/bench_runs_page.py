"""Benchmark: the Runs page with 100 runs against 10,000 runs (indexed paging keeps it flat).

Two homes are seeded with sqlite-utils `insert_all` (runs with their headline columns, a few
findings each, five checkpoints). Then the Runs page is rendered with Streamlit's AppTest, the
sizes interleaved so machine load hits both alike: a full first render of the page (fresh AppTest),
and a rerun that jumps to the LAST page (OFFSET at the end of the index). Medians of several
repetitions, after one warm-up each; the store queries alone are timed too. The ratio
10,000 / 100 should be near 1: list_runs reads one 50-row page through the created_at index and
count_runs is a COUNT(*) over the table.
Usage: python bench/bench_runs_page.py [--reps N] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from eagle3dash import store as db  # noqa: E402

APP = str(ROOT / "eagle3dash" / "dashboard" / "app.py")
SIZES = (100, 10_000)
STATUSES = ("succeeded", "succeeded", "succeeded", "failed", "running", "queued", "cancelled")
FINDINGS = (
    ("layout-mismatch", "critical", "Serving feeds the draft other layers than training did."),
    ("slower-than-baseline", "warning", "Speculation is slower than the baseline."),
    ("draft-tokens-capped", "info", "num_draft_tokens was capped to num_steps + 1."),
)


def seed(home: Path, n: int) -> float:
    """Create a home with `n` runs (and findings); return the seconds it took."""
    start = time.perf_counter()
    store = db.open_store(home)
    now = datetime.now(UTC)
    with store.transaction() as d:
        d["checkpoints"].insert_all(
            {
                "path": f"/data/drafts/draft-{i}",
                "name": f"draft-{i}",
                "format": "specforge",
                "created_at": db.now_iso(),
                "uploaded": 0,
            }
            for i in range(5)
        )
        runs = []
        for i in range(n):
            status = STATUSES[i % len(STATUSES)]
            done = status == "succeeded"
            rule, severity, title = FINDINGS[i % len(FINDINGS)]
            runs.append(
                {
                    "id": i + 1,
                    "created_at": (now - timedelta(seconds=n - i)).strftime(
                        "%Y-%m-%dT%H:%M:%S.%fZ"
                    ),
                    "status": status,
                    "checkpoint_id": 1 + i % 5,
                    "endpoint_url": f"http://gpubox-{i % 7}:30000",
                    "baseline_url": "http://gpubox-0:30001" if i % 2 else None,
                    "options_json": "{}",
                    "measured_accept_length": 1.5 + (i % 30) / 10 if done else None,
                    "sim_accept_training": 3.1 if done else None,
                    "sim_accept_serving": 1.6 if done else None,
                    "tok_s": 50.0 + i % 40 if done else None,
                    "baseline_tok_s": 90.0 if done and i % 2 else None,
                    "speedup": (50.0 + i % 40) / 90.0 if done and i % 2 else None,
                    "worst_severity": severity if done else None,
                    "worst_finding_title": title if done else None,
                }
            )
        d["runs"].insert_all(runs, batch_size=1000)
        d["findings"].insert_all(
            (
                {
                    "run_id": i + 1,
                    "rule_id": FINDINGS[(i + k) % 3][0],
                    "severity": FINDINGS[(i + k) % 3][1],
                    "title": FINDINGS[(i + k) % 3][2],
                    "evidence": "slot 0: embedding output != after block 3",
                    "fix": '"eagle_config": {"eagle_aux_hidden_state_layer_ids": [-1, 2, 30]}',
                    "position": k,
                }
                for i in range(n)
                for k in range(3)
            ),
            batch_size=1000,
        )
    store.close()
    return time.perf_counter() - start


def render(home: Path) -> tuple[float, float, int, int]:
    """(first render s, last-page rerun s, rows on the first page, rows on the last page)."""
    from streamlit.testing.v1 import AppTest

    os.environ[db.HOME_ENV] = str(home)
    at = AppTest.from_file(APP, default_timeout=60)
    t0 = time.perf_counter()
    at.run()
    first = time.perf_counter() - t0
    if at.exception:
        raise RuntimeError(at.exception[0].value)
    rows_first = len(at.dataframe[0].value)
    pages = int(at.number_input(key="runs_page").max)
    at.number_input(key="runs_page").set_value(pages)
    t0 = time.perf_counter()
    at.run()
    last = time.perf_counter() - t0
    if at.exception:
        raise RuntimeError(at.exception[0].value)
    return first, last, rows_first, len(at.dataframe[0].value)


def queries(home: Path, reps: int) -> tuple[float, float]:
    """Median seconds of count_runs + list_runs for the first and the last page."""
    store = db.open_store(home)
    total = db.count_runs(store)
    last = (total - 1) // 50 * 50
    firsts, lasts = [], []
    for _ in range(reps):
        t0 = time.perf_counter()
        db.count_runs(store)
        db.list_runs(store, limit=50, offset=0)
        firsts.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        db.count_runs(store)
        db.list_runs(store, limit=50, offset=last)
        lasts.append(time.perf_counter() - t0)
    store.close()
    return statistics.median(firsts), statistics.median(lasts)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=7, help="repetitions per size (default 7)")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    args = parser.parse_args()

    with tempfile.TemporaryDirectory(prefix="bench-runs-") as tmp:
        homes = {n: Path(tmp) / f"home-{n}" for n in SIZES}
        seeded = {n: seed(homes[n], n) for n in SIZES}
        for n in SIZES:  # warm-up: imports, caches, the database files in the page cache
            render(homes[n])
        samples: dict[int, list[tuple[float, float, int, int]]] = {n: [] for n in SIZES}
        for _ in range(args.reps):
            for n in SIZES:
                samples[n].append(render(homes[n]))
        query_s = {n: queries(homes[n], args.reps * 5) for n in SIZES}

    result: dict = {"reps": args.reps, "sizes": {}}
    for n in SIZES:
        s = samples[n]
        result["sizes"][str(n)] = {
            "seed_s": round(seeded[n], 3),
            "first_render_median_s": statistics.median(x[0] for x in s),
            "last_page_rerun_median_s": statistics.median(x[1] for x in s),
            "rows_first_page": s[0][2],
            "rows_last_page": s[0][3],
            "queries_first_page_median_s": query_s[n][0],
            "queries_last_page_median_s": query_s[n][1],
        }
    small, big = (result["sizes"][str(n)] for n in SIZES)
    for key in (
        "first_render_median_s",
        "last_page_rerun_median_s",
        "queries_first_page_median_s",
        "queries_last_page_median_s",
    ):
        result[f"ratio_{key.removesuffix('_median_s')}"] = big[key] / small[key]
    if args.json:
        print(json.dumps(result, indent=2))
        return 0
    print(f"Runs page, median of {args.reps} (AppTest; sizes interleaved)")
    print(f"{'':34}{'100 runs':>12}{'10,000 runs':>14}{'ratio':>8}")
    rows = (
        ("first render (fresh AppTest)", "first_render_median_s", "ratio_first_render"),
        ("last page (rerun, OFFSET at end)", "last_page_rerun_median_s", "ratio_last_page_rerun"),
        ("store queries, first page", "queries_first_page_median_s", "ratio_queries_first_page"),
        ("store queries, last page", "queries_last_page_median_s", "ratio_queries_last_page"),
    )
    for label, key, ratio in rows:
        a_ms, b_ms = small[key] * 1000, big[key] * 1000
        print(f"{label:34}{a_ms:>10.1f}ms{b_ms:>12.1f}ms{result[ratio]:>7.2f}x")
    print(
        f"rows shown: first page {small['rows_first_page']} / {big['rows_first_page']}, "
        f"last page {small['rows_last_page']} / {big['rows_last_page']}; "
        f"seeding took {small['seed_s']:.2f} s / {big['seed_s']:.2f} s"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
