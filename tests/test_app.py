"""The dashboard's pages under Streamlit's AppTest, on real runs made by the real pipeline.

The test world (tests/conftest.py) gives a tiny target and a random draft served by the SGLang
API double; a module fixture lets `submit_diagnosis` + `run_worker(home, JOB_KINDS, once=True)`
produce two finished runs (the seed-like layout mismatch, and the same draft with the training
layout that matches serving).
Each test points EAGLE3DASH_HOME at that home or at a fresh one; AppTest paths are absolute.
"""

from __future__ import annotations

import io
import json
import os
import re
import threading
import zipfile
from pathlib import Path

import pandas as pd
import pytest
from streamlit.testing.v1 import AppTest

from eagle3dash import jobs as jobq
from eagle3dash import store as db
from eagle3dash.checkpoint import save
from eagle3dash.diagnosis.stored import load_diagnosis
from eagle3dash.diagnosis.stored_run import StoredRun, run_from_row
from eagle3dash.jobs import BusyServer, JobRow
from eagle3dash.jobs.lifecycle import claim_job
from eagle3dash.layout import Layout, Tap
from eagle3dash.submit import submit_diagnosis
from eagle3dash.testing.tensors import random_tensors
from eagle3dash.ui import charts, tables
from eagle3dash.ui.fmt import md_escape
from eagle3dash.ui.progress import cancel_run, progress_view
from eagle3dash.ui.words import waiting_behind_words
from eagle3dash.uploads import register_upload
from tests.appkit import (
    ROOT,
    TIMEOUT,
    app,
    frame_with,
    frames,
    no_exception,
    plain,
    run_queued,
    texts,
)
from tests.specs import served_draft_spec

# --- fixtures ----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def world(tmp_path_factory, served_models, eagle3_double):
    """Two finished runs in one home, made on the test world's double, still serving for the
    New run tests."""
    target, draft, server = served_models["target"], served_models["draft"], eagle3_double
    home = db.open_store(tmp_path_factory.mktemp("app") / "home")
    try:
        checkpoint_id = db.add_checkpoint(home, draft, name="draft")
        from eagle3dash.diagnosis.options import DiagnoseOptions

        def opts(layout: Layout) -> DiagnoseOptions:
            return DiagnoseOptions(
                draft=str(draft),
                endpoint=server.url,
                target=str(target),
                num_prompts=2,
                max_new_tokens=16,
                concurrency=2,
                steps=3,
                training_layout=layout,
            )

        mismatch = submit_diagnosis(home, checkpoint_id, opts((Tap(0), Tap(1), Tap(2))))
        matching = submit_diagnosis(home, checkpoint_id, opts((Tap(1), Tap(2), Tap(3))))
        run_queued(home, [mismatch, matching])
        yield {
            "home": home.home,
            "store": home,
            "url": server.url,
            "draft": draft,
            "checkpoint_id": checkpoint_id,
            "mismatch": mismatch,
            "matching": matching,
        }
    finally:
        home.close()


def checkpoint_files(tmp_path: Path, name: str = "ck") -> dict[str, bytes]:
    path = save(
        served_draft_spec(),
        random_tensors(served_draft_spec(), seed=2),
        tmp_path / name,
        "specforge",
    )
    return {p.name: p.read_bytes() for p in sorted(path.iterdir()) if p.is_file()}


# --- empty states and bad ids ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("page", "says"),
    [
        (None, "No runs yet"),
        ("runs", "No runs yet"),
        ("run", "Open a run from the Runs page"),
        ("compare", "Pick two runs"),
        ("checkpoints", "No checkpoints registered yet"),
        ("new_run", "No checkpoints are registered yet"),
    ],
)
def test_every_page_has_an_empty_state(home, page, says) -> None:
    at = app(page)
    no_exception(at)
    assert says in texts(at)


def test_the_runs_empty_state_links_to_new_run(home) -> None:
    at = app()
    assert "make run" in texts(at)
    links = at.get("page_link")
    assert any("new_run" in link.proto.page for link in links)


@pytest.mark.parametrize("bad", ["abc", "999999", "-3", "1.5", "0", "'<b>x</b>'"])
def test_unknown_or_malformed_run_ids_say_so(home, bad) -> None:
    at = app("run", run=bad)
    no_exception(at)
    errors = texts(at, "error")
    if bad == "999999":
        assert "no run #999999" in errors
    else:
        assert "is not a run id" in errors
        raw = at.error[0].value
        assert "<b>" not in raw.replace("\\<b\\>", "")  # escaped: shown as text, never HTML


def test_compare_with_unknown_or_bad_ids(world_home) -> None:
    at = app("compare", a=str(world_home["mismatch"]), b="999999")
    no_exception(at)
    assert "No run #999999" in texts(at, "error")
    at = app("compare", a="x", b="2")
    no_exception(at)
    assert "?a=x is not a run id" in texts(at, "error")


# --- a finished run ----------------------------------------------------------------------------

ROOT_CAUSE = (
    "Serving feeds the draft the layers after 1, 2 and 3 blocks, but training fed the embedding "
    "output and the layers after 1 and 2 blocks: every slot is one block later than in training."
)
TRAINING_WORDS = "embedding output, after block 1, after block 2"
SERVING_WORDS = "after block 1, after block 2, after block 3"
DECLARED_WORDS = "declared by you (training layout option)"
OBSERVED_WORDS = "observed: each served slot matched to the target's taps"


def in_order(at: AppTest) -> list[tuple[str, str]]:
    """The page's headers and alerts in the order drawn: (kind, text with escapes removed)."""
    kinds = {"header", "error", "warning", "success", "info", "metric"}
    return [
        (node.type, plain(str(node.label if node.type == "metric" else node.value)))
        for node in at.main
        if getattr(node, "type", None) in kinds
    ]


def chart_rows(spec: dict, layer: int | None = None) -> list[dict]:
    """The rows of a chart's (or one layer's) dataset in a Vega-Lite spec."""
    data = (spec if layer is None else spec["layer"][layer])["data"]["name"]
    return spec["datasets"][data]


