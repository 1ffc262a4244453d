"""The acceptance profile on the Run page and in its export: frames, charts and words read back
from a hand-written profile (issue 13's contract form), the JSON and CSV files, and the Run page
(AppTest) of a real stored diagnosis with that profile added.

A module fixture lets the real worker diagnose a random draft on the SGLang API double (no
baseline, no target); its stored diagnosis, with SAMPLE as its profile, is the run the page shows.
"""

from __future__ import annotations

import json

import pytest

from eagle3dash import store as db
from eagle3dash.diagnosis.options import DiagnoseOptions
from eagle3dash.diagnosis.stored import load_diagnosis
from eagle3dash.layout import Tap
from eagle3dash.profile import Profile, TemperatureRow
from eagle3dash.profile_export import profile_csv, profile_json
from eagle3dash.submit import submit_diagnosis
from eagle3dash.ui import charts, words
from eagle3dash.ui import profile as ui
from tests.appkit import app, no_exception, plain, run_queued, texts
from tests.profilekit import CATEGORY_TITLE, FLAGS, SAMPLE

GREEN, ORANGE, VERMILLION = "#009E73", "#E69F00", "#D55E00"
TRAINING, SERVING, MEASURED = "training layout", "serving layout", "endpoint (measured)"
FROM_HISTOGRAM = "the server's histogram (measured)"
FROM_DRAFT = "the standalone draft (simulated)"
PER_POSITION_TITLE = "Acceptance per draft position: measured on the endpoint vs simulated"
STEPS_TITLES = [
    "Steps advice: predicted tok/s by draft steps",
    "Steps advice: predicted accept length by draft steps",
]
TARGET_LABEL = "Local target path (for training-side states)"  # the target option's New-run label


# One of each kind of null: a missing histogram, empty parts, null cells, a reason with a comma.
SMALL = {
    "steps": 2,
    "per_position": {
        "positions": [1, 2],
        "simulated_training": [0.5, 0.25],
        "simulated_serving": [0.5, 0.0],
        "measured": None,
    },
    "per_category": [
        {
            "category": "code",
            "prompts": 2,
            "measured_accept_length": 1.5,
            "sim_accept_training": None,
            "sim_accept_serving": 1.25,
            "tok_s": 40.0,
            "baseline_tok_s": None,
            "speedup": None,
        }
    ],
    "prompt_format": [],
    "temperature": [{"temperature": 0.7, "measured_accept_length": 1.25, "tok_s": None}],
    "steps_advice": [
        {
            "num_steps": 1,
            "predicted_accept_length": 1.5,
            "predicted_tok_s": 40.0,
            "source": "simulated",
        }
    ],
    "recommended": {
        "num_steps": 1,
        "predicted_accept_length": 1.5,
        "predicted_tok_s": 40.0,
        "current_num_steps": 1,
        "current_tok_s": None,
        "flags": "--speculative-num-steps 1 --speculative-eagle-topk 1 "
        "--speculative-num-draft-tokens 2",
    },
    "step_costs": None,
    "not_profiled": [
        {"part": "prompt_format", "reason": "no chat template, so raw only", "option": None}
    ],
}


# What every stored diagnosis has: the options it was started with.
OPTIONS = {"options": {"draft": "/d", "endpoint": "http://gpubox:30000"}}


def profile(**parts) -> Profile:
    """A typed profile (as the loader reads it back) from hand-written parts."""
    return Profile.from_dict({"steps": 1, "per_position": {"positions": []}, **parts})


def rows_of(spec: dict, layer: dict | None = None) -> list[dict]:
    """The rows a (layer of a) Vega-Lite spec plots, from the top-level datasets."""
    return spec["datasets"][(layer or spec)["data"]["name"]]


# --- export ------------------------------------------------------------------------------------


def test_the_profile_json_names_the_run_and_round_trips_the_profile() -> None:
    diagnosis = {
        "options": {"draft": "/ckpt/draft", "endpoint": "http://gpu:30000", "baseline": None},
        "server": {"url": "http://gpu:30000/", "version": "0.5.23", "model_path": "/m/llama"},
        "steps": 3,
        "findings": [],
        "profile": SAMPLE,
    }
    assert json.loads(profile_json(diagnosis) or "") == {
        "format": "eagle3dash-profile",
        "version": 1,
        "draft": "/ckpt/draft",
        "target": "/m/llama",
        "endpoint": "http://gpu:30000",
        "baseline": None,
        "sglang_version": "0.5.23",
        "steps": 3,
        "profile": SAMPLE,
    }
    # No profile (--no-profile, or a run from before): nothing to export, nothing raised.
    for without in ({**diagnosis, "profile": None}, {"steps": 3}):
        assert profile_json(without) is None and profile_csv(without) is None


