"""New run and Checkpoints under Streamlit's AppTest: the demo in one click, the warnings before
submit, a target refused as a draft, the steps the server runs, uploads that keep their name, and
a checkpoint's runs, its new run and its confirmed removal.

The test world (tests/conftest.py) serves a tiny target with a random draft through the SGLang API
double WITHOUT hidden states (3 draft steps); the demo test starts the demo's own endpoints from
the page.
"""

from __future__ import annotations

import io
import json
import os
import zipfile
from pathlib import Path

import httpx
import pytest
from streamlit.testing.v1 import AppTest

from eagle3dash import store as db
from eagle3dash.demo import FIXTURES
from eagle3dash.job_kinds import JOB_KINDS
from eagle3dash.jobs.worker import run_worker
from eagle3dash.preloaded import HEAVY
from eagle3dash.ui import newrun
from tests.appkit import app, no_exception, plain, texts

# --- fixtures ----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def world(served_models, hidden_states_off_double):
    """The test world's target and drafts; its double serves them with hidden states OFF, 3
    draft steps."""
    return {**served_models, "url": hidden_states_off_double.url}


def ckpt_files(path: Path) -> list[tuple[str, bytes, str]]:
    """A checkpoint folder's files as a file_uploader value."""
    return [(p.name, p.read_bytes(), "application/octet-stream") for p in sorted(path.iterdir())]


def upload(at: AppTest, files: list[tuple[str, bytes, str]]) -> AppTest:
    at.radio(key="ckpt_source").set_value("An upload").run()
    at.file_uploader(key="ckpt_upload").set_value(files).run()
    return at


# --- the demo in one click ---------------------------------------------------------------------


@pytest.fixture
def demo_stopped_after():
    """The demo's endpoints live in this process's st.cache_resource: stop them afterwards."""
    yield
    newrun.stop_demo()


def test_try_it_on_the_demo_fills_the_form_and_reaches_the_mismatch(home, demo_stopped_after):
    at = app("new_run")
    at.button(key="demo_try").click().run()
    no_exception(at)
    demo = newrun.demo_endpoints()  # the app's, reused
    assert at.text_input(key="ckpt_path").value == str(FIXTURES / "draft-a")
    assert at.text_input(key="endpoint").value == demo.endpoint.url
    assert at.text_input(key="baseline").value == demo.baseline.url
    assert at.text_input(key="opt_target").value == str(FIXTURES / "target")
    assert at.text_input(key="prompt_path").value == str(FIXTURES / "prompts.jsonl")
    numbers = {k: at.number_input(key=k).value for k in ("opt_num_prompts", "opt_concurrency")}
    assert numbers == {"opt_num_prompts": 8, "opt_concurrency": 1}
    shown = texts(at)
    assert "The form was still being filled in" not in shown  # Run was not pressed
    assert "16 prompts in " + str(FIXTURES / "prompts.jsonl") in shown
    assert (
        f"The demo runs on this machine: endpoint {demo.endpoint.url} (mismatched: draft A" in shown
    )
    assert "not a serving engine" in shown
    assert "each target forward takes at least 10 ms, each draft step 2 ms" in shown
    endpoint, baseline = at.metric[:4], at.metric[4:]  # the baseline's panel comes second
    assert [(m.label, plain(m.value)) for m in endpoint] == [
        ("SGLang version", "0.5.23"),
        ("Speculative", "EAGLE3"),
        ("Draft steps", "4"),
        ("Hidden states", "on"),
    ]
    assert [plain(m.value) for m in baseline] == ["0.5.23", "none", "—", "off"]
    assert at.number_input(key="opt_steps").value == 4
    # Never a green light before the run, which finds the mismatch: what was checked, and not.
    assert "No problems found in the server's settings" not in shown
    assert "Nothing wrong in what a probe can check. Checked: the server's settings" in shown
    assert (
        "whether the server serves this checkpoint (the weight files are byte-identical)" in shown
    )
    assert "Not checked until the run: which taps the server feeds the draft" in shown
    # A rerun reuses the endpoints; the same click again keeps them.
    at.button(key="demo_try").click().run()
    assert (
        newrun.demo_endpoints() is demo and at.text_input(key="endpoint").value == demo.endpoint.url
    )
    # Smaller than the seeded run, the same verdict: the layout finding first, the fix [-1, 0, 1].
    at.number_input(key="opt_num_prompts").set_value(2).run()
    at.number_input(key="opt_max_new_tokens").set_value(32).run()
    at.button(key="submit").click().run()
    no_exception(at)
    (run,) = db.list_runs(home)
    assert run["checkpoint_name"] == "draft-a" and run["baseline_url"] == demo.baseline.url
    assert at.query_params["run"] == str(run["id"])
    run_worker(home.home, JOB_KINDS, poll_interval=0.1, once=True, preload=HEAVY)
    diagnosis = db.get_run(home, run["id"])["diagnosis"]
    assert diagnosis["findings"][0]["id"] == "layout-mismatch"
    assert "[-1, 0, 1]" in diagnosis["findings"][0]["fix"]
    assert diagnosis["speedup"]["speedup"] < 1.0  # slower than no speculation, as in the incident


