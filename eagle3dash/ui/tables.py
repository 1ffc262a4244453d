"""Table data for the pages: plain functions from store rows and diagnosis dicts to DataFrames.

No Streamlit here, so every table can be tested directly. Display tables hold formatted strings
(a dash for "not measured"); `metrics_frame` keeps numbers for charts and CSV.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Iterable, Mapping
from typing import Any

import pandas as pd

from eagle3dash.ui.fmt import DASH, delta, is_missing, num, page_url, pct, ratio, when

METRIC_COLUMNS = ("run_id", "source", "name", "step", "request", "value")
SIDES = ("training", "serving")

RUNS_COLUMNS = (
    "open",
    "run",
    "created",
    "status",
    "checkpoint",
    "endpoint",
    "accept measured",
    "accept sim (training)",
    "accept sim (serving)",
    "tok/s",
    "speedup",
    "worst",
    "worst finding",
)


# --- runs --------------------------------------------------------------------------------------


def checkpoint_label(run: Mapping[str, Any]) -> str:
    """A run's checkpoint name (or path), marked when it was removed since."""
    name = run.get("checkpoint_name") or run.get("checkpoint_path")
    if not name:
        return DASH if run.get("checkpoint_id") is None else f"#{run['checkpoint_id']}"
    return f"{name} (removed)" if run.get("checkpoint_removed") else str(name)


def run_label(run: Mapping[str, Any]) -> str:
    """'#12 draft @ http://gpu:30000 (succeeded)' for pickers."""
    return (
        f"#{run['id']} {checkpoint_label(run)} @ {run.get('endpoint_url') or DASH} "
        f"({run.get('status')})"
    )


def runs_frame(runs: Iterable[Mapping[str, Any]], base_url: str = "") -> pd.DataFrame:
    """One row per run with its link (`run?run=<id>`), status, names and headline numbers."""
    rows = []
    for r in runs:
        rows.append(
            {
                "open": page_url(base_url, "run", run=r["id"]),
                "run": int(r["id"]),
                "created": when(r.get("created_at")),
                "status": r.get("status"),
                "checkpoint": checkpoint_label(r),
                "endpoint": r.get("endpoint_url") or DASH,
                "accept measured": _float(r.get("measured_accept_length")),
                "accept sim (training)": _float(r.get("sim_accept_training")),
                "accept sim (serving)": _float(r.get("sim_accept_serving")),
                "tok/s": _float(r.get("tok_s")),
                "speedup": _float(r.get("speedup")),
                "worst": r.get("worst_severity") or "",
                "worst finding": r.get("worst_finding_title") or "",
            }
        )
    return pd.DataFrame(rows, columns=list(RUNS_COLUMNS))


def _float(value: Any) -> float:
    return float("nan") if is_missing(value) else float(value)


# --- metrics -----------------------------------------------------------------------------------


def metrics_frame(rows: Iterable[Mapping[str, Any]]) -> pd.DataFrame:
    """Long-format metrics (store.get_metrics) with numeric step/request/value columns."""
    df = pd.DataFrame(list(rows), columns=list(METRIC_COLUMNS))
    for col in ("step", "request"):
        df[col] = pd.to_numeric(df[col], errors="coerce").astype("Int64")
    df["value"] = pd.to_numeric(df["value"], errors="coerce").astype("float64")
    df["source"] = df["source"].astype("string")
    df["name"] = df["name"].astype("string")
    return df


def _series(df: pd.DataFrame, source: str, name: str, by: str) -> dict[int, float]:
    sel = df[(df["source"] == source) & (df["name"] == name) & df[by].notna()]
    return {int(k): float(v) for k, v in zip(sel[by], sel["value"], strict=True)}


def _scalar(df: pd.DataFrame, source: str, name: str) -> float | None:
    sel = df[
        (df["source"] == source) & (df["name"] == name) & df["step"].isna() & df["request"].isna()
    ]
    if sel.empty or pd.isna(sel["value"].iloc[-1]):
        return None
    return float(sel["value"].iloc[-1])


# --- training vs serving -----------------------------------------------------------------------


def taps_text(rows: Iterable[Mapping[str, Any]] | None) -> str:
    """Stored layout rows as '0, 1, 2' (post-norm taps get an 'n')."""
    if not rows:
        return DASH
    return ", ".join(
        DASH if r.get("depth") is None else f"{r['depth']}{'n' if r.get('post_norm') else ''}"
        for r in rows
    )


