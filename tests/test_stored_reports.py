"""The typed readers of what a run's pages show besides the diagnosis itself: the server report
(a diagnosis's `server`, an endpoint's last probe), the checkpoint's inspect report (a
diagnosis's `checkpoint`, a registered checkpoint's row) and a run's row (StoredRun). Those
written by hand in older shapes load typed; a malformed one is one clear message, on the Run and
Runs pages too (a real SQLite store, AppTest).

Expected values are literals read off the hand-written documents."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from eagle3dash import store as db
from eagle3dash.diagnosis.stored import (
    StoredRecordError,
    load_checkpoint_report,
    load_diagnosis,
    load_server_report,
)
from eagle3dash.diagnosis.stored_run import read_run, read_runs, run_from_row
from eagle3dash.engines.seam import ServerReport
from eagle3dash.ui import provenance, tables, words
from tests.appkit import app, frames, no_exception, texts

STORED = Path(__file__).parent / "fixtures" / "stored"
URL = "http://127.0.0.1:42301"
# An endpoint's last probe as the first release stored it (2588578): no engine, no hidden-states
# mode, no chunked prefill; speculative settings without `adaptive` or `implausible`.
FIRST_PROBE = {
    "url": URL,
    "version": "0.5.2",
    "model_path": "/models/old-target",
    "served_model_name": "old-target",
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "tp_size": 2,
    "dtype": "bfloat16",
    "quantization": None,
    "attention_backend": "fa3",
    "device": "cuda",
    "speculative": {
        "algorithm": "EAGLE3",
        "draft_model_path": "/drafts/old",
        "num_steps": 3,
        "eagle_topk": 1,
        "num_draft_tokens": 4,
        "token_map": None,
        "draft_quantization": None,
        "quantization_explicitly_set": None,
        "accept_threshold_single": 1.0,
        "accept_threshold_acc": 1.0,
    },
    "enable_return_hidden_states": True,
    "enable_return_aux_hidden_states": False,
    "return_aux_hidden_state_layer_ids": None,
    "disable_radix_cache": None,
    "disable_cuda_graph": False,
    "decode_log_interval": 40,
    "avg_spec_accept_length": 2.25,
    "healthy": True,
    "server_info": {"version": "0.5.2"},
    "model_info": {},
    "server_info_path": "/server_info",
}


def test_the_first_stored_probe_loads_with_the_fields_added_since_off() -> None:
    report = load_server_report(FIRST_PROBE)
    assert report.engine == "sglang" and report.vllm is None
    assert report.return_hidden_states_mode is None and report.chunked_prefill_size is None
    assert report.hidden_states == "full"  # enabled, before the mode existed
    spec = report.speculative
    assert spec is not None and spec.adaptive is False and spec.implausible == []
    assert spec.max_accept_length == 4  # 3 steps, not adaptive
    assert report.server_info == {"version": "0.5.2"}


def test_a_report_reads_back_what_it_wrote() -> None:
    report = load_server_report(FIRST_PROBE)
    assert ServerReport.from_dict(report.to_dict()) == report


def test_a_schema1_diagnosis_carries_its_server_typed() -> None:
    raw = json.loads((STORED / "schema1.json").read_text())
    server = load_diagnosis(raw).server
    assert server is not None and server.url == "http://127.0.0.1:30000"
    assert server.speculative is not None and server.speculative.num_steps == 3
    summary = dict(tables.server_summary(server).itertuples(index=False))
    assert summary["engine"] == "SGLang 0.5.2"
    assert summary["steps / topk / draft tokens"].startswith("3 / ")
    assert summary["return hidden states"].startswith("on, every token")
    assert summary["radix cache disabled"] == "—"


@pytest.fixture
def home(tmp_path, monkeypatch) -> Path:
    monkeypatch.setenv("EAGLE3DASH_HOME", str(tmp_path / "home"))
    return tmp_path / "home"


def _failed_run_on(home: Path, probe: object) -> int:
    """A run that failed before its diagnosis, on an endpoint whose last probe is `probe`."""
    store = db.open_store(home)
    try:
        db.record_probe(store, URL, {"version": "0.5.2"})
        store.db.execute(
            "UPDATE endpoints SET last_probe_json = ? WHERE url = ?", (json.dumps(probe), URL)
        )
        run_id = db.create_run(store, None, URL)
        db.update_run(store, run_id, status="failed", error="the target ran out of memory")
        return run_id
    finally:
        store.close()


def test_the_run_page_shows_an_old_probe_of_its_endpoint(home) -> None:
    at = app("run", run=str(_failed_run_on(home, FIRST_PROBE)))
    no_exception(at)
    settings = next(f for f in frames(at) if "setting" in f.columns)
    shown = dict(zip(settings["setting"], settings["value"], strict=True))
    assert shown["model"] == "/models/old-target"
    assert shown["tp / dtype / quantization"].startswith("2 / ")
    assert shown["server's avg accept length (since start)"] == "2.25"


def test_the_run_page_names_a_broken_probe_in_one_error_box(home) -> None:
    at = app("run", run=str(_failed_run_on(home, {**FIRST_PROBE, "speculative": 3})))
    no_exception(at)
    assert texts(at, "error").count("the endpoint's stored probe cannot be read") == 1
    assert "(SpeculativeSettings is int, not an object)" in texts(at, "error")


# A registered checkpoint's report as stored before the norm and vocab-map flags, the dual-key
# ids and the provenance card (4b4b368): the spec's dims, its ids and the weight files only.
EARLY_REPORT = {
    "format": "specforge",
    "hidden_size": 4096,
    "target_hidden_size": 4096,
    "intermediate_size": 14336,
    "num_layers": 1,
    "num_heads": 32,
    "num_kv_heads": 8,
    "head_dim": 128,
    "vocab_size": 128256,
    "draft_vocab_size": 32000,
    "num_aux": 3,
    "aux_layer_ids": [1, 15, 28],
    "aux_ids_location": "eagle_config",
    "path": "/data/drafts/early",
    "files": ["model.safetensors"],
    "param_count": 850000000,
    "problems": ["fc.weight is float16 while the rest is bfloat16"],
}
CARD = {
    "trainer": "speculators",
    "trainer_version": "0.9.0",
    "run_folder": "/runs/r",
    "checkpoint": "/runs/r/checkpoint-2",
    "chosen_by": "given",
    "epoch": 2,
    "capture_layers": [2, 16, 29],
    "metrics": {
        "source": "eval.json full_acc_k",
        "per_position": [0.5, 0.25],
        "accept_length": 1.75,
        "trainer_value": None,
        "trainer_name": "full_acc",
        "conversion": "as stored",
    },
}


def test_an_early_checkpoint_report_loads_with_the_flags_added_since_at_their_defaults() -> None:
    report = load_checkpoint_report(EARLY_REPORT)
    assert report.spec.aux_layer_ids == (1, 15, 28) and report.spec.dual_top_level_ids is None
    assert (report.spec.has_d2t, report.spec.has_lm_head, report.spec.dtype) == (
        False,
        True,
        "float32",
    )
    assert report.provenance is None and report.document == EARLY_REPORT
    summary = dict(tables.checkpoint_summary(report).itertuples(index=False))
    assert summary["aux layer ids"] == "[1, 15, 28] (eagle_config)"
    assert summary["heads / kv heads / head dim"] == "32 / 8 / 128"
    assert summary["parameters"] == "850,000,000"
    assert summary["weight files"] == "model.safetensors"


def test_a_stored_card_reads_typed_with_the_trainers_numbers() -> None:
    report = load_checkpoint_report({**EARLY_REPORT, "provenance": CARD})
    card = report.provenance
    assert card is not None and card.capture_layers == (2, 16, 29) and card.step is None
    assert provenance.trainer_rows(report) == [
        ("trainer", "acceptance", 1, None, 0.5),
        ("trainer", "acceptance", 2, None, 0.25),
    ]
    assert provenance.trainer_note(report) == (
        "Trainer's eval (eval.json full_acc_k): accept length 1.75 with the bonus token. "
        "Converted: as stored."
    )
    rows = dict(provenance.card_frame(card).values.tolist())
    assert rows["Step / epoch"] == "— / 2" and rows["Capture layers"] == "2, 16, 29"


def test_the_schema1_diagnosis_carries_its_checkpoint_typed() -> None:
    raw = json.loads((STORED / "schema1.json").read_text())
    checkpoint = load_diagnosis(raw).checkpoint
    assert checkpoint is not None and checkpoint.spec.aux_layer_ids == (1, 15, 28)
    assert checkpoint.spec.num_aux == 3 and checkpoint.problems == []


PROBE_AGAIN = "it was cut short or written by another program; probe the endpoint again"
REGISTER_AGAIN = "it was cut short or written by another program; register it again"


@pytest.mark.parametrize(
    ("read", "broken", "message"),
    [
        (
            load_server_report,
            {**FIRST_PROBE, "speculative": "EAGLE3"},
            "the endpoint's stored probe cannot be read (SpeculativeSettings is str, not an "
            f"object): {PROBE_AGAIN}",
        ),
        (
            load_server_report,
            {k: v for k, v in FIRST_PROBE.items() if k != "url"},
            f"the endpoint's stored probe cannot be read (no 'url'): {PROBE_AGAIN}",
        ),
        (
            load_server_report,
            ["not", "a", "report"],
            "the endpoint's stored probe cannot be read (the server report is list, not an "
            f"object): {PROBE_AGAIN}",
        ),
        (
            load_checkpoint_report,
            {**EARLY_REPORT, "aux_layer_ids": "1,15,28"},
            'the checkpoint\'s stored report cannot be read (aux_layer_ids is "1,15,28", not a '
            f"list of layer ids): {REGISTER_AGAIN}",
        ),
        (
            load_checkpoint_report,
            "a checkpoint",
            "the checkpoint's stored report cannot be read (the checkpoint report is str, not an "
            f"object): {REGISTER_AGAIN}",
        ),
    ],
)
def test_a_malformed_report_is_one_line_naming_the_problem(read, broken, message) -> None:
    with pytest.raises(StoredRecordError) as e:
        read(broken)
    assert str(e.value) == message


# A run's row as an early store listed it: no engine, no endpoint stop, no placement; options as
# the form stored them then, with a demo label beside them.
EARLY_ROW = {
    "id": 7,
    "created_at": "2026-11-29T10:00:00.000000Z",
    "status": "succeeded",
    "checkpoint_id": 3,
    "checkpoint_name": None,
    "checkpoint_path": "/data/drafts/early",
    "checkpoint_removed": True,
    "endpoint_url": URL,
    "baseline_url": None,
    "options": {"draft": "/data/drafts/early", "endpoint": URL, "steps": 3, "demo": "mismatched"},
    "measured_accept_length": 1.52,
    "speedup": None,
    "worst_severity": "critical",
    "worst_finding_title": "Shifted.",
    "verdict": {"root_cause": None, "problems_found": True, "not_checked": []},
}


def test_an_early_run_row_loads_typed() -> None:
    run = run_from_row(EARLY_ROW)
    assert (run.id, run.status, run.engine, run.endpoint_stopped_at) == (7, "succeeded", None, None)
    assert (
        run.options is not None
        and run.options.steps == 3
        and run.options.draft == "/data/drafts/early"
    )
    assert (run.demo, run.demo_fixed_run) == ("mismatched", None)
    assert run.diagnosis() is None and run.server_info == {} and run.placement is None
    # schema 1 verdicts had no status: a critical worst finding makes it a problem
    assert run.verdict is not None and run.verdict.status == "problem"
    assert words.run_verdict(run) == "warning: Shifted."
    assert tables.checkpoint_label(run) == "/data/drafts/early (removed)"
    assert tables.engine_label(run) == "SGLang"  # finished before engines were told apart
    assert tables.run_label(run) == f"#7 /data/drafts/early (removed) @ {URL} (succeeded)"
    # a run created without the form's options (the CLI's) has none
    assert run_from_row({"id": 8, "options": {}}).options is None


@pytest.mark.parametrize(
    ("row", "problem"),
    [
        (
            {**EARLY_ROW, "options": "steps=3"},
            "run #7's stored row cannot be read (its options are str, not an object)",
        ),
        (
            {**EARLY_ROW, "tok_s": "fast"},
            "run #7's stored row cannot be read (could not convert string to float: 'fast')",
        ),
        ({"status": "queued"}, "a run's stored row cannot be read (no 'id')"),
    ],
)
def test_a_malformed_run_row_is_one_line(row, problem) -> None:
    with pytest.raises(StoredRecordError) as e:
        run_from_row(row)
    assert str(e.value) == (
        f"{problem}: it was cut short or written by another program; run it again from New run"
    )


def test_runs_read_from_a_real_store_and_a_broken_one_is_named_on_the_runs_page(home) -> None:
    store = db.open_store(home)
    try:
        good = db.create_run(store, None, URL)
        db.update_run(store, good, status="failed", error="boom\ntraceback")
        broken = db.create_run(store, None, URL)
        store.db.execute("UPDATE runs SET options_json = '\"steps=3\"' WHERE id = ?", (broken,))
        run = read_run(store, good)
        assert run is not None and run.error == "boom\ntraceback" and run.options is None
        assert words.run_verdict(run) == "failed: boom"
        # one broken row is named, and hides only itself: the good run stays listed
        read = read_runs(store)
        assert [r.id for r in read.runs] == [good]
        assert [str(e).split(" (")[0] for e in read.unreadable] == [
            f"run #{broken}'s stored row cannot be read"
        ]
    finally:
        store.close()
    at = app("runs")
    no_exception(at)
    assert texts(at, "error").count(f"run #{broken}'s stored row cannot be read") == 1
    assert at.dataframe[0].value["run"].tolist() == [good]
