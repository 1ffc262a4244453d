"""A diagnosis into the store: its one JSON form, and the summary columns the Runs page lists."""

from __future__ import annotations

from eagle3dash import store as db
from eagle3dash.diagnosis.result import Diagnosis


def record_diagnosis(store: db.Store, run_id: int, diagnosis: Diagnosis) -> None:
    """Store a diagnosis once (Diagnosis.to_dict()) with the run's indexed summary columns; the
    run's status is its job's (`jobs.lifecycle`)."""
    result = diagnosis.to_dict()
    verdict = result["verdict"]
    speedup = result["speedup"] or {}
    measured = diagnosis.measured
    db.save_findings(store, run_id, result["findings"])
    db.record_probe(store, diagnosis.server.url, result["server"])
    db.update_run(
        store,
        run_id,
        diagnosis_json=db.to_json(result),
        measured_accept_length=verdict["measured_accept_length"],
        sim_accept_training=verdict["sim_accept_training"],
        sim_accept_serving=verdict["sim_accept_serving"],
        tok_s=measured.output_tok_s_aggregate if measured else None,
        baseline_tok_s=speedup.get("baseline_output_tok_s"),
        speedup=speedup.get("speedup"),
        engine=diagnosis.server.engine,
    )
