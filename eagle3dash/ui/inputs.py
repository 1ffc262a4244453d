"""The New run and Checkpoints pages' inputs: a diagnosis option's widget (from its schema
entry), a row of them, the checkpoint upload."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import MISSING
from typing import Any

import streamlit as st

from eagle3dash.diagnosis.options import SCHEMA, Kind
from eagle3dash.diagnosis.stored import load_checkpoint_report
from eagle3dash.errors import InputError
from eagle3dash.store import CheckpointRow
from eagle3dash.ui import icons
from eagle3dash.ui.fmt import md_escape
from eagle3dash.ui.home import get_store
from eagle3dash.ui.paths import show_path_check
from eagle3dash.ui.reports import checkpoint_report


def option_input(where: Any, name: str, key: str | None = None) -> Any:
    """The widget of one diagnosis option (key opt_<name>), drawn from its schema entry.

    The label is the schema's own constant text, passed as is: Streamlit also makes it the
    input's aria-label, where Markdown escapes would be read out as backslashes."""
    option = SCHEMA[name]
    label, help_text, key = option.label, md_escape(option.help), key or f"opt_{name}"
    if option.kind is Kind.INT:
        low, high = option.bounds or (None, None)
        return where.number_input(label, low, high, option.default, step=1, help=help_text, key=key)
    if option.kind is Kind.SWITCH:
        return where.checkbox(label, value=bool(option.default), help=help_text, key=key)
    if option.kind in (Kind.CHOICE, Kind.SET_OR_FILE):  # a file comes by an upload instead
        entries = list(option.choices) if option.default is not None else [None, *option.choices]
        return where.selectbox(
            label,
            entries,
            index=entries.index(option.default),
            format_func=lambda entry: option.placeholder if entry is None else entry,
            help=help_text,
            key=key,
        )
    placeholder = option.placeholder or (
        f"{option.default_text} (the default)" if option.default not in (None, MISSING) else ""
    )
    typed = where.text_input(label, placeholder=placeholder, help=help_text, key=key)
    if option.kind is Kind.PATH:  # checked as it is typed, right under its box
        show_path_check(where, name, typed)
    return typed


def option_row(*names: str) -> dict[str, Any]:
    """Diagnosis options side by side in one row; their values by option name."""
    columns = st.columns(len(names))
    return {name: option_input(col, name) for col, name in zip(columns, names, strict=True)}


def _signature(files: Sequence[Any]) -> tuple:
    return tuple((f.name, getattr(f, "size", None), getattr(f, "file_id", None)) for f in files)


def registered_words(row: CheckpointRow, known: bool, how: str = "") -> str:
    """What a registration ended in, by upload or by path alike: 'Already registered as
    checkpoint #4 NAME (FORMAT): the same config and weights; using it.' or 'Registered
    checkpoint #5 NAME (FORMAT)' + `how`."""
    name = f"checkpoint #{row.id} {row.name} ({row.format or '?'})"
    if known:
        return f"Already registered as {name}: the same config and weights; using it."
    return f"Registered {name}{how}"


def upload_checkpoint(key: str = "upload") -> int | None:
    """Upload a checkpoint (files or one archive); registered once; its id, or None.

    Each distinct upload is processed once per session (streamed to disk, validated with
    inspect, content-addressed, registered); reruns reuse the outcome.
    """
    from eagle3dash import store as db
    from eagle3dash.uploads import UPLOAD_TYPES, register_upload

    files = st.file_uploader(
        "config.json and the .safetensors files, or one .zip / .tar / .tar.gz of the checkpoint "
        "folder",
        type=list(UPLOAD_TYPES),
        accept_multiple_files=True,
        key=key,
    )
    if not files:
        return None
    store = get_store()
    outcomes: dict = st.session_state.setdefault("_upload_outcomes", {})
    signature = (key, _signature(files))
    # ("ok", checkpoint id, registered before) or ("error", message, False)
    outcome: tuple[str, Any, bool] | None = outcomes.get(signature)
    if outcome is not None and outcome[0] == "ok":
        row = db.get_checkpoint(store, outcome[1])
        if row is None or row.removed:
            outcome = None  # removed since: store it again
    if outcome is None:
        with st.spinner("Storing and checking the upload..."):
            try:
                result = register_upload(store, files)
            except InputError as e:
                outcome = ("error", str(e), False)
            else:
                outcome = ("ok", result.checkpoint_id, result.already_registered)
        outcomes[signature] = outcome
    if outcome[0] == "error":
        st.error(
            "Upload rejected, nothing registered: " + md_escape(outcome[1]), icon=icons.REFUSED
        )
        return None
    row = db.get_checkpoint(store, int(outcome[1]))
    assert row is not None  # registered just now, or found live above
    stored = f", stored as {(row.sha256 or '')[:12]}"
    st.success(md_escape(registered_words(row, outcome[2], stored)), icon=icons.STORED)
    with st.expander("Inspect report", expanded=True):
        checkpoint_report(None if not row.report else load_checkpoint_report(row.report))
    return row.id