def side_by_side_frame(
    metrics: pd.DataFrame,
    run: Mapping[str, Any],
    layouts: Mapping[str, list[dict]] | None = None,
    diagnosis: Mapping[str, Any] | None = None,
) -> pd.DataFrame:
    """Training vs serving: taps, accuracy per step, simulated and measured accept length, tok/s.

    The standalone numbers come from the metrics of each side; the endpoint's measurements
    (measured accept length, tok/s, baseline, speedup) go in the serving column.
    """
    layouts = layouts or {}
    diagnosis = diagnosis or {}
    acc = {side: _series(metrics, side, "accuracy", "step") for side in SIDES}
    steps = sorted(set(acc["training"]) | set(acc["serving"]))
    rows: list[tuple[str, str, str]] = [
        (
            "taps fed to the fc slots",
            taps_text(layouts.get("training")),
            taps_text(layouts.get("serving")),
        ),
    ]
    rules = [((diagnosis.get(side) or {}).get("rule") or DASH) for side in SIDES]
    if any(r != DASH for r in rules):
        rows.append(("layout rule", rules[0], rules[1]))
    for step in steps:
        rows.append(
            (
                f"draft accuracy, step {step + 1}",
                pct(acc["training"].get(step)),
                pct(acc["serving"].get(step)),
            )
        )
    sim = {
        "training": _scalar(metrics, "training", "accept_length"),
        "serving": _scalar(metrics, "serving", "accept_length"),
    }
    if sim["training"] is None:
        sim["training"] = run.get("sim_accept_training")
    if sim["serving"] is None:
        sim["serving"] = run.get("sim_accept_serving")
    rows.append(("simulated accept length", num(sim["training"]), num(sim["serving"])))
    measured = _scalar(metrics, "measured", "accept_length")
    if measured is None:
        measured = run.get("measured_accept_length")
    tok_s = _scalar(metrics, "measured", "tok_s")
    if tok_s is None:
        tok_s = run.get("tok_s")
    baseline = _scalar(metrics, "baseline", "tok_s")
    if baseline is None:
        baseline = run.get("baseline_tok_s")
    na = "(standalone only)"
    rows.append(("measured accept length (endpoint)", na, num(measured)))
    rows.append(("output tok/s (endpoint)", na, num(tok_s, 1)))
    rows.append(("baseline tok/s (no speculation)", na, num(baseline, 1)))
    rows.append(("speedup vs baseline", na, ratio(run.get("speedup"))))
    return pd.DataFrame(rows, columns=["quantity", "training", "serving"])


# --- layouts -----------------------------------------------------------------------------------


def _tap_text(row: Mapping[str, Any] | None) -> str:
    if row is None or row.get("depth") is None:
        return DASH
    return f"{row['depth']}{'n' if row.get('post_norm') else ''}"


def layout_diff_frame(layouts: Mapping[str, list[dict]]) -> pd.DataFrame:
    """Slot by slot: the tap each side feeds (depth and words) and whether they match.

    A `decode` layout (what CUDA-graph replays feed, when it differs) adds two columns.
    """
    training = layouts.get("training") or []
    serving = layouts.get("serving") or []
    decode = layouts.get("decode") or []
    rows = []
    for slot, (t, s) in enumerate(itertools.zip_longest(training, serving)):
        same = (
            t is not None
            and s is not None
            and t.get("depth") == s.get("depth")
            and bool(t.get("post_norm")) == bool(s.get("post_norm"))
        )
        row = {
            "slot": slot,
            "training tap": _tap_text(t),
            "training feeds": (t or {}).get("description") or DASH,
            "serving tap": _tap_text(s),
            "serving feeds": (s or {}).get("description") or DASH,
            "match": "same" if same else "DIFFERS",
            "same": same,
        }
        if decode:
            d = decode[slot] if slot < len(decode) else None
            row["decode tap (CUDA graph)"] = _tap_text(d)
        rows.append(row)
    columns = ["slot", "training tap", "training feeds", "serving tap", "serving feeds", "match"]
    if decode:
        columns.append("decode tap (CUDA graph)")
    return pd.DataFrame(rows, columns=[*columns, "same"])


def layout_points(layouts: Mapping[str, list[dict]]) -> pd.DataFrame:
    """Long format for the layout diagram: slot, side, depth, description, whether slot matches."""
    diff = layout_diff_frame(layouts)
    same = dict(zip(diff["slot"], diff["same"], strict=True)) if not diff.empty else {}
    rows = []
    for side in ("training", "serving"):
        for slot, r in enumerate(layouts.get(side) or []):
            if r.get("depth") is None:
                continue
            rows.append(
                {
                    "slot": slot,
                    "side": side,
                    "depth": int(r["depth"]),
                    "tap": _tap_text(r),
                    "feeds": r.get("description") or _tap_text(r),
                    "same": bool(same.get(slot, False)),
                }
            )
    return pd.DataFrame(rows, columns=["slot", "side", "depth", "tap", "feeds", "same"])


