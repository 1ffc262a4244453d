"""What the AppTest files share: the app on a page, and the page's text as a reader sees it."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pandas as pd
from streamlit.testing.v1 import AppTest

from eagle3dash import store as db
from eagle3dash.testing.sglang_double import DoubleConfig, RunningDouble, start_double

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
    """Markdown source as the reader sees it: backslash escapes and the zero-width spaces that
    keep URLs from becoming links (fmt.md_escape) removed."""
    return re.sub(r"\\(.)", r"\1", text).replace("\u200b", "")


def texts(at: AppTest, *kinds: str) -> str:
    """The page's text elements (of `kinds`, default TEXT_KINDS), escapes removed."""
    return plain("\n".join(str(e.value) for kind in kinds or TEXT_KINDS for e in at.get(kind)))


def frames(at: AppTest) -> list[pd.DataFrame]:
    """Every table on the page, as data frames (a static table's Markdown cells as read)."""
    return [d.value for d in at.dataframe] + [plain_frame(t.value) for t in at.table]


def plain_frame(frame: pd.DataFrame) -> pd.DataFrame:
    """A static table (st.table renders each cell as Markdown) as the reader sees it."""
    shown = frame.map(lambda v: plain(v) if isinstance(v, str) else v)
    return shown.rename(columns=lambda c: plain(c) if isinstance(c, str) else c)


def frame_with(at: AppTest, column: str) -> pd.DataFrame:
    """The first table on the page with this column."""
    found = [f for f in frames(at) if column in f.columns]
    assert found, f"no table with a {column!r} column: {[list(f.columns) for f in frames(at)]}"
    return found[0]


def speculative_double(target: Path, draft: Path, **more: Any) -> RunningDouble:
    """The SGLang API double serving the draft over the target: EAGLE3, 3 chain steps, hidden
    states returned (the app tests' endpoint)."""
    return start_double(
        DoubleConfig(
            target_path=str(target),
            draft_path=str(draft),
            speculative_algorithm="EAGLE3",
            num_steps=3,
            eagle_topk=1,
            num_draft_tokens=4,
            enable_return_hidden_states=True,
            **more,
        )
    )


def run_queued(store: db.Store, run_ids: list[int], slots: int = 2) -> None:
    """Run the queued diagnoses with the real worker (child processes); each must succeed."""
    from eagle3dash import jobs as jobq
    from eagle3dash.job_kinds import JOB_KINDS
    from eagle3dash.jobs.worker import run_worker

    run_worker(store.home, JOB_KINDS, poll_interval=0.05, once=True, slots=slots)
    for run_id in run_ids:
        job = jobq.list_jobs(store, run_id)[0]
        assert job["status"] == "succeeded", jobq.job_log(store, job["id"])
