"""Table data for the pages: plain functions from store rows and diagnosis dicts to DataFrames.

A run's results are its one stored diagnosis, read through `diagnosis/stored.py`
(`StoredDiagnosis`, any schema): tables read its attributes and show what it says, never
recompute it. No Streamlit here, so every table can be tested
directly. Display tables hold formatted strings (a dash for "not measured");
`diagnosis_metrics` keeps numbers for charts and the CSV.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any

import pandas as pd

from eagle3dash.diagnosis.stored import (
    StoredCheckpoint,
    StoredDetection,
    StoredDiagnosis,
    StoredSide,
)
from eagle3dash.diagnosis.stored_run import StoredRun
from eagle3dash.engines.seam import ServerReport
from eagle3dash.jobs import JobRow
from eagle3dash.layout import Tap, bracketed, describe_tap, format_layout
from eagle3dash.ui.fmt import (
    DASH,
    delta,
    is_missing,
    num,
    page_url,
    pct,
    ratio,
    when,
)
from eagle3dash.ui.provenance import format_name, trainer_rows
from eagle3dash.ui.words import (
    engine_name,
    engine_words,
    run_verdict,
    server_rows,
    slot_word,
    source_words,
    taps_words,
)

METRIC_COLUMNS = ("source", "name", "step", "request", "value")
SIDES = ("training", "serving")

# The key columns first (they fit 1400 px without scrolling), the rest after (hidden).
RUNS_COLUMNS = (
    "open",
    "run",
    "status",
    "checkpoint",
    "verdict",
    "measured",
    "sim training",
    "sim serving",
    "speedup",
    "tok/s",
    "findings",
    "endpoint",
    "engine",
    "created",
    "ran on",
)


# --- runs --------------------------------------------------------------------------------------


def checkpoint_label(run: StoredRun) -> str:
    """A run's checkpoint name (or path), marked when it was removed since."""
    name = run.checkpoint_name or run.checkpoint_path
    if not name:
        return DASH if run.checkpoint_id is None else f"#{run.checkpoint_id}"
    return f"{name} (removed)" if run.checkpoint_removed else name


def engine_label(run: StoredRun) -> str:
    """The engine a run diagnosed: 'SGLang' or 'vLLM'; a finished run stored before engines were
    told apart was SGLang's; a dash while it has no diagnosis."""
    engine = run.engine
    if engine == "vllm":
        return "vLLM"
    if engine == "sglang" or run.status == "succeeded":
        return "SGLang"
    return DASH


def placement_label(placement: Mapping[str, Any] | None) -> str:
    """Where a job ran on a Ray cluster: 'gpubox-3 · node 1a2b3c4d · GPU 0' (a dash: here)."""
    if not placement:
        return DASH
    gpus = ", ".join(placement.get("gpu") or ())
    return f"{placement.get('host')} · node {str(placement.get('node'))[:8]}" + (
        f" · GPU {gpus}" if gpus else " · CPU"
    )


def run_label(run: StoredRun) -> str:
    """'#12 draft @ http://gpu:30000 (succeeded)' for pickers."""
    return f"#{run.id} {checkpoint_label(run)} @ {run.endpoint_url or DASH} ({run.status})"


def runs_frame(runs: Iterable[StoredRun], base_url: str = "") -> pd.DataFrame:
    """One row per run (stored_run.read_runs): its link (`run?run=<id>`), status, checkpoint,
    verdict, headline numbers (NaN when not measured), the rule ids of its findings, endpoint,
    time."""
    rows = []
    for r in runs:
        rows.append(
            {
                "open": page_url(base_url, "run", run=r.id),
                "run": r.id,
                "status": r.status or DASH,
                "checkpoint": checkpoint_label(r),
                "verdict": run_verdict(r),
                "measured": _float(r.measured_accept_length),
                "sim training": _float(r.sim_accept_training),
                "sim serving": _float(r.sim_accept_serving),
                "speedup": ratio(r.speedup, r.speedup_noise),
                "tok/s": _float(r.tok_s),
                "findings": r.finding_ids or DASH,
                "endpoint": r.endpoint_url or DASH,
                "engine": engine_label(r),
                "created": when(r.created_at),
                "ran on": placement_label(r.placement),
            }
        )
    return pd.DataFrame(rows, columns=list(RUNS_COLUMNS))