def test_the_verdict_banner_opens_the_run_page(world_home) -> None:
    at = app("run", run=str(world_home["mismatch"]))
    no_exception(at)
    drawn = in_order(at)
    # First of all: the root cause in one sentence (red), then the accept lengths and the speedup,
    # then what was not checked with the one form field that enables it; then the findings.
    assert drawn[0] == ("error", f"**{ROOT_CAUSE}**")
    # The root cause's fix to paste, right under it (the SGLang double is 0.5.23): a whole JSON
    # object, what to do with it and what -1 means beside it.
    assert plain(at.caption[0].value) == (
        "The fix, to paste. Merge into the draft's config.json, served by SGLang 0.5.23. "
        "-1 = the embedding output."
    )
    assert at.code[0].value == '{"eagle_config": {"eagle_aux_hidden_state_layer_ids": [-1, 0, 1]}}'
    assert [kind for kind, _ in drawn[1:5]] == ["metric"] * 4
    assert drawn[5][0] == "info"
    assert drawn[5][1].startswith(
        "Not checked: no baseline: the speedup against serving without speculation is unknown: "
        "fill in 'Baseline URL"
    )
    assert "on New run (serve the same target without speculation and give its URL)" in drawn[5][1]
    assert drawn[6] == ("header", "Findings")
    metrics = {m.label: m.value for m in at.metric}
    assert metrics == {
        "Measured accept length": "1.07",
        "Simulated, training layout": "1.07",
        "Simulated, serving layout": "1.07",
        "Speedup vs baseline": "—",
    }
    helps = {m.label: plain(m.proto.help) for m in at.metric}
    assert DECLARED_WORDS in helps["Simulated, training layout"]
    assert OBSERVED_WORDS in helps["Simulated, serving layout"]


def test_a_finished_run_shows_findings_first_then_table_layout_charts_export(world_home) -> None:
    run_id = world_home["mismatch"]
    at = app("run", run=str(run_id))
    no_exception(at)
    headers = [h.value for h in at.header]
    # The run had the target at hand, so the layout detective ran too.
    assert headers == [
        "Findings",
        "Training vs serving",
        "Layer layout",
        "Layout detective",
        "Charts",
        "Acceptance profile",
    ]
    # Findings first: the layout mismatch is the first, critical, with evidence and a fix.
    badges = [m.value for m in at.markdown if "badge[" in m.value]
    assert badges and "CRITICAL" in badges[0]
    titles = [plain(m.value) for m in at.markdown if m.value.startswith("**")]
    assert titles[0] == f"**{ROOT_CAUSE}**"
    assert [plain(c.value) for c in at.caption if c.value.startswith("rule ")][0] == (
        "rule layout-mismatch"
    )
    assert any("[-1, 0, 1]" in c.value for c in at.code)  # the fix, copyable
    # Training vs serving: the two sides with their sources, the same numbers as the banner.
    table = frame_with(at, "quantity").set_index("quantity")
    assert table.loc["taps fed to the fc slots"].tolist() == [TRAINING_WORDS, SERVING_WORDS]
    assert table.loc["where that layout comes from"].tolist() == [DECLARED_WORDS, OBSERVED_WORDS]
    # The config's ids read as SpecForge's output-of differ from what was declared; SGLang's rules
    # agree with what the server was observed to feed.
    assert table.loc["what the config / SGLang's rules predict"].tolist() == [
        SERVING_WORDS,
        f"the same as found: {SERVING_WORDS}",
    ]
    assert table.loc["draft accuracy, step 1"].tolist() == ["0.0%", "0.0%"]
    assert table.loc["draft accuracy, step 3"].tolist() == ["0.0%", "0.0%"]
    assert table.loc["simulated accept length (3 draft steps)"].tolist() == ["1.07", "1.07"]
    assert table.loc["measured accept length (endpoint)", "serving"] == "1.07"
    assert table.loc["baseline tok/s (no speculation)", "serving"] == "—"  # no baseline given
    assert table.loc["speedup vs baseline", "serving"] == "—"
    assert "Draft on the endpoint: the endpoint serves this checkpoint's draft" in texts(at)
    # The layout diff as the diagnosis classified it, in words (not its kind's id): red box,
    # the slot table, the diagram.
    assert (
        "\nServing feeds every slot one block later than training; embedding output only in "
        "training. How it is known:" in texts(at, "error")
    )
    assert "off-by-one" not in texts(at, "error")
    diff = frame_with(at, "serving feeds")
    assert diff["training tap"].tolist() == ["0", "1", "2"]
    assert diff["serving tap"].tolist() == ["1", "2", "3"]
    assert diff["training feeds"].tolist() == TRAINING_WORDS.split(", ")
    assert diff["serving feeds"].tolist() == SERVING_WORDS.split(", ")
    assert diff["match"].tolist() == ["DIFFERS"] * 3
    # The detective's verdict, from the diagnosis.
    assert "This draft performs best with [0,1,2]" in texts(at, "info")
    # Charts: the layout diagram, the detective's slot heatmap, accuracy and acceptance per step,
    # accept length and tok/s per request; then the profile's.
    titles = [json.loads(c.proto.spec).get("title") for c in at.get("vega_lite_chart")]
    assert titles == [
        "Layer layout: the tap each fc slot gets in training and in serving",
        "Which tap each slot carries: the match score of every slot and tap",
        "Standalone draft: accuracy and acceptance per step",
        "Accept length per request (lines: simulated by the standalone draft)",
        "Output tok/s per request",
        # the acceptance profile: the per-position chart moves there
        "Acceptance per draft position: measured on the endpoint vs simulated",
        "Per category: accept length, tok/s and speedup",
        # no baseline, so no tok/s predicted: no empty tok/s chart (a caption says so)
        "Steps advice: predicted accept length by draft steps",
    ]
    # The shareable link, the exports, the checkpoint and server reports, the logs.
    assert any(f"run?run={run_id}" in c.value for c in at.code)
    labels = [b.label for b in at.get("download_button")]
    assert labels == [
        "Download the profile (JSON)",
        "Download the profile (CSV)",
        "Download the diagnosis (JSON)",
        "Download the numbers (CSV)",
    ]
    assert frame_with(at, "field").set_index("field").loc["format", "value"] == "specforge"
    server = frame_with(at, "setting").set_index("setting")
    assert server.loc["speculative algorithm", "value"] == "EAGLE3"
    assert any("job " in e.label and "succeeded" in e.label for e in at.expander)


