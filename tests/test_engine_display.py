"""The engine a run diagnosed, shown and searched: the Runs column, Compare's row, the Run
header's words, the Runs search (a real SQLite store), and what the New-run form asks of a vLLM
server that does not say."""

from __future__ import annotations

import json
from pathlib import Path

from eagle3dash import store as db
from eagle3dash.diagnosis.stored_run import read_runs, run_from_row
from eagle3dash.engines.seam import ServerReport
from eagle3dash.ui import tables, words

STORED = Path(__file__).parent / "fixtures" / "stored"
URL = "http://127.0.0.1:8690"
VLLM_V2_ASSUMED = {
    "url": URL,
    "engine": "vllm",
    "version": "0.33.0",
    "vllm": {"runner": "v2", "runner_said": False},
    "speculative": {"draft_model_path": None, "num_steps": 3},
}


def report(d: dict) -> ServerReport:
    """A stored report, partial as hand-written, through the typed reader."""
    return ServerReport.from_dict(d)


def test_engine_words() -> None:
    # stored before the runner was read from the server: V2 was assumed, and says so
    assert words.engine_words(report(VLLM_V2_ASSUMED)) == "vLLM 0.33.0 (V2 runner, assumed)"
    said = {**VLLM_V2_ASSUMED, "vllm": {"runner": "v1", "runner_said": True}}
    assert words.engine_words(report(said)) == "vLLM 0.33.0 (V1 runner)"
    cpu = {
        **VLLM_V2_ASSUMED,
        "version": "0.32.0",
        "vllm": {"runner": "v1", "runner_source": "platform", "runner_detail": "device cpu"},
    }
    assert words.engine_words(report(cpu)) == "vLLM 0.32.0 (V1 runner)"
    assert words.runner_words(report(cpu)) == "V1: its device decides (device cpu)"
    unknown = {
        **VLLM_V2_ASSUMED,
        "vllm": {"runner": None, "runner_source": "unknown", "runner_detail": "dev endpoints off"},
    }
    assert words.engine_words(report(unknown)) == "vLLM 0.33.0 (runner not known)"
    assert words.runner_words(report(unknown)).startswith("not known (dev endpoints off)")
    # a report stored before engines were told apart is SGLang's
    assert words.engine_words(report({"url": URL, "version": "0.5.23"})) == "SGLang 0.5.23"


def test_the_form_asks_only_what_the_server_does_not_say() -> None:
    assert words.unsaid_by_server(report(VLLM_V2_ASSUMED)) == (
        "This vLLM server does not say which draft it serves (check that your checkpoint is "
        "that draft): start it with VLLM_SERVER_DEV_MODE=1 to let /server_info tell."
    )
    older = {**VLLM_V2_ASSUMED, "speculative": {"draft_model_path": None, "num_steps": None}}
    text = words.unsaid_by_server(report(older))
    assert text is not None and " or its draft steps (give num_speculative_tokens" in text
    told = {**VLLM_V2_ASSUMED, "speculative": {"draft_model_path": "/d", "num_steps": 3}}
    assert words.unsaid_by_server(report(told)) is None
    sglang = {"url": URL, "engine": "sglang", "speculative": {"algorithm": "EAGLE3"}}
    assert words.unsaid_by_server(report(sglang)) is None
    runner_unknown = {
        **told,
        "vllm": {"runner": None, "runner_source": "unknown", "runner_detail": "dev endpoints off"},
    }
    assert words.unsaid_by_server(report(runner_unknown)) == (
        "This vLLM server does not say its model runner (each runner's reading is kept; the "
        "measured acceptance picks one when the target is given): start it with "
        "VLLM_SERVER_DEV_MODE=1 to let /server_info tell."
    )


def test_runs_column_compare_and_search(tmp_path) -> None:
    store = db.open_store(tmp_path / "home")
    on_vllm = db.create_run(store, None, "http://127.0.0.1:8690")
    on_sglang = db.create_run(store, None, "http://127.0.0.1:8691")
    older = db.create_run(store, None, "http://127.0.0.1:8692")
    db.update_run(store, on_vllm, engine="vllm", status="succeeded")
    db.update_run(store, on_sglang, engine="sglang", status="succeeded")
    db.update_run(store, older, status="succeeded")  # stored before the engine column
    frame = tables.runs_frame(read_runs(store).runs)
    assert dict(zip(frame["run"], frame["engine"], strict=True)) == {
        on_vllm: "vLLM",
        on_sglang: "SGLang",
        older: "SGLang",
    }
    assert [r["id"] for r in db.list_runs(store, search="vllm")] == [on_vllm]
    assert db.count_runs(store, search="VLLM") == 1
    stored = json.loads((STORED / "schema2.json").read_text())  # a whole run, hand-written
    a = run_from_row(
        {"id": 1, "status": "succeeded", "diagnosis": {**stored, "server": VLLM_V2_ASSUMED}}
    )
    older_report = {"url": URL, "version": "0.5.23"}
    b = run_from_row(
        {"id": 2, "status": "succeeded", "diagnosis": {**stored, "server": older_report}}
    )
    rows = tables.compare_frame(a, b)
    engine_row = rows[rows.iloc[:, 0] == "engine"].iloc[0].tolist()
    assert engine_row[1:3] == ["vLLM 0.33.0 (V2 runner, assumed)", "SGLang 0.5.23"]
