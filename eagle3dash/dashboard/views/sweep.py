"""Sweep: a training run's checkpoints ranked by how they serve (`?sweep=<id>`): started here
from a run folder or checkpoints, a served run and a target (or the demo's drafts in one click),
watched while its evaluations run, each checkpoint diagnosable in full."""

import streamlit as st

from eagle3dash import sweep
from eagle3dash.diagnosis.options import DiagnoseOptions
from eagle3dash.submit import submit_diagnosis
from eagle3dash.ui import live, widgets
from eagle3dash.ui import sweep as sweep_ui
from eagle3dash.ui.home import get_store, read_only_notice

store = get_store()
st.title("Checkpoint sweep")
st.caption(sweep_ui.INTRO)
sweeps = sweep.list_sweeps(store)
if not read_only_notice(store):
    with st.expander("Start a sweep", expanded=not sweeps):
        started = sweep_ui.start_form(store)
    if started:
        st.query_params["sweep"] = started
        st.rerun()
if not sweeps:
    st.info(sweep_ui.NO_SWEEPS)
    st.stop()
asked = st.query_params.get("sweep")
sweep_id = st.selectbox("Sweep", sweeps, index=sweeps.index(asked) if asked in sweeps else 0)
setup = sweep.sweep_setup(store, sweep_id)


def draw() -> None:
    """The sweep as far as it got; said while it is unfinished."""
    entries = sweep.sweep_results(store, sweep_id)
    sweep_ui.results(entries, setup)
    if sweep.unfinished(entries):
        st.caption(sweep_ui.WATCHING)


live.live_section(store, lambda s: sweep.unfinished(sweep.sweep_results(s, sweep_id)), draw)

st.subheader("Diagnose a checkpoint in full")
entries = sweep.sweep_results(store, sweep_id)
picked = st.selectbox("Checkpoint", entries, format_func=sweep_ui.diagnose_label)
endpoint = st.text_input("Endpoint", value=(setup and setup.endpoint) or "", key="sweep_endpoint")
if st.button("Diagnose", disabled=not (picked and endpoint), key="sweep_diagnose"):
    # the sweep's target and steps: the run's simulated serving is then the sweep's number
    options = DiagnoseOptions(
        draft=picked.checkpoint,
        endpoint=endpoint,
        target=setup.target if setup else None,
        steps=setup.steps if setup else sweep.DEFAULT_STEPS,
    )
    run_id = submit_diagnosis(store, None, options)
    st.switch_page(widgets.RUN_PAGE, query_params={"run": str(run_id)})