def test_the_matching_run_has_no_layout_finding(world_home) -> None:
    at = app("run", run=str(world_home["matching"]))
    no_exception(at)
    diff = frame_with(at, "serving feeds")
    assert diff["match"].tolist() == ["same"] * 3
    assert diff["training tap"].tolist() == ["1", "2", "3"]
    # Observed serving slots against a declared training layout: a checked agreement, green.
    assert "Training and serving feed the same taps to every slot (declared by you)." in texts(
        at, "success"
    )
    assert "rule layout-mismatch" not in texts(at, "caption")
    table = frame_with(at, "quantity").set_index("quantity")
    assert table.loc["taps fed to the fc slots"].tolist() == [SERVING_WORDS, SERVING_WORDS]
    assert "what the config / SGLang's rules predict" not in table.index  # both agree


def test_a_diagnosis_without_problems_but_unchecked_parts_is_incomplete_not_green(
    world, home
) -> None:
    # The mismatch run's stored diagnosis with its findings taken away: nothing was found, the
    # speedup still was not checked: incomplete, in blue, and no green anywhere in the verdict.
    stored = db.get_run(world["store"], world["mismatch"])["diagnosis"]
    clean = {
        **stored,
        "findings": [],
        "verdict": {
            **stored["verdict"],
            "root_cause": None,
            "problems_found": False,
            "status": "incomplete",
        },
    }
    run_id = db.create_run(home, None, "http://gpubox:30000")
    db.update_run(home, run_id, status="succeeded", diagnosis_json=json.dumps(clean))
    at = app("run", run=str(run_id))
    no_exception(at)
    drawn = in_order(at)
    assert drawn[0] == (
        "info",
        "**No critical problem found in what was checked; not checked: the speedup.**",
    )
    assert drawn[6] == ("header", "Findings")
    assert "No findings." in texts(at, "caption")


def test_a_healthy_diagnosis_says_what_it_rests_on_in_green(world, home) -> None:
    # Every check ran, nothing at warning or worse: the banner states the observed agreement,
    # the served weights, measured against simulated and the speedup.
    stored = db.get_run(world["store"], world["mismatch"])["diagnosis"]
    healthy = {
        **stored,
        "findings": [],
        "not_checked": [],
        "layout_diff": {**stored["layout_diff"], "kind": "identical", "evidence": "observed"},
        "draft_identity": {"status": "same", "reason": "the weight files are byte-identical"},
        "verdict": {
            **stored["verdict"],
            "root_cause": None,
            "problems_found": False,
            "status": "healthy",
            "not_checked": [],
            "measured_accept_length": 3.28,
            "sim_accept_serving": 3.25,
            "speedup": 1.79,
        },
    }
    run_id = db.create_run(home, None, "http://gpubox:30000")
    db.update_run(home, run_id, status="succeeded", diagnosis_json=json.dumps(healthy))
    at = app("run", run=str(run_id))
    no_exception(at)
    assert in_order(at)[0] == (
        "success",
        "**Healthy: training and serving feed the same taps to every slot (observed); the "
        "endpoint serves this checkpoint's weights (byte-identical); measured accept length 3.28 "
        "against 3.25 simulated on the served states; 1.79x the baseline's tok/s.**",
    )