def _float(value: Any) -> float:
    return float("nan") if is_missing(value) else float(value)


# --- a diagnosis's numbers ----------------------------------------------------------------------


def diagnosis_metrics(diagnosis: StoredDiagnosis | None) -> pd.DataFrame:
    """A diagnosis's numbers in long rows (source, name, step, request, value), for the charts and
    the CSV: the endpoint's measured acceptance per draft position (the share of verify rounds
    that accepted at least k drafts, k = step) when the server reports it; each side's accuracy
    and acceptance per draft step (1 = the first drafted token) and its simulated accept length;
    the endpoint's and the baseline's accept length and output tok/s per request (0 = the first
    prompt) and over all requests (no request)."""
    rows: list[tuple[str, str, int | None, int | None, Any]] = []
    if diagnosis is None:
        return metrics_frame(rows)
    measured = diagnosis.measured
    shares = None if measured is None else measured.per_position
    if shares is not None:  # SGLang's histogram stops at the largest k seen: past it, no round
        shares = list(shares) + [0.0] * max(0, diagnosis.steps - len(shares))
        rows += [("measured", "acceptance", k + 1, None, v) for k, v in enumerate(shares)]
    for side in (diagnosis.training, diagnosis.serving):
        evaluated = side.eval
        if evaluated is not None:
            for name, values in (
                ("accuracy", evaluated.accuracy),
                ("acceptance", evaluated.acceptance),
            ):
                rows += [(side.name, name, i + 1, None, v) for i, v in enumerate(values)]
        rows.append((side.name, "accept_length", None, None, side.sim_accept_length))
    rows += trainer_rows(diagnosis.checkpoint)
    for source, bench in (("measured", diagnosis.measured), ("baseline", diagnosis.baseline)):
        if bench is None:
            continue
        rows += [
            (source, "accept_length", None, i, v)
            for i, v in enumerate(bench.accept_length_per_request)
        ]
        rows.append((source, "accept_length", None, None, bench.accept_length))
        rows += [
            (source, "tok_s", None, i, v) for i, v in enumerate(bench.output_tok_s_per_request)
        ]
        rows.append((source, "tok_s", None, None, bench.output_tok_s_aggregate))
    return metrics_frame(rows)


def metrics_frame(rows: Iterable[tuple[str, str, int | None, int | None, Any]]) -> pd.DataFrame:
    """Long metric rows (source, name, step, request, value) typed for the charts, the rows
    without a value left out."""
    df = pd.DataFrame(
        [r for r in rows if not is_missing(r[-1])], columns=list(METRIC_COLUMNS)
    ).astype({"source": "string", "name": "string", "value": "float64"})
    for col in ("step", "request"):
        df[col] = pd.to_numeric(df[col], errors="coerce").astype("Int64")
    return df


# --- training vs serving -----------------------------------------------------------------------


def sides_frame(diagnosis: StoredDiagnosis) -> pd.DataFrame:
    """Training vs serving: each side's taps in words and where they come from, what the config
    or the engine's rules predict where that differs, draft accuracy per step, simulated accept
    length; the endpoint's measurements (accept length, tok/s, baseline, speedup) in the serving
    column."""
    n = diagnosis.num_target_layers
    sides = (diagnosis.training, diagnosis.serving)
    server = diagnosis.server
    rows: list[tuple[str, ...]] = [  # (quantity, training, serving)
        ("taps fed to the fc slots", *(taps_words(s.layout, n) for s in sides)),
        ("where that layout comes from", *(source_words(s.source, server) for s in sides)),
        ("how it was found", *((s.detail or DASH) for s in sides)),
    ]
    if any(s.prediction and s.prediction != s.layout for s in sides):
        rows.append(
            (
                f"what the config / {engine_name(server)}'s rules predict",
                *(_prediction_text(s, n) for s in sides),
            )
        )
    predicted = (diagnosis.predicted_training, diagnosis.predicted_serving)
    rules = [DASH if p is None else (p.rule or DASH) for p in predicted]
    if any(r != DASH for r in rules):
        rows.append(("layout rule", *rules))
    accuracy = [[] if s.eval is None else s.eval.accuracy for s in sides]
    for step in range(max(map(len, accuracy))):
        rows.append(
            (
                f"draft accuracy, step {step + 1}",
                *(pct(a[step]) if step < len(a) else DASH for a in accuracy),
            )
        )
    rows.append(
        (
            f"simulated accept length ({diagnosis.steps or '?'} draft steps)",
            *(num(s.sim_accept_length) for s in sides),
        )
    )
    if any(s.capture_error for s in sides):
        rows.append(("why not evaluated", *((s.capture_error or DASH) for s in sides)))
    measured, baseline, speedup = diagnosis.measured, diagnosis.baseline, diagnosis.speedup
    na = "(standalone only)"
    rows += [
        (
            "measured accept length (endpoint)",
            na,
            num(None if measured is None else measured.accept_length),
        ),
        (
            "output tok/s (endpoint)",
            na,
            num(None if measured is None else measured.output_tok_s_aggregate, 1),
        ),
        (
            "baseline tok/s (no speculation)",
            na,
            num(None if baseline is None else baseline.output_tok_s_aggregate, 1),
        ),
        (
            "speedup vs baseline",
            na,
            ratio(*((None, None) if speedup is None else (speedup.speedup, speedup.speedup_noise))),
        ),
    ]
    return pd.DataFrame(rows, columns=["quantity", "training", "serving"])