def test_the_profile_csv_is_one_value_a_line_with_empty_nulls() -> None:
    assert (profile_csv({"profile": SMALL}) or "").splitlines() == [
        "part,row,metric,value",
        "profile,,steps,2",
        "per_position,1,simulated_training,0.5",
        "per_position,1,simulated_serving,0.5",
        "per_position,1,measured,",
        "per_position,2,simulated_training,0.25",
        "per_position,2,simulated_serving,0.0",
        "per_position,2,measured,",
        "per_category,code,prompts,2",
        "per_category,code,measured_accept_length,1.5",
        "per_category,code,sim_accept_training,",
        "per_category,code,sim_accept_serving,1.25",
        "per_category,code,tok_s,40.0",
        "per_category,code,baseline_tok_s,",
        "per_category,code,speedup,",
        "temperature,0.7,measured_accept_length,1.25",
        "temperature,0.7,tok_s,",
        "steps_advice,1,predicted_accept_length,1.5",
        "steps_advice,1,predicted_tok_s,40.0",
        "steps_advice,1,source,simulated",
        "recommended,,num_steps,1",
        "recommended,,predicted_accept_length,1.5",
        "recommended,,predicted_tok_s,40.0",
        "recommended,,current_num_steps,1",
        "recommended,,current_tok_s,",
        "recommended,,flags,--speculative-num-steps 1 --speculative-eagle-topk 1 "
        "--speculative-num-draft-tokens 2",
        'not_profiled,prompt_format,reason,"no chat template, so raw only"',
        "not_profiled,prompt_format,option,",
        "not_profiled,prompt_format,action,",
        "not_profiled,prompt_format,error,",
    ]


# --- frames, charts and words ------------------------------------------------------------------


def test_per_position_draws_the_three_lines_in_the_run_charts_form() -> None:
    spec = charts.per_position_chart(ui.per_position_metrics(profile(**SAMPLE))).to_dict()
    assert sorted((r["side"], r["how"], r["k"], r["value"]) for r in rows_of(spec)) == [
        (MEASURED, "measured", 1, 0.25),
        (MEASURED, "measured", 2, 0.05),
        (MEASURED, "measured", 3, 0.0),
        (SERVING, "simulated", 1, 0.3),
        (SERVING, "simulated", 2, 0.1),
        (SERVING, "simulated", 3, 0.0),
        (TRAINING, "simulated", 1, 0.8),
        (TRAINING, "simulated", 2, 0.5),
        (TRAINING, "simulated", 3, 0.25),
    ]
    # No histogram: the two simulated lines alone.
    spec = charts.per_position_chart(ui.per_position_metrics(profile(**SMALL))).to_dict()
    assert {(r["side"], r["k"]) for r in rows_of(spec)} == {
        (TRAINING, 1),
        (TRAINING, 2),
        (SERVING, 1),
        (SERVING, 2),
    }
    assert ui.per_position_metrics(profile()).empty