def test_the_run_tables_charts_and_exports_as_plain_functions(world) -> None:
    store, run_id = world["store"], world["mismatch"]
    run = db.get_run(store, run_id)
    diagnosis = load_diagnosis(run["diagnosis"])
    # The numbers of the diagnosis in long rows: per draft step, per request, overall.
    metrics = tables.diagnosis_metrics(diagnosis)
    accuracy = metrics[metrics["name"] == "accuracy"]
    # evaluated to 8 steps: the profile's steps advice simulates --speculative-num-steps 1..8
    assert accuracy["source"].tolist() == ["training"] * 8 + ["serving"] * 8
    assert accuracy["step"].tolist() == [*range(1, 9), *range(1, 9)]
    assert accuracy["value"].tolist() == [0.0] * 16
    per_request = metrics[metrics["request"].notna()]
    assert per_request[["source", "name", "request"]].values.tolist() == [
        ["measured", "accept_length", 0],
        ["measured", "accept_length", 1],
        ["measured", "tok_s", 0],
        ["measured", "tok_s", 1],
    ]
    # Acceptance per step, both sides; a colour per side, fixed.
    spec = charts.acceptance_chart(metrics).to_dict()
    rows = chart_rows(spec)
    assert {(r["side"], r["metric"], r["draft step"]) for r in rows} == {
        (side, metric, step)
        for side in ("training layout", "serving layout")
        for metric in ("accuracy", "acceptance")
        for step in range(1, 9)
    }
    assert spec["layer"][0]["encoding"]["x"]["field"] == "draft step"
    assert spec["layer"][0]["encoding"]["color"]["scale"] == {
        "domain": ["training layout", "serving layout"],
        "range": ["#0072B2", "#E69F00"],
    }
    # Accept length: the measured requests as bars, the simulated sides as rules.
    spec = charts.accept_length_chart(metrics).to_dict()
    bars, rules = chart_rows(spec, 0), chart_rows(spec, 1)
    measured = "endpoint (measured)"
    assert [(r["side"], r["request"]) for r in bars] == [(measured, 0), (measured, 1)]
    assert [round(r["value"], 4) for r in bars] == [1.0667, 1.0667]
    assert [(r["simulated"], round(r["value"], 4)) for r in rules] == [
        ("training", 1.0667),
        ("serving", 1.0667),
    ]
    assert spec["layer"][1]["mark"]["type"] == "rule"
    # tok/s per request: the endpoint's two requests, as measured.
    spec = charts.tok_s_chart(metrics).to_dict()
    rows = chart_rows(spec)
    assert [(r["side"], r["request"]) for r in rows] == [(measured, 0), (measured, 1)]
    assert diagnosis.measured is not None
    assert [r["value"] for r in rows] == diagnosis.measured.output_tok_s_per_request
    assert spec["encoding"]["y"]["title"] == "output tok/s"
    # The layout diagram: each side's taps per slot, the slots joined in red.
    spec = charts.layout_chart(tables.layout_points(diagnosis), 4).to_dict()
    assert chart_rows(spec, 0) == [
        {"slot": 0, "training": 0, "serving": 1, "match": "differs"},
        {"slot": 1, "training": 1, "serving": 2, "match": "differs"},
        {"slot": 2, "training": 2, "serving": 3, "match": "differs"},
    ]
    points = [(r["side"], r["depth"], r["feeds"]) for r in chart_rows(spec, 1)]
    assert points == [
        ("training", 0, "embedding output"),
        ("training", 1, "after block 1"),
        ("training", 2, "after block 2"),
        ("serving", 1, "after block 1"),
        ("serving", 2, "after block 2"),
        ("serving", 3, "after block 3"),
    ]
    assert spec["layer"][1]["encoding"]["x"]["scale"] == {"domain": [0, 4]}
    # Exports: the stored diagnosis with the run row; the CSV of its numbers.
    exported = json.loads(tables.run_export(run_from_row(run), diagnosis))
    assert exported["run"]["id"] == run_id and "diagnosis_json" not in exported["run"]
    assert exported["run"]["worst_severity"] == "critical"
    assert exported["diagnosis"] == json.loads(json.dumps(run["diagnosis"]))  # current schema
    assert exported["diagnosis"]["findings"][0]["id"] == "layout-mismatch"
    csv = pd.read_csv(io.StringIO(tables.diagnosis_csv(diagnosis)))
    assert list(csv.columns) == ["source", "name", "step", "request", "value"]
    # the measured acceptance at 3 positions + 2 sides x (2 metrics x 8 steps + 1)
    # + 2 x (2 requests + all)
    assert len(csv) == 43
    assert csv[csv["name"] == "acceptance"]["source"].tolist()[:3] == ["measured"] * 3
    # No diagnosis: no numbers, no charts, not an error.
    empty = tables.diagnosis_metrics(None)
    assert empty.empty and charts.acceptance_chart(empty) is None
    assert charts.accept_length_chart(empty) is None and charts.tok_s_chart(empty) is None


def test_a_separate_detect_job_shows_beside_the_diagnosis_detective(world, home) -> None:
    stored = db.get_run(world["store"], world["mismatch"])["diagnosis"]
    run_id = db.create_run(home, None, "http://gpubox:30000")
    db.update_run(home, run_id, status="succeeded", diagnosis_json=json.dumps(stored))
    detection = {**stored["detective"], "verdict": ["The detect job's own verdict."]}
    job_id = jobq.submit_job(home, "detect", {}, run_id=run_id)
    home.db.execute(
        "UPDATE jobs SET status = 'succeeded', result_json = ? WHERE id = ?",
        (json.dumps(detection), job_id),
    )
    found = tables.detections(load_diagnosis(stored), jobq.read_jobs(home, run_id))
    assert [label for label, _ in found] == ["from this diagnosis", f"from detect job {job_id}"]
    at = app("run", run=str(run_id))
    no_exception(at)
    subheaders = [s.value for s in at.subheader]
    assert "Layout detective from this diagnosis" in subheaders
    assert f"Layout detective from detect job {job_id}" in subheaders
    assert "The detect job's own verdict." in texts(at, "info")


def test_an_old_run_without_a_diagnosis_shows_its_findings(home) -> None:
    # Stored by an older version: findings rows and the old per-run tables, no diagnosis.
    run_id = db.create_run(home, None, "http://gpubox:30000")
    db.save_findings(
        home,
        run_id,
        [{"rule_id": "old-rule", "severity": "warning", "title": "An old finding.", "fix": "x"}],
    )
    home.db.execute(
        "INSERT INTO layouts (run_id, side, slot, depth) VALUES (?, 'training', 0, 0), "
        "(?, 'training', 1, 1)",
        (run_id, run_id),
    )
    home.db.execute(
        "INSERT INTO metrics (run_id, source, name, value) VALUES (?, 'training', 'accuracy', 0.5)",
        (run_id,),
    )
    home.db.execute(
        "INSERT INTO bench_results (run_id, role, result_json, created_at) "
        "VALUES (?, 'spec', '{\"tok_s\": 41.0}', '2026-01-02T00:00:00Z')",
        (run_id,),
    )
    db.update_run(home, run_id, status="succeeded", measured_accept_length=2.0)
    at = app("run", run=str(run_id))
    no_exception(at)
    assert [h.value for h in at.header] == ["Findings"]
    assert not at.metric and not at.get("vega_lite_chart")  # no banner, no charts
    assert "No diagnosis is stored for this run" in texts(at, "caption")
    assert "Only the findings recorded for it are shown." in texts(at, "caption")
    assert "**An old finding.**" in texts(at, "markdown")
    assert "nothing to export" in texts(at, "caption")
    assert not at.get("download_button")


# --- runs and compare --------------------------------------------------------------------------


def test_the_runs_page_lists_runs_with_links_and_headline_numbers(world_home) -> None:
    at = app()
    no_exception(at)
    runs = frame_with(at, "open")
    ids = {world_home["mismatch"], world_home["matching"]}
    assert set(runs["run"]) == ids
    assert {f"run?run={i}" for i in ids} == set(runs["open"])
    row = runs.set_index("run").loc[world_home["mismatch"]]
    assert row["status"] == "succeeded" and row["verdict"] == f"critical: {ROOT_CAUSE}"
    assert row["measured"] > 1.0 and row["checkpoint"] == "draft"
    # Filters: search and status.
    at.text_input(key="runs_search").set_value(f"#{world_home['matching']}").run()
    assert list(frame_with(at, "open")["run"]) == [world_home["matching"]]
    at.text_input(key="runs_search").set_value("").run()
    at.selectbox(key="runs_status").set_value("failed").run()
    assert "No runs match" in texts(at)


