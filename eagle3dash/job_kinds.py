"""The job kinds the worker runs: each a function (params, progress) -> result dict (or a
`Recordable`, which the process that settles the job records: no job kind opens the store).

A plain table: `python -m eagle3dash worker` passes JOB_KINDS to the worker, which hands each job's
child process the name of its kind's function. Heavy imports (torch) stay inside the functions, so
the worker that only reads the table stays light.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import closing
from dataclasses import dataclass
from typing import Any

from eagle3dash.checkpoint import inspect
from eagle3dash.diagnosis.options import SCHEMA, DiagnoseOptions
from eagle3dash.diagnosis.record import record_diagnosis
from eagle3dash.diagnosis.result import Diagnosis
from eagle3dash.diagnosis.stages import prompt_ids, run_diagnosis
from eagle3dash.engines.endpoints import open_engine
from eagle3dash.engines.facts import target_arch
from eagle3dash.engines.seam import CaptureRequest
from eagle3dash.engines.serving import ServingEngine
from eagle3dash.engines.sglang.rules import DEFAULT_SGLANG_VERSION
from eagle3dash.jobs import JobFn
from eagle3dash.layout import parse_layout
from eagle3dash.probe import probe
from eagle3dash.servebench import BENCH_TIMEOUT, load_prompts, run_bench
from eagle3dash.store import Store
from eagle3dash.sweep import SWEEP_KIND, evaluate_checkpoint
from eagle3dash.target import vocabulary

Progress = Callable[[float, str], None]


def _option(params: dict, name: str) -> Any:
    """A job's option of the diagnosis schema, checked by it; missing: the schema's default."""
    return SCHEMA[name].parse(params.get(name))


@dataclass
class RunDiagnosis:
    """A run's diagnosis as its job returns it, from whichever node ran it (Ray pickles it back
    to the driver); the process that settles the job records it onto the run (`Recordable`)."""

    run_id: int
    diagnosis: Diagnosis

    def record(self, store: Store) -> dict:
        """Record the diagnosis onto its run; the job's result only points at it."""
        record_diagnosis(store, self.run_id, self.diagnosis)
        return {"run_id": self.run_id, "findings": len(self.diagnosis.findings)}


def job_diagnose(params: dict, progress: Progress) -> RunDiagnosis:
    """Job kind 'diagnose': the whole pipeline for run `params["run_id"]`, without the store (the
    costs of earlier runs, for the progress bar, came with the params from `submit_diagnosis`)."""
    # Starting and ending the run is the lifecycle's: the backend moves it with this job.
    options = DiagnoseOptions.from_json(params["options"])
    diagnosis = run_diagnosis(options, progress, costs=params.get("costs"))
    return RunDiagnosis(int(params["run_id"]), diagnosis)


def job_inspect(params: dict, progress: Progress) -> dict:
    """Job kind 'inspect': a checkpoint's report."""
    return inspect(params["path"]).to_json()


def job_probe(params: dict, progress: Progress) -> dict:
    """Job kind 'probe': an endpoint's report and its server-side findings."""
    return probe(params["url"]).to_dict()


def job_serve_bench(params: dict, progress: Progress) -> dict:
    """Job kind 'serve-bench': the serve benchmark of one endpoint (SGLang or vLLM)."""
    prompts = load_prompts(_option(params, "prompts"))[: _option(params, "num_prompts")]
    with closing(open_engine(params["url"], timeout=BENCH_TIMEOUT)) as engine:
        result = run_bench(
            engine,
            prompts,
            concurrency=_option(params, "concurrency"),
            max_new_tokens=_option(params, "max_new_tokens"),
            progress=lambda done, total: progress(done / total, "benchmarking"),
        )
    return result.to_dict()


def job_capture(params: dict, progress: Progress) -> dict:
    """Job kind 'capture': the endpoint's aux states for the prompts, saved as a capture."""
    from eagle3dash.capture import save_capture

    vocab = vocabulary(params.get("target"))
    prompts = load_prompts(_option(params, "prompts"), vocab)[: _option(params, "num_prompts")]
    warnings: list[str] = []
    with closing(open_engine(params["url"])) as engine:
        request = CaptureRequest(
            prompt_ids(prompts, params.get("target"), engine.probe().model_path),
            parse_layout(params["layout"]),
            max_new_tokens=_option(params, "max_new_tokens"),
            progress=lambda done, total: progress(done / total, "capturing"),
            warn=warnings.append,
        )
        capture = engine.capture(request)
    path = save_capture(capture, params["out"])
    return {"path": str(path), "sequences": len(capture.sequences), "warnings": warnings}


def job_draft_eval(params: dict, progress: Progress) -> dict:
    """Job kind 'draft-eval': the standalone draft over a capture under one layout."""
    import torch

    from eagle3dash.capture import read_capture
    from eagle3dash.draft import evaluate_capture, load_draft

    layout = parse_layout(params["layout"])
    capture = read_capture(params["capture"], layout=layout)
    dtype = getattr(torch, _option(params, "dtype"))
    draft = load_draft(params["draft"], _option(params, "device"), dtype, capture.embed_weight)
    steps = _option(params, "steps")
    return evaluate_capture(draft, capture, layout, steps=steps).to_dict()


def job_detect(params: dict, progress: Progress) -> dict:
    """Job kind 'detect': the layout detective (sweep over one all-tap capture, fingerprint)."""
    from eagle3dash.capture import read_capture
    from eagle3dash.detective import detect, read_side

    num_layers = _option(params, "target_layers")
    sides = dict(read_side(s, num_layers) for s in params.get("sides") or [])
    layouts = params.get("layouts") or []
    detection = detect(
        params["draft"],
        capture=read_capture(params["capture"]) if params.get("capture") else None,
        target=params.get("target"),
        prompts=params.get("prompts"),
        extra_layouts={f"user layout {text}": parse_layout(text) for text in layouts},
        steps=_option(params, "steps"),
        sides=sides or None,
        num_layers=num_layers,
        engine=ServingEngine("sglang", params.get("sglang_version", DEFAULT_SGLANG_VERSION)),
        arch=target_arch(_option(params, "arch")),
        device=_option(params, "device"),
        progress=progress,
    )
    return detection.to_dict()


JOB_KINDS: dict[str, JobFn] = {
    "diagnose": job_diagnose,
    "inspect": job_inspect,
    "probe": job_probe,
    "serve-bench": job_serve_bench,
    "capture": job_capture,
    "draft-eval": job_draft_eval,
    "detect": job_detect,
    SWEEP_KIND: evaluate_checkpoint,  # one checkpoint of a sweep (sweep.py)
}
