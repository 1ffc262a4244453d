"""Seed the dashboard with the demo's diagnoses: `python -m eagle3dash demo seed`.

Registers the demo drafts, applies the tool's own fix to draft A for real (a copy of it whose
config.json carries the ids the layout finding proposes), serves each deployment through the
SGLang API double (a test/demo double, not a serving engine; each in a process of its own,
`demo/serve.py`), each beside a baseline of its own without speculation, and queues one
diagnosis per deployment, as New run would:

- "mismatched": draft A as its config says; SGLang feeds every slot one tap too deep.
- "correct": draft B, trained on what SGLang feeds it.
- "fixed": draft A with the fix applied; the mismatched run links to it (`demo_fixed_run` in its
  options) as the proof that the fix works.

The runs are ordinary queued jobs: a worker runs them (`make run` starts one with two slots beside
the app, so the app answers at once and the Runs page shows the demo runs arriving; two of them
run at once, as they measure no server in common), while this process keeps
the doubles serving until they finish; `--worker` runs them in this process instead, for a seed
without a worker. Then the doubles stop and their endpoints are marked stopped in the store.

`--real-vllm` seeds the same demo on real vLLM servers instead (vLLM's CPU build, `make vllm`;
`demo/real_vllm.py`): draft A, draft B as shipped and draft B with the fix, each against one
plain vLLM baseline, every run labelled with what its server said of itself (`real_vllm`).
"""

from __future__ import annotations

import argparse
import signal
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from eagle3dash import jobs as jobq
from eagle3dash import store as db
from eagle3dash.demo import DEPLOYMENT_NAMES, MAX_NEW_TOKENS, NUM_PROMPTS, deployments
from eagle3dash.diagnosis.stored import StoredDiagnosis, load_diagnosis

if TYPE_CHECKING:
    from eagle3dash.demo.real_vllm import RealVLLM

POLL_S = 0.5
WORKER_HINT_S = 15.0  # queued this long without a worker: say how to start one
SLOTS = 2  # runs at a time with --worker, as make run's worker: two of the three runs at once
# The real vLLM demo's runs (demo/real_vllm.py deployments), each against the "plain" baseline;
# the second's fix is the third.
REAL_RUNS = ("draft-a", "draft-b", "draft-b-fixed")
REAL_LABEL = "real-vllm-"  # + the deployment: the runs' "demo" label


@dataclass(frozen=True)
class DemoRun:
    """One seeded run: which deployment, its run id, how it ended and its diagnosis."""

    deployment: str
    run_id: int
    status: str
    diagnosis: StoredDiagnosis | None  # as the pages read it; None when the run did not succeed


def demo_runs(store: db.Store) -> list[int]:
    """The ids of the runs `seed` made (their options carry a "demo" deployment name)."""
    rows = store.db.query(
        "SELECT id FROM runs WHERE json_extract(options_json, '$.demo') IS NOT NULL ORDER BY id"
    )
    return [int(r["id"]) for r in rows]


def seeded(store: db.Store) -> bool:
    """Whether every deployment has a succeeded demo run."""
    rows = store.db.query(
        "SELECT DISTINCT json_extract(options_json, '$.demo') AS name FROM runs "
        "WHERE json_extract(options_json, '$.demo') IS NOT NULL AND status = 'succeeded'"
    )
    return {r["name"] for r in rows} >= set(DEPLOYMENT_NAMES)


def cancel_unfinished(store: db.Store, run_ids: list[int], why: str) -> list[int]:
    """Cancel the queued or running jobs of these runs (their doubles are gone); the runs cut."""
    return [
        run_id
        for run_id in run_ids
        if jobq.cancel_run(store, run_id, reason=why) is not jobq.CancelOutcome.NOTHING
    ]


def _wait(store: db.Store, run_ids: dict[str, int], progress: Callable[[str], None]) -> None:
    """Until every run's jobs have finished; says how to start a worker if none claims them."""
    start, hinted = time.monotonic(), False
    done: set[str] = set()
    while len(done) < len(run_ids):
        for name, run_id in run_ids.items():
            jobs = jobq.list_jobs(store, run_id)
            if name not in done and jobs and all(j["status"] in jobq.FINISHED for j in jobs):
                done.add(name)
                progress(f"the {name} run #{run_id} {jobs[-1]['status']}")
        waiting = all(
            j["status"] == "queued"
            for run_id in run_ids.values()
            for j in jobq.list_jobs(store, run_id)
        )
        if waiting and not hinted and time.monotonic() - start > WORKER_HINT_S:
            progress(
                "the demo runs wait for a worker: start one with `python -m eagle3dash worker` "
                "(make run does), or seed with --worker"
            )
            hinted = True
        time.sleep(POLL_S)


