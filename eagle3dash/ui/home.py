"""The store the pages use: the home folder from EAGLE3DASH_HOME, migrated once per process.

A `Store` keeps one SQLite connection per thread, and Streamlit runs every rerun (and every
fragment poll) in a new thread, so one process-wide `Store` would keep every dead thread's
connection open (measured: 50 reruns, 51 connections). Instead, opening the home and applying
migrations is cached with `st.cache_resource`, and `get_store()` hands each script thread its own
`Store`; the stores of threads that have ended are closed on the next call.
"""

from __future__ import annotations

import threading
from pathlib import Path

import streamlit as st

from eagle3dash import store as db
from eagle3dash.errors import InputError
from eagle3dash.ui.fmt import md_escape

_lock = threading.Lock()
_stores: dict[int, tuple[threading.Thread, db.Store]] = {}


def home_dir() -> Path:
    """The home folder named by EAGLE3DASH_HOME (default ./.eagle3dash), resolved."""
    return db.default_home().expanduser().resolve()


@st.cache_resource(show_spinner=False)
def _prepared_home(home: str) -> Path:
    """Create the home's folders and database and apply migrations (once per process and home)."""
    with db.open_store(home) as store:
        return store.home


def get_store() -> db.Store:
    """This script thread's Store on the configured home."""
    home = home_dir()
    try:
        prepared = _prepared_home(str(home))
    except InputError as e:  # a home that is a file, read-only, not creatable: one clear page
        st.error(md_escape(str(e)), icon="🚫")
        st.stop()
    if not (prepared / db.DB_NAME).is_file():  # deleted behind our back: prepare it again
        _prepared_home.clear()
        prepared = _prepared_home(str(home))
    me = threading.current_thread()
    with _lock:
        for ident, (thread, store) in list(_stores.items()):
            if not thread.is_alive():
                store.close()
                del _stores[ident]
        entry = _stores.get(me.ident or 0)
        if entry is None or entry[0] is not me or entry[1].home != prepared:
            if entry is not None:
                entry[1].close()
            entry = (me, db.Store(prepared))
            _stores[me.ident or 0] = entry
    return entry[1]


def open_stores() -> int:
    """How many per-thread stores are held (for tests)."""
    with _lock:
        return len(_stores)
