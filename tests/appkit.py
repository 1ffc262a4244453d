"""What the AppTest and pipeline files share: the app on a page, the page's text as a reader sees
it, the SGLang API double over the tiny models, and small diagnose options for them."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pandas as pd
from streamlit.testing.v1 import AppTest

from eagle3dash import store as db
from eagle3dash.diagnosis.options import DiagnoseOptions
from eagle3dash.testing.sglang_double import RunningDouble, start_double
from eagle3dash.testing.sglang_double_engine import DoubleConfig

ROOT = Path(__file__).resolve().parent.parent
APP = str(ROOT / "eagle3dash" / "dashboard" / "app.py")
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


def speculative_config(target: Path, draft: Path, **more: Any) -> DoubleConfig:
    """The SGLang API double's settings for the draft over the target: EAGLE3, 3 chain steps,
    hidden states returned (the app tests' endpoint), `more` overriding any."""
    fields: dict[str, Any] = dict(
        target_path=str(target),
        draft_path=str(draft),
        speculative_algorithm="EAGLE3",
        num_steps=3,
        eagle_topk=1,
        num_draft_tokens=4,
        enable_return_hidden_states=True,
    )
    return DoubleConfig(**{**fields, **more})


def speculative_double(target: Path, draft: Path, **more: Any) -> RunningDouble:
    """The double started with speculative_config's settings."""
    return start_double(speculative_config(target, draft, **more))


def double(models: dict[str, Path], **overrides: Any) -> RunningDouble:
    """speculative_double over these models' target and draft, `overrides` on its settings."""
    return speculative_double(models["target"], models["draft"], **overrides)


def options(models: dict[str, Path], url: str, **overrides: Any) -> DiagnoseOptions:
    """Small, fast diagnose options with the local target for training-side states."""
    fields: dict[str, Any] = dict(
        draft=str(models["draft"]),
        endpoint=url,
        target=str(models["target"]),
        num_prompts=3,
        max_new_tokens=24,
        concurrency=2,
        steps=4,
        profile=False,  # the layout's evidence; the profile has tests of its own
    )
    return DiagnoseOptions(**{**fields, **overrides})


def run_queued(store: db.Store, run_ids: list[int], slots: int = 2) -> None:
    """Run the queued diagnoses with the real worker (child processes); each must succeed."""
    from eagle3dash import jobs as jobq
    from eagle3dash.job_kinds import JOB_KINDS
    from eagle3dash.jobs.worker import run_worker
    from eagle3dash.preloaded import HEAVY

    run_worker(store.home, JOB_KINDS, poll_interval=0.05, once=True, slots=slots, preload=HEAVY)
    for run_id in run_ids:
        job = jobq.list_jobs(store, run_id)[0]
        assert job["status"] == "succeeded", jobq.job_log(store, job["id"])
