"""The read side of a stored diagnosis: one loader, every stored shape, typed objects.

`Diagnosis.to_dict()` (eagle3dash/diagnosis/result.py) writes the document with a `schema`
number; `load_diagnosis` is the one place that reads it back. It upgrades every shape ever stored
in `runs.diagnosis_json` to the current one (`upgrade`), then returns a `StoredDiagnosis`: typed
sides, layouts as tuples of `Tap`, findings, not-checked items, the profile, the identity and the
layout detective's case. The pages, Compare, the run export and the CLI read attributes of it.

The stored shapes, oldest first (the commits that wrote them):

- schema 1 (b88e692 .. c8c3eb8): sides with their `source`, a `verdict` without `status`, no
  evidence levels; a layout diff's slot taps as text ('3', '61n'); the detective's layouts as
  text ('0,3,31'); `measured.per_position` from 479c3dc and `profile` from c8c3eb8 on.
- schema 2 (76e9373 .. this change, no `schema` key): evidence levels on the sides, the layout
  diff and the identity, the verdict's `status`; `timings` from d153028 on; a profile's
  `recommended` without `changes` in its earlier commits (its flags were always offered).
- schema 3: the `schema` key; every tap in the document as Tap.to_dict ({"depth", "post_norm"}),
  but for a `detected-layout` finding's `best` and `claimed`, still text ('0,1,2').
- schema 4: those two as lists of Tap.to_dict too.
"""

from __future__ import annotations

import copy
import dataclasses
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

from eagle3dash.detective import AcceptanceMatch
from eagle3dash.diagnosis.options import DiagnoseOptions
from eagle3dash.diagnosis.result import (
    HEALTHY,
    INCOMPLETE,
    PROBLEM,
    SCHEMA,
    NotChecked,
    verdict_status,
)
from eagle3dash.engines.seam import ServerReport
from eagle3dash.errors import InputError
from eagle3dash.evidence_levels import checked, source_level, weaker
from eagle3dash.findings import Finding
from eagle3dash.identity import DraftIdentity
from eagle3dash.layout import Layout, LayoutResult, Tap, layout_from_json, parse_layout
from eagle3dash.profile import Profile
from eagle3dash.provenance import Provenance, TrainingMetrics
from eagle3dash.servebench import BenchResult, RequestStat
from eagle3dash.spec import DraftSpec

Json = Mapping[str, Any]  # one stored JSON object, as json.loads returns it
_T = TypeVar("_T")


def _build(cls: type[_T], d: Json) -> _T:
    """A dataclass from the keys it names; a field missing from an older shape takes its
    default, else None."""
    values: dict[str, Any] = {}
    for f in dataclasses.fields(cls):  # type: ignore[arg-type]
        if f.name in d:
            values[f.name] = d[f.name]
        elif f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
            values[f.name] = None
    return cls(**values)


# --- upgrades ----------------------------------------------------------------------------------


def _tap_json(value: Any) -> Any:
    """A stored tap in the one JSON form: text ('3', '61n') becomes Tap.to_dict."""
    return parse_layout(value)[0].to_dict() if isinstance(value, str) else value


def _layout_json(value: Any) -> Any:
    """A stored layout in the one JSON form: text ('0,3,31') becomes a list of Tap.to_dict."""
    return [t.to_dict() for t in parse_layout(value)] if isinstance(value, str) else value


def upgrade_detection(d: Json) -> dict:
    """A stored layout-detective case (Detection.to_dict(), in a diagnosis or a detect job's
    result) with every layout in the one tap form."""
    out = copy.deepcopy(dict(d))
    out["best"] = _layout_json(out.get("best") or [])
    out["serving"] = _layout_json(out.get("serving"))
    for row in out.get("rows") or []:
        row["layout"] = _layout_json(row.get("layout") or [])
    match = out.get("slot_match")
    if match:
        match["taps"] = [_tap_json(t) for t in match.get("taps") or []]
        rms = match.get("tap_rms") or []
        if isinstance(rms, Mapping):  # schema <= 2: keyed by the tap's text
            rms = [{"tap": _tap_json(k), "rms": v} for k, v in rms.items()]
        match["tap_rms"] = rms
        match["best"] = {k: _layout_json(v) for k, v in (match.get("best") or {}).items()}
        for scores in (match.get("sides") or {}).values():
            for s in scores:
                s["best"] = _tap_json(s["best"])
                for row in s.get("scores") or []:
                    row["tap"] = _tap_json(row["tap"])
        for row in match.get("heatmap") or []:
            row["tap"] = _tap_json(row["tap"])
    return out


