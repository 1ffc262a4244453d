"""Runs: every diagnosis, newest first, 50 a page, with filters, links and a compare picker."""

import math

import streamlit as st

from eagle3dash import store as db
from eagle3dash.diagnosis.stored_run import read_runs
from eagle3dash.jobs import STATUSES
from eagle3dash.ui import icons, live, run_panels, tables, widgets, words
from eagle3dash.ui.fmt import md_escape
from eagle3dash.ui.home import get_store

PAGE_SIZE = 50

store = get_store()
st.title("Runs")


def runs_page() -> None:
    """The table with its filters and the compare picker (redrawn while a run is unfinished)."""
    if db.count_runs(store) == 0:
        st.info(
            "No runs yet. Start one on **New run**: name a draft checkpoint and the SGLang "
            "endpoint serving it. No GPU box at hand? `make run` seeds the built-in demo (a tiny "
            "target and drafts that reproduce the slow-serving incident): its runs appear here "
            "as they are queued, without a reload."
        )
        st.page_link(widgets.NEW_RUN_PAGE, label="Start a new run", icon=icons.NEW_RUN)
        st.caption("Home folder: " + md_escape(store.home))
        return

    left, right = st.columns([1, 3])
    status = left.selectbox("Status", ["all", *STATUSES], key="runs_status")
    search = right.text_input(
        "Search",
        placeholder="checkpoint, endpoint, finding (rule id or title), status or #id",
        key="runs_search",
    )
    status_filter = None if status == "all" else status
    total = db.count_runs(store, status=status_filter, search=search)
    pages = max(1, math.ceil(total / PAGE_SIZE))
    if st.session_state.get("runs_page", 1) > pages:
        st.session_state["runs_page"] = pages
    page = st.number_input("Page", min_value=1, max_value=pages, step=1, key="runs_page")
    offset = (int(page) - 1) * PAGE_SIZE
    read = read_runs(store, limit=PAGE_SIZE, offset=offset, status=status_filter, search=search)
    for problem in read.unreadable:
        st.error(md_escape(str(problem)), icon=icons.REFUSED)
    rows = read.runs
    if not rows:
        if not read.unreadable:
            st.info("No runs match these filters.")
        return

    shown = len(rows) + len(read.unreadable)
    st.caption(f"Runs {offset + 1}–{offset + shown} of {total:,} (page {page} of {pages})")
    run_panels.runs_table(rows)
    for note in words.runs_double_note(rows):
        st.caption(f"{icons.NOTE} " + md_escape(note))

    labels = {r.id: tables.run_label(r) for r in rows}
    picked = st.multiselect(
        "Compare two runs",
        list(labels),
        format_func=lambda run_id: labels.get(run_id, f"#{run_id}"),
        max_selections=2,
        key="runs_compare",
    )
    if st.button("Compare", disabled=len(picked) != 2, key="runs_compare_go"):
        a, b = sorted(picked)
        st.switch_page(widgets.COMPARE_PAGE, query_params={"a": str(a), "b": str(b)})
    st.caption("Home folder: " + md_escape(store.home))


live.live_section(store, live.runs_waiting, runs_page, idle=live.IDLE_POLL_S)
