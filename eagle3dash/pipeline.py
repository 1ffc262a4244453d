"""The diagnose pipeline: inspect, probe, capture, standalone evaluation, serve benchmark, findings.

Each stage is a plain function, so the CLI runs them in one process and the job runner can run them
as jobs. `run_diagnosis` chains them and reports progress as (fraction, message); `submit_diagnosis`
queues it as a job for the app, and `record_diagnosis` stores its results for the pages. Importing
this module registers the job kinds and stays light: torch is imported only inside the stages.

Both evaluations run on the same token sequences (the endpoint's own greedy completions), so they
differ only in the taps: the serving side gets the concatenated aux states SGLang really feeds the
draft; the training side gets the target's states at the training layout's taps, from a local
target (`--target`) or a training dump (`--train-states`, other sequences).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from eagle3dash.checkpoint import InspectReport, inspect
from eagle3dash.errors import InputError
from eagle3dash.findings import Evidence, Finding, diagnose
from eagle3dash.layout import format_layout, parse_layout
from eagle3dash.prediction import LayoutComparison, predict_layouts
from eagle3dash.servebench import (
    BenchResult,
    Prompt,
    compare_to_baseline,
    load_prompts,
    run_bench,
)
from eagle3dash.sglang import ServerReport, SGLangClient
from eagle3dash.sglang_rules import DEFAULT_SGLANG_VERSION

if TYPE_CHECKING:
    from eagle3dash.metrics import DraftEval
    from eagle3dash.store import Store

Progress = Callable[[float, str], None]


def _no_progress(fraction: float, message: str) -> None:
    pass


@dataclass
class DiagnoseOptions:
    """What to diagnose and how hard to look."""

    draft: str
    endpoint: str
    baseline: str | None = None
    prompts: str = "chat"  # a built-in set name or a JSONL path
    num_prompts: int = 16
    max_new_tokens: int = 64
    concurrency: int = 4
    train_states: str | None = None  # SpecForge or speculators dump made with the training layout
    target: str | None = None  # local Hugging Face target, for training-side states
    target_layers: int | None = None  # target depth N, when no config tells it
    arch: str | None = None  # target architecture for SGLang's capture rules
    trainer: str | None = None
    training_layout: str | None = None  # taps the training data really used, e.g. "0,3,31"
    steps: int = 5  # draft steps evaluated (the server's own steps are reported too)
    device: str = "cpu"
    dtype: str = "float32"
    capture_dir: str | None = None  # where the serving capture is kept
    timeout: float = 120.0


@dataclass
class Diagnosis:
    """Everything one diagnosis found, ready for the CLI, the store and the app."""

    options: DiagnoseOptions
    report: InspectReport
    server: ServerReport
    num_target_layers: int
    arch: str
    layouts: LayoutComparison
    server_steps: int | None = None
    training_eval: DraftEval | None = None
    serving_eval: DraftEval | None = None
    measured: BenchResult | None = None
    baseline: BenchResult | None = None
    detection: dict | None = None  # the layout detective's case (with --target)
    findings: list[Finding] = field(default_factory=list)
    missing: list[str] = field(default_factory=list)  # comparisons not made, and how to supply them
    warnings: list[str] = field(default_factory=list)

    def side(self, name: str) -> dict:
        """One side of the side-by-side table: layout, evaluation and simulated accept length."""
        result = getattr(self.layouts, name)
        ev = self.training_eval if name == "training" else self.serving_eval
        out = {
            "layout": [t.to_dict() for t in result.layout],
            "rule": result.rule,
            "eval": ev.to_dict() if ev else None,
            "top1": ev.accuracy[0] if ev else None,
            "sim_accept_length": self.sim_accept_length(ev),
            "mean_accept_length": ev.accept_length_at(min(self.server_steps or ev.steps, ev.steps))
            if ev
            else None,
        }
        return out

    def sim_accept_length(self, ev: DraftEval | None) -> float | None:
        """Simulated accept length at the server's chain length (or the evaluated steps)."""
        if ev is None:
            return None
        return ev.simulated_accept_length(self.server_steps)

    def to_dict(self) -> dict:
        """The --json contract: findings, training, serving, measured, plus context."""
        speedup = None
        if self.measured and self.baseline:
            speedup = compare_to_baseline(self.measured, self.baseline)
        return {
            "findings": [f.to_dict() for f in self.findings],
            "training": self.side("training"),
            "serving": self.side("serving"),
            "measured": self.measured.to_dict() if self.measured else None,
            "baseline": self.baseline.to_dict() if self.baseline else None,
            "speedup": speedup,
            "layout_diff": self.layouts.diff.to_dict(),
            "detective": self.detection,
            "num_target_layers": self.num_target_layers,
            "arch": self.arch,
            "server_steps": self.server_steps,
            "missing": self.missing,
            "warnings": self.warnings,
            "checkpoint": self.report.to_json(),
            "server": self.server.to_dict(),
        }


