"""Command line: `python -m eagle3dash <command>`: the operations the app runs, for headless use.

Every command prints a short human report, or with --json one JSON object (a stable contract).
Unusable input exits 1 with a one-line message, never a traceback.
"""

from __future__ import annotations

import argparse
import builtins
import json
import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from eagle3dash.diagnosis.options import EXCLUSIVE, SCHEMA, DiagnoseOptions, Kind
from eagle3dash.engines.facts import target_arch
from eagle3dash.engines.serving import ENGINES, ServingEngine
from eagle3dash.engines.sglang.rules import DEFAULT_SGLANG_VERSION
from eagle3dash.engines.vllm.rules import DEFAULT_RUNNER, DEFAULT_VLLM_VERSION, RUNNER_ENV, RUNNERS
from eagle3dash.errors import InputError
from eagle3dash.layout import bracketed, format_layout, parse_layout
from eagle3dash.text import one_line, printable, shortened
from eagle3dash.trainers import training_readings

if TYPE_CHECKING:
    from eagle3dash.diagnosis.stored import StoredDiagnosis
    from eagle3dash.findings import Finding
    from eagle3dash.provenance import Provenance
    from eagle3dash.store import Store
    from eagle3dash.sweep import ServedRun, SweepCheckpoint

DEBUG_ENV = "EAGLE3DASH_DEBUG"
ERROR_LINE_CHARS = 1000  # an error line's longest: long names inside it are cut in the middle


def print(*values: object, **kwargs: object) -> None:
    """builtins.print with every value made printable: a prompt category, a server's model path
    or a file name holding terminal escape codes is shown, never obeyed."""
    builtins.print(*(printable(v) for v in values), **kwargs)  # type: ignore[call-overload]


def _error_line(text: object) -> str:
    return "error: " + shortened(one_line(text), ERROR_LINE_CHARS)


class UsageError(InputError):
    """A bad combination of command-line arguments."""


def _print_json(obj: dict) -> None:
    json.dump(obj, sys.stdout, indent=2, default=str)
    sys.stdout.write("\n")


def _rows(pairs: list[tuple[str, object]]) -> str:
    width = max(len(k) for k, _ in pairs)
    return "\n".join(f"  {k:<{width}}  {v}" for k, v in pairs)


def cmd_inspect(args: argparse.Namespace) -> int:
    """Report a draft checkpoint from its config and safetensors headers."""
    from eagle3dash.checkpoint import inspect_draft

    report = inspect_draft(args.path, args.draft_config)
    if args.json:
        _print_json(report.to_json())
        return 0
    from eagle3dash.checkpoint_problems import problem_lines
    from eagle3dash.ui.provenance import export_lines, format_name

    s = report.spec
    ids = list(s.aux_layer_ids) if s.aux_layer_ids is not None else None
    print(f"{args.path}  ({format_name(s.format)} format, {', '.join(report.files)})")
    print(
        _rows(
            [
                ("hidden (draft / target)", f"{s.hidden_size} / {s.target_hidden_size}"),
                ("layers", s.num_layers),
                ("heads / kv heads / head dim", f"{s.num_heads} / {s.num_kv_heads} / {s.head_dim}"),
                ("intermediate", s.intermediate_size),
                ("vocab (target / draft)", f"{s.vocab_size} / {s.draft_vocab_size}"),
                ("aux slots (fc input)", s.num_aux),
                ("aux layer ids", f"{ids} ({s.aux_ids_location})"),
                ("norm_before_residual", s.norm_before_residual),
                ("norm_before_fc / fc_norm", f"{s.norm_before_fc} / {s.fc_norm}"),
                ("norm_output in config", s.norm_output_key),
                ("d2t / t2d", f"{s.has_d2t} / {s.has_t2d}"),
                ("embed_tokens / lm_head", f"{s.has_embed} / {s.has_lm_head}"),
                ("dtype", s.dtype),
                ("parameters", f"{report.param_count:,}"),
            ]
        )
    )
    if report.provenance is not None:
        _print_provenance(report.provenance)
    for line in export_lines(s, report.provenance):
        print(line)
    lines = problem_lines(report.problems)
    if lines:
        print(f"{len(report.problems)} problem(s):")
        for line in lines:
            print(f"  - {line}")
    else:
        print("no problems found")
    return 0


def _print_provenance(card: Provenance) -> None:
    """The run folder's provenance card, one row per recorded fact."""
    from eagle3dash.ui.provenance import layers_text, trainer_name

    rows = [
        ("trainer", f"{trainer_name(card.trainer)} {card.trainer_version or ''}".strip()),
        ("checkpoint", f"{card.checkpoint} ({card.chosen_by})"),
        ("step", card.step),
        ("epoch", card.epoch),
        ("strategy", card.strategy),
        ("target", card.target_path),
        ("target revision", card.target_revision),
        ("target config.json sha256", card.target_config_sha256),
        ("capture layers", layers_text(card) if card.capture_layers else None),
        ("chat template", card.chat_template),
        ("best metric", f"{card.best_metric} = {card.best_score}" if card.best_metric else None),
    ]
    print("provenance (the run folder):")
    print(_rows([(k, v) for k, v in rows if v is not None]))
    m = card.metrics
    if m is not None:
        positions = ", ".join(f"{p:.3f}" for p in m.per_position)
        print(
            f"training-time acceptance ({m.source}): per position {positions}; accept length "
            f"{m.accept_length:.2f} with the bonus token ({m.conversion})"
        )
    for note in card.notes:
        print(f"  note: {note}")