def seed(
    home: str | Path | None = None,
    force: bool = False,
    progress: Callable[[str], None] = print,
    num_prompts: int = NUM_PROMPTS,
    max_new_tokens: int = MAX_NEW_TOKENS,
    worker: bool = False,
) -> list[DemoRun]:
    """Queue the three demo deployments' diagnoses and serve them until a worker has run them
    (this process's own with `worker`); skipped when they succeeded before."""
    with db.open_store(home) as store:
        if seeded(store) and not force:
            progress("the demo runs are already there (use --force to make them again)")
            return []
        cut = cancel_unfinished(store, demo_runs(store), "its demo endpoints stopped before it ran")
        if cut:
            progress(f"cancelled the unfinished demo runs of an earlier seed: {cut}")
        run_ids = _serve_until_run(store, progress, num_prompts, max_new_tokens, worker)
        return _results(store, run_ids)


def _results(store: db.Store, run_ids: dict[str, int]) -> list[DemoRun]:
    results = []
    for name, run_id in run_ids.items():
        run = db.get_run(store, run_id)
        assert run is not None  # made by the caller
        stored = run.get("diagnosis")
        diagnosis = None if not stored else load_diagnosis(stored)
        results.append(DemoRun(name, run_id, run["status"], diagnosis))
    return results


def seed_real_vllm(
    home: str | Path | None = None,
    progress: Callable[[str], None] = print,
    num_prompts: int = NUM_PROMPTS,
    max_new_tokens: int = MAX_NEW_TOKENS,
    worker: bool = False,
    servers: Mapping[str, RealVLLM] | None = None,
) -> list[DemoRun]:
    """Queue the real vLLM demo's diagnoses (REAL_RUNS against a plain baseline) and serve them
    until a worker has run them (this process's own with `worker`): on `servers` when given
    ({deployment: server}, left running), else on real servers started here and stopped after."""
    from eagle3dash.demo.real_vllm import start_real_vllm

    with db.open_store(home) as store:
        own: list[RealVLLM] = []
        if servers is None:
            progress("starting the real vLLM servers (vLLM's CPU build; a minute or more)")
            own = start_real_vllm("plain", *REAL_RUNS, home=store.home)
            servers = {server.deployment: server for server in own}
        run_ids: dict[str, int] = {}
        try:
            run_ids = _queue_real(store, servers, progress, num_prompts, max_new_tokens)
            _run_or_wait(store, run_ids, progress, worker)
        finally:
            for server in own:
                server.stop()
                db.mark_endpoint_stopped(store, server.url)
            why = "the real vLLM demo stopped before it ran"
            cancel_unfinished(store, list(run_ids.values()), why)
        return _results(store, run_ids)


def _queue_real(
    store: db.Store,
    servers: Mapping[str, RealVLLM],
    progress: Callable[[str], None],
    num_prompts: int,
    max_new_tokens: int,
) -> dict[str, int]:
    """One diagnosis a deployment, labelled with what its server said; the shipped draft B's
    run links to the fixed one's."""
    from eagle3dash.demo.real_vllm import NUM_SPECULATIVE_TOKENS, REAL_DEPLOYMENTS
    from eagle3dash.demo.serve import demo_options
    from eagle3dash.submit import submit_diagnosis
    from eagle3dash.uploads import register_path

    baseline = servers["plain"].url
    run_ids: dict[str, int] = {}
    for name in REAL_RUNS:
        server = servers[name]
        assert server.draft is not None  # every REAL_RUNS deployment serves a draft
        checkpoint_id, _ = register_path(store, server.draft, name=f"demo {server.draft.name}")
        options = demo_options(
            server.draft, server.url, baseline, num_prompts, max_new_tokens, NUM_SPECULATIVE_TOKENS
        )
        labels = {"demo": REAL_LABEL + name, "real_vllm": server.facts().to_json()}
        run_ids[name] = submit_diagnosis(store, checkpoint_id, options, labels)
        described = REAL_DEPLOYMENTS[name].description
        progress(f"queued the real vLLM {name} run #{run_ids[name]} ({described})")
    shipped = db.get_run(store, run_ids["draft-b"])
    assert shipped is not None  # queued above
    link = {"demo_fixed_run": run_ids["draft-b-fixed"]}
    db.update_run(store, run_ids["draft-b"], options={**shipped["options"], **link})
    return run_ids


