"""Reading a run: plain words, a live and neutral status, stage progress with time, tables that
keep their key columns, charts that tell their series apart, search over every finding, measured
acceptance per draft position, and where the double's speed comes from. AppTest on real runs.

A module fixture serves the test world's tiny target and random draft (tests/conftest.py) with the
SGLang API double (a modelled cost of 2 ms per target forward), and a baseline double without
speculation, and lets the real worker make two runs: "full" (baseline and local target given:
measured speedup, the layout detective) and "bare" (neither: what was not checked).
"""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime, timedelta
from types import SimpleNamespace

import pytest
from streamlit.dataframe_util import convert_arrow_bytes_to_pandas_df
from streamlit.testing.v1 import AppTest

from eagle3dash import jobs as jobq
from eagle3dash import store as db
from eagle3dash.diagnosis.options import DiagnoseOptions
from eagle3dash.diagnosis.stages import plan_stages, target_depth
from eagle3dash.diagnosis.stored import StoredDiagnosis, load_diagnosis
from eagle3dash.diagnosis.stored_run import StoredRun, run_from_row
from eagle3dash.engines.seam import ServerReport
from eagle3dash.errors import InputError
from eagle3dash.findings import Finding
from eagle3dash.jobs import JobRow
from eagle3dash.layout import Tap
from eagle3dash.submit import submit_diagnosis
from eagle3dash.testing.sglang_double import start_double
from eagle3dash.testing.sglang_double_engine import DoubleConfig
from eagle3dash.ui import words
from eagle3dash.ui.fmt import duration
from eagle3dash.ui.progress import progress_view
from tests.appkit import (
    app,
    frame_with,
    frames,
    no_exception,
    plain,
    plain_frame,
    run_queued,
    speculative_double,
    texts,
)

DELAY_S = 0.002
ROOT_CAUSE = (
    "Serving feeds the draft the layers after 1, 2 and 3 blocks, but training fed the embedding "
    "output and the layers after 1 and 2 blocks: every slot is one block later than in training."
)
DOUBLE_NOTE = (
    "This endpoint is eagle3dash's SGLang API double, a test and demo stand-in, not a serving "
    "engine: its tok/s and the speedup come from the double's modelled cost (each target forward "
    "takes at least 2 ms and each draft step 0.2 ms, the tiny models' compute inside those "
    "floors), not from measured serving speed."
)


# --- fixtures ----------------------------------------------------------------------------------


# What every stored diagnosis has: the options it was started with.
OPTIONS = {"options": {"draft": "/d", "endpoint": "http://gpubox:30000"}}


@pytest.fixture(scope="module")
def world(tmp_path_factory, served_models):
    """Two finished runs (full, bare) in one home, on the test world's models served by this
    module's doubles (a modelled cost); the doubles stopped afterwards."""
    target, draft = served_models["target"], served_models["draft"]
    speculative = speculative_double(target, draft, delay_s=DELAY_S)
    baseline = start_double(DoubleConfig(target_path=str(target), delay_s=DELAY_S))
    home = db.open_store(tmp_path_factory.mktemp("app_run") / "home")
    try:
        checkpoint_id = db.add_checkpoint(home, draft, name="draft")

        def opts(**more) -> DiagnoseOptions:
            return DiagnoseOptions(
                draft=str(draft),
                endpoint=speculative.url,
                num_prompts=2,
                max_new_tokens=16,
                concurrency=2,
                steps=3,
                training_layout=(Tap(0), Tap(1), Tap(2)),
                **more,
            )

        full = submit_diagnosis(
            home, checkpoint_id, opts(target=str(target), baseline=baseline.url)
        )
        bare = submit_diagnosis(home, checkpoint_id, opts())
        run_queued(home, [full, bare])
        yield {"home": home.home, "store": home, "full": full, "bare": bare}
    finally:
        home.close()
        speculative.stop()
        baseline.stop()


def chart_specs(at: AppTest) -> dict[str, dict]:
    """The page's Vega-Lite charts by title, each with its rows under "rows" (Streamlit sends a
    chart's datasets beside its spec, as Arrow)."""
    found = {}
    for chart in at.get("vega_lite_chart"):
        spec = json.loads(chart.proto.spec)
        spec["rows"] = [
            row
            for dataset in chart.proto.datasets
            for row in convert_arrow_bytes_to_pandas_df(dataset.data.data).to_dict("records")
        ]
        found[spec.get("title")] = spec
    return found


