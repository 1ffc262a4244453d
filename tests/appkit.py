"""What the AppTest files share: the app on a page, and the page's text as a reader sees it."""

from __future__ import annotations

import re
from pathlib import Path

from streamlit.testing.v1 import AppTest

ROOT = Path(__file__).resolve().parent.parent
APP = str(ROOT / "app.py")
TIMEOUT = 60
TEXT_KINDS = (
    "title",
    "header",
    "subheader",
    "markdown",
    "caption",
    "info",
    "error",
    "warning",
    "success",
    "code",
)


def app(page: str | None = None, **params: str) -> AppTest:
    """The app on a page with query params, run once."""
    at = AppTest.from_file(APP, default_timeout=TIMEOUT)
    if page:
        at.switch_page(f"views/{page}.py")
    for key, value in params.items():
        at.query_params[key] = value
    return at.run(timeout=TIMEOUT)


def no_exception(at: AppTest) -> None:
    """No element of the run is an exception."""
    assert not at.exception, [e.value for e in at.exception]


def plain(text: str) -> str:
    """Markdown source as the reader sees it: backslash escapes removed."""
    return re.sub(r"\\(.)", r"\1", text)


def texts(at: AppTest, *kinds: str) -> str:
    """The page's text elements (of `kinds`, default TEXT_KINDS), escapes removed."""
    return plain("\n".join(str(e.value) for kind in kinds or TEXT_KINDS for e in at.get(kind)))