def target_depth(options: DiagnoseOptions, server: ServerReport) -> int:
    """Target depth N: the flag, else the local target's config, else the served model's config."""
    from eagle3dash.capture import num_target_layers

    if options.target_layers:
        return options.target_layers
    for path in (options.target, server.model_path):
        if path and (Path(path) / "config.json").is_file():
            return num_target_layers(path)
    raise InputError(
        f"cannot tell how many layers the target has: {server.model_path!r} is not a local "
        "checkpoint here; pass --target-layers N (or --target PATH)"
    )


def target_embedding(options: DiagnoseOptions, server: ServerReport):
    """The target's embedding matrix, read alone from a local checkpoint, or None."""
    from eagle3dash.capture import read_target_embedding

    for path in (options.target, server.model_path):
        if path and Path(path).is_dir():
            return read_target_embedding(path)
    return None


def local_tokenizer(*paths: str | None):
    """The first tokenizer that loads from a local copy among `paths` (never from a hub)."""
    from transformers import AutoTokenizer

    for path in paths:
        if not path:
            continue
        try:
            return AutoTokenizer.from_pretrained(path, local_files_only=True)
        except (OSError, ValueError):
            continue
    tried = ", ".join(repr(p) for p in paths if p) or "none"
    raise InputError(
        f"cannot tokenize the text prompts: no local tokenizer (tried {tried}); pass --target "
        "PATH (a local copy of the target, or just its tokenizer files) or give prompts as token "
        'ids ({"input_ids": [...]} lines)'
    )


def prompt_ids(prompts: list[Prompt], *tokenizer_paths: str | None) -> list[list[int]]:
    """Each prompt's token ids: its own, or its text through the target's local tokenizer, so
    the ids are the ones SGLang sees."""
    tokenizer = None
    out = []
    for prompt in prompts:
        if prompt.input_ids is not None:
            out.append(list(prompt.input_ids))
            continue
        tokenizer = tokenizer or local_tokenizer(*tokenizer_paths)
        out.append(list(tokenizer(prompt.text)["input_ids"]))
    return out