def stored(world, name: str) -> dict:
    return db.get_run(world["store"], world[name])["diagnosis"]


def copy_run(store: db.Store, diagnosis: dict, endpoint: str = "http://gpubox:30000") -> int:
    """A finished run in `store` with this diagnosis."""
    run_id = db.create_run(store, None, endpoint)
    db.update_run(store, run_id, status="succeeded", diagnosis_json=json.dumps(diagnosis))
    db.save_findings(store, run_id, diagnosis["findings"])
    return run_id


# --- 1. plain words ----------------------------------------------------------------------------


def test_the_run_page_says_taps_in_words_and_names_its_own_form_fields(world_home) -> None:
    for name in ("full", "bare"):
        at = app("run", run=str(world_home[name]))
        no_exception(at)
        shown = texts(at) + "\n".join(f.to_csv() for f in frames(at))
        assert "Tap(" not in shown
        assert not re.search(r"(^|\s)--[a-z]", texts(at, "info")), texts(at, "info")
    # The layout finding's evidence, slot by slot in words.
    evidence = [m.value for m in at.markdown if m.value.startswith("Evidence: ")]
    assert "Training: slot 0: embedding output, slot 1: after block 1, slot 2: after block 2." in (
        plain(evidence[0])
    )
    # The bare run could not check the speedup: its box names the New-run field to fill in.
    not_checked = [plain(i.value) for i in at.info if i.value.startswith("Not checked: no base")]
    assert not_checked[0] == (
        "Not checked: no baseline: the speedup against serving without speculation is unknown: "
        "fill in 'Baseline URL (optional: the same target served without speculation, for the "
        "speedup)' on New run (serve the same target without speculation and give its URL)"
    )


def test_the_slot_heatmap_names_its_taps_and_explains_the_score(world_home) -> None:
    at = app("run", run=str(world_home["full"]))
    no_exception(at)
    heatmap = chart_specs(at)["Which tap each slot carries: the match score of every slot and tap"]
    assert heatmap["encoding"]["x"]["sort"] == [
        "embedding output",
        "after block 1",
        "after block 2",
        "after block 3",
        "last block's output",
        "after the final norm",
    ]
    assert words.SLOT_MATCH_CAPTION in texts(at, "caption")
    assert "4n" not in {r["tap"] for r in heatmap["rows"]}


# --- 2. a live header, a neutral cancel ---------------------------------------------------------


def _job_run(store: db.Store, status: str, progress: float = 0.0, message: str = "") -> int:
    """A run whose diagnose job is `status`; the run row still says queued (as when the worker
    has just claimed the job)."""
    run_id = db.create_run(store, None, "http://gpubox:30000")
    job_id = jobq.submit_job(store, "diagnose", {"options": {}}, run_id=run_id)
    if status != "queued":
        started = (datetime.now(UTC) - timedelta(seconds=90)).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
        store.db.execute(
            "UPDATE jobs SET status = ?, progress = ?, message = ?, started_at = ? WHERE id = ?",
            (status, progress, message, started, job_id),
        )
    return run_id


def test_the_header_says_what_the_job_does_not_the_stale_run_row(home) -> None:
    run_id = _job_run(home, "running", 0.5, "stage 3/7: capturing (1/2 prompts)")
    assert db.get_run(home, run_id)["status"] == "queued"
    at = app("run", run=str(run_id))
    no_exception(at)
    header = next(m.value for m in at.markdown if "checkpoint" in m.value and "endpoint" in m.value)
    assert plain(header).startswith(":material/autorenew: running · checkpoint")
    assert "queued" not in texts(at, "markdown")


def run_row(row: dict) -> StoredRun:
    """A run as the store lists it, with only `row`'s columns set (the rest as a fresh run)."""
    return run_from_row({"id": 1, **row})