def _to_schema_2(d: dict) -> None:
    """Schema 1 -> 2: the evidence levels and the verdict's status, from what schema 1 kept."""
    for name in ("training", "serving"):
        side = d.get(name) or {}
        side.setdefault("evidence", source_level(side.get("source") or ""))
    level = weaker(d["training"]["evidence"], d["serving"]["evidence"])
    diff = d.get("layout_diff") or {}
    diff.setdefault("evidence", level)
    diff.setdefault("checked", checked(level))
    diff.setdefault("training_evidence", d["training"]["evidence"])
    diff.setdefault("serving_evidence", d["serving"]["evidence"])
    diff.setdefault("would_check", [])
    for slot in diff.get("slots") or []:
        slot.setdefault("evidence", level)
    identity = d.get("draft_identity")
    if identity:
        identity.setdefault(
            "evidence", "observed" if identity.get("status") != "unknown" else "not-checked"
        )
    verdict = d.setdefault("verdict", {})
    findings = [_build(Finding, f) for f in d.get("findings") or []]
    verdict.setdefault("status", verdict_status(findings, bool(d.get("not_checked"))))
    # schema 1 counted info notes as problems; since, only warnings and worse are
    verdict["problems_found"] = any(f.severity != "info" for f in findings)
    verdict.setdefault("layout_evidence", level)
    verdict.setdefault("identity", None if not identity else identity.get("status"))


def _to_schema_3(d: dict) -> None:
    """Schema 2 -> 3: every tap as Tap.to_dict (slot taps and the detective's layouts were
    text)."""
    prediction = d.get("prediction") or {}
    for diff in (d.get("layout_diff"), prediction.get("diff"), prediction.get("decode_diff")):
        for slot in (diff or {}).get("slots") or []:
            slot["training"] = _tap_json(slot.get("training"))
            slot["serving"] = _tap_json(slot.get("serving"))
    if d.get("detective"):
        d["detective"] = upgrade_detection(d["detective"])
    recommended = (d.get("profile") or {}).get("recommended")
    if recommended:  # advice stored before `changes` always offered its flags
        recommended.setdefault("changes", True)


def _detected_layout_data(rule_id: object, data: object) -> object:
    """A finding's data with a `detected-layout` finding's layouts as taps (text before schema
    4); any other finding's data as stored."""
    if rule_id != "detected-layout" or not isinstance(data, dict):
        return data
    return {**data, **{k: _layout_json(data[k]) for k in ("best", "claimed") if data.get(k)}}


def _to_schema_4(d: dict) -> None:
    """Schema 3 -> 4: a detected-layout finding's `best` and `claimed` as taps (they were text)."""
    for finding in d.get("findings") or []:
        if isinstance(finding, dict):
            finding["data"] = _detected_layout_data(finding.get("id"), finding.get("data"))


# What a refused serving capture's not-checked item said before it carried its error (issue 37):
# a pointer to an error the CLI never printed.
_POINTER_BELOW = "read the capture error below, "


def _carry_capture_error(d: dict) -> None:
    """A refused serving capture's not-checked item with its error (the serving side's), in
    place of the pointer to it that earlier versions stored."""
    error = (d.get("serving") or {}).get("capture_error")
    would_check = (d.get("layout_diff") or {}).get("would_check") or []
    for item in [*(d.get("not_checked") or []), *would_check]:
        action = item.get("action") or ""
        if item.get("check") == "serving-states" and action.startswith(_POINTER_BELOW) and error:
            item["action"] = action.removeprefix(_POINTER_BELOW)
            item.setdefault("error", error)


def schema_of(d: Json) -> int:
    """The schema a stored diagnosis was written in (module docstring)."""
    if "schema" in d:
        return int(d["schema"])
    return 2 if "evidence" in (d.get("training") or {}) else 1


def upgrade(raw: Json) -> dict:
    """A stored diagnosis of any schema in the current shape (a copy; the stored one is kept)."""
    d = copy.deepcopy(dict(raw))
    schema = schema_of(d)
    if schema > SCHEMA:
        raise StoredDiagnosisError(
            f"this diagnosis was stored by a newer eagle3dash (schema {schema}, this one reads "
            f"up to {SCHEMA}): upgrade eagle3dash to read it"
        )
    if schema < 2:
        _to_schema_2(d)
    if schema < 3:
        _to_schema_3(d)
    if schema < 4:
        _to_schema_4(d)
    _carry_capture_error(d)
    d["schema"] = SCHEMA
    return d