def test_the_category_matrix_outlines_the_weakest_category() -> None:
    assert ui.weakest_category(profile(**SAMPLE)) == ("novel", "measured_accept_length")
    assert ui.weakest_text(profile(**SAMPLE)) == (
        "Weakest category: novel, measured accept length 1.20 against 2.40 to 3.10 for the "
        "other categories."
    )
    spec = ui.category_chart(profile(**SAMPLE)).to_dict()
    cells, text, outline = spec["layer"]
    assert spec["title"] == CATEGORY_TITLE
    shown = {
        (r["category"], r["metric"]): (r["label"], round(r["share"], 4))
        for r in rows_of(spec, cells)
    }
    assert len(shown) == 15  # 3 categories x 5 metrics
    assert shown[("copy-heavy", "measured: accept length")] == ("3.10", 1.0)
    assert shown[("chat", "output tok/s")] == ("96.0", round(96 / 120.5, 4))
    assert shown[("novel", "speedup")] == ("1.00x", 0.5)
    assert shown[("novel", "simulated: serving layout")] == ("1.10", round(1.1 / 1.3, 4))
    assert cells["encoding"]["x"]["sort"] == [
        "measured: accept length",
        "simulated: training layout",
        "simulated: serving layout",
        "output tok/s",
        "speedup",
    ]
    assert cells["encoding"]["y"]["sort"] == ["copy-heavy", "novel", "chat"]
    assert cells["encoding"]["color"]["field"] == "share"
    assert text["encoding"]["text"]["field"] == "label"
    assert {r["category"] for r in rows_of(spec, outline)} == {"novel"}
    assert outline["mark"]["stroke"] == VERMILLION
    # Without measured accept lengths the serving simulation ranks them; a lone category is not
    # "weakest"; a metric no category has is not a column.
    simulated = profile(
        per_category=[
            {**row, "measured_accept_length": None, "speedup": None}
            | ({"sim_accept_serving": 0.9} if row["category"] == "chat" else {})
            for row in SAMPLE["per_category"]
        ]
    )
    assert ui.weakest_category(simulated) == ("chat", "sim_accept_serving")
    assert ui.weakest_text(simulated) == (
        "Weakest category: chat, simulated accept length (serving layout) 0.90 against 1.10 to "
        "1.30 for the other categories."
    )
    assert "speedup" not in set(ui.category_frame(simulated)["metric"])
    assert (
        ui.weakest_category(profile(**SMALL)) is None and ui.weakest_text(profile(**SMALL)) is None
    )
    assert not ui.category_frame(profile(**SMALL))["weakest"].any()
    assert ui.category_chart(profile(per_category=[])) is None


def test_prompt_format_and_temperature_tables() -> None:
    assert ui.format_frame(profile(**SAMPLE)).to_dict("records") == [
        {
            "prompt format": "raw",
            "prompts": "11",
            "measured accept length": "2.25",
            "simulated accept length (serving layout)": "1.20",
            "output tok/s": "92.5",
        }
    ]
    # a profile stored before rows could stop early does not say how many prompts: a dash
    assert ui.temperature_frame(profile(**SAMPLE)).values.tolist() == [
        ["0.0", "—", "2.25", "92.5"],
        ["0.7", "—", "1.75", "80.0"],
    ]
    assert ui.temperature_frame(profile(**SMALL)).values.tolist() == [["0.7", "—", "1.25", "—"]]
    assert ui.format_frame(profile(**SMALL)).empty


def test_rows_on_fewer_prompts_than_the_benchmark_say_why() -> None:
    stopped = [
        TemperatureRow(0.0, 1.3, 60.0, 0.3, prompts=4),
        TemperatureRow(0.7, 1.2, 55.0, 0.2, prompts=4),
    ]
    assert words.rows_prompts_note(stopped, 8) == (
        "Every row on the same first 4 of the 8 prompts (the first row: the benchmark's own "
        "requests on them). The profile sends its prompts in waves and stops once no row's noise, "
        "beside the first row's, could hide a gap of 0.5 tokens per round."
    )
    assert words.rows_prompts_note(stopped, 4) is None  # every prompt
    assert (
        words.rows_prompts_note([TemperatureRow(0.0, 1.3, prompts=None)], 8) is None
    )  # stored before
    assert words.rows_prompts_note([], 8) is None
    assert words.rows_prompts_note(stopped, None) is None  # no benchmark


def test_the_steps_chart_marks_its_one_recommendation() -> None:
    spec = ui.steps_chart(profile(**SAMPLE), "predicted tok/s").to_dict()
    assert spec["title"] == STEPS_TITLES[0]
    rules, labels, line, points = spec["layer"]  # no noise stored: no error bars
    assert [(r["num_steps"], r["predicted tok/s"]) for r in rows_of(spec, line)] == [
        (1, 70.0),
        (2, 84.0),
        (3, 80.0),
        (4, 76.0),
    ]
    assert line["encoding"]["y"]["field"] == "predicted tok/s"
    accept = ui.steps_chart(profile(**SAMPLE), "predicted accept length").to_dict()
    assert accept["title"] == STEPS_TITLES[1]
    assert [r["predicted accept length"] for r in rows_of(accept, accept["layer"][2])] == [
        1.25,
        1.5,
        1.55,
        1.6,
    ]
    assert accept["layer"][2]["encoding"]["y"]["field"] == "predicted accept length"
    assert points["encoding"]["color"]["scale"] == {
        "domain": [FROM_HISTOGRAM, FROM_DRAFT],
        "range": [GREEN, ORANGE],
    }
    # One mark: the recommendation, naming the served setting it replaces.
    assert [(r["num_steps"], r["label"]) for r in rows_of(spec, rules)] == [
        (2, "recommended: 2 (served: 3)")
    ]
    assert labels["encoding"]["text"]["field"] == "label"
    assert line["encoding"]["x"]["scale"]["domain"] == [0.5, 4.5]
    # The server already runs the recommended setting: the one mark says so.
    assert ui.settings_frame(profile(**SMALL)).values.tolist() == [
        ["recommended", 1, "recommended: 1 (the served setting)"]
    ]
    assert ui.steps_chart(profile(steps_advice=[])) is None