def test_the_progress_panel_reloads_the_page_when_the_status_changes() -> None:
    run = run_row({"status": "queued"})
    queued = progress_view(run, [JobRow.from_row({"id": 1, "status": "queued", "progress": 0.0})])
    running = progress_view(run, [JobRow.from_row({"id": 1, "status": "running", "progress": 0.1})])
    done = progress_view(
        run_row({"status": "succeeded"}), [JobRow.from_row({"id": 1, "status": "succeeded"})]
    )
    assert not queued.outdated("queued")  # nothing changed: keep polling the panel only
    assert running.outdated("queued")  # queued -> running: the header is redrawn
    assert not running.outdated("running")
    assert done.outdated("running")  # finished: the results are drawn


def test_a_cancelled_run_is_said_neutrally_not_as_an_error(home) -> None:
    run_id = _job_run(home, "running", 0.3, "stage 3/7: capturing")
    (job,) = jobq.list_jobs(home, run_id)
    home.db.execute(
        "UPDATE jobs SET status = 'cancelled', message = ? WHERE id = ?",
        (jobq.CANCELLED_WHILE_RUNNING, job["id"]),
    )
    db.update_run(home, run_id, status="cancelled", error=jobq.CANCELLED_WHILE_RUNNING)
    at = app("run", run=str(run_id))
    no_exception(at)
    assert not at.error
    assert texts(at, "info").startswith(
        "This run was cancelled while it ran, so it has no results. Start it again from New run."
    )
    assert ":material/stop_circle: cancelled · checkpoint" in texts(at, "markdown")
    assert words.stopped_text("cancelled", "terminated (SIGTERM)").startswith(
        "This run was cancelled, so"
    )  # whatever the worker recorded, a cancel reads as one


# --- 3. stages, time, logs ---------------------------------------------------------------------


def test_progress_shows_the_stage_with_elapsed_time_and_an_estimate(home) -> None:
    run_id = _job_run(home, "running", 0.5, "stage 3/7: capturing (1/2 prompts)")
    at = app("run", run=str(run_id))
    no_exception(at)
    (bar,) = at.get("progress")
    assert bar.proto.value == 50 and plain(bar.proto.text) == "stage 3/7: capturing (1/2 prompts)"
    timing = [c.value for c in at.caption if "elapsed" in c.value]
    assert re.fullmatch(
        r"1 min 3\d s elapsed · about 1 min 3\d s left \(estimated from the progress so far\)",
        plain(timing[0]),
    )


def test_the_estimate_waits_for_progress_and_time() -> None:
    start = datetime(2026, 1, 1, tzinfo=UTC)
    job = {"id": 1, "status": "running", "started_at": "2026-01-01T00:00:00.000000Z"}

    def view(fraction: float, seconds: float):
        later = start + timedelta(seconds=seconds)
        return progress_view(
            run_row({"status": "running"}),
            [JobRow.from_row({**job, "progress": fraction})],
            now=later,
        )

    assert view(0.25, 60).remaining_s == pytest.approx(180.0)
    assert view(0.25, 60).timing == (
        "1 min 00 s elapsed · about 3 min 00 s left (estimated from the progress so far)"
    )
    assert view(0.01, 60).timing == "1 min 00 s elapsed"  # too little progress to extrapolate
    assert view(0.5, 2).remaining_s is None  # too early
    queued = progress_view(
        run_row({"status": "queued"}), [JobRow.from_row({**job, "status": "queued", "progress": 0})]
    )
    assert queued.elapsed_s is None and queued.timing is None
    assert [duration(s) for s in (0.4, 42, 185, 3725)] == [
        "0 s",
        "42 s",
        "3 min 05 s",
        "1 h 02 min",
    ]


