"""Streamlit pieces every page shares: the pages' paths, a share link, an error box, `guard`
around a call, an integer query parameter, a table whose cells wrap. Text from users or diagnoses
is always escaped.

Nothing in `eagle3dash/ui/` uses `unsafe_allow_html`: findings, paths, URLs and messages go through
`fmt.md_escape` (Markdown) or into st.code / st.dataframe / st.json, which show text as text.
"""

from __future__ import annotations

import contextlib
import logging
from typing import Any
from urllib.parse import urlsplit

import pandas as pd
import streamlit as st

from eagle3dash.errors import InputError
from eagle3dash.text import ascii_int
from eagle3dash.ui import icons
from eagle3dash.ui.fmt import breakable, md_escape, page_url

RUN_PAGE = "views/run.py"
COMPARE_PAGE = "views/compare.py"
NEW_RUN_PAGE = "views/new_run.py"
RUNS_PAGE = "views/runs.py"
CHECKPOINTS_PAGE = "views/checkpoints.py"


def base_url() -> str:
    """The app's root URL as the browser sees it ('' when unknown, e.g. under AppTest)."""
    url = None
    with contextlib.suppress(Exception):
        url = st.context.url
    if not url:
        return ""
    parts = urlsplit(url)
    root = (st.get_option("server.baseUrlPath") or "").strip("/")
    return f"{parts.scheme}://{parts.netloc}" + (f"/{root}" if root else "")


def share_link(page: str, **params: Any) -> None:
    """The shareable URL of this view in a code block (with its copy button)."""
    base = base_url()
    url = page_url(base or "", page, **params)
    st.caption("Link to this view (copy it with the button on the right)")
    st.code(url if base else "/" + url, language=None)


def text_table(frame: pd.DataFrame) -> None:
    """A static table whose cells wrap (a long path too: fmt.breakable); st.table renders each cell
    as Markdown, so every text cell and header goes through md_escape (a checkpoint name or a
    server's message is text)."""
    shown = frame.map(lambda v: md_escape(breakable(v)) if isinstance(v, str) else v)
    st.table(shown.rename(columns=lambda c: md_escape(c)), hide_index=True)


def show_error(error: BaseException) -> None:
    """An InputError's message (no traceback)."""
    st.error(md_escape(str(error)), icon=icons.REFUSED)


def query_int(name: str) -> tuple[int | None, str | None]:
    """An integer query parameter: (value, None), (None, None) if absent, (None, text) if bad."""
    raw = st.query_params.get(name)
    if raw is None or raw == "":
        return None, None
    value = ascii_int(str(raw).strip().lstrip("#"))
    if value is None or value <= 0:
        return None, str(raw)
    return value, None


def guard(fn, *args: Any, **kwargs: Any) -> Any:
    """Call fn; show an InputError's message, or one box for anything unexpected (its traceback
    goes to the app's log), instead of a traceback on the page; then return None."""
    try:
        return fn(*args, **kwargs)
    except InputError as e:
        show_error(e)
        return None
    except Exception as e:
        logging.getLogger("eagle3dash.app").exception("unexpected error in %s", fn)
        st.error(
            f"Something unexpected went wrong ({md_escape(type(e).__name__)}): a bug in "
            "eagle3dash, not in your input. The details are in the app's log.",
            icon=icons.REFUSED,
        )
        return None
