"""Probe an endpoint (SGLang or vLLM, told apart by `endpoints.detect_engine`): its report, the
draft it serves when that is readable here, and the findings a probe alone can make."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from eagle3dash.checkpoint import InspectReport, inspect
from eagle3dash.engines.endpoints import open_engine
from eagle3dash.engines.seam import ServerReport
from eagle3dash.errors import InputError
from eagle3dash.findings import Evidence, Finding, diagnose
from eagle3dash.identity import DigestCache, DraftIdentity, compare_drafts, is_local_url
from eagle3dash.store import Store, record_probe
from eagle3dash.target import LocalTarget, local_target


@dataclass(frozen=True)
class ServedDraft:
    """The draft a server names (--speculative-draft-model-path), inspected when it is a folder
    on this machine."""

    path: str | None  # as /server_info reports it
    report: InspectReport | None  # its config and weight headers, None when not read
    reason: str  # where it was read, or why it was not

    def to_dict(self) -> dict:
        """JSON-ready: {"path", "report" (InspectReport.to_json or None), "reason"}."""
        return {
            "path": self.path,
            "report": None if self.report is None else self.report.to_json(),
            "reason": self.reason,
        }


@dataclass(frozen=True)
class Probe:
    """What a probe of an endpoint found: the server's report, its draft and the findings."""

    server: ServerReport
    findings: list[Finding]
    draft: ServedDraft | None = None  # None when the server runs no speculative decoding
    target: LocalTarget | None = None  # the served model, when its folder is on this machine

    def to_dict(self) -> dict:
        """JSON-ready: {"server", "draft" (or None), "target" (or None), "findings"}."""
        return {
            "server": self.server.to_dict(),
            "draft": None if self.draft is None else self.draft.to_dict(),
            "target": None if self.target is None else self.target.to_dict(),
            "findings": [f.to_dict() for f in self.findings],
        }


def served_draft(server: ServerReport) -> ServedDraft | None:
    """The server's draft, inspected (headers only) when the server runs on this machine and
    names a folder that exists here; None without speculative decoding."""
    spec = server.speculative
    if spec is None:
        return None
    path = spec.draft_model_path
    if not path:
        return ServedDraft(None, None, "the server does not name its draft")
    if not is_local_url(server.url):
        return ServedDraft(
            path, None, f"the server runs on another machine, so {path} is not a path here"
        )
    folder = Path(path).expanduser()
    if not folder.is_dir():
        return ServedDraft(
            path, None, f"{path} is not a folder on this machine (a hub id, or moved since)"
        )
    try:
        report = inspect(folder)
    except InputError as e:
        return ServedDraft(path, None, f"{path} could not be inspected: {e}")
    return ServedDraft(path, report, f"read here from {folder.resolve()}")


def probe(url: str, timeout: float = 60.0, retries: int = 3) -> Probe:
    """Probe the endpoint at url (SGLang or vLLM) and read its draft when it can; EndpointError
    says what is wrong with the endpoint (an unreadable draft is only a reason in Probe.draft)."""
    engine = open_engine(url, timeout=timeout, retries=retries)
    try:
        server = engine.probe()
    finally:
        engine.close()
    draft = served_draft(server)
    target = local_target(server.model_path) if is_local_url(server.url) else None
    evidence = _evidence(server, target)
    if draft is not None and draft.report is not None:
        evidence.report, evidence.draft_path = draft.report, draft.path
        # The draft read is the served one by construction: no digest needed.
        evidence.identity = DraftIdentity("same", None, None, draft.path, draft.reason)
    return Probe(server=server, findings=diagnose(evidence), draft=draft, target=target)


def _evidence(server: ServerReport, target: LocalTarget | None) -> Evidence:
    """What a probe's findings read: the server, its engine, and the served model's depth when
    its folder is here (so no finding asks for a layer count the probe has read)."""
    return Evidence(
        server=server,
        engine=server.engine,
        vllm_runner=server.rules_engine().runner,
        num_target_layers=target.num_layers if target is not None else None,
    )


def probe_and_record(store: Store, url: str, timeout: float = 60.0, retries: int = 3) -> Probe:
    """Probe the endpoint at url (`probe`) and remember its server report in `store`'s endpoints,
    under the URL the server reports; nothing is recorded when the probe fails."""
    found = probe(url, timeout=timeout, retries=retries)
    record_probe(store, found.server.url, found.server.to_dict())
    return found


@dataclass(frozen=True)
class PairCheck:
    """What a probe checked of an endpoint and a checkpoint before a diagnosis runs: the findings,
    whether the checkpoint was read (None: none chosen; else its path, or the reason it could not
    be read) and whether the server serves it (None: not compared)."""

    findings: list[Finding]
    checkpoint: str | None  # the checkpoint's path as read; None when none was chosen
    unreadable: str | None  # why the chosen checkpoint could not be read
    identity: DraftIdentity | None  # whether the server serves it, by content or by path


def check_pair(found: Probe, draft: str | None, cache: DigestCache | None = None) -> PairCheck:
    """The findings a diagnosis of the checkpoint `draft` (a path here) against this endpoint
    can make before it runs: the server's settings (hidden states off or not every token, no
    speculation), whether the server serves this checkpoint (by the weights' content when both
    are here, else by path), an algorithm that does not fit it, and the checkpoint's own. Without
    a readable checkpoint, the probe's findings; and what was checked."""
    if not draft:
        return PairCheck(list(found.findings), None, None, None)
    try:
        report = inspect(draft)
    except InputError as e:  # the checkpoint's own error is shown where it is chosen
        return PairCheck(list(found.findings), draft, str(e), None)
    server, identity = found.server, None
    served = server.speculative.draft_model_path if server.speculative else None
    if served:
        identity = compare_drafts(report.path, served, is_local_url(server.url), cache)
    evidence = _evidence(server, found.target)
    evidence.report, evidence.draft_path, evidence.identity = report, report.path, identity
    return PairCheck(diagnose(evidence), report.path, None, identity)


def before_submit(
    found: Probe, draft: str | None, cache: DigestCache | None = None
) -> list[Finding]:
    """The findings of `check_pair`."""
    return check_pair(found, draft, cache).findings