def test_every_stage_is_numbered_and_the_log_leads_with_the_projects_lines(world) -> None:
    store = world["store"]
    job = jobq.list_jobs(store, world["full"])[0]
    log = jobq.job_log(store, job["id"])
    assert "HTTP Request" not in log and "httpx" not in log
    stages = re.findall(r"eagle3dash\.job: +\d+% (stage \d+/\d+: [^\n(]+)", log)
    full = DiagnoseOptions(draft="d", endpoint="e", target="t", baseline="b")
    assert plan_stages(full) == (
        "inspecting the checkpoint",
        "probing the endpoint",
        "benchmarking the endpoint",
        "benchmarking the baseline",
        "capturing the aux states the server feeds the draft",
        "capturing every tap of the local target",
        "layout detective: which taps does the draft perform best with?",
        "running the standalone draft on each side's states",
        "profiling acceptance: per position, category and temperature",
        "profiling acceptance: prompt formats",
        "profiling acceptance: the cost of a step, for the steps advice",
    )
    numbered = list(dict.fromkeys(line.split(": ", 1)[0] for line in stages))
    assert numbered == [f"stage {k}/11" for k in range(1, 12)]
    assert stages[0] == "stage 1/11: inspecting the checkpoint"
    lines = [line for line in log.splitlines() if line.strip()]
    assert "job" in lines[0] and "started" in lines[0]  # the worker's header
    assert "stage 1/11: inspecting the checkpoint" in lines[1]
    bare = DiagnoseOptions(draft="d", endpoint="e")
    assert len(plan_stages(bare)) == 8
    assert len(plan_stages(DiagnoseOptions(draft="d", endpoint="e", profile=False))) == 5


# --- 4. tables ---------------------------------------------------------------------------------


def test_the_runs_table_leads_with_its_key_columns_and_shows_no_none(world_home) -> None:
    at = app()
    no_exception(at)
    (table,) = at.dataframe
    runs = table.value
    assert list(runs.columns)[:10] == [
        "open",
        "run",
        "status",
        "checkpoint",
        "verdict",
        "measured",
        "sim training",
        "sim serving",
        "speedup",
        "tok/s",
    ]
    rows = runs.set_index("run")
    full, bare = rows.loc[world_home["full"]], rows.loc[world_home["bare"]]
    assert full["verdict"] == f"critical: {ROOT_CAUSE}" and full["status"] == "succeeded"
    # the speedup with its interval; no baseline: no speedup
    assert re.fullmatch(r"\d+\.\d\dx ±\d+\.\d\d", full["speedup"]) and bare["speedup"] == "—"
    assert full["findings"].startswith("layout-mismatch")
    assert table.proto.placeholder == "—"  # a missing number shows a dash, never "None"
    assert table.proto.row_height > 64  # tall enough for a long verdict to wrap
    config = json.loads(table.proto.columns)
    assert config["verdict"]["width"] >= 250 and "help" in config["verdict"]
    shown = [c for c in runs.columns if not config.get(c, {}).get("hidden")]
    assert shown == [*list(runs.columns)[:10], "findings"]  # endpoint, engine, created, ran on
    # hidden until the column menu shows them; the shown ones fit what a table gets at 1400 px
    # (the navigation on top: 1400 - 2 x 80 px of margin, less its 2 px of border)
    assert sum(config[c]["width"] for c in shown) == 1238


def test_a_runs_verdict_in_words() -> None:
    shifted = {"id": "layout-mismatch", "severity": "critical", "title": "It is shifted."}
    cause = {"root_cause": {**shifted, "evidence": "", "fix": ""}, "problems_found": True}
    warned = {"root_cause": None, "problems_found": True, "not_checked": []}
    clean = {"root_cause": None, "problems_found": False, "not_checked": ["speedup"]}
    assert words.run_verdict(run_row({"verdict": cause})) == "critical: It is shifted."
    odd = {"worst_finding_title": "Odd.", "worst_severity": "warning"}
    assert words.run_verdict(run_row({"verdict": warned, **odd})) == "warning: Odd."
    # Stored before statuses (schema 1), whose problems_found counted info notes too: a run
    # whose worst finding is an info note reads healthy, as its Run page says.
    note = {"worst_finding_title": "Weak novel.", "worst_severity": "info"}
    assert words.run_verdict(run_row({"verdict": warned, **note})) == (
        "healthy: every check ran and found nothing at warning or worse"
    )
    # Nothing found but something not checked: incomplete, never a green light.
    assert words.run_verdict(run_row({"verdict": clean})) == (
        "incomplete: no critical problem in what was checked (not checked: the speedup)"
    )
    # An info note is never the verdict: a healthy run reads healthy.
    healthy = {"root_cause": None, "problems_found": False, "not_checked": [], "status": "healthy"}
    assert words.run_verdict(
        run_row({"verdict": healthy, "worst_finding_title": "Weak novel."})
    ) == ("healthy: every check ran and found nothing at warning or worse")
    assert (
        words.run_verdict(run_row({"status": "failed", "error": "boom\ntraceback"}))
        == "failed: boom"
    )
    assert words.run_verdict(run_row({"status": "cancelled"})) == "cancelled"
    assert words.run_verdict(run_row({"status": "running"})) == "—"