def test_the_steps_chart_draws_each_prediction_with_its_interval() -> None:
    """The issue's chart: 1 step predicted fastest, the served 4 kept as the recommendation, and
    error bars (± the measured per-request noise) showing the gap within it."""
    rows = [
        {
            "num_steps": n,
            "predicted_accept_length": 1.5,
            "predicted_tok_s": t,
            "source": "measured",
            "tok_s_noise": t * 0.2,
        }
        for n, t in ((1, 65.0), (2, 60.0), (4, 50.0))
    ]
    keep = {**SAMPLE["recommended"], "num_steps": 4, "current_num_steps": 4, "changes": False}
    spec = ui.steps_chart(
        profile(**{**SAMPLE, "steps_advice": rows, "recommended": keep})
    ).to_dict()
    rules, labels, bars, line, points = spec["layer"]
    assert [(r["num_steps"], r["low"], r["high"]) for r in rows_of(spec, bars)] == [
        (1, pytest.approx(52.0), pytest.approx(78.0)),
        (2, pytest.approx(48.0), pytest.approx(72.0)),
        (4, pytest.approx(40.0), pytest.approx(60.0)),
    ]
    assert (bars["encoding"]["y"]["field"], bars["encoding"]["y2"]["field"]) == ("low", "high")
    assert [r["label"] for r in rows_of(spec, rules)] == ["recommended: 4 (the served setting)"]


def test_the_steps_advice_and_not_profiled_in_words() -> None:
    assert words.recommendation_text(profile(**SAMPLE)) == (
        "Recommended: 2 draft steps (predicted 84.0 tok/s, accept length 1.50, +5% (+1% to +9%)) "
        "instead of the current 3 (80.0 tok/s)."
    )
    # While a critical finding stands the advice says it holds only until that is fixed.
    root = {
        "id": "layout-mismatch",
        "severity": "critical",
        "title": "T.",
        "evidence": "",
        "fix": "",
    }
    broken = load_diagnosis(
        {"schema": 3, "training": {}, "serving": {}, "verdict": {"root_cause": root}, **OPTIONS}
    )
    assert words.recommendation_text(profile(**SAMPLE), broken) == (
        "After fixing the root cause the acceptance changes: measure again. Recommended: 2 draft "
        "steps (predicted 84.0 tok/s, accept length 1.50, +5% (+1% to +9%)) instead of the "
        "current 3 (80.0 tok/s) — holds only while that finding stands."
    )
    within = dict(SAMPLE["recommended"], num_steps=3, changes=False, gain_low=-0.03)
    assert words.recommendation_text(profile(recommended=within)) == (
        "Keep 3 draft steps: the fastest predicted setting, 2 draft steps, gains +5% (-3% to "
        "+9%), which is not above the per-request noise and 5%."
    )
    assert words.recommendation_text(profile(**SMALL)) == (
        "The server already runs the recommended 1 draft step (predicted 40.0 tok/s, accept "
        "length 1.50)."
    )
    assert ui.step_costs_text(profile(**SAMPLE)) == (
        "From this run's own timings (the verify cost is the baseline's time per token): one "
        "verify forward 11.00 ms, one draft step 1.20 ms, a request's fixed cost 12.00 ms."
    )
    assert ui.step_costs_text(profile(**SMALL)) is None
    assert ui.not_profiled_texts(profile(**SAMPLE), "prompt_format") == [
        "Not profiled, prompt format: no local tokenizer with a chat template: fill in "
        f"'{TARGET_LABEL}' on New run (give a local copy of the target)"
    ]
    assert ui.not_profiled_texts(profile(**SAMPLE), "temperature") == []
    odd = profile(not_profiled=[{"part": "vision", "reason": "no images", "action": "add some"}])
    assert ui.not_profiled_texts(odd, None) == ["Not profiled, vision: no images: add some"]


