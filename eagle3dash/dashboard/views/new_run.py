"""New run: a draft checkpoint (registered, a path or an upload), the endpoint, prompts, options."""

import streamlit as st

from eagle3dash import store as db
from eagle3dash.diagnosis.options import DiagnoseOptions
from eagle3dash.diagnosis.stored import load_checkpoint_report
from eagle3dash.diagnosis.stored_run import read_runs
from eagle3dash.errors import InputError
from eagle3dash.submit import submit_diagnosis
from eagle3dash.ui import inputs, newrun, paths, probe_panel, reports, tables, widgets
from eagle3dash.ui.fmt import md_escape
from eagle3dash.ui.home import get_store, read_only_notice
from eagle3dash.ui.newrun import BUILTIN, PATH, PROMPT_FILE, REGISTERED
from eagle3dash.uploads import PROMPT_TYPES, register_path, save_prompt_file

store = get_store()
st.title("New run")
st.caption(
    "Name the draft checkpoint and the SGLang or vLLM endpoint serving it with that draft. The run "
    "inspects the checkpoint, captures the states the server feeds the draft, evaluates the "
    "draft standalone under the training and the serving layer layouts, benchmarks the endpoint, "
    "and says what is wrong and how to fix it."
)
if read_only_notice(store):
    st.stop()
demo_slot = newrun.try_the_demo()

# 1. The draft checkpoint.
st.header("1. Draft checkpoint")
checkpoints = db.list_checkpoints(store)
newrun.preselect_checkpoint([c.id for c in checkpoints])
if not checkpoints:
    st.info(
        "No checkpoints are registered yet: give the path of one on this machine or upload it "
        "(config.json with its .safetensors, or one archive of the folder)."
    )
source = st.radio(
    "Checkpoint",
    newrun.CHECKPOINT_SOURCES,
    index=0 if checkpoints else 1,
    horizontal=True,
    key="ckpt_source",
)
checkpoint_id: int | None = None
draft_path: str | None = None
if source == REGISTERED:
    if checkpoints:
        by_id = {c.id: c for c in checkpoints}
        picked = st.selectbox(
            "Registered checkpoint",
            list(by_id),
            format_func=lambda i: f"#{i} {by_id[i].name} ({by_id[i].format or '?'})",
            key="ckpt_pick",
        )
        if picked is not None:
            checkpoint_id, draft_path = picked, by_id[picked].path
            st.caption("Path: " + md_escape(draft_path))
            with st.expander("Inspect report"):
                reports.registered_checkpoint_report(db.get_checkpoint(store, picked))
elif source == PATH:
    typed = st.text_input(
        "Checkpoint folder on this machine (or its config.json / .safetensors)",
        placeholder="/data/drafts/kimi-eagle3",
        key="ckpt_path",
    ).strip()
    if typed:
        report = widgets.guard(newrun.inspect_typed, typed)
        if report is not None:
            draft_path = report.path
            st.success(f"{md_escape(report.spec.format)} draft at {md_escape(report.path)}")
            with st.expander("Inspect report", expanded=bool(report.problems)):
                reports.checkpoint_report(load_checkpoint_report(report.to_json()))
else:
    checkpoint_id = inputs.upload_checkpoint(key="ckpt_upload")
    if checkpoint_id is not None:
        row = db.get_checkpoint(store, checkpoint_id)
        draft_path = None if row is None else row.path

# 2. The endpoint (probed on entry) and an optional baseline.
st.header("2. Endpoint (SGLang or vLLM)")
endpoint = inputs.option_input(st, "endpoint", key="endpoint")
probe = probe_panel.probe_panel(endpoint, key="endpoint", findings_title=None)
newrun.before_submit_warnings(probe, draft_path)
newrun.follow_server_steps(probe)
newrun.ask_what_the_server_does_not_say(probe)
newrun.propose_target(probe)
target = newrun.local_target_input()
baseline = inputs.option_input(st, "baseline", key="baseline")
if baseline.strip():
    with st.expander("Baseline server", expanded=False):
        probe_panel.probe_panel(baseline, key="baseline", findings_title="Baseline findings")

# 3. Prompts.
st.header("3. Prompts")
prompt_source = st.radio("Prompts", newrun.PROMPT_SOURCES, horizontal=True, key="prompt_source")
prompts: str | None = None
if prompt_source == BUILTIN:
    prompts = inputs.option_input(st, "prompts", key="prompt_set")
elif prompt_source == PROMPT_FILE:
    prompts = newrun.prompt_file_input()
else:
    upload = st.file_uploader(
        'One JSON object a line: {"prompt": ...}, {"messages": [...]} or {"input_ids": [...]}',
        type=list(PROMPT_TYPES),
        key="prompt_file",
    )
    if upload is not None:
        saved = widgets.guard(save_prompt_file, store, upload)
        if saved is not None:
            prompts = str(saved[0])
            st.success(f"{saved[1]} prompts from {md_escape(upload.name)}")

# 4. Options.
st.header("4. Options")
values = {
    "draft": draft_path,
    "endpoint": endpoint,
    "baseline": baseline,
    "prompts": prompts,
    "target": target,
}
with st.expander("Options", expanded=False):
    values |= inputs.option_row("num_prompts", "max_new_tokens", "steps", "concurrency")
    values |= inputs.option_row("device", "dtype", "target_layers", "arch")
    values |= inputs.option_row("training_layout", "trainer", "training_sglang_version")
    values |= inputs.option_row("train_states", "draft_config")
    values |= inputs.option_row("profile", "temperatures")

# Submit.
submit = st.button("Run the diagnosis", type="primary", key="submit")
filled_now = newrun.demo_banner(demo_slot, submit)  # a click in a filling run: old values
if submit and not filled_now:
    try:
        if endpoint.strip() and probe is None:
            raise InputError("the endpoint did not answer a probe; fix the URL or the server first")
        if prompts is None:
            raise InputError(
                "give a valid JSONL prompt file (on this machine or uploaded), or choose a "
                "built-in prompt set"
            )
        paths.check_typed_paths(values)
        options = DiagnoseOptions.parse(values)
        if source == PATH:  # registered once everything else checks out
            checkpoint_id, _ = register_path(
                store, options.draft, draft_config=options.draft_config
            )
        run_id = submit_diagnosis(store, checkpoint_id, options, newrun.run_labels(options))
    except InputError as e:
        widgets.show_error(e)
    else:
        st.switch_page(widgets.RUN_PAGE, query_params={"run": str(run_id)})

recent = read_runs(store, limit=3).runs
if recent:
    st.caption("Latest runs: " + md_escape(", ".join(tables.run_label(r) for r in recent)))