def test_the_compare_picker_on_runs_leads_to_the_compare_view(world_home) -> None:
    a, b = world_home["mismatch"], world_home["matching"]
    at = app()
    at.multiselect(key="runs_compare").set_value([a, b]).run()
    at.button(key="runs_compare_go").click().run()
    no_exception(at)
    assert at.title[0].value == "Compare runs"
    assert at.query_params["a"] == str(a) and at.query_params["b"] == str(b)


def test_the_compare_view_shows_both_runs_and_the_deltas(world_home) -> None:
    a, b = world_home["mismatch"], world_home["matching"]
    at = app("compare", a=str(a), b=str(b))
    no_exception(at)
    table = frame_with(at, "change (B - A)").set_index("quantity")
    assert table.loc["training taps"].tolist() == [TRAINING_WORDS, SERVING_WORDS, ""]
    assert table.loc["training layout from"].tolist() == [DECLARED_WORDS, DECLARED_WORDS, ""]
    assert table.loc["serving taps"].tolist() == [SERVING_WORDS, SERVING_WORDS, ""]
    assert table.loc["serving layout from"].tolist() == [OBSERVED_WORDS, OBSERVED_WORDS, ""]
    # The headline numbers from the runs' summary columns: both measured 1.07, no baseline.
    assert table.loc["measured accept length"].tolist() == ["1.07", "1.07", "+0.00"]
    assert table.loc["speedup"].tolist() == ["—", "—", "—"]
    assert table.loc["worst finding", "run A"] == f"critical: {ROOT_CAUSE}"
    assert [s.value for s in at.subheader] == ["What differs", f"Run A: #{a}", f"Run B: #{b}"]
    # What differs comes first: the two runs declared different training layouts.
    differs = frame_with(at, "setting")
    assert differs.to_dict("records") == [
        {
            "what": "prompts and options",
            "setting": "training_layout",
            "run A": "0,1,2",
            "run B": "1,2,3",
        }
    ]
    # Each run's layer layout from its diagnosis.
    slots = [f for f in frames(at) if "serving feeds" in f.columns]
    assert [f["match"].tolist() for f in slots] == [["DIFFERS"] * 3, ["same"] * 3]
    # The accuracy per step of both runs, both sides.
    (chart,) = at.get("vega_lite_chart")
    spec = json.loads(chart.proto.spec)
    assert spec["title"] == "Draft accuracy per step"
    assert spec["layer"][0]["encoding"]["color"]["field"] == "run"
    assert spec["layer"][0]["encoding"]["strokeDash"]["field"] == "layout"
    assert any(f"compare?a={a}&b={b}" in c.value for c in at.code)


# --- progress ----------------------------------------------------------------------------------


def _running_run(store: db.Store, status: str, progress: float = 0.0, message: str = "") -> int:
    run_id = db.create_run(store, None, "http://gpubox:30000")
    job_id = jobq.submit_job(store, "diagnose", {"options": {}}, run_id=run_id)
    if status != "queued":
        db.update_run(store, run_id, status=status)
        store.db.execute(
            "UPDATE jobs SET status = ?, progress = ?, message = ?, started_at = ? WHERE id = ?",
            (status, progress, message, db.now_iso(), job_id),
        )
    return run_id


def test_a_running_job_shows_progress_and_can_be_cancelled(home) -> None:
    run_id = _running_run(home, "running", 0.4, "capturing")
    at = app("run", run=str(run_id))
    no_exception(at)
    assert [h.value for h in at.header] == []  # no results yet
    bars = at.get("progress")
    assert len(bars) == 1 and bars[0].proto.value == 40
    assert "capturing" in bars[0].proto.text
    assert "running" in texts(at)
    at.button(key=f"cancel-{run_id}").click().run()
    no_exception(at)
    job = jobq.list_jobs(home, run_id)[0]
    assert job["cancel_requested"] and job["status"] == "running"  # the worker stops it


def test_a_queued_run_waits_for_a_worker_and_cancels_at_once(home) -> None:
    run_id = _running_run(home, "queued")
    at = app("run", run=str(run_id))
    no_exception(at)
    assert "python -m eagle3dash worker" in texts(at)
    at.button(key=f"cancel-{run_id}").click().run()
    no_exception(at)
    assert db.get_run(home, run_id)["status"] == "cancelled"
    assert "This run was cancelled before it started" in texts(at, "info")
    assert not at.error  # a cancel is not an error


def test_a_queued_run_says_which_run_measures_its_server_now(home) -> None:
    endpoint, baseline = "gpubox:30000", "gpubox:30001"  # as submit_diagnosis names them
    ahead = db.create_run(home, None, endpoint)
    jobq.submit_job(home, "diagnose", {}, run_id=ahead, servers=[endpoint, baseline])
    claim_job(home, os.getpid())
    waiting = db.create_run(home, None, endpoint)
    jobq.submit_job(home, "diagnose", {}, run_id=waiting, servers=[baseline])
    at = app("run", run=str(waiting))
    no_exception(at)
    assert (
        f"Queued behind run #{ahead}, which is measuring gpubox:30001 now. A server "
        "is measured by one run at a time, so that no run's numbers include another's "
        "requests; this run starts when that one ends."
    ) in texts(at)
    assert "python -m eagle3dash worker" not in texts(at)  # a worker is there: it runs the first
    # no timings yet, and the page does not say the run finished
    assert "Each stage's wall time appears here when the run finishes." in texts(at)
    assert "finished before" not in texts(at)