# --- the Run page ------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def real_diagnosis(tmp_path_factory, served_models, eagle3_double) -> dict:
    """A diagnosis made by the real worker on the test world's double, as the store keeps it."""
    models, double = served_models, eagle3_double
    home = db.open_store(tmp_path_factory.mktemp("profile_ui") / "home")
    try:
        options = DiagnoseOptions(
            draft=str(models["draft"]),
            endpoint=double.url,
            num_prompts=2,
            max_new_tokens=8,
            concurrency=2,
            steps=3,
            training_layout=(Tap(0), Tap(1), Tap(2)),
        )
        run_id = submit_diagnosis(home, None, options)
        run_queued(home, [run_id], slots=1)
        diagnosis = db.get_run(home, run_id)["diagnosis"]
        assert diagnosis is not None
        return diagnosis
    finally:
        home.close()


def stored_run(store: db.Store, diagnosis: dict) -> int:
    """A finished run in `store` with this diagnosis."""
    run_id = db.create_run(store, None, "http://gpubox:30000")
    db.update_run(store, run_id, status="succeeded", diagnosis_json=json.dumps(diagnosis))
    return run_id


def chart_titles(at) -> list[str]:
    return [json.loads(c.proto.spec).get("title") for c in at.get("vega_lite_chart")]


def test_the_run_page_shows_the_profile_after_the_charts(real_diagnosis, home) -> None:
    # no root cause: the advice's command to paste (a broken draft's waits on its fix, issue 42)
    verdict = {**real_diagnosis["verdict"], "root_cause": None}
    run_id = stored_run(home, {**real_diagnosis, "verdict": verdict, "profile": SAMPLE})
    at = app("run", run=str(run_id))
    no_exception(at)
    headers = [h.value for h in at.header]
    assert headers[headers.index("Charts") + 1] == "Acceptance profile"
    assert [s.value for s in at.subheader][-5:] == [
        "Per draft position",
        "Per category",
        "Prompt format",
        "Temperature",
        "Which --speculative-num-steps",
    ]
    # The per-position chart moves from Charts into the profile: drawn once, from the profile.
    titles = chart_titles(at)
    assert titles[-4:] == [PER_POSITION_TITLE, CATEGORY_TITLE, *STEPS_TITLES]
    assert titles.count(PER_POSITION_TITLE) == 1
    assert ":material/warning: Weakest category: novel, measured accept length 1.20" in texts(
        at, "markdown"
    )
    # the recommended flags as the whole command that serves the run's model (issue 36)
    (command,) = [c.value for c in at.code if c.language == "bash"]
    assert command.startswith("python -m sglang.launch_server --model-path ")
    assert command.endswith(f" {FLAGS}")
    assert (
        f"Not profiled, prompt format: no local tokenizer with a chat template: fill in "
        f"'{TARGET_LABEL}' on New run (give a local copy of the target)"
    ) in [plain(i.value) for i in at.info]
    tables = [d.value for d in at.dataframe]
    temperatures = [t for t in tables if "temperature" in t.columns]
    assert temperatures[0]["measured accept length"].tolist() == ["2.25", "1.75"]
    assert any("prompt format" in t.columns for t in tables)
    assert [b.label for b in at.get("download_button")] == [
        "Download the profile (JSON)",
        "Download the profile (CSV)",
        "Download the diagnosis (JSON)",  # the Export tab's, as before
        "Download the numbers (CSV)",
    ]


def test_a_run_without_a_profile_shows_nothing_new(real_diagnosis, home) -> None:
    old = {k: v for k, v in real_diagnosis.items() if k != "profile"}
    for diagnosis in (old, {**old, "profile": None}):
        at = app("run", run=str(stored_run(home, diagnosis)))
        no_exception(at)
        assert "Acceptance profile" not in [h.value for h in at.header]
        titles = chart_titles(at)
        assert PER_POSITION_TITLE in titles and CATEGORY_TITLE not in titles
        labels = [b.label for b in at.get("download_button")]
        assert labels == ["Download the diagnosis (JSON)", "Download the numbers (CSV)"]