def cmd_layout(args: argparse.Namespace) -> int:
    """Training and serving layouts of a draft, and their diff."""
    from eagle3dash.checkpoint import inspect_draft
    from eagle3dash.layout import describe_layout, describe_tap
    from eagle3dash.prediction import predict_layouts
    from eagle3dash.run_record import recorded_training

    report = inspect_draft(args.draft, args.draft_config)
    spec = report.spec
    trainer, recorded = recorded_training(report.provenance, args.trainer)
    override = args.training_layout or None  # a Layout: main parsed it through the schema
    try:
        if args.engine == "vllm":
            engine = ServingEngine("vllm", args.vllm_version, args.vllm_runner)
        else:
            engine = ServingEngine("sglang", args.sglang_version)
        result = predict_layouts(
            spec,
            args.target_layers,
            trainer=trainer,
            sglang_version=args.sglang_version,
            arch=target_arch(args.arch),
            cuda_graph=not args.no_cuda_graph,
            training_override=override,
            training_sglang_version=args.training_sglang_version,
            training_ids=recorded,
            engine=engine,
        )
        readings = training_readings(
            spec, args.target_layers, target_arch(args.arch), args.training_sglang_version
        )
    except ValueError as e:
        raise UsageError(str(e)) from e
    if args.json:
        _print_json(
            {
                "training": [t.to_dict() for t in result.training.layout],
                "serving": [t.to_dict() for t in result.serving.layout],
                "diff": result.diff.to_dict(),
                "training_rule": result.training.to_dict(),
                "serving_rule": result.serving.to_dict(),
                "readings": {
                    r.trainer: {"layout": format_layout(r.layout), "hints": list(r.hints)}
                    for r in readings
                },
            }
        )
        return 0
    n = args.target_layers
    unknown = override is None and result.training.assumed is not None  # no file names the ids
    # no trainer named, no run record, no layout given: the training side is one trainer's
    # reading of the config, a prediction, and the readings of the others are shown beside it
    guessed = unknown or (override is None and trainer is None and recorded is None)
    for side in ("training", "serving"):
        res = getattr(result, side)
        guess = ", ASSUMED" if res.assumed or (side == "training" and guessed) else ""
        print(f"{side}: {bracketed(res.layout)} ({describe_layout(res.layout, n)}{guess})")
        if res.assumed:
            print(f"  unknown: {res.assumed}")
        print(f"  rule: {res.rule}")
        if res.decode_layout is not None:
            decode = res.decode_layout
            print(
                f"  decode (CUDA-graph replays): {bracketed(decode)} ({describe_layout(decode, n)})"
            )
        for note in res.notes:
            print(f"  note: {note}")
        if res.error:
            print(f"  error: {res.error}")
    if guessed:
        why = "none is settled" if unknown else "no trainer, run folder or layout is given"
        print(
            f"training readings ({why}; give --trainer, the run folder or --training-layout to "
            "settle it):"
        )
        for r in readings:
            hints = ", ".join(r.hints) or "no hints"
            guess = ", assumed: its default ids" if r.result.assumed else ""
            print(f"  {r.trainer}: {bracketed(r.layout)} ({hints}{guess})")
    d = result.diff
    if guessed:
        print(
            f"diff: {d.kind} against the assumed training side, so nothing is settled: {d.summary}"
        )
    else:
        print(f"diff: {d.kind}: {d.summary}")
    for i, training, serving, same in d.slots:
        mark = "  " if same else "!="
        a = describe_tap(training, n) if training is not None else "-"
        b = describe_tap(serving, n) if serving is not None else "-"
        print(f"  slot {i}: {a:<24} {mark} {b}")
    return 0


def cmd_matrix(args: argparse.Namespace) -> int:
    """Where a draft can be served: each engine release read, the taps it feeds, the fixes."""
    from eagle3dash.checkpoint import inspect_draft
    from eagle3dash.serving_matrix import serving_matrix
    from eagle3dash.ui.matrix import matrix_lines

    report = inspect_draft(args.draft, args.draft_config)
    training = args.training_layout or None
    try:
        matrix = serving_matrix(
            report.spec,
            args.target_layers,
            target_arch(args.arch),
            trainer=args.trainer,
            training=training,
            card=report.provenance,
        )
    except ValueError as e:
        raise UsageError(str(e)) from e
    if args.json:
        _print_json(matrix.to_dict())
        return 0
    for line in matrix_lines(matrix):
        print(line)
    return 0