def _prediction_text(side: StoredSide, num_layers: int | None) -> str:
    if not side.prediction:
        return DASH
    predicted = taps_words(side.prediction, num_layers)
    # spelled out: a bare "the same" reads as the same as the other side
    return f"the same as found: {predicted}" if side.prediction == side.layout else predicted


# --- layouts -----------------------------------------------------------------------------------


def _tap_cell(tap: Tap | None) -> str:
    return DASH if tap is None else format_layout((tap,))


def slots_frame(diagnosis: StoredDiagnosis) -> pd.DataFrame:
    """The layout diff's slots: the tap each side feeds (depth and words) and whether they match,
    as the diagnosis classified them; plus the tap CUDA-graph decode replays feed, where SGLang's
    rules say it differs."""
    n = diagnosis.num_target_layers
    serving_rule = diagnosis.predicted_serving
    decode = () if serving_rule is None else serving_rule.decode_layout or ()
    rows = []
    for s in diagnosis.layout_diff.slots:
        row = {
            "slot": s.slot,
            "match": slot_word(diagnosis, s.same),
            "training tap": _tap_cell(s.training),
            "training feeds": DASH if s.training is None else describe_tap(s.training, n),
            "serving tap": _tap_cell(s.serving),
            "serving feeds": DASH if s.serving is None else describe_tap(s.serving, n),
            "same": s.same,
        }
        if decode:
            row["decode tap (CUDA graph)"] = _tap_cell(
                decode[s.slot] if s.slot < len(decode) else None
            )
        rows.append(row)
    columns = ["slot", "match", "training tap", "training feeds", "serving tap", "serving feeds"]
    if decode:
        columns.append("decode tap (CUDA graph)")
    return pd.DataFrame(rows, columns=[*columns, "same"])


def layout_points(diagnosis: StoredDiagnosis) -> pd.DataFrame:
    """Long rows for the layout diagram: slot, side, depth, tap, words, whether the slot matches."""
    diff = diagnosis.layout_diff
    n = diagnosis.num_target_layers
    same = {s.slot: s.same for s in diff.slots}
    rows = [
        {
            "slot": slot,
            "side": side,
            "depth": tap.depth,
            "tap": _tap_cell(tap),
            "feeds": describe_tap(tap, n),
            "same": same.get(slot, False),
        }
        for side, layout in (("training", diff.training), ("serving", diff.serving))
        for slot, tap in enumerate(layout)
    ]
    return pd.DataFrame(rows, columns=["slot", "side", "depth", "tap", "feeds", "same"])


# --- reports -----------------------------------------------------------------------------------


def _pair(a: Any, b: Any) -> str:
    return f"{DASH if a is None else a} / {DASH if b is None else b}"


