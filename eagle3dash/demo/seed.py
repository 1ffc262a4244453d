"""Seed the dashboard with the demo's diagnoses: `python -m eagle3dash demo seed`.

Registers the demo drafts, applies the tool's own fix to draft A for real (a copy of it whose
config.json carries the ids the layout finding proposes), serves each deployment through the
SGLang API double (a test/demo double, not a serving engine) beside a baseline without
speculation, and runs the diagnose pipeline on each, so the dashboard opens with finished runs:

- "mismatched": draft A as its config says; SGLang feeds every slot one tap too deep.
- "correct": draft B, trained on what SGLang feeds it.
- "fixed": draft A with the fix applied.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from eagle3dash.demo import FIXTURES, deployments

NUM_PROMPTS = 8
MAX_NEW_TOKENS = 64
# Per forward, so tok/s and speedup look like serving: a target forward costs DELAY_S and a draft
# step a tenth of it (the double's DoubleConfig.delay_s); the tiny models' own compute is noise.
DELAY_S = 0.01


@dataclass(frozen=True)
class DemoRun:
    """One seeded run: which deployment, its run id and its headline numbers."""

    deployment: str
    run_id: int
    diagnosis: dict


def fixed_draft(home: Path, ids: tuple[int, ...], fixtures: Path = FIXTURES) -> Path:
    """Draft A with `eagle_config.eagle_aux_hidden_state_layer_ids = ids`: the fix, applied."""
    out = home / "demo" / "draft-a-fixed"
    if out.exists():
        shutil.rmtree(out)
    shutil.copytree(fixtures / "draft-a", out)
    config = json.loads((out / "config.json").read_text())
    config["eagle_config"]["eagle_aux_hidden_state_layer_ids"] = list(ids)
    (out / "config.json").write_text(json.dumps(config, indent=2) + "\n")
    return out


def demo_runs(store) -> list[int]:
    """The ids of the runs `seed` made earlier (their options carry a "demo" deployment name)."""
    rows = store.db.query(
        "SELECT id FROM runs WHERE json_extract(options_json, '$.demo') IS NOT NULL ORDER BY id"
    )
    return [int(r["id"]) for r in rows]


def seed(
    home: str | Path | None = None,
    force: bool = False,
    progress: Callable[[str], None] = print,
    num_prompts: int = NUM_PROMPTS,
    max_new_tokens: int = MAX_NEW_TOKENS,
) -> list[DemoRun]:
    """Diagnose the three demo deployments and store them as runs (skipped if already there)."""
    from eagle3dash import store as db
    from eagle3dash.checkpoint import inspect
    from eagle3dash.diagnosis.options import DiagnoseOptions
    from eagle3dash.diagnosis.record import record_diagnosis
    from eagle3dash.diagnosis.stages import run_diagnosis
    from eagle3dash.testing.sglang_double import start_double

    store = db.open_store(home)
    if demo_runs(store) and not force:
        progress("the demo runs are already there (use --force to make them again)")
        return []
    plans = deployments()
    fix_ids = plans["fixed"].aux_layer_ids_override
    assert fix_ids is not None  # the fixed deployment names the ids the fix writes
    fixed_path = fixed_draft(store.home, fix_ids)
    drafts = {
        "mismatched": plans["mismatched"].draft_path,
        "correct": plans["correct"].draft_path,
        "fixed": fixed_path,
    }
    target = plans["mismatched"].target_path
    prompts = FIXTURES / "prompts.jsonl"
    results = []
    baseline_config = plans["mismatched"].double_config(
        draft_path=None, speculative_algorithm=None, delay_s=DELAY_S
    )
    with start_double(baseline_config) as baseline:
        for name in ("mismatched", "correct", "fixed"):
            plan = plans[name]
            path = drafts[name]
            report = inspect(path)
            checkpoint_id = db.add_checkpoint(
                store,
                path,
                name=f"demo {path.name}",
                format=report.spec.format,
                report=report.to_json(),
            )
            config = plan.double_config(
                draft_path=path,
                aux_layer_ids_override=None,  # the checkpoint on disk says it all
                enable_return_hidden_states=True,
                delay_s=DELAY_S,
            )
            with start_double(config) as server:
                options = DiagnoseOptions(
                    draft=str(path),
                    endpoint=server.url,
                    baseline=baseline.url,
                    prompts=str(prompts),
                    num_prompts=num_prompts,
                    max_new_tokens=max_new_tokens,
                    concurrency=1,  # the double serves one request at a time
                    # The training side comes from the tensors (the layout detective), as it
                    # would for a user who knows nothing of how the draft was trained.
                    target=str(target),
                    steps=config.num_steps,
                )
                params = {**options.__dict__, "demo": name}
                run_id = db.create_run(store, checkpoint_id, server.url, baseline.url, params)
                progress(f"diagnosing the {name} deployment ({plan.description})")
                diagnosis = run_diagnosis(options, digest_cache=store)
            record_diagnosis(store, run_id, diagnosis)
            results.append(DemoRun(name, run_id, diagnosis.to_dict()))
    return results


def summary(run: DemoRun) -> str:
    """One line of headline numbers for a seeded run."""
    d = run.diagnosis
    first = d["findings"][0]["id"] if d["findings"] else "no findings"
    train, serve, measured = d["training"], d["serving"], d["measured"] or {}
    return (
        f"run #{run.run_id} {run.deployment}: top-1 training {train['top1']:.1%} / serving "
        f"{serve['top1']:.1%}; simulated accept length {train['sim_accept_length']:.2f} / "
        f"{serve['sim_accept_length']:.2f}; measured {measured.get('accept_length', 0):.2f}; "
        f"first finding: {first}"
    )


def main(argv: list[str] | None = None) -> int:
    """`python -m eagle3dash demo seed`: make the demo runs in the store."""
    parser = argparse.ArgumentParser(prog="python -m eagle3dash demo seed", description=__doc__)
    parser.add_argument("--home", help="data folder (default $EAGLE3DASH_HOME or ./.eagle3dash)")
    parser.add_argument("--force", action="store_true", help="make the runs even if they exist")
    args = parser.parse_args(argv)
    for run in seed(args.home, force=args.force, progress=lambda m: print(m, file=sys.stderr)):
        print(summary(run))
    return 0
