"""The read side of a run's row: what the store keeps of a run (`store.get_run`, `list_runs`,
`checkpoint_runs`), typed once here for the pages (`StoredRun`); its diagnosis is read by
`diagnosis/stored.py` `load_diagnosis`.

A row's columns grew over the releases (the engine, the endpoint's stop, a job's Ray placement);
a column an older store lacks reads as None. Its options are the ones `submit.submit_diagnosis`
stored (DiagnoseOptions.to_json() and the run's labels); a run created without them (the CLI's
runs, older tests) has none.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from eagle3dash import store as db
from eagle3dash.diagnosis.options import DiagnoseOptions
from eagle3dash.diagnosis.stored import (
    Json,
    StoredDiagnosis,
    StoredRecordError,
    StoredVerdict,
    load_diagnosis,
    load_verdict,
    read_stored,
)


def _number(value: Any) -> float | None:
    return None if value is None else float(value)


def _text(value: Any) -> str | None:
    return None if value is None else str(value)


@dataclass(frozen=True)
class StoredRun:
    """One run as the store keeps it, typed; `row` is the row as stored (what the export
    writes). The verdict, finding ids, server info and placement come with the Runs list's
    rows (list_runs, checkpoint_runs), the diagnosis with one run's (get_run)."""

    id: int
    status: str
    created_at: str | None
    checkpoint_id: int | None
    checkpoint_name: str | None
    checkpoint_path: str | None
    checkpoint_removed: bool
    endpoint_url: str | None
    endpoint_stopped_at: str | None  # None while it may be up
    baseline_url: str | None
    engine: str | None  # None: stored before engines were told apart
    error: str | None
    measured_accept_length: float | None
    sim_accept_training: float | None
    sim_accept_serving: float | None
    tok_s: float | None
    baseline_tok_s: float | None
    speedup: float | None
    worst_severity: str | None
    worst_finding_title: str | None
    options: DiagnoseOptions | None  # None: created without the form's options
    demo: str | None  # the demo deployment a seeded run diagnosed (a label beside the options)
    demo_fixed_run: int | None  # a demo run's twin with the fix applied
    verdict: StoredVerdict | None  # list rows: Diagnosis.verdict(), None before it finished
    finding_ids: str | None  # list rows: the rule ids of its findings, in order
    server_info: Json  # list rows: the endpoint's raw server_info (the demo double's cost)
    placement: Json | None  # list rows: where a Ray cluster ran its latest placed job
    diagnosis_document: Json | None = field(repr=False, compare=False)  # get_run only
    row: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def from_row(cls, row: Mapping[str, Any]) -> StoredRun:
        """From a decoded store row (store.decode_row) of any release; TypeError, KeyError or
        ValueError for a row that is not a run's."""
        options = row.get("options") or {}
        if not isinstance(options, Mapping):
            raise TypeError(f"its options are {type(options).__name__}, not an object")
        verdict = row.get("verdict")
        fixed = options.get("demo_fixed_run")
        return cls(
            id=int(row["id"]),
            status=str(row.get("status") or "queued"),
            created_at=_text(row.get("created_at")),
            checkpoint_id=None if row.get("checkpoint_id") is None else int(row["checkpoint_id"]),
            checkpoint_name=_text(row.get("checkpoint_name")),
            checkpoint_path=_text(row.get("checkpoint_path")),
            checkpoint_removed=bool(row.get("checkpoint_removed")),
            endpoint_url=_text(row.get("endpoint_url")),
            endpoint_stopped_at=_text(row.get("endpoint_stopped_at")),
            baseline_url=_text(row.get("baseline_url")),
            engine=_text(row.get("engine")),
            error=_text(row.get("error")),
            measured_accept_length=_number(row.get("measured_accept_length")),
            sim_accept_training=_number(row.get("sim_accept_training")),
            sim_accept_serving=_number(row.get("sim_accept_serving")),
            tok_s=_number(row.get("tok_s")),
            baseline_tok_s=_number(row.get("baseline_tok_s")),
            speedup=_number(row.get("speedup")),
            worst_severity=_text(row.get("worst_severity")),
            worst_finding_title=_text(row.get("worst_finding_title")),
            options=DiagnoseOptions.from_json(options) if "draft" in options else None,
            demo=_text(options.get("demo")),
            demo_fixed_run=None if fixed is None else int(fixed),
            verdict=None if not verdict else load_verdict(verdict, row.get("worst_severity")),
            finding_ids=_text(row.get("finding_ids")),
            server_info=dict(row.get("server_info") or {}),
            placement=row.get("placement") or None,
            diagnosis_document=row.get("diagnosis") or None,
            row=dict(row),
        )

    @property
    def speedup_noise(self) -> float | None:
        """The speedup's noise (± NOISE_SE standard errors) as its verdict stored it; None for a
        run stored before it, or without a speedup."""
        if self.verdict is not None:
            return self.verdict.speedup_noise
        document = self.diagnosis_document
        verdict = document.get("verdict") if isinstance(document, Mapping) else None
        return _number(verdict.get("speedup_noise")) if isinstance(verdict, Mapping) else None

    def diagnosis(self) -> StoredDiagnosis | None:
        """Its stored diagnosis through the one loader (any schema), None before it finished."""
        raw = self.diagnosis_document
        return None if not raw else load_diagnosis(raw)


def run_from_row(row: Mapping[str, Any]) -> StoredRun:
    """A store row as a StoredRun; StoredRecordError (one line) for one it cannot read."""
    known = isinstance(row, Mapping) and row.get("id") is not None
    what = f"run #{row['id']}'s stored row" if known else "a run's stored row"
    return read_stored(StoredRun.from_row, row, what, "run it again from New run")


def read_run(store: db.Store, run_id: int) -> StoredRun | None:
    """One run with its stored diagnosis (store.get_run), typed; None when there is none."""
    row = db.get_run(store, run_id)
    return None if row is None else run_from_row(row)


@dataclass(frozen=True)
class RunsRead:
    """A page of runs: the rows read, and one line for each row that could not be (a broken row
    hides itself, never the rest of the list)."""

    runs: list[StoredRun]
    unreadable: list[StoredRecordError]


def _read_each(rows: list[dict]) -> RunsRead:
    runs: list[StoredRun] = []
    unreadable: list[StoredRecordError] = []
    for row in rows:
        try:
            runs.append(run_from_row(row))
        except StoredRecordError as e:
            unreadable.append(e)
    return RunsRead(runs, unreadable)


def read_runs(
    store: db.Store,
    limit: int = 50,
    offset: int = 0,
    status: str | None = None,
    search: str | None = None,
) -> RunsRead:
    """One page of the Runs list (store.list_runs), typed."""
    return _read_each(db.list_runs(store, limit, offset, status, search))


def read_checkpoint_runs(store: db.Store, checkpoint_id: int, limit: int = 20) -> RunsRead:
    """The runs that used a checkpoint, newest first (store.checkpoint_runs), typed."""
    return _read_each(db.checkpoint_runs(store, checkpoint_id, limit))