def run_diagnosis(options: DiagnoseOptions, progress: Progress | None = None) -> Diagnosis:
    """Run every stage against the endpoint and return the diagnosis with its findings."""
    import torch

    from eagle3dash.capture import capture_from_sglang, read_capture, save_capture
    from eagle3dash.detective import capture_all_taps, detect
    from eagle3dash.draft import evaluate_capture, load_draft

    progress = progress or _no_progress
    progress(0.0, "inspecting the checkpoint")
    report = inspect(options.draft)
    progress(0.05, f"probing {options.endpoint}")
    client = SGLangClient(options.endpoint, timeout=options.timeout)
    server = client.probe()
    depth = target_depth(options, server)
    arch = options.arch or (server.architectures or [None])[0] or server.model_type or "llama"
    override = parse_layout(options.training_layout) if options.training_layout else None
    layouts = predict_layouts(
        report.spec,
        depth,
        trainer=options.trainer,
        sglang_version=server.version or DEFAULT_SGLANG_VERSION,
        arch=arch,
        cuda_graph=not server.disable_cuda_graph,
        training_override=override,
    )
    diagnosis = Diagnosis(
        options=options,
        report=report,
        server=server,
        num_target_layers=depth,
        arch=arch,
        layouts=layouts,
        server_steps=server.speculative.num_steps if server.speculative else None,
    )
    training_layout = layouts.training.layout
    serving_layout = layouts.serving.layout

    prompts = load_prompts(options.prompts)[: options.num_prompts]
    if server.speculative and server.enable_return_hidden_states and not layouts.serving.error:
        progress(0.1, "capturing the aux states the server feeds the draft")
        capture = capture_from_sglang(
            client,
            prompt_ids(prompts, options.target, server.model_path),
            serving_layout,
            max_new_tokens=options.max_new_tokens,
            report=server,
            progress=lambda done, total: progress(0.1 + 0.3 * done / total, "capturing"),
            warn=diagnosis.warnings.append,
        )
        if options.capture_dir:
            save_capture(capture, options.capture_dir)
        embed = target_embedding(options, server)
        draft = load_draft(options.draft, options.device, getattr(torch, options.dtype), embed)
        layout_text = format_layout(serving_layout)
        progress(0.4, f"evaluating the draft on the serving layout [{layout_text}]")
        diagnosis.serving_eval = evaluate_capture(
            draft, capture, serving_layout, steps=options.steps, embed_weight=embed
        )
        training_capture = None
        if options.target:
            # Every tap at once: the training layout's, and the layout detective's candidates.
            progress(0.5, f"capturing every tap of the local target {options.target}")
            tokens = [seq.input_ids.tolist() for seq in capture.sequences]
            training_capture = capture_all_taps(options.target, tokens, device=options.device)
            for mine, theirs in zip(training_capture.sequences, capture.sequences, strict=True):
                mine.loss_mask = theirs.loss_mask  # score the same rows on both sides
            training_capture.meta["served_tokens"] = capture.meta.get("served_tokens")
        elif options.train_states:
            progress(0.5, f"reading the training dump {options.train_states}")
            training_capture = read_capture(
                options.train_states, layout=training_layout, num_target_layers=depth
            )
            diagnosis.warnings.append(
                "training-side states come from the training dump, so they cover other token "
                "sequences than the serving capture"
            )
        else:
            diagnosis.missing.append(
                "training-side evaluation: no target states at the training taps "
                f"[{format_layout(training_layout)}]; pass --target PATH (a local Hugging Face "
                "checkpoint of the target) or --train-states DIR (SpecForge data_*.ckpt or "
                "speculators hs_*.safetensors made with the training layout)"
            )
        if training_capture is not None:
            layout_text = format_layout(training_layout)
            progress(0.6, f"evaluating the draft on the training layout [{layout_text}]")
            diagnosis.training_eval = evaluate_capture(
                draft, training_capture, training_layout, steps=options.steps, embed_weight=embed
            )
        if options.target:
            progress(0.62, "layout detective: which taps does the draft perform best with?")
            diagnosis.detection = detect(
                options.draft,
                capture=training_capture,
                steps=options.steps,
                sides={"serving": capture},
                num_layers=depth,
                sglang_version=server.version or DEFAULT_SGLANG_VERSION,
                arch=arch,
                device=options.device,
                draft=draft,
            ).to_dict()
    elif not server.speculative:
        diagnosis.missing.append("standalone evaluation: the endpoint runs no speculative decoding")
    elif not server.enable_return_hidden_states:
        diagnosis.missing.append(
            "standalone evaluation on the serving states: restart the server with "
            "--enable-return-hidden-states so the states it feeds the draft can be captured"
        )
    else:
        diagnosis.missing.append(f"serving capture: {layouts.serving.error}")

    progress(0.7, f"benchmarking {options.endpoint}")
    bench_prompts = prompts

    def bench_progress(start: float, span: float) -> Callable[[int, int], None]:
        return lambda done, total: progress(start + span * done / total, "benchmarking")

    diagnosis.measured = run_bench(
        options.endpoint,
        bench_prompts,
        concurrency=options.concurrency,
        max_new_tokens=options.max_new_tokens,
        progress=bench_progress(0.7, 0.15 if options.baseline else 0.25),
    )
    if options.baseline:
        progress(0.85, f"benchmarking the baseline {options.baseline}")
        diagnosis.baseline = run_bench(
            options.baseline,
            bench_prompts,
            concurrency=options.concurrency,
            max_new_tokens=options.max_new_tokens,
            progress=bench_progress(0.85, 0.1),
        )
    else:
        diagnosis.missing.append(
            "speedup: pass --baseline URL (the same target served without speculation)"
        )

    diagnosis.findings = diagnose(
        Evidence(
            report=report,
            draft_path=options.draft,
            num_target_layers=depth,
            arch=arch,
            server=server,
            layouts=layouts,
            sglang_version=server.version,
            trainer=options.trainer,
            detection=diagnosis.detection,
            training_eval=diagnosis.training_eval,
            serving_eval=diagnosis.serving_eval,
            measured=diagnosis.measured,
            baseline=diagnosis.baseline,
        )
    )
    progress(1.0, "done")
    return diagnosis