def finding_from_row(row: Json) -> Finding:
    """A finding as the store's `findings` table keeps it (store.get_findings: `rule_id`), its
    data in the current shape."""
    rule_id = row.get("rule_id") or row.get("id") or ""
    data = _detected_layout_data(rule_id, row.get("data"))
    return _build(Finding, {**row, "id": rule_id, "data": data})


# --- the typed read model ----------------------------------------------------------------------


@dataclass(frozen=True)
class StoredEval:
    """A side's standalone draft evaluation as stored (metrics.DraftEval.to_dict())."""

    layout: Layout
    steps: int
    accuracy: list[float]
    acceptance: list[float]
    num_sequences: int | None = None
    num_positions: int | None = None
    accept_length_per_sequence: list[float | None] = field(default_factory=list)

    @classmethod
    def from_dict(cls, d: Json) -> StoredEval:
        """From DraftEval.to_dict()."""
        return cls(
            layout=layout_from_json(d.get("layout") or []),
            steps=int(d.get("steps") or 0),
            accuracy=list(d.get("accuracy") or []),
            acceptance=list(d.get("acceptance") or []),
            num_sequences=d.get("num_sequences"),
            num_positions=d.get("num_positions"),
            accept_length_per_sequence=list(d.get("accept_length_per_sequence") or []),
        )


@dataclass(frozen=True)
class StoredSide:
    """One side of a stored diagnosis (result.Side.to_dict())."""

    name: str
    layout: Layout
    source: str
    evidence: str
    detail: str
    prediction: Layout | None
    eval: StoredEval | None
    steps: int | None
    top1: float | None
    sim_accept_length: float | None
    slot_margins: list[float] | None
    capture_error: str | None
    measured: bool
    acceptance_match: AcceptanceMatch | None = None

    @classmethod
    def from_dict(cls, d: Json) -> StoredSide:
        """From Side.to_dict() (current schema)."""
        prediction = d.get("prediction")
        return cls(
            name=str(d.get("name") or ""),
            layout=layout_from_json(d.get("layout") or []),
            source=str(d.get("source") or ""),
            evidence=str(d.get("evidence") or ""),
            detail=str(d.get("detail") or ""),
            prediction=None if prediction is None else layout_from_json(prediction),
            eval=None if not d.get("eval") else StoredEval.from_dict(d["eval"]),
            steps=d.get("steps"),
            top1=d.get("top1"),
            sim_accept_length=d.get("sim_accept_length"),
            slot_margins=d.get("slot_margins"),
            capture_error=d.get("capture_error"),
            measured=bool(d.get("measured")),
            acceptance_match=None
            if not d.get("acceptance_match")
            else AcceptanceMatch.from_dict(d["acceptance_match"]),
        )


@dataclass(frozen=True)
class StoredSlot:
    """One fc slot of the layout diff: the tap each side feeds it (None: that side has fewer)."""

    slot: int
    training: Tap | None
    serving: Tap | None
    same: bool


@dataclass(frozen=True)
class StoredLayoutDiff:
    """The stored layout diff with its evidence (Diagnosis.layout_diff_dict())."""

    training: Layout
    serving: Layout
    slots: list[StoredSlot]
    kind: str
    embedding_only_in: str | None
    summary: str
    evidence: str
    checked: bool
    training_evidence: str
    serving_evidence: str
    would_check: list[NotChecked]

    @classmethod
    def from_dict(cls, d: Json) -> StoredLayoutDiff:
        """From layout_diff_dict() (current schema)."""

        def tap(value: Json | None) -> Tap | None:
            return None if value is None else Tap.from_dict(value)

        return cls(
            training=layout_from_json(d.get("training") or []),
            serving=layout_from_json(d.get("serving") or []),
            slots=[
                StoredSlot(
                    int(s["slot"]),
                    tap(s.get("training")),
                    tap(s.get("serving")),
                    bool(s.get("same")),
                )
                for s in d.get("slots") or []
            ],
            kind=str(d.get("kind") or ""),
            embedding_only_in=d.get("embedding_only_in"),
            summary=str(d.get("summary") or ""),
            evidence=str(d.get("evidence") or ""),
            checked=bool(d.get("checked")),
            training_evidence=str(d.get("training_evidence") or ""),
            serving_evidence=str(d.get("serving_evidence") or ""),
            would_check=[_build(NotChecked, n) for n in d.get("would_check") or []],
        )