# --- reports -----------------------------------------------------------------------------------


def _pair(a: Any, b: Any) -> str:
    return f"{DASH if a is None else a} / {DASH if b is None else b}"


def checkpoint_summary(report: Mapping[str, Any] | None) -> pd.DataFrame:
    """The inspect report's main fields as (field, value) text rows."""
    if not report:
        return pd.DataFrame(columns=["field", "value"])
    r = report
    ids = r.get("aux_layer_ids")
    rows = [
        ("format", r.get("format")),
        ("path", r.get("path")),
        ("weight files", ", ".join(r.get("files") or []) or DASH),
        ("hidden (draft / target)", _pair(r.get("hidden_size"), r.get("target_hidden_size"))),
        ("layers", r.get("num_layers")),
        (
            "heads / kv heads / head dim",
            f"{r.get('num_heads')} / {r.get('num_kv_heads')} / {r.get('head_dim')}",
        ),
        ("intermediate", r.get("intermediate_size")),
        ("vocab (target / draft)", _pair(r.get("vocab_size"), r.get("draft_vocab_size"))),
        ("aux slots (fc input)", r.get("num_aux")),
        (
            "aux layer ids",
            f"{list(ids) if ids is not None else 'none'} ({r.get('aux_ids_location')})",
        ),
        ("norm_before_residual", r.get("norm_before_residual")),
        ("norm_before_fc / fc_norm", _pair(r.get("norm_before_fc"), r.get("fc_norm"))),
        ("d2t / t2d", _pair(r.get("has_d2t"), r.get("has_t2d"))),
        ("embed_tokens / lm_head", _pair(r.get("has_embed"), r.get("has_lm_head"))),
        ("dtype", r.get("dtype")),
        ("parameters", f"{int(r['param_count']):,}" if r.get("param_count") is not None else DASH),
    ]
    return pd.DataFrame(
        [(k, DASH if v is None else str(v)) for k, v in rows], columns=["field", "value"]
    )


def server_summary(server: Mapping[str, Any] | None) -> pd.DataFrame:
    """A probe's ServerReport dict as (setting, value) text rows, speculative settings included."""
    if not server:
        return pd.DataFrame(columns=["setting", "value"])
    s = server
    spec = s.get("speculative") or {}
    rows: list[tuple[str, Any]] = [
        ("url", s.get("url")),
        ("SGLang version", s.get("version")),
        ("model", s.get("model_path")),
        ("served model name", s.get("served_model_name")),
        ("architectures", ", ".join(s.get("architectures") or []) or None),
        ("tp size", s.get("tp_size")),
        ("dtype", s.get("dtype")),
        ("quantization", s.get("quantization")),
        ("attention backend", s.get("attention_backend")),
        ("device", s.get("device")),
        ("speculative algorithm", spec.get("algorithm") if spec else "none"),
    ]
    if spec:
        rows += [
            ("draft model path", spec.get("draft_model_path")),
            ("draft steps (num_steps)", spec.get("num_steps")),
            ("eagle_topk", spec.get("eagle_topk")),
            ("num_draft_tokens", spec.get("num_draft_tokens")),
            ("draft quantization", spec.get("draft_quantization")),
        ]
    rows += [
        ("--enable-return-hidden-states", s.get("enable_return_hidden_states")),
        ("aux hidden state layer ids", s.get("return_aux_hidden_state_layer_ids")),
        ("CUDA graph disabled", s.get("disable_cuda_graph")),
        ("radix cache disabled", s.get("disable_radix_cache")),
        ("server's avg accept length (since start)", s.get("avg_spec_accept_length")),
        ("healthy", s.get("healthy")),
    ]
    return pd.DataFrame(
        [(k, DASH if v is None else str(v)) for k, v in rows], columns=["setting", "value"]
    )


# --- compare -----------------------------------------------------------------------------------

_HEADLINES = (
    ("measured accept length", "measured_accept_length", 2),
    ("simulated accept length (training)", "sim_accept_training", 2),
    ("simulated accept length (serving)", "sim_accept_serving", 2),
    ("output tok/s", "tok_s", 1),
    ("baseline tok/s", "baseline_tok_s", 1),
    ("speedup", "speedup", 2),
)


