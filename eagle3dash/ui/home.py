"""The store the pages use: the home folder from EAGLE3DASH_HOME, migrated once per process.

A `Store` keeps one SQLite connection per thread, and Streamlit runs every rerun (and every
fragment poll) in a new thread, so one process-wide `Store` would keep every dead thread's
connection open (measured: 50 reruns, 51 connections). Instead, opening the home and applying
migrations is cached with `st.cache_resource`, and `get_store()` hands each script thread its own
`Store`; the stores of threads that have ended are closed on the next call.
"""

from __future__ import annotations

import contextlib
import sqlite3
import threading
from collections.abc import Iterator
from pathlib import Path

import streamlit as st

from eagle3dash import store as db
from eagle3dash.diagnosis.stored import StoredRecordError
from eagle3dash.errors import InputError
from eagle3dash.store_faults import classify
from eagle3dash.ui import icons
from eagle3dash.ui.fmt import md_escape

_lock = threading.Lock()
_stores: dict[int, tuple[threading.Thread, db.Store]] = {}


def home_dir() -> Path:
    """The home folder named by EAGLE3DASH_HOME (default ./.eagle3dash), resolved."""
    return db.default_home().expanduser().resolve()


@st.cache_resource(show_spinner=False)
def _prepared_home(home: str) -> tuple[Path, bool]:
    """Create the home's folders and database and apply migrations (once per process and home);
    a read-only home with a database is opened read-only instead. (The home, read-only?)"""
    try:
        with db.open_store(home) as store:
            return store.home, False
    except db.ReadOnlyHomeError:
        with db.open_read_only(home) as store:
            return store.home, True


def get_store() -> db.Store:
    """This script thread's Store on the configured home."""
    home = home_dir()
    try:
        prepared, read_only = _prepared_home(str(home))
        if not (prepared / db.DB_NAME).is_file():  # deleted behind our back: prepare it again
            _prepared_home.clear()
            prepared, read_only = _prepared_home(str(home))
    except InputError as e:  # a home that is a file, not creatable, unreadable: one clear page
        st.error(md_escape(str(e)), icon=icons.REFUSED)
        st.stop()
    me = threading.current_thread()
    with _lock:
        for ident, (thread, store) in list(_stores.items()):
            if not thread.is_alive():
                store.close()
                del _stores[ident]
        entry = _stores.get(me.ident or 0)
        if (
            entry is None
            or entry[0] is not me
            or entry[1].home != prepared
            or entry[1].read_only != read_only
        ):
            if entry is not None:
                entry[1].close()
            entry = (me, db.Store(prepared, read_only=read_only))
            _stores[me.ident or 0] = entry
    return entry[1]


@contextlib.contextmanager
def store_faults_shown() -> Iterator[None]:
    """Around a page: a database it cannot read, a lock held past the wait or a full disk is one
    error box naming the file and what to do, instead of an exception."""
    try:
        yield
    except StoredRecordError as e:  # a stored document, not the database, is broken
        st.error(md_escape(str(e)), icon=icons.REFUSED)
    except (sqlite3.Error, OSError) as e:
        fault = classify(e, home_dir() / db.DB_NAME)
        if fault is None:
            raise
        st.error(md_escape(str(fault)), icon=icons.REFUSED)


def read_only_notice(store: db.Store) -> bool:
    """Say so on a page that writes when the home is read-only (its runs can still be shown)."""
    if not store.read_only:
        return False
    st.warning(
        f"The home {md_escape(str(store.home))} is read-only: its runs and checkpoints are shown, "
        "but nothing can be queued, registered or uploaded here. Make it writable, or set "
        f"{db.HOME_ENV} to a folder you can write, and restart the app.",
        icon=icons.LOCKED,
    )
    return True


def open_stores() -> int:
    """How many per-thread stores are held (for tests)."""
    with _lock:
        return len(_stores)
