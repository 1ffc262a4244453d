"""Runs stored by every earlier schema (tests/fixtures/stored/, written by hand) in a real SQLite
store, rendered on every page that reads a run's diagnosis: Runs, Run and Compare (AppTest).

Each expected value is a literal read off the fixture files; the pages must read the old shapes
through the one loader (eagle3dash/diagnosis/stored.py), not each tolerate them on its own."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from eagle3dash import store as db
from tests.appkit import app, frames, no_exception, texts

STORED = Path(__file__).parent / "fixtures" / "stored"
ONE_ROOT = "Serving feeds every slot one block later than training (fixture one)."
TWO_WARNING = "Fixture two measures a lower accept length than its simulation."
THREE_WARNING = "Fixture three measures a lower accept length than its simulation."
THREE_DETECTED = "Fixture three's draft performs best with the layout its config implies."


@pytest.fixture(scope="module")
def stored(tmp_path_factory) -> dict:
    """A home whose runs #1, #2 and #3 hold the schema-1, -2 and -3 fixtures as stored then, with
    the summary columns and findings rows an older eagle3dash wrote beside them."""
    home = tmp_path_factory.mktemp("stored") / "home"
    store = db.open_store(home)
    runs = {}
    try:
        for name, columns in (
            ("schema1", {"measured_accept_length": 1.52, "tok_s": 412.5, "speedup": 1.0801}),
            ("schema2", {"measured_accept_length": 2.06, "tok_s": 233.4}),
            ("schema3", {"measured_accept_length": 2.06, "tok_s": 233.4}),
        ):
            text = (STORED / f"{name}.json").read_text()
            raw = json.loads(text)
            run_id = db.create_run(
                store, None, raw["options"]["endpoint"], raw["options"]["baseline"]
            )
            db.update_run(store, run_id, status="succeeded", diagnosis_json=text, **columns)
            db.save_findings(store, run_id, raw["findings"])
            runs[name] = run_id
    finally:
        store.close()
    return {"home": home, **runs}


@pytest.fixture
def pages(stored, monkeypatch) -> dict:
    monkeypatch.setenv("EAGLE3DASH_HOME", str(stored["home"]))
    return stored


def test_the_runs_page_lists_both_old_runs_with_their_verdicts(pages) -> None:
    at = app("runs")
    no_exception(at)
    table = next(f for f in frames(at) if "verdict" in f.columns)
    verdicts = dict(zip(table["run"], table["verdict"], strict=True))
    assert verdicts[pages["schema1"]] == f"critical: {ONE_ROOT}"
    assert verdicts[pages["schema2"]] == (
        f"warning: {TWO_WARNING} (not checked: the states the server feeds the draft, the speedup)"
    )
    assert verdicts[pages["schema3"]] == (
        f"warning: {THREE_WARNING} (not checked: the states the server feeds the draft, the "
        "speedup)"
    )


def test_a_schema1_run_renders_its_verdict_layouts_and_detective(pages) -> None:
    at = app("run", run=str(pages["schema1"]))
    no_exception(at)
    assert ONE_ROOT in texts(at, "error")
    metrics = {m.label: m.value for m in at.metric}
    assert metrics["Measured accept length"] == "1.52"
    assert metrics["Simulated, serving layout"] == "1.47"
    assert metrics["Speedup vs baseline"] == "1.08x"
    slots = next(f for f in frames(at) if "serving tap" in f.columns)
    assert slots["training tap"].tolist() == ["2", "16", "29"]  # stored as text in schema 1
    assert slots["serving tap"].tolist() == ["3", "17", "30"]
    assert slots["serving feeds"].tolist() == ["after block 3", "after block 17", "after block 30"]
    sweep = next(f for f in frames(at) if "candidate" in f.columns)
    assert sweep["layout"].tolist() == ["[2,16,29]", "[3,17,30]"]
    assert "fixture-one draft performs best with [2,16,29]" in texts(at, "info")
    assert "the fixture-one server's draft is on another machine" in texts(at, "info")
    assert "predates SGLang's spec_correct_drafts_histogram" in texts(at, "caption")
    assert "recorded no stage timings" in texts(at, "caption")
    assert "Acceptance profile" not in [h.value for h in at.header]


def test_a_schema2_run_renders_its_incomplete_verdict_and_profile(pages) -> None:
    at = app("run", run=str(pages["schema2"]))
    no_exception(at)
    assert (
        f"No critical problem found in what was checked; warning: {TWO_WARNING.rstrip('.')}; "
        "not checked: the states the server feeds the draft, the speedup."
    ) in texts(at, "info")
    sides = next(f for f in frames(at) if "quantity" in f.columns and "training" in f.columns)
    taps = sides[sides["quantity"] == "taps fed to the fc slots"].iloc[0]
    assert taps["training"] == "embedding output, after block 5, after block 9"
    assert "Acceptance profile" in [h.value for h in at.header]
    assert (
        "Weakest category: fixture-chat, measured accept length 1.88 against 2.37 for the other "
        "categories."
    ) in texts(at, "markdown")
    # the stored flags, as the whole command that serves the fixture's model (issue 36)
    (command,) = [c.value for c in at.code if c.value.startswith("python -m sglang")]
    assert command.startswith("python -m sglang.launch_server --model-path /models/fixture-target")
    assert "--speculative-num-steps 2 " in command
    assert command.endswith("--speculative-num-draft-tokens 3")
    temperature = next(f for f in frames(at) if "temperature" in f.columns)
    # stored before the rows could stop early: how many prompts each covered is not known
    assert temperature.values.tolist() == [["0.7", "—", "1.74", "201.6"]]
    assert "11.9 s from the first stage to the findings" in texts(at, "caption")


def test_a_schema3_run_renders_its_detected_layout_finding(pages) -> None:
    at = app("run", run=str(pages["schema3"]))
    no_exception(at)
    assert f"warning: {THREE_WARNING.rstrip('.')}" in texts(at, "info")
    assert THREE_DETECTED in texts(at, "markdown")


def test_compare_reads_both_old_runs(pages) -> None:
    at = app("compare", a=str(pages["schema1"]), b=str(pages["schema2"]))
    no_exception(at)
    assert "[1, 15, 28] → [-1, 4, 8]" in texts(at, "markdown")
    table = next(f for f in frames(at) if "run A" in f.columns and "quantity" in f.columns)
    taps = table[table["quantity"] == "serving taps"].iloc[0]
    assert taps["run A"] == "after block 3, after block 17, after block 30"
    assert taps["run B"] == "embedding output, after block 5, after block 9"
    differs = next(f for f in frames(at) if "setting" in f.columns)
    version = differs[differs["setting"] == "version"].iloc[0]
    assert (version["run A"], version["run B"]) == ("SGLang 0.5.2", "SGLang 0.5.23")