def test_compare_shows_the_speedup_above_the_table_and_keeps_the_match_column(world_home) -> None:
    a, b = world_home["full"], world_home["bare"]
    at = app("compare", a=str(a), b=str(b))
    no_exception(at)
    metrics = {m.label: m.value for m in at.metric}
    full = db.get_run(world_home["store"], a)
    assert metrics[f"Speedup, run A #{a}"].startswith(f"{full['speedup']:.2f}x ±")
    assert metrics[f"Speedup, run B #{b}"] == "—"
    assert f"Measured accept length, run B #{b}" in metrics
    # The comparison is a static table: long text wraps instead of hiding in a scroll box.
    (table,) = [plain_frame(t.value) for t in at.table]
    assert table.columns.tolist() == ["quantity", "run A", "run B", "change (B - A)"]
    speedup = table.set_index("quantity").loc["speedup"].tolist()
    assert speedup[0] == metrics[f"Speedup, run A #{a}"] and speedup[1:] == ["—", "—"]
    # Each run's slot table, half a page wide: the match right after the slot, taps in words.
    slot_tables = [d for d in at.dataframe if "match" in d.value.columns]
    assert len(slot_tables) == 2
    for d in slot_tables:
        assert list(d.proto.column_order) == ["slot", "match", "training feeds", "serving feeds"]


# --- 5. charts ---------------------------------------------------------------------------------


def test_the_run_charts_tell_their_series_apart(world_home) -> None:
    at = app("run", run=str(world_home["full"]))
    no_exception(at)
    charts = chart_specs(at)
    accuracy = charts["Standalone draft: accuracy and acceptance per step"]
    lines, points = accuracy["layer"]
    assert lines["encoding"]["color"]["scale"]["range"] == ["#0072B2", "#E69F00"]  # Okabe-Ito
    assert points["encoding"]["shape"]["scale"]["range"] == ["circle", "triangle-up"]
    assert lines["encoding"]["strokeDash"]["scale"]["range"] == [[1, 0], [6, 3]]
    assert (lines["encoding"]["color"]["legend"]["title"], "metric") == (
        "side",
        lines["encoding"]["strokeDash"]["legend"]["title"],
    )


# --- 6. search ---------------------------------------------------------------------------------


def test_search_finds_runs_by_any_findings_rule_id_or_title(world, home) -> None:
    full = stored(world, "full")
    layout = next(f for f in full["findings"] if f["id"] == "layout-mismatch")
    # Written here, not measured: which speed findings a timed run has depends on the load.
    second = "Draft steps beyond the third are never accepted"
    other = {**layout, "id": "steps-unused", "title": second, "severity": "warning"}
    other_only = {**full, "findings": [other]}
    full = {**full, "findings": [layout, other]}
    with_layout = copy_run(home, full, "http://gpu-a:30000")
    without = copy_run(home, other_only, "http://gpu-b:30000")
    clean = copy_run(home, {**full, "findings": []}, "http://gpu-c:30000")
    at = app()
    at.text_input(key="runs_search").set_value("layout-mismatch").run()
    no_exception(at)
    assert at.dataframe[0].value["run"].tolist() == [with_layout]
    at.text_input(key="runs_search").set_value(second[:25]).run()
    assert sorted(at.dataframe[0].value["run"]) == sorted([with_layout, without])
    at.text_input(key="runs_search").set_value("gpu-c").run()
    assert at.dataframe[0].value["run"].tolist() == [clean]


# --- 7. measured acceptance per draft position -------------------------------------------------