def test_the_waiting_words_name_each_run_ahead_and_its_servers() -> None:
    busy = [
        BusyServer("127.0.0.1:30000", 4, 3),
        BusyServer("127.0.0.1:30001", 4, 3),
        BusyServer("gpubox:30002", 9, None),  # a job without a run
    ]
    assert plain(waiting_behind_words(busy)) == (  # as the reader sees the Markdown
        "Queued behind run #3, which is measuring 127.0.0.1:30000 and 127.0.0.1:30001; job 9, "
        "which is measuring gpubox:30002 now. A server is measured by one run at a time, so "
        "that no run's numbers include another's requests; this run starts when they end."
    )


def run_row(**row) -> StoredRun:
    """A run as the store lists it, with only `row`'s columns set (the rest as a fresh run)."""
    return run_from_row({"id": 1, **row})


def test_progress_view_logic() -> None:
    run = run_row(status="running")
    job = {"id": 1, "status": "running", "progress": 0.25, "message": "capturing"}
    view = progress_view(run, [JobRow.from_row(job)])
    assert view.active and view.poll_every == 2.0 and view.percent == 25
    assert view.message == "capturing" and not view.waiting_for_worker
    queued = progress_view(
        run_row(status="queued"), [JobRow.from_row({**job, "status": "queued", "progress": 0})]
    )
    assert queued.active and queued.waiting_for_worker and queued.status == "queued"
    # A job that died while the run row still says running: the job wins, polling stops.
    dead = {**job, "status": "failed", "error": "abandoned: no heartbeat"}
    view = progress_view(run, [JobRow.from_row(dead)])
    assert not view.active and view.poll_every is None
    assert view.status == "failed" and "heartbeat" in view.error
    done = progress_view(
        run_row(status="succeeded"), [JobRow.from_row({**job, "status": "succeeded"})]
    )
    assert done.status == "succeeded" and done.percent == 100 and done.error is None
    cancelling = progress_view(run, [JobRow.from_row({**job, "cancel_requested": True})])
    assert cancelling.cancelling and cancelling.active
    none = progress_view(run_row(status="queued"), [])
    assert none.status == "queued" and not none.active and none.job_id is None


def test_cancel_run_on_finished_jobs_changes_nothing(home) -> None:
    run_id = _running_run(home, "succeeded")
    home.db.execute("UPDATE jobs SET status = 'succeeded' WHERE run_id = ?", (run_id,))
    assert "nothing to cancel" in cancel_run(home, run_id)
    assert db.get_run(home, run_id)["status"] == "succeeded"


# --- uploads on the New run page ---------------------------------------------------------------


def _upload(at: AppTest, files: list[tuple[str, bytes, str]]) -> AppTest:
    at.radio(key="ckpt_source").set_value("An upload").run()
    at.file_uploader(key="ckpt_upload").set_value(files).run()
    return at


def _no_staging_left(store: db.Store) -> bool:
    return not any(p.name.startswith(".upload-") for p in store.path("checkpoints").iterdir())


def test_uploading_checkpoint_files_registers_them(home, tmp_path) -> None:
    files = checkpoint_files(tmp_path)
    at = _upload(app("new_run"), [(n, b, "application/octet-stream") for n, b in files.items()])
    no_exception(at)
    assert "Registered checkpoint #1" in texts(at, "success")
    assert frame_with(at, "field").set_index("field").loc["format", "value"] == "specforge"
    (row,) = db.list_checkpoints(home)
    assert row.uploaded and Path(row.path).parent == home.path("checkpoints")
    assert Path(row.path).name == row.sha256
    at.run()  # a rerun does not store it again
    assert len(db.list_checkpoints(home)) == 1 and _no_staging_left(home)


def test_uploading_a_zip_of_a_folder_registers_it(home, tmp_path) -> None:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as zf:
        for name, blob in checkpoint_files(tmp_path).items():
            zf.writestr(f"my-draft/{name}", blob)
    at = _upload(app("new_run"), [("my-draft.zip", buf.getvalue(), "application/zip")])
    no_exception(at)
    (row,) = db.list_checkpoints(home)
    assert row.name == "my-draft" and row.format == "specforge"
    assert sorted(p.name for p in Path(row.path).iterdir()) == [
        "config.json",
        "model.safetensors",
    ]


def _evil_zip(files: dict[str, bytes]) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as zf:
        for name, blob in files.items():
            zf.writestr(name, blob)
        zf.writestr("../evil", b"boom")
    return buf.getvalue()