def cmd_eval(args: argparse.Namespace) -> int:
    """Standalone draft evaluation over a capture under one layout."""
    import torch

    from eagle3dash.capture import read_capture, read_target_embedding
    from eagle3dash.checkpoint import load
    from eagle3dash.draft import build_draft, evaluate_capture

    layout = parse_layout(args.layout)
    dtype = getattr(torch, args.dtype)
    spec, tensors, report = load(args.draft)
    if report.nonfinite:
        raise InputError(
            f"{args.draft}: {', '.join(report.nonfinite)} hold NaN or Inf values: the checkpoint "
            "is broken, so an evaluation of it would mean nothing"
        )
    if len(layout) != spec.num_aux:
        raise UsageError(
            f"--layout has {len(layout)} taps but the draft's fc takes {spec.num_aux} slots"
        )
    capture = read_capture(args.capture, layout=layout, num_target_layers=args.target_layers)
    draft = build_draft(spec, tensors, device=args.device, dtype=dtype)
    embed = read_target_embedding(args.target) if args.target else None
    result = evaluate_capture(draft, capture, layout, steps=args.steps, embed_weight=embed)
    if args.json:
        _print_json(result.to_dict())
        return 0
    print(
        f"layout [{format_layout(layout)}], {result.num_positions} positions, {result.steps} steps"
    )
    print("  step  accuracy  acceptance")
    for k, (acc, accept) in enumerate(zip(result.accuracy, result.acceptance, strict=True)):
        print(f"  {k:>4}  {acc:8.3f}  {accept:10.3f}")
    print(f"mean accept length per position ({result.steps} steps): {result.accept_length:.3f}")
    if result.served_accept_length is not None:
        served = result.served_accept_length
        print(f"simulated accept length, serving rounds replayed: {served:.3f}")
    return 0


def _print_findings(findings: Sequence[Finding]) -> None:
    if not findings:
        print("no findings")
        return
    print(f"{len(findings)} finding(s):")
    for f in findings:
        print(f"  [{f.severity}] {f.id}: {f.title}")
        print(f"      evidence: {f.evidence}")
        print(f"      fix: {f.fix}")


def cmd_probe(args: argparse.Namespace) -> int:
    """Report an endpoint (SGLang or vLLM), the draft it serves (when readable here) and the
    findings."""
    from eagle3dash.checkpoint import inspect
    from eagle3dash.probe import before_submit, probe
    from eagle3dash.ui import words
    from eagle3dash.ui.fmt import size

    if args.draft is not None:
        inspect(args.draft)  # an unusable checkpoint is an error here, not a silent skip
    found = probe(args.url, timeout=args.timeout)
    findings = found.findings if args.draft is None else before_submit(found, args.draft)
    if args.json:
        _print_json({**found.to_dict(), "findings": [f.to_dict() for f in findings]})
        return 0
    server = found.server
    rows: list[tuple[str, object]] = [
        ("engine", words.engine_words(server)),
        ("model", f"{server.model_path} ({', '.join(server.architectures or []) or '?'})"),
        *words.server_rows(server),
    ]
    unsaid = words.unsaid_by_server(server)
    if unsaid:
        rows.append(("not said", unsaid))
    if found.draft is not None:
        read = found.draft.reason
        if found.draft.report is not None:
            ds = found.draft.report.spec
            ids = list(ds.aux_layer_ids) if ds.aux_layer_ids is not None else None
            read += f": {ds.format} format, aux layer ids {ids} ({ds.aux_ids_location})"
        rows.append(("draft checkpoint", read))
    if found.target is not None:
        t = found.target
        rows.append(
            (
                "served model here",
                f"{t.path} ({t.num_layers} layers, {size(t.weight_bytes)} of weights): "
                "--target it to measure the training side and the served slots",
            )
        )
    print(server.url)
    print(_rows(rows))
    _print_findings(findings)
    return 0


_last_message = [""]


def _progress_bar(fraction: float, message: str) -> None:
    """A self-overwriting progress bar on a terminal; one line per new stage otherwise."""
    if not sys.stderr.isatty():
        if message != _last_message[0]:
            _last_message[0] = message
            print(f"{fraction:4.0%} {message}", file=sys.stderr)
        return
    width = 30
    filled = int(round(fraction * width))
    sys.stderr.write(
        f"\r[{'#' * filled}{'.' * (width - filled)}] {fraction:4.0%} {message[:60]:<60}"
    )
    if fraction >= 1.0:
        sys.stderr.write("\n")
    sys.stderr.flush()


def _fmt(value: object, spec: str = ".2f") -> str:
    return "-" if value is None else format(value, spec)


def cmd_diagnose(args: argparse.Namespace) -> int:
    """Run the whole diagnosis of a draft against an endpoint."""
    from eagle3dash.diagnosis.stages import run_diagnosis
    from eagle3dash.diagnosis.stored import load_diagnosis

    values = {name: getattr(args, name) for name in SCHEMA}
    options = DiagnoseOptions.parse(values, naming="flag")
    if args.profile_out and not options.profile:
        raise UsageError("--profile-out needs the profile: drop --no-profile")
    diagnosis = run_diagnosis(options, progress=None if args.json else _progress_bar)
    d = diagnosis.to_dict()
    if args.profile_out:
        _write_profile(d, Path(args.profile_out))
    if args.json:
        _print_json(d)
        return 0
    # Printed as the store gives it back to the pages: the same typed read of the same document.
    _print_diagnosis(load_diagnosis(d))
    return 0