def test_the_run_page_draws_measured_acceptance_per_position_beside_both_simulations(
    world_home,
) -> None:
    diagnosis = stored(world_home, "full")
    assert diagnosis["measured"]["per_position"] is not None
    at = app("run", run=str(world_home["full"]))
    no_exception(at)
    spec = chart_specs(at)["Acceptance per draft position: measured on the endpoint vs simulated"]
    rows = spec["rows"]
    steps = diagnosis["steps"]
    measured = [r["value"] for r in rows if r["side"] == "endpoint (measured)"]
    shares = diagnosis["measured"]["per_position"]
    assert measured == shares + [0.0] * (steps - len(shares))  # past the histogram: no round
    for side in ("training", "serving"):
        simulated = [r["value"] for r in rows if r["side"] == f"{side} layout"]
        # per round, replayed as the server's rounds: the profile's lines
        assert simulated == diagnosis["profile"]["per_position"][f"simulated_{side}"]
    assert "not reported" not in texts(at, "caption")


def test_a_server_without_the_histogram_is_named_under_the_chart(world, home) -> None:
    diagnosis = stored(world, "full")
    # stored before the histogram and the profile existed
    older = {
        **diagnosis,
        # a benchmark of that time had neither the histogram nor per_position
        "measured": {
            k: v
            for k, v in diagnosis["measured"].items()
            if k not in ("per_position", "correct_drafts_histogram")
        },
        "profile": None,
    }
    run_id = copy_run(home, older)
    at = app("run", run=str(run_id))
    no_exception(at)
    spec = chart_specs(at)["Acceptance per draft position: measured on the endpoint vs simulated"]
    assert {r["how"] for r in spec["rows"]} == {"simulated"}
    assert (
        "Measured acceptance per position: not reported, as the server predates SGLang's "
        "spec_correct_drafts_histogram; only the simulated sides are drawn."
    ) in texts(at, "caption")


# --- 8. the double's speed ---------------------------------------------------------------------


def test_a_run_on_the_double_says_its_speed_is_modelled(world_home) -> None:
    diagnosis = stored(world_home, "full")
    info = diagnosis["server"]["server_info"]
    assert info["eagle3dash_double"] is True and info["eagle3dash_double_delay_s"] == DELAY_S
    at = app("run", run=str(world_home["full"]))
    no_exception(at)
    captions = [plain(c.value) for c in at.caption]
    assert f":material/info: {DOUBLE_NOTE}" in captions  # under the banner's speedup
    # once on the page: not again under the tok/s chart and each of the profile's tables
    assert texts(at).count("This endpoint is eagle3dash's") == 1


def test_a_real_server_gets_no_double_note(world, home) -> None:
    diagnosis = stored(world, "full")
    info = {k: v for k, v in diagnosis["server"]["server_info"].items() if "eagle3dash" not in k}
    real = {**diagnosis, "server": {**diagnosis["server"], "server_info": info}}
    at = app("run", run=str(copy_run(home, real)))
    no_exception(at)
    assert "SGLang API double" not in texts(at)
    url = diagnosis["server"]["url"]
    zero = {"eagle3dash_double": True, "eagle3dash_double_delay_s": 0.0}
    assert "come from the double's tiny models computing on this machine (no modelled cost " in (
        words.double_note(ServerReport.from_dict({"url": url, "server_info": zero}))
    )
    unsaid_cost = {"url": url, "server_info": {"eagle3dash_double": True}}
    assert words.double_note(ServerReport.from_dict(unsaid_cost)) == (
        "This endpoint is eagle3dash's SGLang API double, a test and demo stand-in, not a serving "
        "engine: its tok/s and the speedup come from the double's modelled cost (each target "
        "forward takes at least a set delay and each draft step a tenth of it), not from measured "
        "serving speed."
    )


def test_the_vllm_double_is_named_with_its_modelled_cost() -> None:
    # the vLLM double's server_info: vLLM's own shape, plus the double's marks at its top level
    info = {
        "vllm_config": {},
        "vllm_env": {"VLLM_SERVER_DEV_MODE": True},
        "eagle3dash_double": True,
        "eagle3dash_double_delay_s": 0.01,
        "eagle3dash_double_draft_step_s": 0.002,
    }
    report = ServerReport.from_dict({"url": "http://127.0.0.1:8000", "server_info": info})
    assert words.double_note(report) == (
        "This endpoint is eagle3dash's vLLM API double, a test and demo stand-in, not a serving "
        "engine: its tok/s and the speedup come from the double's modelled cost (each target "
        "forward takes at least 10 ms and each draft step 2 ms, the tiny models' compute inside "
        "those floors), not from measured serving speed."
    )


