"""A diagnosis into the store: what the pages read."""

from __future__ import annotations

from eagle3dash import store as db
from eagle3dash.diagnosis.result import Diagnosis
from eagle3dash.layout import describe_tap


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
        for i, (tok_s, length) in enumerate(
            zip(bench.output_tok_s_per_request, bench.accept_length_per_request, strict=False)
        ):
            rows.append({"source": source, "name": "tok_s", "request": i, "value": tok_s})
            rows.append({"source": source, "name": "accept_length", "request": i, "value": length})
    return rows


def record_diagnosis(store: db.Store, run_id: int, diagnosis: Diagnosis) -> None:
    """Store a diagnosis: layouts, metrics, findings, bench results and the run's headline."""
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