def _print_diagnosis(d: StoredDiagnosis) -> None:
    """The human report of a diagnosis: verdict, the two sides, findings, what was not checked."""
    from eagle3dash.ui.fmt import ratio
    from eagle3dash.ui.timings import timing_lines
    from eagle3dash.ui.words import (
        layout_check_action,
        layout_comparison,
        not_checked_text,
        source_words,
        verdict_sentence,
    )

    train, serve, measured, speedup = d.training, d.serving, d.measured, d.speedup

    def row(label: str, training: str = "", serving: str = "") -> None:
        print(f"{label:30}{training:>14}{serving:>14}")

    print(f"verdict ({d.verdict.status or 'unknown'}): {verdict_sentence(d)}")
    row("", "training", "serving")
    row("layout", bracketed(train.layout), bracketed(serve.layout))
    _, kind, comparison = layout_comparison(d)
    print(f"layout comparison: {comparison if kind is None else f'{kind}: {comparison}'}")
    action = layout_check_action(d, "cli")
    if action:
        print(f"  to check it: {action}")
    row("top-1 (draft step 1)", _fmt(train.top1, ".1%"), _fmt(serve.top1, ".1%"))
    row(
        f"simulated accept length S={d.steps}",
        _fmt(train.sim_accept_length),
        _fmt(serve.sim_accept_length),
    )
    if measured is not None:
        row("measured accept length", "", _fmt(measured.accept_length))
        row("output tok/s", "", _fmt(measured.output_tok_s_aggregate, ".1f"))
    else:
        row("measured accept length", "", "-")
        row("output tok/s", "", "-")
    if speedup is not None:
        row("baseline tok/s", "", _fmt(speedup.baseline_output_tok_s, ".1f"))
        row("speedup", "", ratio(speedup.speedup, speedup.speedup_noise))
    _print_per_position(d)
    print(f"training layout: {source_words(train.source, d.server)} ({train.detail})")
    print(f"serving layout: {source_words(serve.source, d.server)} ({serve.detail})")
    if d.detective is not None:
        print("layout detective:")
        for line in d.detective.verdict:
            print(f"  {line}")
    _print_profile(d)
    _print_findings(d.findings)
    for item in d.not_checked:
        print(f"not checked: {not_checked_text(item, interface='cli')}")
    for line in d.warnings:
        print(f"warning: {line}")
    for line in timing_lines(d.timings):
        print(line)


def _write_profile(d: dict, path: Path) -> None:
    """The profile as one JSON file at `path` and its CSV beside it (same name, .csv)."""
    from eagle3dash.profile_export import profile_csv, profile_json

    as_json, as_csv = profile_json(d), profile_csv(d)
    if as_json is None or as_csv is None:  # checked before the run; a profile stage never empty
        raise InputError("the diagnosis has no profile to write")
    csv_path = path.with_suffix(".csv")
    try:
        path.write_text(as_json, "utf-8")
        csv_path.write_text(as_csv, "utf-8")
    except OSError as e:
        raise InputError(f"cannot write the profile to {path}: {e.strerror or e}") from None
    print(f"profile written to {path} and {csv_path}", file=sys.stderr)


def _print_profile(d: StoredDiagnosis) -> None:
    """The acceptance profile: categories, prompt formats, temperatures, the steps advice."""
    from eagle3dash.ui.fmt import ratio
    from eagle3dash.ui.words import (
        not_checked_text,
        recommendation_text,
        rows_prompts_note,
        steps_knob,
    )

    profile = d.profile
    if profile is None:
        return
    print(
        f"{'category':30}{'prompts':>9}{'measured':>10}{'sim train':>10}{'sim serve':>10}"
        f"{'tok/s':>9}{'speedup':>14}"
    )
    for c in profile.per_category:
        print(
            f"  {c.category:28}{c.prompts:>9}{_fmt(c.measured_accept_length):>10}"
            f"{_fmt(c.sim_accept_training):>10}{_fmt(c.sim_accept_serving):>10}"
            f"{_fmt(c.tok_s, '.1f'):>9}{ratio(c.speedup, c.speedup_noise):>14}"
        )
    for f in profile.prompt_format:
        print(
            f"prompt format {f.format}: measured accept length "
            f"{_fmt(f.measured_accept_length)}{_pm(f.accept_length_noise)}, simulated "
            f"{_fmt(f.sim_accept_serving)}"
        )
    for t in profile.temperature:
        print(
            f"temperature {t.temperature:g}: measured accept length "
            f"{_fmt(t.measured_accept_length)}{_pm(t.accept_length_noise)}, "
            f"{_fmt(t.tok_s, '.1f')} tok/s"
        )
    sent = None if d.measured is None else d.measured.num_requests
    tables_by_note: dict[str, list[str]] = {}  # the same words once, naming every table they fit
    for table, rows in (
        ("prompt formats", profile.prompt_format),
        ("temperatures", profile.temperature),
    ):
        note = rows_prompts_note(rows, sent)
        if note:
            tables_by_note.setdefault(note, []).append(table)
    for note, tables in tables_by_note.items():
        print(f"  {' and '.join(tables)}: {note}")
    if profile.steps_advice:
        print(f"{steps_knob(d.server):30}{'accept length':>14}{'tok/s':>10}  source")
        for r in profile.steps_advice:
            print(
                f"  {r.num_steps:<28}{_fmt(r.predicted_accept_length):>14}"
                f"{_fmt(r.predicted_tok_s, '.1f'):>10}  {r.source}"
            )
    advice = recommendation_text(profile, d)
    if advice:
        print(f"steps advice: {advice}")
    for item in profile.not_profiled:
        print(f"not profiled: {not_checked_text(item, interface='cli')}")


def _pm(noise: float | None) -> str:
    """' ±0.12' for a value's noise, '' without one."""
    return "" if noise is None else f" ±{noise:.2f}"


