"""Sweep: a training run's checkpoints ranked by how they serve (`?sweep=<id>`), each one
diagnosable in full."""

import streamlit as st

from eagle3dash import sweep
from eagle3dash.diagnosis.options import DiagnoseOptions
from eagle3dash.submit import submit_diagnosis
from eagle3dash.ui import sweep as sweep_ui
from eagle3dash.ui import widgets
from eagle3dash.ui.home import get_store

store = get_store()
st.title("Checkpoint sweep")
st.caption(sweep_ui.INTRO)
sweeps = sweep.list_sweeps(store)
if not sweeps:
    st.info(sweep_ui.NO_SWEEPS)
    st.stop()
asked = st.query_params.get("sweep")
sweep_id = st.selectbox("Sweep", sweeps, index=sweeps.index(asked) if asked in sweeps else 0)
entries = sweep.sweep_results(store, sweep_id)
st.markdown(sweep_ui.verdict(entries))
chart = sweep_ui.sweep_chart(entries)
if chart is not None:
    st.altair_chart(chart, width="stretch")
st.dataframe(sweep_ui.sweep_frame(entries), hide_index=True, width="stretch")

st.subheader("Diagnose a checkpoint in full")
endpoint = sweep.sweep_endpoint(store, sweep_id)
picked = st.selectbox("Checkpoint", entries, format_func=sweep_ui.diagnose_label)
endpoint = st.text_input("Endpoint", value=endpoint or "", key="sweep_endpoint")
if st.button("Diagnose", disabled=not (picked and endpoint)):
    options = DiagnoseOptions(draft=picked.checkpoint, endpoint=endpoint)
    run_id = submit_diagnosis(store, None, options)
    st.switch_page(widgets.RUN_PAGE, query_params={"run": str(run_id)})