def test_run_pressed_with_try_it_in_one_rerun_submits_nothing(home, demo_stopped_after):
    """Streamlit folds a Run click that reaches the server before the "Try it" click's run has
    started into that run: both triggers are set, beside the widgets' old, empty values. Nothing
    is submitted, and the form stays filled, with a line saying why. (Seen in Chromium on a
    loaded machine: the two clicks in one run submitted run 4 at once.)"""
    at = app("new_run")
    at.button(key="demo_try").click()
    at.button(key="submit").click().run()
    no_exception(at)
    assert db.list_runs(home) == []
    assert "The form was still being filled in when you clicked, so nothing was submitted" in texts(
        at
    )
    assert at.text_input(key="ckpt_path").value == str(FIXTURES / "draft-a")
    at.button(key="submit").click().run()  # now, what the form shows
    no_exception(at)
    (run,) = db.list_runs(home)
    assert run["checkpoint_name"] == "draft-a"
    assert "The form was still being filled in" not in texts(at)


def test_try_it_on_the_demo_serves_the_deployment_picked(home, demo_stopped_after):
    # Each demo deployment can be re-run from the app: the fixed one serves draft A with the
    # fix written into a copy of its config under the home, in processes of their own.
    at = app("new_run")
    assert at.selectbox(key="demo_pick").options == [
        "mismatched: draft A as shipped",
        "correct: draft B, the control",
        "fixed: draft A with the fix applied",
        "format: draft C, needs the chat template",
        "vLLM V1: draft B's SpecForge config on vLLM's V1 runner",
        "vLLM fixed: draft B with both engines' keys",
    ]
    at.selectbox(key="demo_pick").set_value("fixed").run()
    at.button(key="demo_try").click().run()
    no_exception(at)
    demo = newrun.demo_endpoints("fixed")
    assert demo.name == "fixed" and demo.endpoint.process.pid != os.getpid()
    fixed = home.home / "demo" / "draft-a-fixed"
    assert at.text_input(key="ckpt_path").value == str(fixed)
    config = json.loads((fixed / "config.json").read_text())
    assert config["eagle_config"]["eagle_aux_hidden_state_layer_ids"] == [-1, 0, 1]
    assert "(fixed: draft A with the fix applied)" in texts(at)
    info = httpx.get(demo.endpoint.url + "/server_info", timeout=30).json()
    assert info["speculative_draft_model_path"] == str(fixed)
    # Picking another deployment stops this one's doubles.
    at.selectbox(key="demo_pick").set_value("correct").run()
    at.button(key="demo_try").click().run()
    assert not demo.alive() and newrun.demo_endpoints("correct").name == "correct"
    assert at.text_input(key="ckpt_path").value == str(FIXTURES / "draft-b")
    # A vLLM deployment's probe names vLLM's version, not SGLang's.
    at.selectbox(key="demo_pick").set_value("vllm-v1").run()
    at.button(key="demo_try").click().run()
    no_exception(at)
    metrics = {m.label: plain(m.value) for m in at.metric}
    assert metrics["vLLM version"] == "0.33.0" and "SGLang version" not in metrics


# --- before submit -----------------------------------------------------------------------------


def test_hidden_states_off_is_a_warning_before_submit(world, home) -> None:
    at = app("new_run")
    at.text_input(key="ckpt_path").set_value(str(world["draft"])).run()
    at.text_input(key="endpoint").set_value(world["url"]).run()
    no_exception(at)
    assert {m.label: m.value for m in at.metric}["Hidden states"] == "off"
    (warning,) = [w.value for w in at.warning]
    assert plain(warning).startswith(
        "**The server does not return hidden states, so what it feeds the draft cannot be "
        "captured: the serving side is at best inferred from the measured acceptance.**"
    )
    assert "Fix: Restart the server with --enable-return-hidden-states" in plain(warning)
    assert at.error == []  # the server serves this very checkpoint