def _run_or_wait(
    store: db.Store, run_ids: dict[str, int], progress: Callable[[str], None], worker: bool
) -> None:
    """Run the queued jobs in this process (`worker`), else wait for a worker to run them."""
    if not worker:
        _wait(store, run_ids, progress)
        return
    from eagle3dash.job_kinds import JOB_KINDS
    from eagle3dash.jobs.worker import run_worker
    from eagle3dash.preloaded import HEAVY

    run_worker(store.home, JOB_KINDS, poll_interval=0.1, once=True, slots=SLOTS, preload=HEAVY)


def _serve_until_run(
    store: db.Store,
    progress: Callable[[str], None],
    num_prompts: int,
    max_new_tokens: int,
    worker: bool,
) -> dict[str, int]:
    """Serve the deployments, queue their runs, wait for them; then stop the endpoints and
    mark them stopped, and cancel what did not run (on an interrupt)."""
    from eagle3dash.demo.serve import demo_draft, demo_options, serve_doubles
    from eagle3dash.submit import submit_diagnosis
    from eagle3dash.uploads import register_path

    plans = deployments()
    drafts = {name: demo_draft(name, store.home) for name in DEPLOYMENT_NAMES}
    # every double at once, each in a process of its own: each deployment and a baseline of its
    # own, so that the worker's two slots run two of the runs at once (no server is measured by
    # two jobs at a time: jobs/lifecycle.py claim_job)
    servers = serve_doubles(
        *((name, drafts[name], baseline) for name in DEPLOYMENT_NAMES for baseline in (False, True))
    )
    run_ids: dict[str, int] = {}
    try:
        for i, name in enumerate(DEPLOYMENT_NAMES):
            endpoint, baseline = servers[2 * i], servers[2 * i + 1]
            checkpoint_id, _ = register_path(store, drafts[name], name=f"demo {drafts[name].name}")
            options = demo_options(
                drafts[name], endpoint.url, baseline.url, num_prompts, max_new_tokens
            )
            run_ids[name] = submit_diagnosis(store, checkpoint_id, options, {"demo": name})
            progress(f"queued the {name} run #{run_ids[name]} ({plans[name].description})")
        mismatched = db.get_run(store, run_ids["mismatched"])
        assert mismatched is not None  # queued above
        link = {"demo_fixed_run": run_ids["fixed"]}
        db.update_run(store, run_ids["mismatched"], options={**mismatched["options"], **link})
        _run_or_wait(store, run_ids, progress, worker)
    finally:
        for server in servers:
            server.stop()
            db.mark_endpoint_stopped(store, server.url)
        cancel_unfinished(store, list(run_ids.values()), "the demo seed stopped before it ran")
    return run_ids


def summary(run: DemoRun) -> str:
    """One line of headline numbers for a seeded run."""
    d = run.diagnosis
    if d is None:
        return f"run #{run.run_id} {run.deployment}: {run.status}"
    first = d.findings[0].id if d.findings else "no findings"
    train, serve = d.training, d.serving
    measured = None if d.measured is None else d.measured.accept_length
    return (
        f"run #{run.run_id} {run.deployment}: top-1 training {train.top1 or 0:.1%} / serving "
        f"{serve.top1 or 0:.1%}; simulated accept length {train.sim_accept_length or 0:.2f} / "
        f"{serve.sim_accept_length or 0:.2f}; measured {measured or 0:.2f}; "
        f"first finding: {first}"
    )


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def main(argv: list[str] | None = None) -> int:
    """`python -m eagle3dash demo seed`: make the demo runs in the store."""
    parser = argparse.ArgumentParser(prog="python -m eagle3dash demo seed", description=__doc__)
    parser.add_argument("--home", help="data folder (default $EAGLE3DASH_HOME or ./.eagle3dash)")
    parser.add_argument("--force", action="store_true", help="make the runs even if they exist")
    parser.add_argument(
        "--worker",
        action="store_true",
        help="run the demo's diagnoses in this process (when no `python -m eagle3dash worker` "
        "runs); it runs every queued job until the queue is empty",
    )
    parser.add_argument(
        "--real-vllm",
        action="store_true",
        help="seed the demo on real vLLM servers of this machine's CPU instead (vLLM's CPU "
        "build, installed by `make vllm`): draft A, draft B as shipped and draft B fixed",
    )
    args = parser.parse_args(argv)
    signal.signal(signal.SIGTERM, _interrupt)  # `make run` stopping: stop the doubles cleanly
    progress = lambda m: print(m, file=sys.stderr, flush=True)  # noqa: E731
    try:
        if args.real_vllm:
            runs = seed_real_vllm(args.home, progress=progress, worker=args.worker)
        else:
            runs = seed(args.home, force=args.force, progress=progress, worker=args.worker)
    except KeyboardInterrupt:
        print("demo seed stopped; its unfinished runs are cancelled", file=sys.stderr)
        return 130
    for run in runs:
        print(summary(run))
    return 0