@dataclass(frozen=True)
class StoredVerdict:
    """The verdict banner's values (Diagnosis.verdict())."""

    status: str
    root_cause: Finding | None
    problems_found: bool
    layout_evidence: str | None
    identity: str | None
    all_checked: bool
    measured_accept_length: float | None
    sim_accept_training: float | None
    sim_accept_serving: float | None
    training_source: str | None
    serving_source: str | None
    speedup: float | None
    not_checked: list[str]
    speedup_noise: float | None = None  # ± NOISE_SE standard errors; None: stored before it

    @classmethod
    def from_dict(cls, d: Json) -> StoredVerdict:
        """From Diagnosis.verdict() (current schema)."""
        root = d.get("root_cause")
        return cls(
            status=str(d.get("status") or ""),
            root_cause=None if not root else _build(Finding, root),
            problems_found=bool(d.get("problems_found")),
            layout_evidence=d.get("layout_evidence"),
            identity=d.get("identity"),
            all_checked=bool(d.get("all_checked")),
            measured_accept_length=d.get("measured_accept_length"),
            sim_accept_training=d.get("sim_accept_training"),
            sim_accept_serving=d.get("sim_accept_serving"),
            training_source=d.get("training_source"),
            serving_source=d.get("serving_source"),
            speedup=d.get("speedup"),
            not_checked=list(d.get("not_checked") or []),
            speedup_noise=d.get("speedup_noise"),
        )


def load_verdict(raw: Json, worst_severity: str | None) -> StoredVerdict:
    """A verdict alone, as the Runs list reads it (`$.verdict` of each stored diagnosis, and the
    run's worst finding severity): schema 1 stored no status and counted info notes as
    problems, so both are derived as `upgrade` derives them from the findings."""
    verdict = StoredVerdict.from_dict(raw)
    if verdict.status:
        return verdict
    problems = worst_severity in ("critical", "warning")
    if verdict.root_cause is not None:
        status = PROBLEM
    elif verdict.not_checked:
        status = INCOMPLETE
    else:
        status = PROBLEM if problems else HEALTHY
    return dataclasses.replace(verdict, status=status, problems_found=problems)


@dataclass(frozen=True)
class StoredSweepRow:
    """One candidate layout of the detective's sweep."""

    name: str
    layout: Layout
    top1: float
    sim_accept_length: float
    gap_sim_accept_length: float | None


@dataclass(frozen=True)
class HeatmapCell:
    """One slot of one side against one tap of the reference (slot matching)."""

    side: str
    slot: int
    tap: Tap
    score: float
    cosine: float
    rms_ratio: float


@dataclass(frozen=True)
class StoredDetection:
    """The layout detective's case as stored (detective.Detection.to_dict())."""

    num_target_layers: int | None
    best: Layout
    serving: Layout | None
    verdict: list[str]
    rows: list[StoredSweepRow]
    heatmap: list[HeatmapCell]
    fingerprint: list[dict[str, Any]]  # fc_fingerprint's rows: numbers and a hint per slot
    fingerprint_limits: str | None  # what the fingerprint cannot tell

    @classmethod
    def from_dict(cls, raw: Json) -> StoredDetection:
        """From Detection.to_dict() of any schema (a diagnosis's or a detect job's result)."""
        d = upgrade_detection(raw)
        serving = d.get("serving")
        return cls(
            num_target_layers=d.get("num_target_layers"),
            best=layout_from_json(d.get("best") or []),
            serving=None if serving is None else layout_from_json(serving),
            verdict=list(d.get("verdict") or []),
            rows=[
                StoredSweepRow(
                    str(r.get("name") or ""),
                    layout_from_json(r.get("layout") or []),
                    float(r["top1"]),
                    float(r["sim_accept_length"]),
                    r.get("gap_sim_accept_length"),
                )
                for r in d.get("rows") or []
            ],
            heatmap=[
                HeatmapCell(
                    str(r["side"]),
                    int(r["slot"]),
                    Tap.from_dict(r["tap"]),
                    float(r["score"]),
                    float(r["cosine"]),
                    float(r["rms_ratio"]),
                )
                for r in (d.get("slot_match") or {}).get("heatmap") or []
            ],
            fingerprint=list(d.get("fingerprint") or []),
            fingerprint_limits=d.get("fingerprint_limits") or None,
        )