def test_another_draft_served_is_an_error_before_submit(world, home) -> None:
    other = db.add_checkpoint(home, world["other"], name="epoch 7")
    at = app("new_run")
    assert at.radio(key="ckpt_source").value == "A registered checkpoint"
    assert at.selectbox(key="ckpt_pick").value == other
    at.text_input(key="endpoint").set_value(world["url"]).run()
    no_exception(at)
    (error,) = [plain(e.value) for e in at.error]
    assert error.startswith(
        "**The endpoint serves another draft than the checkpoint under diagnosis: their weights "
        "differ.**"
    )
    assert f"Fix: Restart the server with --speculative-draft-model-path {world['other']}" in error
    assert len(at.warning) == 1  # and hidden states off


def test_draft_steps_follow_the_server_unless_set_by_hand(world, home) -> None:
    at = app("new_run")
    assert at.number_input(key="opt_steps").value == 5  # no server yet: the option's default
    at.text_input(key="endpoint").set_value(world["url"]).run()
    assert at.number_input(key="opt_steps").value == 3  # the server's --speculative-num-steps
    at = app("new_run")
    at.number_input(key="opt_steps").set_value(6).run()
    at.text_input(key="endpoint").set_value(world["url"]).run()
    assert at.number_input(key="opt_steps").value == 6


def test_a_target_typed_as_the_draft_is_refused(world, home) -> None:
    at = app("new_run")
    at.text_input(key="ckpt_path").set_value(str(world["target"])).run()
    no_exception(at)
    assert texts(at, "error") == (
        f"{world['target']}: this looks like a target model (a causal LM), not an EAGLE-3 draft: "
        "no fc.weight, 4 decoder layers; give the EAGLE-3 draft's folder"
    )
    assert at.success == []
    at.button(key="submit").click().run()
    assert db.list_runs(home) == [] and db.list_checkpoints(home) == []


def test_a_prompt_file_on_this_machine(home, tmp_path) -> None:
    at = app("new_run")
    at.radio(key="prompt_source").set_value("A file on this machine").run()
    at.text_input(key="prompt_path").set_value(str(FIXTURES / "prompts.jsonl")).run()
    assert f"16 prompts in {FIXTURES / 'prompts.jsonl'}" in texts(at, "caption")
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"prompt": "hi"}\n[1]\n')
    at.text_input(key="prompt_path").set_value(str(bad)).run()
    no_exception(at)
    assert f"{bad}, line 2" in texts(at, "error")


# --- uploads -----------------------------------------------------------------------------------


def test_a_re_upload_keeps_the_checkpoints_name(world, home) -> None:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as zf:
        for name, blob, _ in ckpt_files(world["draft"]):
            zf.writestr(f"my-draft/{name}", blob)
    at = upload(app("new_run"), [("my-draft.zip", buf.getvalue(), "application/zip")])
    assert "Registered checkpoint #1 my-draft (specforge)" in texts(at, "success")
    at = upload(app("new_run"), ckpt_files(world["draft"]))  # the loose files, another session
    no_exception(at)
    assert (
        "Already registered as checkpoint #1 my-draft (specforge): the same config and weights; "
        "using it." in texts(at, "success")
    )
    assert [c.name for c in db.list_checkpoints(home)] == ["my-draft"]


def test_a_path_and_an_upload_of_one_draft_are_one_checkpoint(world, home) -> None:
    at = app("checkpoints")
    at.text_input(key="register_path").set_value(str(world["draft"])).run()
    at.button(key="register_go").click().run()
    at = upload(app("new_run"), ckpt_files(world["draft"]))
    assert "Already registered as checkpoint #1 draft (specforge)" in texts(at, "success")
    assert len(db.list_checkpoints(home)) == 1
    assert list(home.path("checkpoints").iterdir()) == []


def test_a_junk_upload_says_so_in_one_line(home) -> None:
    at = upload(app("new_run"), [("junk.tar.gz", b"not an archive", "application/gzip")])
    no_exception(at)
    assert texts(at, "error") == (
        "Upload rejected, nothing registered: junk.tar.gz: not a zip or tar archive, or one cut "
        "short; upload a .zip, .tar or .tar.gz of the checkpoint folder"
    )


# --- checkpoints -------------------------------------------------------------------------------