def _print_per_position(d: StoredDiagnosis) -> None:
    """Acceptance per draft position, k = 1 .. steps: the share of rounds (measured, and each
    side's replayed rounds in the profile; else the share of chains) that accepted at least k
    drafts."""
    shares = None if d.measured is None else d.measured.per_position
    if d.profile is not None:
        position = d.profile.per_position
        sims = [position.simulated_training or [], position.simulated_serving or []]
    else:
        sims = [
            [] if side.eval is None else side.eval.acceptance for side in (d.training, d.serving)
        ]
    if not any(sims) and shares is None:
        return
    print(f"{'accepted >= k drafts':30}{'training':>14}{'serving':>14}{'measured':>14}")
    for k in range(1, d.steps + 1):
        cells = [_fmt(sim[k - 1], ".1%") if k <= len(sim) else "" for sim in sims]
        # SGLang's histogram stops at the largest k any round accepted: past it, no round did
        got = "" if shares is None else _fmt(shares[k - 1] if k <= len(shares) else 0.0, ".1%")
        print(f"{f'  k = {k}':30}{cells[0]:>14}{cells[1]:>14}{got:>14}")
    if shares is None and d.measured is not None and d.measured.accept_length is not None:
        print("  measured: not reported (the server predates spec_correct_drafts_histogram)")


def cmd_detect(args: argparse.Namespace) -> int:
    """The layout detective: which taps the draft performs best with, from tensors."""
    from eagle3dash.capture import read_capture
    from eagle3dash.detective import detect, read_side, sweep_table
    from eagle3dash.diagnosis.stages import prompt_ids
    from eagle3dash.servebench import load_prompts
    from eagle3dash.target import vocabulary

    if (args.capture is None) == (args.target is None):
        raise UsageError("pass exactly one of --capture DIR or --target PATH")
    sides = dict(read_side(s, args.target_layers) for s in args.side or [])
    capture = read_capture(args.capture) if args.capture else None
    prompts = None
    if args.prompts:
        if args.target is None:
            raise UsageError("--prompts goes with --target (a capture brings its own sequences)")
        prompts = prompt_ids(load_prompts(args.prompts, vocabulary(args.target)), args.target)
    elif args.target is not None and not sides:
        from eagle3dash.demo import DEMO_PROMPTS

        prompts = [list(p) for p in DEMO_PROMPTS]  # the documented default of --prompts
    extra = {f"user layout {text}": parse_layout(text) for text in args.layout or []}
    detection = detect(
        args.draft,
        capture=capture,
        target=args.target,
        prompts=prompts,
        extra_layouts=extra,
        steps=args.steps,
        sides=sides or None,
        num_layers=args.target_layers,
        engine=ServingEngine("sglang", args.sglang_version),
        arch=target_arch(args.arch),
        device=args.device,
        progress=None if args.json else _progress_bar,
    )
    if args.json:
        _print_json(detection.to_dict())
        return 0
    print(f"{'rank':>4}  {'layout':<10}{'top-1':>8}{'accept':>8}{'gap':>7}  candidate")
    for r in sweep_table(detection.rows):
        print(
            f"{r['rank']:>4}  {r['layout']:<10}{r['top1']:>8.1%}{r['sim_accept_length']:>8.2f}"
            f"{r['gap']:>7.2f}  {r['candidate']}"
        )
    for line in detection.verdict:
        print(line)
    return 0


def cmd_worker(args: argparse.Namespace) -> int:
    """Run queued jobs until stopped: each in a child process, or a Ray task (`--jobs ray`)."""
    from eagle3dash.job_kinds import JOB_KINDS

    if args.jobs == "ray":  # only then is Ray imported
        from eagle3dash.jobs.backend import ServeSettings, serve
        from eagle3dash.jobs.ray_backend import RayBackend, cluster_slots

        backend = RayBackend()
        settings = ServeSettings(slots=args.slots or cluster_slots())
        done = serve(backend, args.home, JOB_KINDS, settings, once=args.once)
    else:
        from eagle3dash.jobs.worker import run_worker
        from eagle3dash.preloaded import HEAVY

        done = run_worker(
            args.home, JOB_KINDS, once=args.once, slots=args.slots or 1, preload=HEAVY
        )
    print(f"worker stopped after {done} job(s)", file=sys.stderr)
    return 0


def cmd_sweep(args: argparse.Namespace) -> int:
    """Queue a checkpoint sweep; with --wait, wait for the worker, print the ranking and why any
    checkpoint could not be evaluated (exit 1 then)."""
    from eagle3dash import jobs
    from eagle3dash import store as db
    from eagle3dash.sweep import DEFAULT_STEPS, checkpoints_given, submit_sweep, sweep_results

    checkpoints = checkpoints_given(args.checkpoints)
    with db.open_store(args.home) as store:
        run_id = args.run
        if run_id is None and not args.capture:
            run_id = _diagnose_for_capture(store, checkpoints, args)
        served = None if run_id is None else _served_run(store, run_id)
        capture = served.capture if served is not None else args.capture
        # A served run's target and steps, as the Sweep page takes them: its numbers then match.
        target = (
            args.target
            or (served.target if served is not None else None)
            or _served_model_path(args.endpoint)
        )
        steps = args.steps or (served.steps if served is not None else DEFAULT_STEPS)
        sweep_id = submit_sweep(
            store,
            checkpoints,
            capture,
            args.endpoint,
            steps,
            target=target,
            served_run=run_id,
        )
        print(f"sweep {sweep_id}: {len(checkpoints)} checkpoint(s) queued")
        print(f"  evaluated on {_capture_words(capture, run_id)}, {steps} draft steps")
        if not args.wait:
            return 0
        ids = [e.job_id for e in sweep_results(store, sweep_id)]
        for job_id in ids:
            jobs.wait_for_job(store, job_id, timeout=args.timeout)
        entries = sweep_results(store, sweep_id)
        print("  rank  step  sim serving  checkpoint")
        for rank, e in enumerate(entries, 1):
            score = f"{e.sim_serving:11.3f}" if e.sim_serving is not None else f"{e.status:>11}"
            step = e.step if e.step is not None else "-"
            best = "  (trainer's best)" if e.best else ""
            print(f"  {rank:4d}  {step:>4}  {score}  {e.checkpoint}{best}")
        failed = [e for e in entries if e.reason is not None]
        for e in failed:
            print(f"{e.name} failed: {e.reason}", file=sys.stderr)
    return 1 if failed else 0