# --- the results in the store, and the job kinds ----------------------------------------------


def diagnosis_metrics(diagnosis: Diagnosis) -> list[dict]:
    """Long-format metric rows (source, name, step, request, value), ready for altair."""
    rows: list[dict] = []
    for source, ev in (("training", diagnosis.training_eval), ("serving", diagnosis.serving_eval)):
        if ev is None:
            continue
        for step, (acc, accept) in enumerate(zip(ev.accuracy, ev.acceptance, strict=True)):
            rows.append({"source": source, "name": "accuracy", "step": step, "value": acc})
            rows.append({"source": source, "name": "acceptance", "step": step, "value": accept})
        rows.append(
            {"source": source, "name": "accept_length", "value": diagnosis.sim_accept_length(ev)}
        )
    for source, bench in (("measured", diagnosis.measured), ("baseline", diagnosis.baseline)):
        if bench is None:
            continue
        rows.append({"source": source, "name": "tok_s", "value": bench.output_tok_s_aggregate})
        rows.append({"source": source, "name": "accept_length", "value": bench.accept_length})
        for i, (tok_s, accept) in enumerate(
            zip(bench.output_tok_s_per_request, bench.accept_length_per_request, strict=False)
        ):
            rows.append({"source": source, "name": "tok_s", "request": i, "value": tok_s})
            rows.append({"source": source, "name": "accept_length", "request": i, "value": accept})
    return rows


def record_diagnosis(store: Store, run_id: int, diagnosis: Diagnosis) -> None:
    """Store a diagnosis: layouts, metrics, findings, bench results and the run's headline."""
    from eagle3dash import store as db
    from eagle3dash.layout import describe_tap

    n = diagnosis.num_target_layers
    for side in ("training", "serving"):
        result = getattr(diagnosis.layouts, side)
        taps = [
            {"depth": t.depth, "post_norm": t.post_norm, "description": describe_tap(t, n)}
            for t in result.layout
        ]
        db.save_layouts(store, run_id, side, taps)
    decode = diagnosis.layouts.serving.decode_layout
    if decode is not None:
        taps = [{"depth": t.depth, "post_norm": t.post_norm} for t in decode]
        db.save_layouts(store, run_id, "decode", taps)
    db.save_metrics(store, run_id, diagnosis_metrics(diagnosis))
    db.save_findings(store, run_id, [f.to_dict() for f in diagnosis.findings])
    for role, bench in (("spec", diagnosis.measured), ("baseline", diagnosis.baseline)):
        if bench is not None:
            db.save_bench(store, run_id, role, bench.to_dict())
    db.record_probe(store, diagnosis.server.url, diagnosis.server.to_dict())
    result = diagnosis.to_dict()
    speedup = result["speedup"] or {}
    db.update_run(
        store,
        run_id,
        status="succeeded",
        measured_accept_length=diagnosis.measured.accept_length if diagnosis.measured else None,
        sim_accept_training=result["training"]["sim_accept_length"],
        sim_accept_serving=result["serving"]["sim_accept_length"],
        tok_s=diagnosis.measured.output_tok_s_aggregate if diagnosis.measured else None,
        baseline_tok_s=speedup.get("baseline_output_tok_s"),
        speedup=speedup.get("speedup"),
    )


def submit_diagnosis(store: Store, checkpoint_id: int | None, options: DiagnoseOptions) -> int:
    """Create a run and queue its diagnose job; return the run id."""
    from eagle3dash import jobs
    from eagle3dash import store as db

    params = dataclasses.asdict(options)
    run_id = db.create_run(store, checkpoint_id, options.endpoint, options.baseline, params)
    params["capture_dir"] = params["capture_dir"] or str(db.capture_dir(store, run_id))
    db.update_run(store, run_id, options=params)
    jobs.submit_job(
        store,
        "diagnose",
        {"options": params},
        run_id=run_id,
        needs_gpu=options.device.startswith("cuda"),
    )
    return run_id