def compare_frame(
    a: Mapping[str, Any],
    b: Mapping[str, Any],
    layouts_a: Mapping[str, list[dict]] | None = None,
    layouts_b: Mapping[str, list[dict]] | None = None,
) -> pd.DataFrame:
    """Two runs' headline numbers side by side with the change (B - A)."""
    la, lb = layouts_a or {}, layouts_b or {}
    rows = [
        ("status", str(a.get("status")), str(b.get("status")), ""),
        ("checkpoint", checkpoint_label(a), checkpoint_label(b), ""),
        ("endpoint", a.get("endpoint_url") or DASH, b.get("endpoint_url") or DASH, ""),
        ("created", when(a.get("created_at")), when(b.get("created_at")), ""),
        ("training taps", taps_text(la.get("training")), taps_text(lb.get("training")), ""),
        ("serving taps", taps_text(la.get("serving")), taps_text(lb.get("serving")), ""),
    ]
    for label, key, digits in _HEADLINES:
        rows.append(
            (
                label,
                num(a.get(key), digits),
                num(b.get(key), digits),
                delta(a.get(key), b.get(key), digits),
            )
        )
    rows.append(
        ("worst finding", _worst(a), _worst(b), ""),
    )
    return pd.DataFrame(rows, columns=["quantity", "run A", "run B", "change (B - A)"])


def _worst(run: Mapping[str, Any]) -> str:
    if not run.get("worst_severity"):
        return DASH
    return f"{run['worst_severity']}: {run.get('worst_finding_title') or ''}"


# --- export ------------------------------------------------------------------------------------


def run_export(
    run: Mapping[str, Any],
    findings: list[dict],
    layouts: Mapping[str, list[dict]],
    bench: Mapping[str, Any],
    diagnosis: Mapping[str, Any] | None,
) -> str:
    """The JSON download of a run: its row, the stored results and the full diagnosis."""
    row = {k: v for k, v in run.items() if not k.endswith("_json")}
    payload = {
        "run": row,
        "findings": findings,
        "layouts": layouts,
        "bench": bench,
        "diagnosis": diagnosis,
    }
    return json.dumps(payload, indent=2, default=str, allow_nan=True)


def metrics_csv(metrics: pd.DataFrame) -> str:
    """The CSV download of a run's metrics (long format)."""
    return metrics.to_csv(index=False)


# --- layout detective --------------------------------------------------------------------------

DETECT_KIND = "detect"


def detection_from_jobs(jobs: Iterable[Mapping[str, Any]]) -> dict | None:
    """The run's latest detective case (`Detection.to_dict()`): a detect job's result, or the
    one a diagnose job made with the target at hand; None without either."""
    for job in reversed(list(jobs)):
        result = job.get("result")
        if job.get("status") != "succeeded" or not result:
            continue
        if job.get("kind") == DETECT_KIND:
            return dict(result)
        if result.get("detective"):
            return dict(result["detective"])
    return None


def sweep_frame(detection: Mapping[str, Any]) -> pd.DataFrame:
    """The ranked candidate layouts: rank, layout, top-1, simulated accept length, gap, origin."""
    rows = [
        {
            "rank": i + 1,
            "layout": "[" + str(r.get("layout", "")) + "]",
            "top-1": pct(r.get("top1")),
            "sim accept length": num(r.get("sim_accept_length")),
            "behind the best": num(r.get("gap_sim_accept_length")),
            "candidate": r.get("name", ""),
        }
        for i, r in enumerate(detection.get("rows") or [])
    ]
    return pd.DataFrame(
        rows,
        columns=["rank", "layout", "top-1", "sim accept length", "behind the best", "candidate"],
    )


def slot_heatmap_frame(detection: Mapping[str, Any]) -> pd.DataFrame:
    """Long rows (side slot, tap, score, cosine, RMS ratio) for the slot-matching heatmap."""
    match = detection.get("slot_match") or {}
    rows = [
        {
            "slot": f"{r['side']} slot {r['slot']}",
            "tap": str(r["tap"]),
            "score": float(r["score"]),
            "cosine": float(r["cosine"]),
            "rms_ratio": float(r["rms_ratio"]),
        }
        for r in match.get("heatmap") or []
    ]
    return pd.DataFrame(rows, columns=["slot", "tap", "score", "cosine", "rms_ratio"])


def fingerprint_frame(detection: Mapping[str, Any]) -> pd.DataFrame:
    """Per fc slot: Frobenius norm, mean column norm, top singular values, hint."""
    rows = [
        {
            "slot": r.get("slot"),
            "Frobenius": num(r.get("frobenius")),
            "mean column norm": num(r.get("mean_col_norm"), 3),
            "top singular values": ", ".join(num(v) for v in r.get("top_singular_values") or []),
            "hint": r.get("hint") or DASH,
        }
        for r in detection.get("fingerprint") or []
    ]
    return pd.DataFrame(
        rows, columns=["slot", "Frobenius", "mean column norm", "top singular values", "hint"]
    )