def test_a_vllm_runs_predictions_are_worded_as_vllms(world, home) -> None:
    # The bare run (no target) has a predicted serving side; stored as a vLLM run, its page says
    # whose rules predicted it and names vLLM's version, never SGLang's rules.
    bare = stored(world, "bare")
    assert bare["serving"]["source"] == "predicted"
    server = {**bare["server"], "engine": "vllm", "version": "0.33.0"}
    run_id = copy_run(home, {**bare, "server": server})
    at = app("run", run=str(run_id))
    no_exception(at)
    table = frame_with(at, "quantity").set_index("quantity")
    assert table.loc["where that layout comes from"].tolist()[1] == (
        "assumed: vLLM's rules for this version"
    )
    shown = texts(at) + "\n".join(f.to_csv() for f in frames(at))
    assert "serving side predicted from vLLM's rules, not checked" in shown
    assert "vLLM 0.33.0" in shown  # the server table's engine row
    assert "SGLang's rules" not in shown


def test_the_runs_table_says_which_runs_numbers_the_doubles_cost_shaped(world, home) -> None:
    """One caption per modelled cost under the Runs table, naming its runs and the columns it
    shaped, with the cost the double's server info states; a run on a real server is not named."""
    full, bare = (copy_run(home, stored(world, name)) for name in ("full", "bare"))
    diagnosis = stored(world, "full")
    info = {k: v for k, v in diagnosis["server"]["server_info"].items() if "eagle3dash" not in k}
    copy_run(home, {**diagnosis, "server": {**diagnosis["server"], "server_info": info}})
    at = app()
    no_exception(at)
    expected = (
        f":material/info: Runs #{full}, #{bare}: their tok/s and speedup are shaped by the demo "
        "double (the accept lengths count tokens: its cost does not touch them). "
        f"{DOUBLE_NOTE}"
    )
    assert [plain(c.value) for c in at.caption if "double" in c.value] == [expected]


def test_a_library_error_names_the_form_field_beside_the_flag() -> None:
    server = SimpleNamespace(model_path="/models/on-the-gpu-box")
    with pytest.raises(InputError) as raised:
        target_depth(DiagnoseOptions(draft="d", endpoint="e"), server)  # type: ignore[arg-type]
    assert str(raised.value) == (
        "cannot tell how many layers the target has: '/models/on-the-gpu-box' is not a local "
        "checkpoint here; give --target-layers ('Target layers N' on New run) or --target "
        "('Local target path (for training-side states)' on New run)"
    )


def test_the_fix_to_paste() -> None:
    def finding(fix: str, data: dict | None = None) -> Finding:
        return Finding("some-rule", "critical", "A title.", "", fix, data or {})

    ids = finding("Set ...", {"config_ids": [-1, 0, 1], "sglang_version": "0.5.23"})
    assert words.fix_block(ids) == words.FixBlock(
        "Merge into the draft's config.json, served by SGLang 0.5.23.",
        '{"eagle_config": {"eagle_aux_hidden_state_layer_ids": [-1, 0, 1]}}',
        "json",
        "-1 = the embedding output",
    )
    # A server flag without the server's model: no command can be made whole.
    flag = finding("Restart the server with --chunked-prefill-size 88 or more, then run again.")
    assert words.fix_block(flag) is None
    prose = finding("Retrain the draft. Then serve it.")
    assert words.fix_block(prose) is None  # prose stays prose


