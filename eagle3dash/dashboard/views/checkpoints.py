"""Checkpoints: registered and uploaded drafts with their runs and inspect reports; register,
start a new run with one, remove (after a confirmation)."""

import streamlit as st

from eagle3dash import store as db
from eagle3dash.ui import inputs, matrix, newrun, paths, reports, widgets
from eagle3dash.ui.fmt import md_escape, when
from eagle3dash.ui.home import get_store, read_only_notice
from eagle3dash.uploads import registration

store = get_store()
st.title("Checkpoints")
read_only = read_only_notice(store)

notice = st.session_state.pop("checkpoints_notice", None)
if notice:
    st.success(md_escape(notice))

if not read_only:
    with st.expander("Register a checkpoint by its path on this machine"):
        path = st.text_input("Checkpoint folder (or its config.json)", key="register_path")
        if st.button("Register", key="register_go", disabled=not path.strip()):
            typed = paths.inside_roots  # checked against the roots, naming this page's upload
            result = widgets.guard(
                lambda: registration(
                    store, typed(path, paths.CHECKPOINT_LABEL, paths.CHECKPOINTS_UPLOAD)
                )
            )
            if result is not None:
                registered = result[0]
                row = db.get_checkpoint(store, registered.checkpoint_id)
                assert row is not None  # registered just now
                notice = inputs.registered_words(row, registered.known)
                st.session_state["checkpoints_notice"] = notice
                st.rerun()

    with st.expander("Upload a checkpoint"):
        inputs.upload_checkpoint(key="checkpoints_upload")

show_removed = st.toggle("Show removed checkpoints", key="show_removed")
checkpoints = db.list_checkpoints(store, include_removed=show_removed)
if not checkpoints:
    st.info(
        "No checkpoints registered yet. Register a path or upload one above, or name one on "
        "New run (it is registered when the run starts)."
    )
    st.stop()

st.caption(
    "Removing an uploaded checkpoint deletes its files from the home folder; removing a path of "
    "yours only unregisters it. Runs that used a checkpoint keep their results either way."
)
for c in checkpoints:
    with st.container(border=True):
        kind = "uploaded" if c.uploaded else "path on this machine"
        removed = " · removed" if c.removed else ""
        st.markdown(
            f"**#{c.id} {md_escape(c.name)}** · {md_escape(c.format or '?')} · "
            f"{kind}{removed} · added {md_escape(when(c.created_at))}"
        )
        st.caption(md_escape(c.path))
        newrun.checkpoint_runs(c)
        with st.expander("Inspect report"):
            reports.registered_checkpoint_report(db.get_checkpoint(store, c.id))
        if not c.removed:
            matrix.matrix_section(c.path, key=f"matrix_{c.id}")
        if not c.removed:
            removed_notice = None if read_only else newrun.remove_with_confirmation(c)
            if removed_notice:
                st.session_state["checkpoints_notice"] = removed_notice
                st.rerun()
