"""Probe an SGLang endpoint: its report and the findings that need only the server."""

from __future__ import annotations

from dataclasses import dataclass

from eagle3dash.findings import Evidence, Finding, diagnose
from eagle3dash.sglang import ServerReport, SGLangClient


@dataclass(frozen=True)
class Probe:
    """What a probe of an endpoint found: the server's report and its server-side findings."""

    server: ServerReport
    findings: list[Finding]

    def to_dict(self) -> dict:
        """JSON-ready: {"server": ..., "findings": [...]}."""
        return {"server": self.server.to_dict(), "findings": [f.to_dict() for f in self.findings]}


def probe(url: str, timeout: float = 60.0, retries: int = 3) -> Probe:
    """Probe the endpoint at url; EndpointError says what is wrong."""
    with SGLangClient(url, timeout=timeout, retries=retries) as client:
        server = client.probe()
    return Probe(server=server, findings=diagnose(Evidence(server=server)))