def test_the_layout_comparison_follows_its_weaker_side() -> None:
    def diff(kind: str, level: str, checked: bool, training: str, serving: str) -> StoredDiagnosis:
        layout_diff = {
            "kind": kind,
            "summary": "Serving feeds every slot one block later than training.",
            "evidence": level,
            "checked": checked,
            "training_evidence": training,
            "serving_evidence": serving,
        }
        return load_diagnosis(
            {"schema": 3, "training": {}, "serving": {}, "layout_diff": layout_diff, **OPTIONS}
        )

    assert words.layout_comparison(diff("identical", "observed", True, "observed", "observed")) == (
        "success",
        None,
        "Training and serving feed the same taps to every slot (observed).",
    )
    assumed = diff("identical", "assumed", False, "assumed", "predicted")
    assert words.layout_comparison(assumed) == (
        "neutral",
        None,
        "Same taps on both sides (assumed from the config, not checked): training side assumed "
        "from the config, not checked, serving side predicted from SGLang's rules, not checked.",
    )
    assert words.slot_word(assumed, True) == "same (assumed from the config, not checked)"
    predicted = diff("off-by-one", "predicted", False, "declared", "predicted")
    assert words.layout_comparison(predicted)[:2] == ("warning", "off-by-one")
    observed = diff("off-by-one", "observed", True, "observed", "observed")
    assert words.layout_comparison(observed)[:2] == ("error", "off-by-one")
    assert words.slot_word(observed, False) == "DIFFERS"


# --- words, not ids; hover help ---------------------------------------------------------------


def test_finding_evidence_opens_with_one_sentence_its_numbers_behind_an_expander(
    world_home,
) -> None:
    at = app("run", run=str(world_home["full"]))
    no_exception(at)
    stored = [f["evidence"] for f in db.get_findings(world_home["store"], world_home["full"])]
    leads = [plain(m.value).removeprefix("Evidence: ") for m in at.markdown]
    leads = [m for m in leads if any(e.startswith(m.rstrip(".")) for e in stored)]
    assert leads, "no finding's evidence is shown"
    for lead in leads:  # one sentence: no full stop before a capital, no semicolon
        assert not re.search(r"\.\s+[A-Z\[(]|;", lead), lead
    numbers = [e for e in at.expander if e.label == "The numbers behind it"]
    assert numbers  # the layout finding's evidence runs on past its first sentence
    shown = " ".join(plain(m.value) for e in numbers for m in e.markdown)
    assert "slot 0: after block 1" in shown  # its serving side, no longer in the lead


def test_evidence_parts_split_at_the_first_sentence_or_semicolon() -> None:
    assert words.evidence_parts(
        "Training: slot 0: tap 0. best of 6. Serving on SGLang 0.5.23."
    ) == (
        "Training: slot 0: tap 0. best of 6.",
        "Serving on SGLang 0.5.23.",
    )
    assert words.evidence_parts("a 3.14, top-1 87.5%; b 1.23; gap 1.91.") == (
        "a 3.14, top-1 87.5%.",
        "b 1.23; gap 1.91.",
    )
    assert words.evidence_parts("One sentence (e.g. this one).") == (
        "One sentence (e.g. this one).",
        "",
    )


def test_no_internal_id_in_the_pages_sentences(world_home) -> None:
    """What was not checked (tests/test_stored_pages.py: the verdicts), and the layout
    comparison's kind, in words: not 'serving-taps' or 'off-by-one'."""
    at = app("run", run=str(world_home["full"]))
    no_exception(at)
    said = texts(at, "error", "warning", "success", "info", "markdown")
    for kind in ("off-by-one", "shifted-slot", "different-width", "defaults-used", "post-norm"):
        assert kind not in said
    assert words.check_words(["draft-identity", "profile-chat-template-capture"]) == (
        "whether the endpoint serves this draft, the capture of the chat-template prompts"
    )


def test_the_pages_terms_have_hover_help(world_home) -> None:
    """'taps', 'fc slot', 'top-1' and 'sim training / sim serving' explained where the Run page's
    sides and layout use them, and on the Runs table's columns."""
    at = app("run", run=str(world_home["full"]))
    no_exception(at)
    helps = {h.value: h.proto.help for h in at.header}
    for term in ("taps", "fc slot", "top-1", "sim training / sim serving"):
        assert f"**{term}**: " in helps["Training vs serving"], term
    assert "**fc slot**: One of the draft's fc inputs" in helps["Layer layout"]
    at = app()
    no_exception(at)
    columns = json.loads(at.dataframe[0].proto.columns)
    for column in ("sim training", "sim serving"):
        assert columns[column]["help"].startswith("**sim training / sim serving**: The simulated")