def _served_run(store: Store, run_id: int) -> ServedRun:
    """Run `run_id` and its serving capture; one line when it kept none."""
    from eagle3dash.sweep import served_run

    found = served_run(store, run_id)
    if found is None:
        raise InputError(
            f"run #{run_id} kept no serving capture in {store.home}: give a run that "
            "captured what its server feeds the draft (the Sweep page lists them), or "
            "--capture DIR"
        )
    return found


def _capture_words(capture: str, run_id: int | None) -> str:
    """'run #2's serving capture (its prompts as sent: raw)', else the capture folder."""
    from eagle3dash.sweep import CAPTURE_PROMPTS

    return f"run #{run_id}'s serving capture ({CAPTURE_PROMPTS})" if run_id else capture


def _served_model_path(endpoint: str | None) -> str | None:
    """The endpoint's model path when it is a folder here (its target's embedding), else None."""
    if not endpoint:
        return None
    from eagle3dash.engines.endpoints import open_engine

    engine = open_engine(endpoint)
    try:
        path = engine.probe().model_path
    finally:
        engine.close()
    return path if path and Path(path).is_dir() else None


def _diagnose_for_capture(
    store: Store, checkpoints: list[SweepCheckpoint], args: argparse.Namespace
) -> int:
    """Diagnose the trainer's best (else the last) checkpoint against the endpoint and wait for
    the worker: its serving capture is the sweep's one capture; the run's id."""
    from dataclasses import replace

    from eagle3dash import jobs
    from eagle3dash.submit import submit_diagnosis

    if not args.endpoint:
        raise UsageError("give --endpoint (captured once by a diagnosis), --run N or --capture")
    first = next((c for c in checkpoints if c.best), checkpoints[-1])
    options = DiagnoseOptions(draft=first.path, endpoint=args.endpoint, target=args.target)
    if args.steps:
        options = replace(options, steps=args.steps)
    run_id = submit_diagnosis(store, None, options)
    print(f"run #{run_id}: diagnosing {first.path} to capture what the server feeds its draft")
    for job in jobs.list_jobs(store, run_id):
        jobs.wait_for_job(store, job["id"], timeout=args.timeout)
    _check_kept_capture(store, run_id)
    return run_id


def _check_kept_capture(store: Store, run_id: int) -> None:
    """Raise one line saying why, when a run kept no serving capture (the capture's error, or
    the run's)."""
    from eagle3dash import store as db
    from eagle3dash.diagnosis.stored_run import read_run

    capture = db.capture_dir(store.home, run_id)  # made when the run was queued
    if any(capture.iterdir()):
        return
    run = read_run(store, run_id)
    diagnosis = None if run is None else run.diagnosis()
    why = (diagnosis.serving.capture_error if diagnosis is not None else None) or (
        None if run is None else run.error
    )
    status = None if run is None else run.status
    raise InputError(
        f"run #{run_id} ({status}) saved no serving capture: "
        f"{one_line(why or 'the server fed no states')}"
    )


def cmd_app(args: argparse.Namespace) -> int:
    """Serve the dashboard with its worker and, on the first start, the demo's runs."""
    from eagle3dash.dashboard.launch import AppSettings, run_app

    settings = AppSettings(
        bind=args.bind,
        port=args.port,
        jobs=args.jobs,
        slots=args.slots,
        demo=not args.no_demo,
        home=args.home,
        data_roots=tuple(args.data_root or ()),
    )
    return run_app(settings)


def cmd_demo(args: argparse.Namespace) -> int:
    """The built-in demo: rebuild its fixtures, or seed the dashboard with its runs."""
    if args.action == "build":
        from eagle3dash.demo.build import main as build_main

        return build_main(args.rest)
    from eagle3dash.demo.seed import main as seed_main

    return seed_main(args.rest)


def _add_diagnose_options(parser: argparse.ArgumentParser) -> None:
    """One flag per option of the diagnosis schema; values stay text until parse reads them."""
    groups = {}
    for pair in EXCLUSIVE:
        group = parser.add_mutually_exclusive_group()
        groups.update(dict.fromkeys(pair, group))
    for name, option in SCHEMA.items():
        where = groups.get(name, parser)
        if option.kind is Kind.SWITCH:
            where.add_argument(
                option.flag, dest=name, action="store_const", const=False, help=option.help
            )
            continue
        where.add_argument(option.flag, required=option.required, help=option.describe())


