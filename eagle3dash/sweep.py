"""Checkpoint sweep: every checkpoint of a training run, its standalone draft evaluated on the
layout the server feeds (the taps of one serving capture), ranked by simulated accept length
under serving, beside the trainer's own choice of "best".

A sweep is one `sweep-eval` job per checkpoint (fan-out: on a Ray cluster, one task each; on the
local worker, one after another), all reading the same capture (a diagnosis's serving capture in
the home, `captures/<run>`, or any capture saved by `eagle3dash`). Each job's result holds its
numbers; the ranking is read from the jobs (`sweep_results`), so the store has nothing new to keep.
Light at import (no torch): the app and the CLI submit and read sweeps.

A sweep's numbers are the same metric as its served run's "simulated serving" when it evaluates
that run's capture at that run's draft steps (the page and `--run N` take both): the capture holds
the run's own prompts as it sent them (raw, no chat template), so a sweep never reads the Run
page's chat-template row. `SweepSetup` says what a sweep evaluated on.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from eagle3dash import jobs
from eagle3dash.diagnosis.stored_run import StoredRun, read_run, read_runs
from eagle3dash.errors import InputError
from eagle3dash.home_files import saved_capture
from eagle3dash.store import Store

SWEEP_KIND = "sweep-eval"
DEFAULT_STEPS = 5
# A run's serving capture holds its benchmark's prompts as sent (diagnosis/stages.py
# capture_serving); only the Run page's other prompt formats send them through a chat template.
CAPTURE_PROMPTS = "its prompts as it sent them: raw, no chat template"
_STEP_IN_NAME = re.compile(r"(\d+)\D*$")
_NOT_A_NAME = re.compile(r"[^A-Za-z0-9._]+")
# What the worker puts before an InputError's one line (`type(e).__name__`, jobs/worker.py).
_INPUT_ERROR_PREFIX = f"{InputError.__name__}: "


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
    reason: str | None  # why its evaluation failed, in one line; None unless it failed
    placement: dict | None  # where it ran (Ray), else None

    @property
    def name(self) -> str:
        """'step 200', or the checkpoint's folder name when it has no step ('draft-b')."""
        return checkpoint_name(self.checkpoint, self.step)


@dataclass(frozen=True)
class SweepSetup:
    """What a sweep evaluated its checkpoints on, as submitted."""

    capture: str
    steps: int
    target: str | None
    endpoint: str | None
    served_run: int | None  # the run whose serving capture it is, when the sweep was given one


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


def served_run(store: Store, run_id: int) -> ServedRun | None:
    """Run `run_id` with its serving capture; None when there is no such run or it kept none."""
    run = read_run(store, run_id)
    capture = None if run is None else saved_capture(store.home, run_id)
    return None if run is None or capture is None else ServedRun(run, str(capture))


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


def checkpoint_name(path: str, step: int | None) -> str:
    """'step 200', or the checkpoint's folder name when it has no step ('draft-b')."""
    return Path(path).name if step is None else f"step {step}"


def checkpoints_given(paths: Sequence[str]) -> list[SweepCheckpoint]:
    """What a sweep was given: one folder without a config.json is a training run folder (its
    checkpoints, the trainer's best marked); else each path is a checkpoint of its own."""
    if len(paths) == 1 and not Path(paths[0]).joinpath("config.json").is_file():
        return sweep_checkpoints(paths[0])
    return sweep_checkpoints(list(paths))


def submit_sweep(
    store: Store,
    checkpoints: Sequence[SweepCheckpoint],
    capture: str,
    endpoint: str | None = None,
    steps: int = DEFAULT_STEPS,
    needs_gpu: bool = False,
    target: str | None = None,
    name: str | None = None,
    served_run: int | None = None,
) -> str:
    """Queue one evaluation job per checkpoint over `capture` (`target`: a local copy of the
    target, whose embedding drafts without their own need; `served_run`: the run whose capture
    it is); the sweep's id, readable: `name` (else the checkpoints' folder) and a number."""
    if not Path(capture).is_dir():
        raise InputError(
            f"{capture}: no capture folder here; give a run's serving capture "
            "(captures/<run> in the home) or one saved with `eagle3dash capture`"
        )
    with store.transaction():  # the number is unique: no other sweep is queued meanwhile
        sweep_id = _new_sweep_id(store, name or _folder_of(checkpoints))
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
                "served_run": served_run,
            }
            jobs.submit_job(store, SWEEP_KIND, params, needs_gpu=needs_gpu)
    return sweep_id