def checkpoint_summary(report: StoredCheckpoint | None) -> pd.DataFrame:
    """The inspect report's main fields as (field, value) text rows."""
    if report is None:
        return pd.DataFrame(columns=["field", "value"])
    r, count = report.spec, report.param_count
    ids = r.aux_layer_ids
    rows = [
        ("format", format_name(r.format)),
        ("path", report.path),
        ("weight files", ", ".join(report.files) or DASH),
        ("hidden (draft / target)", _pair(r.hidden_size, r.target_hidden_size)),
        ("layers", r.num_layers),
        ("heads / kv heads / head dim", f"{r.num_heads} / {r.num_kv_heads} / {r.head_dim}"),
        ("intermediate", r.intermediate_size),
        ("vocab (target / draft)", _pair(r.vocab_size, r.draft_vocab_size)),
        ("aux slots (fc input)", r.num_aux),
        ("aux layer ids", f"{list(ids) if ids is not None else 'none'} ({r.aux_ids_location})"),
        ("norm_before_residual", r.norm_before_residual),
        ("norm_before_fc / fc_norm", _pair(r.norm_before_fc, r.fc_norm)),
        ("d2t / t2d", _pair(r.has_d2t, r.has_t2d)),
        ("embed_tokens / lm_head", _pair(r.has_embed, r.has_lm_head)),
        ("dtype", r.dtype),
        ("parameters", f"{count:,}" if count is not None else DASH),
    ]
    return pd.DataFrame(
        [(k, DASH if v is None else str(v)) for k, v in rows], columns=["field", "value"]
    )


def server_summary(server: ServerReport | None) -> pd.DataFrame:
    """A probe's ServerReport as (setting, value) text rows, speculative settings included: the
    same rows as the CLI's probe (`words.server_rows`), each engine's own."""
    if server is None:
        return pd.DataFrame(columns=["setting", "value"])
    rows: list[tuple[str, Any]] = [
        ("url", server.url),
        ("engine", engine_words(server)),
        ("model", server.model_path),
        ("served model name", server.served_model_name),
        ("architectures", ", ".join(server.architectures or []) or None),
        *server_rows(server),
    ]
    return pd.DataFrame(
        [(k, DASH if v is None else str(v)) for k, v in rows], columns=["setting", "value"]
    )


# --- compare -----------------------------------------------------------------------------------

# (label, summary column, decimals); the speedup reads as a ratio ('0.73x').
_HEADLINES = (
    ("measured accept length", "measured_accept_length", 2),
    ("simulated accept length (training)", "sim_accept_training", 2),
    ("simulated accept length (serving)", "sim_accept_serving", 2),
    ("output tok/s", "tok_s", 1),
    ("baseline tok/s", "baseline_tok_s", 1),
    ("speedup", "speedup", 2),
)


def _headline(run: StoredRun, key: str, digits: int) -> str:
    value = getattr(run, key)
    return ratio(value, run.speedup_noise) if key == "speedup" else num(value, digits)


def _engine_of(diagnosis: StoredDiagnosis | None) -> str:
    return engine_words(diagnosis.server) if diagnosis else DASH


def compare_frame(a: StoredRun, b: StoredRun) -> pd.DataFrame:
    """Two runs side by side: each side's taps in words with where they come from (from each
    run's diagnosis), the headline numbers (the run's summary columns) with the change (B - A)."""
    da, db_ = a.diagnosis(), b.diagnosis()
    rows = [
        ("status", a.status, b.status, ""),
        ("checkpoint", checkpoint_label(a), checkpoint_label(b), ""),
        ("endpoint", a.endpoint_url or DASH, b.endpoint_url or DASH, ""),
        ("engine", _engine_of(da), _engine_of(db_), ""),
        ("created", when(a.created_at), when(b.created_at), ""),
    ]
    for side in SIDES:
        rows.append((f"{side} taps", _taps_of(da, side), _taps_of(db_, side), ""))
        rows.append(
            (
                f"{side} layout from",
                _source_of(da, side),
                _source_of(db_, side),
                "",
            )
        )
    for label, key, digits in _HEADLINES:
        rows.append(
            (
                label,
                _headline(a, key, digits),
                _headline(b, key, digits),
                delta(getattr(a, key), getattr(b, key), digits),
            )
        )
    rows.append(
        ("worst finding", _worst(a), _worst(b), ""),
    )
    return pd.DataFrame(rows, columns=["quantity", "run A", "run B", "change (B - A)"])