def job_diagnose(params: dict, progress: Progress) -> dict:
    """Job kind 'diagnose': the whole pipeline for one run, stored for its page."""
    from eagle3dash import jobs
    from eagle3dash import store as db

    job = jobs.current_job()
    store = db.open_store(job["home"])
    run_id = job["run_id"]
    db.update_run(store, run_id, status="running")
    try:
        diagnosis = run_diagnosis(DiagnoseOptions(**params["options"]), progress)
        record_diagnosis(store, run_id, diagnosis)
    except BaseException as e:  # also a cancel: the run must not stay "running"
        status = "cancelled" if isinstance(e, jobs.JobCancelled) else "failed"
        db.update_run(store, run_id, status=status, error=str(e) or type(e).__name__)
        raise
    return diagnosis.to_dict()


def job_inspect(params: dict, progress: Progress) -> dict:
    """Job kind 'inspect': a checkpoint's report."""
    return inspect(params["path"]).to_json()


def job_probe(params: dict, progress: Progress) -> dict:
    """Job kind 'probe': an endpoint's report and its server-side findings."""
    server = SGLangClient(params["url"]).probe()
    return {
        "server": server.to_dict(),
        "findings": [f.to_dict() for f in diagnose(Evidence(server=server))],
    }


def job_serve_bench(params: dict, progress: Progress) -> dict:
    """Job kind 'serve-bench': the serve benchmark of one endpoint."""
    prompts = load_prompts(params.get("prompts", "chat"))[: params.get("num_prompts", 16)]
    result = run_bench(
        params["url"],
        prompts,
        concurrency=params.get("concurrency", 4),
        max_new_tokens=params.get("max_new_tokens", 64),
        progress=lambda done, total: progress(done / total, "benchmarking"),
    )
    return result.to_dict()


def job_capture(params: dict, progress: Progress) -> dict:
    """Job kind 'capture': the endpoint's aux states for the prompts, saved as a capture."""
    from eagle3dash.capture import capture_from_sglang, save_capture

    client = SGLangClient(params["url"])
    prompts = load_prompts(params.get("prompts", "chat"))[: params.get("num_prompts", 16)]
    warnings: list[str] = []
    capture = capture_from_sglang(
        client,
        prompt_ids(prompts, params.get("target"), client.probe().model_path),
        parse_layout(params["layout"]),
        max_new_tokens=params.get("max_new_tokens", 64),
        progress=lambda done, total: progress(done / total, "capturing"),
        warn=warnings.append,
    )
    path = save_capture(capture, params["out"])
    return {"path": str(path), "sequences": len(capture.sequences), "warnings": warnings}


def job_draft_eval(params: dict, progress: Progress) -> dict:
    """Job kind 'draft-eval': the standalone draft over a capture under one layout."""
    import torch

    from eagle3dash.capture import read_capture
    from eagle3dash.draft import evaluate_capture, load_draft

    layout = parse_layout(params["layout"])
    capture = read_capture(params["capture"], layout=layout)
    dtype = getattr(torch, params.get("dtype", "float32"))
    draft = load_draft(params["draft"], params.get("device", "cpu"), dtype, capture.embed_weight)
    steps = params.get("steps", 5)
    return evaluate_capture(draft, capture, layout, steps=steps).to_dict()


def job_detect(params: dict, progress: Progress) -> dict:
    """Job kind 'detect': the layout detective (sweep over one all-tap capture, fingerprint)."""
    from eagle3dash.capture import read_capture
    from eagle3dash.detective import detect, read_side

    sides = dict(read_side(s, params.get("target_layers")) for s in params.get("sides") or [])
    layouts = params.get("layouts") or []
    detection = detect(
        params["draft"],
        capture=read_capture(params["capture"]) if params.get("capture") else None,
        target=params.get("target"),
        prompts=params.get("prompts"),
        extra_layouts={f"user layout {text}": parse_layout(text) for text in layouts},
        steps=params.get("steps", 4),
        sides=sides or None,
        num_layers=params.get("target_layers"),
        sglang_version=params.get("sglang_version", DEFAULT_SGLANG_VERSION),
        arch=params.get("arch", "llama"),
        device=params.get("device", "cpu"),
        progress=progress,
    )
    return detection.to_dict()


def register_job_kinds() -> None:
    """Make the pipeline's stages runnable as jobs."""
    from eagle3dash.jobs import register_job_kind

    register_job_kind("diagnose", job_diagnose)
    register_job_kind("inspect", job_inspect)
    register_job_kind("probe", job_probe)
    register_job_kind("serve-bench", job_serve_bench)
    register_job_kind("capture", job_capture)
    register_job_kind("draft-eval", job_draft_eval)
    register_job_kind("detect", job_detect)


register_job_kinds()
