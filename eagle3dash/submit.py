"""What the app queues: light (no torch, no HTTP client)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from eagle3dash import jobs
from eagle3dash import store as db
from eagle3dash.diagnosis.options import DiagnoseOptions
from eagle3dash.diagnosis.stages import earlier_timings, unit_costs
from eagle3dash.http_client import server_key


def submit_diagnosis(
    store: db.Store,
    checkpoint_id: int | None,
    options: DiagnoseOptions,
    labels: Mapping[str, Any] | None = None,
) -> int:
    """Create a run and queue its diagnose job; return the run id.

    `labels` (e.g. {"demo": "mismatched"}) are kept with the run's options for the pages and
    queries, and are not passed to the diagnosis.
    """
    params = options.to_json()
    run_id = db.create_run(store, checkpoint_id, options.endpoint, options.baseline, params)
    params["capture_dir"] = params["capture_dir"] or str(db.capture_dir(store.home, run_id))
    db.update_run(store, run_id, options={**params, **(labels or {})})
    costs = unit_costs(earlier_timings(db.recent_timings(store)))
    jobs.submit_job(
        store,
        "diagnose",
        {"options": params, "run_id": run_id, "costs": costs},
        run_id=run_id,
        needs_gpu=options.device.startswith("cuda"),
        servers=[server_key(url) for url in (options.endpoint, options.baseline) if url],
    )
    return run_id