def _bench(d: Json | None) -> BenchResult | None:
    """A stored benchmark (BenchResult.to_dict(); schema 1 had no histogram, per_position is
    derived from it again)."""
    if not d:
        return None
    fields = {k: v for k, v in d.items() if k not in ("per_position", "requests")}
    fields.setdefault("temperature", 0.0)
    bench = _build(BenchResult, fields)
    bench.requests = [_build(RequestStat, r) for r in d.get("requests") or []]
    bench.error_messages = list(bench.error_messages or [])
    return bench


def _layout_result(d: Json | None) -> LayoutResult | None:
    """What the config or SGLang's rules predict for one side (LayoutResult.to_dict())."""
    if not d:
        return None
    decode = d.get("decode_layout")
    return LayoutResult(
        layout=layout_from_json(d.get("layout") or []),
        rule=str(d.get("rule") or ""),
        notes=list(d.get("notes") or []),
        decode_layout=None if decode is None else layout_from_json(decode),
        error=d.get("error"),
        alternatives=tuple(
            (str(a["label"]), layout_from_json(a["layout"])) for a in d.get("alternatives") or []
        ),
    )


@dataclass(frozen=True)
class Speedup:
    """Measured tok/s against the baseline's (servebench.compare_to_baseline)."""

    speedup: float | None
    spec_output_tok_s: float | None
    baseline_output_tok_s: float | None
    latency_p50_speedup: float | None = None
    speedup_noise: float | None = None  # ± NOISE_SE standard errors; None: stored before it
    warnings: list[str] = field(default_factory=list)


def _ids(value: Any, name: str) -> tuple[int, ...] | None:
    """Stored layer ids (a JSON list of ints) as a tuple; a TypeError naming `name` else."""
    if value is None:
        return None
    if not isinstance(value, list | tuple) or not all(isinstance(i, int) for i in value):
        raise TypeError(f"{name} is {json.dumps(value)}, not a list of layer ids")
    return tuple(value)


def _provenance(d: Json | None) -> Provenance | None:
    """A run folder's provenance card (Provenance.to_dict())."""
    if not d:
        return None
    metrics = d.get("metrics")
    card = _build(Provenance, d)
    card.metrics = None if not metrics else _build(TrainingMetrics, metrics)
    card.capture_layers = _ids(d.get("capture_layers"), "capture_layers") or None
    card.notes = list(d.get("notes") or [])
    return card


@dataclass(frozen=True)
class StoredCheckpoint:
    """A checkpoint's inspect report as stored (checkpoint.InspectReport.to_json(), in a
    diagnosis or a registered checkpoint's row), typed; `document` is the report as stored
    (shown whole, and compared key by key)."""

    spec: DraftSpec
    path: str | None
    files: list[str]
    param_count: int | None
    problems: list[str]  # CheckpointProblem.text of each
    provenance: Provenance | None
    document: dict[str, Any] = field(repr=False, compare=False)

    @classmethod
    def from_dict(cls, d: Json) -> StoredCheckpoint:
        """From InspectReport.to_json() of any release: a spec field it did not store takes
        DraftSpec's default (None where it has none)."""
        if not isinstance(d, Mapping):
            raise TypeError(f"the checkpoint report is {type(d).__name__}, not an object")
        other = d.get("other_id_keys") or []
        spec = _build(
            DraftSpec,
            {
                **d,
                "aux_layer_ids": _ids(d.get("aux_layer_ids"), "aux_layer_ids"),
                "dual_top_level_ids": _ids(d.get("dual_top_level_ids"), "dual_top_level_ids"),
                "other_id_keys": tuple((str(k), _ids(ids, str(k)) or ()) for k, ids in other),
                "architectures": tuple(d.get("architectures") or ()),
            },
        )
        count = d.get("param_count")
        return cls(
            spec=spec,
            path=d.get("path"),
            files=list(d.get("files") or []),
            param_count=None if count is None else int(count),
            problems=[str(p) for p in d.get("problems") or []],
            provenance=_provenance(d.get("provenance")),
            document=dict(d),
        )