def _taps_of(diagnosis: StoredDiagnosis | None, side: str) -> str:
    if diagnosis is None:
        return DASH
    return taps_words(diagnosis.side(side).layout, diagnosis.num_target_layers)


def _source_of(diagnosis: StoredDiagnosis | None, side: str) -> str:
    source = None if diagnosis is None else diagnosis.side(side).source
    return source_words(source, diagnosis.server) if diagnosis is not None and source else DASH


def _worst(run: StoredRun) -> str:
    if not run.worst_severity:
        return DASH
    if run.worst_severity == "info":  # an info note is never a run's headline
        return "none at warning or worse"
    return f"{run.worst_severity}: {run.worst_finding_title or ''}"


# --- export ------------------------------------------------------------------------------------


def run_export(run: StoredRun, diagnosis: StoredDiagnosis | None) -> str:
    """The JSON download of a run: its row (summary columns, as stored) and its diagnosis in the
    current schema (an older stored one upgraded)."""
    row = {k: v for k, v in run.row.items() if not k.endswith("_json") and k != "diagnosis"}
    document = None if diagnosis is None else diagnosis.document
    return json.dumps({"run": row, "diagnosis": document}, indent=2, default=str, allow_nan=True)


def diagnosis_csv(diagnosis: StoredDiagnosis | None) -> str:
    """The CSV download of a diagnosis's numbers: per draft step and per request (long rows)."""
    return diagnosis_metrics(diagnosis).to_csv(index=False)


# --- layout detective --------------------------------------------------------------------------

DETECT_KIND = "detect"


def detections(
    diagnosis: StoredDiagnosis | None, jobs: Iterable[JobRow]
) -> list[tuple[str, StoredDetection]]:
    """The run's detective cases, each with where it comes from: the diagnosis's (made with the
    target at hand), then the latest succeeded detect job's."""
    found = []
    if diagnosis is not None and diagnosis.detective is not None:
        found.append(("from this diagnosis", diagnosis.detective))
    for job in reversed(list(jobs)):
        if job.kind == DETECT_KIND and job.status == "succeeded" and job.result:
            found.append((f"from detect job {job.id}", StoredDetection.from_dict(job.result)))
            break
    return found


def sweep_frame(detection: StoredDetection) -> pd.DataFrame:
    """The ranked candidate layouts: rank, layout, top-1, simulated accept length, gap, origin."""
    rows = [
        {
            "rank": i + 1,
            "layout": bracketed(r.layout),
            "top-1": pct(r.top1),
            "sim accept length": num(r.sim_accept_length),
            "behind the best": num(r.gap_sim_accept_length),
            "candidate": r.name,
        }
        for i, r in enumerate(detection.rows)
    ]
    return pd.DataFrame(
        rows,
        columns=["rank", "layout", "top-1", "sim accept length", "behind the best", "candidate"],
    )


def slot_heatmap_frame(detection: StoredDetection) -> pd.DataFrame:
    """Long rows (side slot, tap in words, score, cosine, RMS ratio) for the slot-matching
    heatmap, the taps in depth order ('embedding output' ... 'after the final norm')."""
    n = detection.num_target_layers
    rows = [
        {
            "slot": f"{c.side} slot {c.slot}",
            "tap": describe_tap(c.tap, n),
            "score": c.score,
            "cosine": c.cosine,
            "rms_ratio": c.rms_ratio,
        }
        for c in sorted(detection.heatmap, key=lambda cell: cell.tap)
    ]
    return pd.DataFrame(rows, columns=["slot", "tap", "score", "cosine", "rms_ratio"])


def fingerprint_frame(detection: StoredDetection) -> pd.DataFrame:
    """Per fc slot: Frobenius norm, mean column norm, top singular values, hint."""
    rows = [
        {
            "slot": r.get("slot"),
            "Frobenius": num(r.get("frobenius")),
            "mean column norm": num(r.get("mean_col_norm"), 3),
            "top singular values": ", ".join(num(v) for v in r.get("top_singular_values") or []),
            "hint": r.get("hint") or DASH,
        }
        for r in detection.fingerprint
    ]
    return pd.DataFrame(
        rows, columns=["slot", "Frobenius", "mean column norm", "top singular values", "hint"]
    )