@pytest.mark.parametrize("kind", ["truncated", "traversal", "garbage"])
def test_a_broken_upload_shows_the_problem_and_registers_nothing(home, tmp_path, kind) -> None:
    files = checkpoint_files(tmp_path)
    if kind == "truncated":
        blob = files["model.safetensors"]
        upload = [
            ("config.json", files["config.json"], "application/json"),
            ("model.safetensors", blob[: len(blob) // 2], "application/octet-stream"),
        ]
        says = "truncated"
    elif kind == "traversal":
        upload = [("bad.zip", _evil_zip(files), "application/zip")]
        says = "'..'"
    else:
        upload = [("junk.tar.gz", b"this is not an archive at all", "application/gzip")]
        says = "not a zip or tar archive"
    at = _upload(app("new_run"), upload)
    no_exception(at)
    errors = texts(at, "error")
    assert "Upload rejected, nothing registered" in errors and says in errors
    assert db.list_checkpoints(home, include_removed=True) == []
    assert _no_staging_left(home)
    assert not (tmp_path / "evil").exists() and not (home.home / "evil").exists()


# --- New run: probe and submit -----------------------------------------------------------------


def test_new_run_probes_the_endpoint_and_submits_to_the_run_page(world, home) -> None:
    checkpoint_id = db.add_checkpoint(home, world["draft"], name="draft")
    at = app("new_run")
    # Labels as written (Streamlit makes them the inputs' aria-labels too: no Markdown escapes).
    endpoint = at.text_input(key="endpoint")
    assert endpoint.label == "Endpoint URL (the server running the target with this draft)"
    endpoint.set_value(world["url"]).run()
    no_exception(at)
    metrics = {m.label: plain(m.value) for m in at.metric}
    assert metrics["SGLang version"] == "0.5.23" and metrics["Speculative"] == "EAGLE3"
    assert metrics["Draft steps"] == "3" and metrics["Hidden states"] == "on"
    assert "Before you submit" in texts(at)  # the probe checked against the checkpoint
    assert db.get_endpoint(home, world["url"]) is not None  # the probe is remembered
    at.text_input(key="opt_training_layout").set_value("0,1,2").run()
    at.button(key="submit").click().run()
    no_exception(at)
    (run,) = db.list_runs(home)
    assert run["checkpoint_id"] == checkpoint_id and run["status"] == "queued"
    assert run["options"]["training_layout"] == "0,1,2"
    assert run["options"]["draft"] == str(world["draft"])
    assert at.query_params["run"] == str(run["id"])
    assert at.title[0].value == f"Run #{run['id']}"  # landed on the Run page
    assert at.get("progress")  # and it shows the queued job's progress


def test_new_run_with_a_down_endpoint_shows_the_error_not_a_traceback(home) -> None:
    at = app("new_run")
    at.text_input(key="endpoint").set_value("http://127.0.0.1:9").run()
    no_exception(at)
    errors = texts(at, "error")
    assert "cannot connect" in errors and "Traceback" not in errors
    at.button(key="submit").click().run()
    no_exception(at)
    assert db.count_runs(home) == 0


def test_new_run_refuses_a_bad_training_layout(world, home) -> None:
    db.add_checkpoint(home, world["draft"], name="draft")
    at = app("new_run")
    at.text_input(key="endpoint").set_value(world["url"]).run()
    at.text_input(key="opt_training_layout").set_value("zero,1").run()
    at.button(key="submit").click().run()
    no_exception(at)
    assert "Training layout override (taps the training data used): not a tap" in texts(at, "error")
    assert db.count_runs(home) == 0


def test_a_jsonl_prompt_upload_is_validated(home) -> None:
    at = app("new_run")
    at.radio(key="prompt_source").set_value("Upload a JSONL file").run()
    good = b'{"prompt": "hello"}\n{"input_ids": [1, 2, 3]}\n'
    at.file_uploader(key="prompt_file").set_value(("p.jsonl", good, "application/json")).run()
    no_exception(at)
    assert "2 prompts from p.jsonl" in texts(at, "success")
    assert len(list(home.path("prompts").glob("*.jsonl"))) == 1
    bad = b'{"prompt": "hello"}\nnot json\n'
    at.file_uploader(key="prompt_file").set_value(("q.jsonl", bad, "application/json")).run()
    assert "line 2" in texts(at, "error")


# --- checkpoints -------------------------------------------------------------------------------


def test_the_checkpoints_page_removes_an_upload_but_keeps_its_runs(home, tmp_path) -> None:
    files = checkpoint_files(tmp_path)
    uploaded = register_upload(home, [_named(n, b) for n, b in files.items()], name="up")
    run_id = db.create_run(home, uploaded.checkpoint_id, "http://gpubox:30000")
    at = app("checkpoints")
    no_exception(at)
    assert any("up" in m.value and "uploaded" in m.value for m in at.markdown)
    at.button(key=f"remove-{uploaded.checkpoint_id}").click().run()
    at.button(key=f"remove-yes-{uploaded.checkpoint_id}").click().run()  # asked to confirm
    no_exception(at)
    assert "its uploaded files were deleted" in texts(at, "success")
    assert not uploaded.path.exists()
    assert db.list_checkpoints(home) == []
    assert db.get_run(home, run_id)["checkpoint_removed"] is True
    at = app("run", run=str(run_id))
    no_exception(at)
    assert "up (removed)" in texts(at)


def test_the_checkpoints_page_registers_a_path(home, tmp_path) -> None:
    path = save(
        served_draft_spec(),
        random_tensors(served_draft_spec(), seed=3),
        tmp_path / "mine",
        "specforge",
    )
    at = app("checkpoints")
    at.text_input(key="register_path").set_value(str(path)).run()
    at.button(key="register_go").click().run()
    no_exception(at)
    (row,) = db.list_checkpoints(home)
    assert row.path == str(path) and not row.uploaded
    at.text_input(key="register_path").set_value(str(tmp_path / "nope")).run()
    at.button(key="register_go").click().run()
    assert "does not exist" in texts(at, "error")


def _named(name: str, blob: bytes) -> io.BytesIO:
    f = io.BytesIO(blob)
    f.name = name
    return f


# --- text is text ------------------------------------------------------------------------------


def test_finding_text_is_escaped_never_html(home) -> None:
    run_id = db.create_run(home, None, "http://gpubox:30000")
    evil = "<script>alert(1)</script> **bold** [link](http://x) $x$"
    db.save_findings(
        home,
        run_id,
        [{"rule_id": "r", "severity": "critical", "title": evil, "evidence": evil, "fix": evil}],
    )
    db.update_run(home, run_id, status="succeeded")
    at = app("run", run=str(run_id))
    no_exception(at)
    shown = [m.value for m in at.markdown if "script" in m.value]
    assert shown and all("\\<script\\>" in s and "<script>" not in s for s in shown)
    # the fix is prose: escaped in the text beside, never in a block to paste
    assert any("Fix: " in s for s in shown) and not any(evil in c.value for c in at.code)
    assert md_escape("a*b_c<d>") == "a\\*b\\_c\\<d\\>"


def test_no_page_allows_unsafe_html() -> None:
    sources = [
        *(ROOT / "eagle3dash/dashboard").rglob("*.py"),
        *(ROOT / "eagle3dash/ui").glob("*.py"),
    ]
    for path in sources:
        assert not re.search(r"unsafe_allow_html\s*=", path.read_text()), path


# --- more flows --------------------------------------------------------------------------------


def test_new_run_with_a_path_registers_the_checkpoint_on_submit(world, home) -> None:
    at = app("new_run")
    assert at.radio(key="ckpt_source").value == "A path on this machine"  # none registered yet
    at.text_input(key="ckpt_path").set_value(str(world["draft"] / "config.json")).run()
    assert "specforge draft at" in texts(at, "success")
    at.text_input(key="endpoint").set_value(world["url"]).run()
    at.button(key="submit").click().run()
    no_exception(at)
    (row,) = db.list_checkpoints(home)
    assert row.path == str(world["draft"]) and row.format == "specforge"
    assert db.get_checkpoint(home, row.id).report["aux_layer_ids"] == [0, 1, 2]
    (run,) = db.list_runs(home)
    assert run["checkpoint_id"] == row.id
    assert at.query_params["run"] == str(run["id"])


def test_a_failed_run_shows_why_and_its_log(home) -> None:
    run_id = _running_run(home, "running")
    (job,) = jobq.list_jobs(home, run_id)
    home.db.execute(
        "UPDATE jobs SET status = 'failed', error = ? WHERE id = ?",
        ("EndpointError: cannot connect to http://gpubox:30000", job["id"]),
    )
    db.update_run(home, run_id, status="failed", error="cannot connect to http://gpubox:30000")
    home.path("logs", f"{job['id']}.log").write_text("[worker] job started\nTraceback: boom\n")
    at = app("run", run=str(run_id))
    no_exception(at)
    assert "The run failed: cannot connect to http://gpubox:30000" in texts(at, "error")
    assert not at.get("progress")
    assert any("Traceback: boom" in c.value for c in at.code)  # the log, in its tab


def test_the_runs_page_pages_through_many_runs(home) -> None:
    with home.transaction() as d:
        d["runs"].insert_all(
            {"created_at": f"2025-01-01T00:00:{i // 100:02d}.{i:06d}Z", "status": "succeeded"}
            for i in range(120)
        )
    at = app()
    assert len(frame_with(at, "open")) == 50
    assert "Runs 1–50 of 120 (page 1 of 3)" in texts(at, "caption")
    at.number_input(key="runs_page").set_value(3).run()
    runs = frame_with(at, "open")
    assert len(runs) == 20 and runs["run"].max() == 20  # the oldest ones
    at.selectbox(key="runs_status").set_value("failed").run()  # page 3 of nothing: clamped
    no_exception(at)
    assert "No runs match" in texts(at)


def test_the_compare_pickers_set_the_link(world_home) -> None:
    a, b = world_home["mismatch"], world_home["matching"]
    at = app("compare")
    at.number_input(key="compare_a").set_value(a).run()
    at.number_input(key="compare_b").set_value(b).run()
    at.button(key="compare_go").click().run()
    no_exception(at)
    assert at.query_params["a"] == str(a) and at.query_params["b"] == str(b)
    assert frame_with(at, "change (B - A)") is not None


def test_get_store_keeps_no_connection_of_finished_threads(home) -> None:
    from eagle3dash.ui.home import get_store, open_stores

    def work() -> None:
        assert db.count_runs(get_store()) == 0

    for _ in range(20):
        thread = threading.Thread(target=work)
        thread.start()
        thread.join()
    assert db.count_runs(get_store()) == 0  # this call closes the dead threads' stores
    assert open_stores() <= 2
    assert get_store() is get_store()  # one store per thread


@pytest.mark.parametrize("page", [None, "run", "new_run", "checkpoints", "compare"])
def test_a_home_that_is_a_file_is_one_clear_page(tmp_path, monkeypatch, page) -> None:
    blocker = tmp_path / "home"
    blocker.write_text("not a folder")
    monkeypatch.setenv("EAGLE3DASH_HOME", str(blocker))
    at = app(page)
    no_exception(at)
    assert texts(at, "error") == (
        f"the home {blocker} is a file, not a folder: set EAGLE3DASH_HOME to a folder you can "
        "write (default ./.eagle3dash)"
    )


def test_loopback_asks_nothing_and_a_network_address_needs_the_gate(home, monkeypatch) -> None:
    from streamlit import config

    from eagle3dash.ui import access

    at = app()
    assert "Runs" in [t.value for t in at.title]
    # The environment no longer decides: EAGLE3DASH_BIND=127.0.0.1 with a network server.address.
    monkeypatch.setenv("EAGLE3DASH_BIND", "127.0.0.1")
    monkeypatch.setattr(access, "_gates", [])
    previous = config.get_option("server.address")
    config.set_option("server.address", "0.0.0.0")
    try:
        at = app("run", run="1")
        no_exception(at)
        assert texts(at, "error") == (
            "This app listens on 0.0.0.0, a network address, without its access gate (uploads "
            "and media would be open to anyone): start it with `eagle3dash app --bind ...`, "
            "`make run BIND=...` or `streamlit run serve.py`, or serve on 127.0.0.1 and reach it "
            "through an SSH tunnel."
        )
        assert "Runs" not in [t.value for t in at.title]
        monkeypatch.setattr(access, "_gates", [object()])  # a gate in front, but no cookie
        at = app()
        assert texts(at, "error") == (
            "This session has not given the access token: open /_eagle3dash/access."
        )
    finally:
        config.set_option("server.address", previous)


def test_guard_turns_an_unexpected_exception_into_one_box(home) -> None:
    def page() -> None:
        from eagle3dash.ui import widgets

        def broken() -> None:
            raise RuntimeError("internal detail")

        widgets.guard(broken)

    at = AppTest.from_function(page, default_timeout=TIMEOUT).run()
    no_exception(at)
    assert texts(at, "error") == (
        "Something unexpected went wrong (RuntimeError): a bug in eagle3dash, not in your input. "
        "The details are in the app's log."
    )


def test_a_demo_run_names_its_deployment_its_fixed_run_and_its_stopped_endpoint(home) -> None:
    url = "http://127.0.0.1:9"
    db.record_probe(home, url, {"version": "0.5.23"})
    run_id = db.create_run(home, None, url, None, {"demo": "mismatched", "demo_fixed_run": 7})
    db.mark_endpoint_stopped(home, url)
    at = app("run", run=str(run_id))
    no_exception(at)
    captions = [c.value for c in at.caption]
    assert (
        "demo deployment **mismatched** · its endpoint has stopped since (the URL no longer "
        "answers)"
    ) in captions
    labels = [link.proto.label for link in at.get("page_link")]
    assert "The same draft with the fix applied: run #7" in labels