def _add_schema_flags(
    parser: argparse.ArgumentParser, *names: str, required: tuple[str, ...] = ()
) -> None:
    """Flags for these options of the diagnosis schema (its help, choices and default); `main`
    reads their values through the schema, as `diagnose` does."""
    for name in names:
        option = SCHEMA[name]
        parser.add_argument(
            option.flag,
            dest=name,
            required=option.required or name in required,
            help=option.describe(),
        )
    parser.set_defaults(schema_flags=(parser.get_default("schema_flags") or ()) + names)


def _add_jobs_flags(parser: argparse.ArgumentParser, local_slots: int = 2) -> None:
    """--slots and --jobs: how many jobs at once, and where they run."""
    parser.add_argument(
        "--slots",
        type=int,
        default=None,
        help=f"jobs run at the same time (default {local_slots}; with Ray, the cluster's CPUs); "
        "two jobs never measure one server at once",
    )
    parser.add_argument(
        "--jobs",
        choices=("local", "ray"),
        default=os.environ.get("EAGLE3DASH_JOBS") or "local",
        help="where jobs run: child processes here, or Ray tasks on the cluster RAY_ADDRESS "
        "names (default $EAGLE3DASH_JOBS or local)",
    )


def cmd_double(args: argparse.Namespace) -> int:
    """Serve the SGLang API double (tests and the demo) until stopped."""
    from eagle3dash.testing.sglang_double import main as double_main

    return double_main(args.rest, prog="python -m eagle3dash double")


