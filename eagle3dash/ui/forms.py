"""The New run form without Streamlit: probing an endpoint (its options are checked by
`DiagnoseOptions.parse`)."""

from __future__ import annotations

from dataclasses import dataclass

from eagle3dash import store as db
from eagle3dash.findings import Evidence, diagnose
from eagle3dash.sglang import SGLangClient

PROBE_TIMEOUT_S = 5.0


@dataclass(frozen=True)
class Probe:
    """What a probe of an endpoint found: the ServerReport dict and its server-side findings."""

    url: str
    server: dict
    findings: list[dict]


def probe_endpoint(
    store: db.Store | None, url: str, timeout: float = PROBE_TIMEOUT_S, record: bool = True
) -> Probe:
    """Probe an SGLang endpoint (short timeout, one try); EndpointError says what is wrong."""
    with SGLangClient(url, timeout=timeout, retries=1) as client:
        report = client.probe()
    findings = [f.to_dict() for f in diagnose(Evidence(server=report))]
    server = report.to_dict()
    if record and store is not None:
        db.record_probe(store, report.url, server)
    return Probe(url=report.url, server=server, findings=findings)