@dataclass(frozen=True)
class StoredDiagnosis:
    """A stored diagnosis, typed; `document` is the upgraded JSON (what the export writes)."""

    schema: int
    verdict: StoredVerdict
    findings: list[Finding]
    training: StoredSide
    serving: StoredSide
    layout_diff: StoredLayoutDiff
    detective: StoredDetection | None
    identity: DraftIdentity | None
    not_checked: list[NotChecked]
    warnings: list[str]
    profile: Profile | None
    num_target_layers: int | None
    arch: str | None
    steps: int
    timings: dict[str, float]
    measured: BenchResult | None
    baseline: BenchResult | None
    speedup: Speedup | None
    predicted_training: LayoutResult | None  # what the config predicts
    predicted_serving: LayoutResult | None  # what SGLang's rules predict
    checkpoint: StoredCheckpoint | None  # the draft's inspect report, None if not stored
    server: ServerReport | None  # the probe's report (engine.ServerReport), None if not stored
    options: DiagnoseOptions  # what the run was started with
    document: dict[str, Any] = field(repr=False, compare=False)

    def side(self, name: str) -> StoredSide:
        """The training or the serving side, by name."""
        return {"training": self.training, "serving": self.serving}[name]


class StoredRecordError(InputError):
    """A stored document (a run's diagnosis, an endpoint's last probe) that cannot be read: cut
    short, or not written by eagle3dash. The message is one line."""


class StoredDiagnosisError(StoredRecordError):
    """A stored diagnosis that cannot be read: cut short, or not written by eagle3dash."""


_READ_ERRORS = (KeyError, TypeError, ValueError, AttributeError)  # what a malformed one raises


def read_stored(
    read: Callable[[Any], _T],
    raw: Any,
    what: str,
    again: str,
    error: type[StoredRecordError] = StoredRecordError,
) -> _T:
    """`read(raw)`, or `error` in one line: `what` cannot be read, why, and `again` (what to do)."""
    try:
        return read(raw)
    except _READ_ERRORS as e:
        problem = f"no {e}" if isinstance(e, KeyError) else str(e)
        raise error(
            f"{what} cannot be read ({problem}): it was cut short or written by another "
            f"program; {again}"
        ) from e


def load_diagnosis(raw: Json) -> StoredDiagnosis:
    """The one loader: a stored diagnosis of any schema, upgraded and typed; StoredDiagnosisError
    (one line) for a document it cannot read."""
    what = "this run's stored diagnosis"
    return read_stored(_load, raw, what, "run the diagnosis again", StoredDiagnosisError)


def load_checkpoint_report(raw: Json) -> StoredCheckpoint:
    """A registered checkpoint's stored inspect report (store.register_checkpoint), typed;
    StoredRecordError (one line) for one it cannot read."""
    what = "the checkpoint's stored report"
    return read_stored(StoredCheckpoint.from_dict, raw, what, "register it again")


def load_server_report(raw: Json) -> ServerReport:
    """An endpoint's last probe as the store keeps it (store.record_probe: ServerReport.to_dict()
    of any release), typed; StoredRecordError (one line) for one it cannot read."""
    what = "the endpoint's stored probe"
    return read_stored(ServerReport.from_dict, raw, what, "probe the endpoint again")


def _load(raw: Json) -> StoredDiagnosis:
    d = upgrade(raw)
    identity = d.get("draft_identity")
    profile = d.get("profile")
    prediction = d.get("prediction") or {}
    return StoredDiagnosis(
        schema=SCHEMA,
        verdict=StoredVerdict.from_dict(d.get("verdict") or {}),
        findings=[_build(Finding, f) for f in d.get("findings") or []],
        training=StoredSide.from_dict(d["training"]),
        serving=StoredSide.from_dict(d["serving"]),
        layout_diff=StoredLayoutDiff.from_dict(d.get("layout_diff") or {}),
        detective=None if not d.get("detective") else StoredDetection.from_dict(d["detective"]),
        identity=None if not identity else _build(DraftIdentity, identity),
        not_checked=[_build(NotChecked, n) for n in d.get("not_checked") or []],
        warnings=list(d.get("warnings") or []),
        profile=None if not profile else Profile.from_dict(profile),
        num_target_layers=d.get("num_target_layers"),
        arch=d.get("arch"),
        steps=int(d.get("steps") or d.get("server_steps") or 0),
        timings=dict(d.get("timings") or {}),
        measured=_bench(d.get("measured")),
        baseline=_bench(d.get("baseline")),
        speedup=None if not d.get("speedup") else _build(Speedup, d["speedup"]),
        predicted_training=_layout_result(prediction.get("training")),
        predicted_serving=_layout_result(prediction.get("serving")),
        checkpoint=None if not d.get("checkpoint") else StoredCheckpoint.from_dict(d["checkpoint"]),
        server=None if not d.get("server") else ServerReport.from_dict(d["server"]),
        options=DiagnoseOptions.from_json(d["options"]),
        document=d,
    )