def build_parser() -> argparse.ArgumentParser:
    """The argparse tree of every command."""
    parser = argparse.ArgumentParser(
        prog="eagle3dash",
        description="Why is an EAGLE-3 draft that looked good in training slow in serving?",
    )
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("inspect", help="report a draft checkpoint (config + headers only)")
    p.add_argument("path", help="checkpoint directory, its config.json, or a .safetensors file")
    p.add_argument(
        "--draft-config",
        help="the draft's config.json, to read a SpecForge step folder's training_state.pt",
    )
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(func=cmd_inspect)

    p = sub.add_parser("layout", help="training vs serving layer layout of a draft")
    _add_schema_flags(p, "draft", "draft_config", "target_layers", required=("target_layers",))
    _add_schema_flags(p, "trainer", "training_sglang_version", "training_layout")
    p.add_argument(
        "--sglang-version", default=DEFAULT_SGLANG_VERSION, help="serving SGLang version"
    )
    _add_schema_flags(p, "arch")
    p.add_argument("--no-cuda-graph", action="store_true", help="server runs without CUDA graphs")
    p.add_argument(
        "--engine", choices=ENGINES, default="sglang", help="the serving engine (default sglang)"
    )
    p.add_argument(
        "--vllm-version", default=DEFAULT_VLLM_VERSION, help="serving vLLM version (--engine vllm)"
    )
    p.add_argument(
        "--vllm-runner",
        choices=RUNNERS,
        default=DEFAULT_RUNNER,
        help=f"vLLM's model runner (default {DEFAULT_RUNNER}; v1 under {RUNNER_ENV}=0)",
    )
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(func=cmd_layout)

    p = sub.add_parser(
        "matrix", help="where a draft can be served: SGLang and vLLM releases x the taps fed"
    )
    _add_schema_flags(
        p, "draft", "draft_config", "target_layers", "arch", required=("target_layers",)
    )
    _add_schema_flags(p, "trainer", "training_layout")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(func=cmd_matrix)

    p = sub.add_parser("eval", help="standalone draft accuracy over a capture")
    _add_schema_flags(p, "draft")
    p.add_argument("--capture", required=True, help="capture dir, SpecForge or speculators dump")
    p.add_argument(
        "--layout",
        required=True,
        help="taps fed to the fc slots, e.g. 0,3,31 (for a training dump, which records no ids: "
        "the taps it was made with)",
    )
    _add_schema_flags(p, "steps", "target_layers")
    p.add_argument(
        "--target",
        help="a local copy of the target: only its embedding is read, for drafts without "
        "embed_tokens (serving gives them the target's)",
    )
    _add_schema_flags(p, "device", "dtype")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(func=cmd_eval)

    p = sub.add_parser(
        "probe",
        help="report an SGLang or vLLM endpoint, its draft (when readable here) and the findings",
    )
    p.add_argument("url", help="the endpoint, e.g. http://127.0.0.1:30000")
    p.add_argument(
        "--draft",
        help="a checkpoint to diagnose against it: also says whether the server serves it and "
        "whether its algorithm fits (New run's warnings before submit)",
    )
    p.add_argument("--timeout", type=float, default=30.0, help="seconds per request")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(func=cmd_probe)

    p = sub.add_parser("diagnose", help="the whole diagnosis of a draft against an endpoint")
    _add_diagnose_options(p)
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument(
        "--profile-out",
        metavar="PATH",
        help="write the acceptance profile as JSON to PATH and as CSV beside it (PATH.csv)",
    )
    p.set_defaults(func=cmd_diagnose)

    p = sub.add_parser("detect", help="which taps a draft performs best with (layout sweep)")
    _add_schema_flags(p, "draft")
    p.add_argument("--capture", help="a capture holding every tap (eagle3dash format)")
    p.add_argument("--target", help="local Hugging Face target: capture every tap once")
    p.add_argument("--prompts", help="JSONL of input_ids for --target (default: demo prompts)")
    p.add_argument(
        "--layout", action="append", help="an extra candidate layout, e.g. 0,3,31 (repeatable)"
    )
    p.add_argument(
        "--side",
        action="append",
        help="NAME=PATH[@LAYOUT]: a training dump or serving capture to match slot by slot",
    )
    _add_schema_flags(p, "target_layers")
    p.add_argument(
        "--sglang-version", default=DEFAULT_SGLANG_VERSION, help="serving SGLang version"
    )
    _add_schema_flags(p, "arch", "steps", "device")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(func=cmd_detect)

    p = sub.add_parser("worker", help="run the app's queued jobs (diagnoses) until stopped")
    p.add_argument("--home", help="data folder (default $EAGLE3DASH_HOME or ./.eagle3dash)")
    p.add_argument("--once", action="store_true", help="stop when the queue is empty")
    _add_jobs_flags(p, local_slots=1)
    p.set_defaults(func=cmd_worker)

    p = sub.add_parser(
        "app",
        help="serve the dashboard with its worker (and the demo's runs on the first start)",
    )
    p.add_argument(
        "--bind",
        default="127.0.0.1",
        help="the address to listen on (default 127.0.0.1: reach it through an SSH tunnel; a "
        "network address asks every browser for EAGLE3DASH_TOKEN)",
    )
    p.add_argument("--port", type=int, help="the port (default 8501)")
    _add_jobs_flags(p)
    p.add_argument("--home", help="data folder (default $EAGLE3DASH_HOME or ./.eagle3dash)")
    p.add_argument(
        "--data-root",
        action="append",
        metavar="FOLDER",
        help="a folder whose paths the app's path boxes accept, besides the home and "
        "$EAGLE3DASH_DATA_ROOTS (repeatable)",
    )
    p.add_argument("--no-demo", action="store_true", help="do not seed the demo's runs")
    p.set_defaults(func=cmd_app)

    p = sub.add_parser(
        "sweep",
        help="rank a training run's checkpoints by simulated accept length under serving",
    )
    p.add_argument(
        "checkpoints",
        nargs="+",
        help="a SpecForge, speculators or NeMo AutoModel run folder, or checkpoints",
    )
    where = p.add_mutually_exclusive_group()
    where.add_argument("--capture", help="a saved serving capture folder")
    where.add_argument("--run", type=int, help="use this run's serving capture (in the home)")
    p.add_argument(
        "--endpoint",
        help="the serving endpoint: without --capture or --run, a diagnosis of the trainer's best "
        "checkpoint captures it once (a worker must be running)",
    )
    p.add_argument(
        "--target",
        help="a local copy of the target (its embedding, for drafts without their own; default: "
        "the --run's target, else the endpoint's model path when it is a folder here)",
    )
    p.add_argument(
        "--steps",
        type=int,
        help="draft tokens per chain (default: the --run's own, which its simulated serving "
        "used; else 5)",
    )
    p.add_argument("--home", help="data folder (default $EAGLE3DASH_HOME or ./.eagle3dash)")
    p.add_argument(
        "--wait",
        action="store_true",
        help="wait for the worker, print the ranking (exit 1 when a checkpoint failed)",
    )
    p.add_argument("--timeout", type=float, default=3600.0, help="seconds to wait per checkpoint")
    p.set_defaults(func=cmd_sweep)

    p = sub.add_parser(
        "demo",
        help="the built-in demo: `demo seed` makes its runs, `demo build --out DIR` its fixtures",
    )
    p.add_argument("action", choices=["seed", "build"])
    p.add_argument("rest", nargs=argparse.REMAINDER, help="options of the action (see --help)")
    p.set_defaults(func=cmd_demo)

    # prefix_chars="+": every option after `double` (--help too) is the double's, not this parser's
    p = sub.add_parser(
        "double",
        help="the SGLang API double for tests and the demo (answers like SGLang "
        f"{DEFAULT_SGLANG_VERSION} on 127.0.0.1 with tiny models), not a serving engine; "
        "`double --help` for its options",
        add_help=False,
        prefix_chars="+",
    )
    p.add_argument("rest", nargs=argparse.REMAINDER, help="the double's options")
    p.set_defaults(func=cmd_double)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run one command; bad input becomes a one-line message and exit code 1."""
    args = build_parser().parse_args(argv)
    func: Callable[[argparse.Namespace], int] = args.func
    try:
        for name in getattr(args, "schema_flags", ()):  # layout, matrix, eval, detect
            setattr(args, name, SCHEMA[name].parse(getattr(args, name), "flag"))
        return func(args)
    except (InputError, ValueError) as e:
        print(_error_line(e), file=sys.stderr)
        return 1
    except BrokenPipeError:  # output piped into `head`: stop quietly
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except KeyboardInterrupt:
        return 130
    except OSError as e:  # a path the user gave: too long, unreadable, a full disk
        where = f"{e.filename}: " if e.filename is not None else ""
        print(_error_line(f"{where}{e.strerror or type(e).__name__}"), file=sys.stderr)
        return 1
    except Exception as e:  # a bug, not the user's input: still one line, no traceback
        if os.environ.get(DEBUG_ENV):
            raise
        print(
            _error_line(
                f"unexpected {type(e).__name__}: {e} (a bug in eagle3dash, not in your "
                f"input; {DEBUG_ENV}=1 shows the traceback)"
            ),
            file=sys.stderr,
        )
        return 1
