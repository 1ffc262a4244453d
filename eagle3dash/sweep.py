"""Checkpoint sweep: every checkpoint of a training run, its standalone draft evaluated on the
layout the server feeds (the taps of one serving capture), ranked by simulated accept length
under serving, beside the trainer's own choice of "best".

A sweep is one `sweep-eval` job per checkpoint (fan-out: on a Ray cluster, one task each; on the
local worker, one after another), all reading the same capture (a diagnosis's serving capture in
the home, `captures/<run>`, or any capture saved by `eagle3dash`). Each job's result holds its
numbers; the ranking is read from the jobs (`sweep_results`), so the store has nothing new to keep.
Light at import (no torch): the app and the CLI submit and read sweeps.
"""

from __future__ import annotations

import math
import re
import secrets
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from eagle3dash import jobs
from eagle3dash.diagnosis.stored_run import StoredRun, read_runs
from eagle3dash.errors import InputError
from eagle3dash.home_files import saved_capture
from eagle3dash.store import Store

SWEEP_KIND = "sweep-eval"
DEFAULT_STEPS = 5
_STEP_IN_NAME = re.compile(r"(\d+)\D*$")


@dataclass(frozen=True)
class SweepCheckpoint:
    """One checkpoint to evaluate: its folder, its training step (or epoch), the trainer's best."""

    path: str
    step: int | None
    best: bool = False


@dataclass(frozen=True)
class SweepEntry:
    """One checkpoint's evaluation as its job left it."""

    job_id: int
    checkpoint: str
    step: int | None
    best: bool
    status: str
    sim_serving: float | None  # simulated accept length under the serving layout
    error: str | None
    placement: dict | None  # where it ran (Ray), else None


@dataclass(frozen=True)
class ServedRun:
    """A diagnosed run that kept its serving capture: the states its server fed the draft,
    which a sweep evaluates every checkpoint on (with the run's endpoint, target and steps)."""

    run: StoredRun
    capture: str

    @property
    def target(self) -> str | None:
        """The run's local target (its embedding, for drafts without their own)."""
        return None if self.run.options is None else self.run.options.target

    @property
    def steps(self) -> int:
        """The draft steps the run evaluated (the server's), else the sweep's default."""
        return DEFAULT_STEPS if self.run.options is None else self.run.options.steps


def served_runs(store: Store, limit: int = 200) -> list[ServedRun]:
    """The home's latest runs that kept a serving capture, newest first."""
    found = []
    for run in read_runs(store, limit=limit).runs:
        capture = saved_capture(store.home, run.id)
        if capture is not None:
            found.append(ServedRun(run, str(capture)))
    return found


def sweep_checkpoints(source: str | Sequence[str]) -> list[SweepCheckpoint]:
    """The checkpoints of a run folder (SpecForge steps, speculators epochs; the trainer's best
    marked) or of a list of folders (their step read from a trailing number in the name)."""
    from eagle3dash.provenance import run_checkpoints

    if isinstance(source, str):
        steps, best = run_checkpoints(source)
        return [SweepCheckpoint(str(p), step, p.resolve() == best) for step, p in steps.items()]
    out = []
    for path in source:
        m = _STEP_IN_NAME.search(Path(path).name)
        out.append(SweepCheckpoint(str(path), int(m[1]) if m else None))
    if not out:
        raise InputError("a sweep needs at least one checkpoint")
    return out


def submit_sweep(
    store: Store,
    checkpoints: Sequence[SweepCheckpoint],
    capture: str,
    endpoint: str | None = None,
    steps: int = DEFAULT_STEPS,
    needs_gpu: bool = False,
    target: str | None = None,
) -> str:
    """Queue one evaluation job per checkpoint over `capture` (`target`: a local copy of the
    target, whose embedding drafts without their own need); the sweep's id."""
    if not Path(capture).is_dir():
        raise InputError(
            f"{capture}: no capture folder here; give a run's serving capture "
            "(captures/<run> in the home) or one saved with `eagle3dash capture`"
        )
    sweep_id = secrets.token_hex(4)
    for c in checkpoints:
        params = {
            "sweep": sweep_id,
            "checkpoint": c.path,
            "step": c.step,
            "best": c.best,
            "capture": str(capture),
            "endpoint": endpoint,
            "target": target,
            "steps": int(steps),
        }
        jobs.submit_job(store, SWEEP_KIND, params, needs_gpu=needs_gpu)
    return sweep_id


def evaluate_checkpoint(params: dict, progress: Callable[[float, str], None]) -> dict:
    """Job kind 'sweep-eval': one checkpoint's draft on the capture's taps (what the server fed)."""
    from eagle3dash.capture import load_capture, read_target_embedding
    from eagle3dash.draft import evaluate_capture, load_draft

    progress(0.05, "loading the capture and the draft")
    capture = load_capture(params["capture"])
    target = params.get("target")
    embed = read_target_embedding(target) if target else None  # as SGLang's set_embed does
    draft = load_draft(params["checkpoint"], target_embedding=embed)
    layout = tuple(capture.taps)
    ev = evaluate_capture(
        draft,
        capture,
        layout,
        steps=int(params.get("steps") or DEFAULT_STEPS),
        embed_weight=embed,
        progress=lambda done, total: progress(0.1 + 0.9 * done / total, "evaluating"),
    )
    return {
        "checkpoint": params["checkpoint"],
        "step": params.get("step"),
        "sim_serving": ev.simulated_accept_length(),
        "accept_length": ev.accept_length,
        "layout": [str(t) for t in layout],
    }


def sweep_results(store: Store, sweep_id: str) -> list[SweepEntry]:
    """A sweep's entries, best first: by simulated accept length under serving (higher first,
    then the earlier step); unfinished and failed ones last, in step order."""
    entries = []
    for job in jobs.list_jobs(store):
        p = job["params"] or {}
        if job["kind"] != SWEEP_KIND or p.get("sweep") != sweep_id:
            continue
        result = job["result"] or {}
        entries.append(
            SweepEntry(
                job_id=int(job["id"]),
                checkpoint=str(p["checkpoint"]),
                step=p.get("step"),
                best=bool(p.get("best")),
                status=str(job["status"]),
                sim_serving=result.get("sim_serving"),
                error=job.get("error"),
                placement=job.get("placement"),
            )
        )
    return sorted(entries, key=_rank_key)


def _rank_key(e: SweepEntry) -> tuple[Any, ...]:
    score = e.sim_serving
    missing = score is None or math.isnan(score)
    step = e.step if e.step is not None else math.inf
    return (missing, 0.0 if missing else -float(score or 0.0), step, e.checkpoint)


def unfinished(entries: Sequence[SweepEntry]) -> bool:
    """Whether any of a sweep's evaluations is still queued or running."""
    return any(e.status not in jobs.FINISHED for e in entries)


def sweep_endpoint(store: Store, sweep_id: str) -> str | None:
    """The endpoint a sweep's capture came from, as submitted (None: not given)."""
    for job in jobs.list_jobs(store):
        p = job["params"] or {}
        if job["kind"] == SWEEP_KIND and p.get("sweep") == sweep_id:
            return p.get("endpoint")
    return None


def list_sweeps(store: Store) -> list[str]:
    """The sweeps in the store, newest first."""
    seen: dict[str, None] = {}
    for job in reversed(jobs.list_jobs(store)):
        p = job["params"] or {}
        if job["kind"] == SWEEP_KIND and p.get("sweep"):
            seen.setdefault(str(p["sweep"]), None)
    return list(seen)
