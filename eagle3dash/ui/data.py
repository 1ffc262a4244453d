"""What a run's page reads besides the run row: the diagnosis, the depth, the reports.

Plain functions over the store and job rows (no Streamlit).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from eagle3dash import store as db

DIAGNOSE_KIND = "diagnose"


def diagnosis_from_jobs(jobs: Sequence[Mapping[str, Any]]) -> dict | None:
    """The result of the run's last succeeded diagnose job (`Diagnosis.to_dict()`), or None."""
    for job in reversed(list(jobs)):
        result = job.get("result")
        if job.get("kind") == DIAGNOSE_KIND and job.get("status") == "succeeded" and result:
            return dict(result)
    return None


def num_target_layers(run: Mapping[str, Any], diagnosis: Mapping[str, Any] | None) -> int | None:
    """The target's depth N: from the diagnosis, else the run's options."""
    if diagnosis and diagnosis.get("num_target_layers"):
        return int(diagnosis["num_target_layers"])
    options = run.get("options") or {}
    value = options.get("target_layers")
    return int(value) if value else None


def server_report_of(
    store: db.Store, run: Mapping[str, Any], diagnosis: Mapping[str, Any] | None
) -> dict | None:
    """The run's server settings: the diagnosis's, else the endpoint's last probe."""
    if diagnosis and diagnosis.get("server"):
        return dict(diagnosis["server"])
    url = run.get("endpoint_url")
    if not url:
        return None
    row = db.get_endpoint(store, url)
    return None if row is None else row.get("last_probe")