def test_a_checkpoint_lists_its_runs_and_starts_a_new_run_with_it(world, home) -> None:
    mine = db.add_checkpoint(home, world["draft"], name="mine")
    other = db.add_checkpoint(home, world["other"], name="other")
    runs = [db.create_run(home, mine, "http://gpubox:30000") for _ in range(2)]
    demo = {"demo": "mismatched", "demo_fixed_run": 9}
    db.update_run(home, runs[1], status="succeeded", options=demo, endpoint_url="http://x:1")
    db.mark_endpoint_stopped(home, "http://x:1")
    at = app("checkpoints")
    no_exception(at)
    links = [(link.proto.label, link.proto.query_string) for link in at.get("page_link")]
    assert [q for label, q in links if label.startswith("Run #")] == [
        f"run={runs[1]}",
        f"run={runs[0]}",
    ]
    assert any(
        label.startswith(f"Run #{runs[1]} · :material/check_circle: succeeded · ")
        and label.endswith(" · demo: mismatched, fixed by run #9 · endpoint stopped")
        for label, _ in links
    )
    assert ("New run with this checkpoint", f"checkpoint={mine}") in links
    assert "Used by 2 runs:" in texts(at, "caption") and "No run has used it yet." in texts(at)
    # The link's page: New run with that checkpoint picked (and the other one stays pickable).
    at = app("new_run", checkpoint=str(mine))
    no_exception(at)
    assert at.radio(key="ckpt_source").value == "A registered checkpoint"
    assert at.selectbox(key="ckpt_pick").value == mine != other
    assert "checkpoint" not in at.query_params  # picked once; the user may change it
    at = app("new_run", checkpoint="999")
    assert "No registered checkpoint #999: pick one below." in texts(at, "warning")


def test_remove_asks_first(world, home) -> None:
    mine = db.add_checkpoint(home, world["draft"], name="mine")
    at = app("checkpoints")
    at.button(key=f"remove-{mine}").click().run()
    no_exception(at)
    assert texts(at, "warning") == (
        f"Remove checkpoint #{mine} mine? Your files stay where they are; it is only "
        "unregistered. Runs that used it keep their results."
    )
    at.button(key=f"remove-no-{mine}").click().run()
    assert at.warning == [] and len(db.list_checkpoints(home)) == 1
    at.button(key=f"remove-{mine}").click().run()
    at.button(key=f"remove-yes-{mine}").click().run()
    assert f"Removed checkpoint #{mine}; no files were touched." in texts(at, "success")
    assert db.list_checkpoints(home) == [] and world["draft"].is_dir()


def test_the_served_models_local_folder_is_proposed_as_the_target(world, home) -> None:
    at = app("new_run")
    at.text_input(key="endpoint").set_value(world["url"]).run()
    no_exception(at)
    target = str(Path(world["target"]).resolve())
    (proposal,) = [plain(i.value) for i in at.info if "served model is on this machine" in i.value]
    assert proposal.startswith(f"The served model is on this machine: {target} (4 layers, ")
    at.button(key="use_served_target").click().run()
    no_exception(at)
    assert at.text_input(key="opt_target").value == target
    assert not [i for i in at.info if "served model is on this machine" in i.value]


# --- the local target box ----------------------------------------------------------------------


def test_the_target_box_says_what_it_found_as_it_is_typed(world, home, tmp_path) -> None:
    """A model folder: its depth and weights under the box; a folder with only the config and
    the tokenizer: why that measures no training side; and, beside the box, why a target is not
    uploaded."""
    at = app("new_run")
    captions = texts(at, "caption")
    assert "A target is not uploaded: the training side is measured by running the target" in (
        captions
    )
    target = world["target"]
    weights = sum(f.stat().st_size for f in target.glob("*.safetensors"))
    at.text_input(key="opt_target").set_value(str(target)).run()
    no_exception(at)
    assert at.error == []
    size = f"{weights / 1e6:,.1f} MB" if weights >= 1e6 else f"{weights / 1e3:,.0f} KB"
    assert f"Target at {target}: 4 decoder blocks, {size} of weights" in texts(at, "caption")

    bare = tmp_path / "target-config-only"
    bare.mkdir()
    for name in ("config.json", "tokenizer.json", "tokenizer_config.json"):
        (bare / name).write_bytes((target / name).read_bytes())
    at.text_input(key="opt_target").set_value(str(bare)).run()
    no_exception(at)
    assert texts(at, "error") == (
        f"Local target path (for training-side states): {bare} holds no weights (*.safetensors "
        "or *.bin): the training side is measured by running the target on the served tokens, "
        "which needs its weights; its config and tokenizer alone do not measure it"
    )
    at.text_input(key="opt_target").set_value(str(tmp_path / "nope")).run()
    assert texts(at, "error") == (
        f"Local target path (for training-side states): {tmp_path / 'nope'} does not exist on "
        "this machine"
    )