def _folder_of(checkpoints: Sequence[SweepCheckpoint]) -> str:
    """The folder that holds every checkpoint (a run folder), by its name; else 'sweep'."""
    parents = {Path(c.path).parent for c in checkpoints}
    return parents.pop().name if len(parents) == 1 else "sweep"


def _new_sweep_id(store: Store, name: str) -> str:
    """'eagle3-llama-2': the name (letters, digits, '.', '_', '-') and the first unused number."""
    stem = _NOT_A_NAME.sub("-", name).strip("-") or "sweep"
    taken = set(list_sweeps(store))
    return next(f"{stem}-{n}" for n in range(1, len(taken) + 2) if f"{stem}-{n}" not in taken)


def evaluate_checkpoint(params: dict, progress: Callable[[float, str], None]) -> dict:
    """Job kind 'sweep-eval': one checkpoint's draft on the capture's taps (what the server fed)."""
    from eagle3dash.capture import load_capture, read_target_embedding
    from eagle3dash.draft import evaluate_capture, load_draft

    progress(0.05, "loading the capture and the draft")
    capture = load_capture(params["capture"])
    target = params.get("target")
    embed = read_target_embedding(target) if target else None  # as SGLang's set_embed does
    draft = load_draft(params["checkpoint"], target_embedding=embed)
    if draft.embed_tokens is None and embed is None and capture.embed_weight is None:
        raise InputError(
            "this draft has no embed_tokens of its own (serving gives it the target's) and "
            "neither the sweep nor its capture holds the target's: give the sweep the target "
            "model folder (the Sweep page's target box, `eagle3dash sweep --target PATH`)"
        )
    layout = tuple(capture.taps)
    ev = evaluate_capture(
        draft,
        capture,
        layout,
        steps=int(params.get("steps") or DEFAULT_STEPS),
        embed_weight=embed if embed is not None else capture.embed_weight,
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
                reason=_reason(job),
                placement=job.get("placement"),
            )
        )
    return sorted(entries, key=_rank_key)


def _reason(job: dict) -> str | None:
    """A failed job's one line: its error when that is one line, else its message (the worker's
    summary of a traceback), without the class name the worker puts before an InputError."""
    if job["status"] != jobs.Status.FAILED:
        return None
    error = (job.get("error") or "").strip()
    line = error if error and "\n" not in error else job.get("message") or "failed"
    return str(line).removeprefix(_INPUT_ERROR_PREFIX)


def _rank_key(e: SweepEntry) -> tuple[Any, ...]:
    score = e.sim_serving
    missing = score is None or math.isnan(score)
    step = e.step if e.step is not None else math.inf
    return (missing, 0.0 if missing else -float(score or 0.0), step, e.checkpoint)


def unfinished(entries: Sequence[SweepEntry]) -> bool:
    """Whether any of a sweep's evaluations is still queued or running."""
    return any(e.status not in jobs.FINISHED for e in entries)


def sweep_setup(store: Store, sweep_id: str) -> SweepSetup | None:
    """What a sweep evaluated on, as submitted (None: no such sweep)."""
    for job in jobs.list_jobs(store):
        p = job["params"] or {}
        if job["kind"] == SWEEP_KIND and p.get("sweep") == sweep_id:
            return SweepSetup(
                capture=str(p["capture"]),
                steps=int(p.get("steps") or DEFAULT_STEPS),
                target=p.get("target"),
                endpoint=p.get("endpoint"),
                served_run=p.get("served_run"),
            )
    return None


def list_sweeps(store: Store) -> list[str]:
    """The sweeps in the store, newest first."""
    seen: dict[str, None] = {}
    for job in reversed(jobs.list_jobs(store)):
        p = job["params"] or {}
        if job["kind"] == SWEEP_KIND and p.get("sweep"):
            seen.setdefault(str(p["sweep"]), None)
    return list(seen)
