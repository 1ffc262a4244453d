"""The read side: every stored shape of a diagnosis loads through the one loader, typed.

The fixtures (tests/fixtures/stored/) are written by hand in each earlier shape; the expected
values below are read off them by eye."""

import json
from pathlib import Path

import pytest

from eagle3dash.diagnosis.stored import (
    SCHEMA,
    StoredDetection,
    StoredDiagnosisError,
    finding_from_row,
    load_diagnosis,
    schema_of,
    upgrade,
)
from eagle3dash.layout import Tap

STORED = Path(__file__).parent / "fixtures" / "stored"


def fixture(name: str) -> dict:
    return json.loads((STORED / f"{name}.json").read_text())


def test_the_schema_of_each_stored_shape_is_recognised():
    assert [schema_of(fixture(n)) for n in ("schema1", "schema2")] == [1, 2]
    assert schema_of({"schema": 3, "training": {}}) == 3


def test_schema1_loads_typed_with_the_evidence_it_lacked_derived_from_its_sources():
    d = load_diagnosis(fixture("schema1"))
    assert d.schema == SCHEMA == 4
    assert d.training.layout == (Tap(2), Tap(16), Tap(29))
    assert d.serving.layout == (Tap(3), Tap(17), Tap(30))
    # config -> assumed, observed -> observed; the comparison is as strong as the weaker side
    assert (d.training.evidence, d.serving.evidence) == ("assumed", "observed")
    assert d.layout_diff.evidence == "assumed" and d.layout_diff.checked is False
    # slot taps were text ('2', '3')
    assert [(s.training, s.serving) for s in d.layout_diff.slots] == [
        (Tap(2), Tap(3)),
        (Tap(16), Tap(17)),
        (Tap(29), Tap(30)),
    ]
    # a critical finding: the status schema 1 did not store is 'problem'
    assert d.verdict.status == "problem"
    assert d.verdict.root_cause is not None and d.verdict.root_cause.id == "training-serving-gap"
    assert d.findings[1].basis == "observed"  # Finding's default: schema 1 had no basis
    assert d.identity is not None and d.identity.status == "unknown"
    assert d.document["draft_identity"]["evidence"] == "not-checked"
    assert d.profile is None and d.timings == {}
    assert d.serving.eval is not None and d.serving.eval.accuracy == [0.218, 0.19, 0.15]


def test_schema1_detective_layouts_become_taps():
    det = load_diagnosis(fixture("schema1")).detective
    assert det is not None
    assert det.best == (Tap(2), Tap(16), Tap(29)) and det.serving == (Tap(3), Tap(17), Tap(30))
    assert [r.layout for r in det.rows] == [(Tap(2), Tap(16), Tap(29)), (Tap(3), Tap(17), Tap(30))]
    assert [(c.tap, c.score) for c in det.heatmap] == [(Tap(3), 0.86), (Tap(2), 0.45)]
    match = upgrade(fixture("schema1"))["detective"]["slot_match"]
    assert match["tap_rms"] == [
        {"tap": {"depth": 2, "post_norm": False}, "rms": 0.31},
        {"tap": {"depth": 3, "post_norm": False}, "rms": 0.42},
    ]
    assert match["best"] == {"serving": [{"depth": 3, "post_norm": False}]}


def test_schema2_keeps_its_stored_status_profile_and_timings():
    d = load_diagnosis(fixture("schema2"))
    assert d.verdict.status == "incomplete" and d.verdict.identity == "same"
    assert d.layout_diff.slots[0].training == Tap(0) and d.layout_diff.kind == "identical"
    assert [n.check for n in d.layout_diff.would_check] == ["serving-states"]
    assert d.findings[0].basis == "predicted" and d.findings[0].severity == "warning"
    assert d.profile is not None and d.profile.per_category[0].category == "fixture-code"
    assert d.profile.recommended is not None and d.profile.recommended.num_steps == 2
    assert d.timings["total"] == 11.887
    assert d.serving.capture_error.startswith("the fixture-two server")
    slots = upgrade(fixture("schema2"))["prediction"]["diff"]["slots"]
    assert slots[1]["training"] == {"depth": 5, "post_norm": False}


def test_upgrade_keeps_the_stored_document_unchanged():
    raw = fixture("schema1")
    before = json.dumps(raw, sort_keys=True)
    upgrade(raw)
    assert json.dumps(raw, sort_keys=True) == before


def test_a_newer_schema_is_refused_with_what_to_do():
    with pytest.raises(StoredDiagnosisError, match="schema 5.*upgrade eagle3dash"):
        load_diagnosis({"schema": 5, "training": {}, "serving": {}})


def test_a_document_cut_short_is_one_line_naming_what_is_missing():
    # a run stored with no sides at all (a killed writer, another program)
    with pytest.raises(StoredDiagnosisError, match="cannot be read \\(no 'training'\\)"):
        load_diagnosis({"steps": 4, "verdict": {}, "findings": []})


def test_a_post_norm_tap_survives_text_and_dict_forms():
    det = StoredDetection.from_dict({"best": "0,3,31n", "rows": [], "verdict": []})
    assert det.best == (Tap(0), Tap(3), Tap(31, post_norm=True))
    assert Tap.from_dict({"depth": 31, "post_norm": True}) == Tap(31, True)
    assert Tap.from_dict({"depth": 4}) == Tap(4)


DETECTED_TEXT = {"best": "0,1,2", "claimed": "1,2,3n", "fix_ids": [-1, 0, 1]}
DETECTED_TAPS = {
    "best": [
        {"depth": 0, "post_norm": False},
        {"depth": 1, "post_norm": False},
        {"depth": 2, "post_norm": False},
    ],
    "claimed": [
        {"depth": 1, "post_norm": False},
        {"depth": 2, "post_norm": False},
        {"depth": 3, "post_norm": True},
    ],
    "fix_ids": [-1, 0, 1],
}


def test_schema3_detected_layout_data_becomes_taps_and_other_data_stays():
    finding = {"severity": "warning", "title": "t", "evidence": "e", "fix": "f"}
    d = load_diagnosis(
        {
            "schema": 3,
            "options": {"draft": "/d", "endpoint": "http://gpubox:30000"},
            "training": {},
            "serving": {},
            "findings": [
                {**finding, "id": "detected-layout", "data": DETECTED_TEXT},
                {**finding, "id": "slower-than-baseline", "data": {"best": "0,1,2"}},
            ],
        }
    )
    assert [f.data for f in d.findings] == [DETECTED_TAPS, {"best": "0,1,2"}]
    # the findings table's row of a run stored before schema 4 reads the same
    row = {**finding, "rule_id": "detected-layout", "data": DETECTED_TEXT}
    assert finding_from_row(row).data == DETECTED_TAPS
