"""What a run's page reads besides the run row and its stored diagnosis: the server report.

Plain functions over the store (no Streamlit).
"""

from __future__ import annotations

from eagle3dash import store as db
from eagle3dash.diagnosis.stored import StoredDiagnosis, load_server_report
from eagle3dash.diagnosis.stored_run import StoredRun
from eagle3dash.engines.seam import ServerReport


def server_report_of(
    store: db.Store, run: StoredRun, diagnosis: StoredDiagnosis | None
) -> ServerReport | None:
    """The run's server settings: the diagnosis's, else the endpoint's last probe."""
    if diagnosis is not None and diagnosis.server is not None:
        return diagnosis.server
    url = run.endpoint_url
    if not url:
        return None
    row = db.get_endpoint(store, url)
    probe = None if row is None else row.get("last_probe")
    return None if not probe else load_server_report(probe)
