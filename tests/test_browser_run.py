"""Reading runs in a real headless Chromium at 1400x900: the Runs table's key columns fit, search
finds a run by a finding's rule id, the Run page's header follows its job live, and a cancel reads
as cancelled.

The world (two SGLang API doubles, a worker subprocess and the app on a fresh home) is
tests/conftest.py's app_world, made for this module. The live and cancel tests add a slow double (a
modelled cost of 0.5 s per target forward), so that a diagnosis stays running while the page is
watched. Screenshots (runs.png, run_running.png, run_cancelled.png) go to the same folder as
test_browser.py's (docs/ with EAGLE3DASH_SCREENSHOTS=docs: runs.png is the README's).
"""

from __future__ import annotations

import dataclasses
import re
import time
from pathlib import Path

import pytest
from playwright.sync_api import Page, expect

from eagle3dash import jobs as jobq
from eagle3dash import store as db
from eagle3dash.diagnosis.options import DiagnoseOptions
from eagle3dash.layout import Tap
from eagle3dash.submit import submit_diagnosis
from eagle3dash.ui.progress import cancel_run
from eagle3dash.ui.run_panels import RUNS_KEY_WIDTHS
from tests.appkit import speculative_double
from tests.browserkit import (
    HEIGHT,
    RUN_S,
    SHOTS,
    WIDTH,
    idle,
    new_page,
    no_exception_shown,
    skip_without_chromium,
    wait_for_run,
)

skip_without_chromium()


@pytest.fixture(scope="module")
def world(app_world):
    """This module's app world (tests/conftest.py): its own home, worker and app."""
    return app_world


SLOW_DELAY_S = 0.5  # per target forward: a diagnosis of 4 prompts takes a minute or more
LIVE_MS = 30_000  # the page polls every 2 s; the worker starts or stops a job within seconds
KEY_HELP = {  # the key columns with a header tooltip, and a word of it
    "status": "queued, running",
    "checkpoint": "The draft checkpoint diagnosed.",
    "verdict": "The root cause",
    "measured": "Measured accept length",
    "sim training": "of the taps training fed it (sim training)",
    "sim serving": "of the taps the server feeds it (sim serving)",
    "speedup": "over the baseline's",
}


def _options(draft: Path, endpoint: str, target: Path, **more) -> DiagnoseOptions:
    return DiagnoseOptions(
        draft=str(draft),
        endpoint=endpoint,
        target=str(target),
        num_prompts=2,
        max_new_tokens=16,
        concurrency=2,
        steps=3,
        training_layout=(Tap(0), Tap(1), Tap(2)),
        **more,
    )


@pytest.fixture(scope="module")
def runs(world):
    """Two finished runs: the layout mismatch, and the fixed draft (no findings)."""
    store = world["store"]
    mismatch = submit_diagnosis(
        store,
        db.add_checkpoint(store, world["draft"], name="draft"),
        _options(world["draft"], world["double"], world["target"]),
    )
    fixed = submit_diagnosis(
        store,
        db.add_checkpoint(store, world["fixed"], name="draft-fixed"),
        _options(world["fixed"], world["fixed_double"], world["target"]),
    )
    wait_for_run(store, mismatch)
    wait_for_run(store, fixed)
    return {"mismatch": mismatch, "fixed": fixed}


@pytest.fixture(scope="module")
def slow(world):
    """A slow double serving the mismatch draft, and a submit function for runs against it; the
    runs still unfinished at the end are cancelled."""
    server = speculative_double(world["target"], world["draft"], delay_s=SLOW_DELAY_S)
    store = world["store"]
    made: list[int] = []

    def submit() -> int:
        options = _options(world["draft"], server.url, world["target"])
        run_id = submit_diagnosis(store, None, dataclasses.replace(options, num_prompts=4))
        made.append(run_id)
        return run_id

    try:
        yield submit
    finally:
        for run_id in made:
            cancel_run(store, run_id)
        server.stop()


def _job_status(store: db.Store, run_id: int, wanted: str) -> None:
    deadline = time.monotonic() + RUN_S
    while time.monotonic() < deadline:
        if jobq.list_jobs(store, run_id)[0]["status"] == wanted:
            return
        time.sleep(0.2)
    pytest.fail(f"run {run_id}'s job did not become {wanted} within {RUN_S} s")


def _header(page: Page):
    """The status line under the Run page's title."""
    return page.get_by_test_id("stMarkdown").filter(has_text=re.compile(r"· checkpoint")).first


def _open_runs(page: Page, url: str) -> None:
    page.goto(url)
    expect(page.get_by_role("heading", name="Runs")).to_be_visible()
    idle(page)
    expect(page.get_by_test_id("stDataFrame")).to_be_visible()


# --- tests -------------------------------------------------------------------------------------


def test_the_key_runs_columns_fit_1400px(world, runs, browser, logs_on_failure) -> None:
    page = new_page(browser)
    assert page.viewport_size == {"width": WIDTH, "height": HEIGHT}
    _open_runs(page, world["url"])
    grid = page.locator('[data-testid="stDataFrame"] .dvn-scroller').first
    box = grid.bounding_box()
    assert box is not None
    # Unscrolled, each key column lies whole inside the table and the window: hovering just
    # inside its left and its right edge shows that column's own header tooltip.
    assert grid.evaluate("e => e.scrollLeft") == 0
    left = box["x"]
    tooltip = page.get_by_test_id("stDataFrameTooltipContent")
    for name, width in RUNS_KEY_WIDTHS.items():
        right = left + width
        assert right <= box["x"] + box["width"] and right <= WIDTH, name
        if name in KEY_HELP:
            for x in (left + 6, right - 6):
                page.mouse.move(x, box["y"] + 15)
                expect(tooltip.first).to_contain_text(KEY_HELP[name])
                page.mouse.move(box["x"] + 2, box["y"] - 40)  # off the header: the tip goes
                expect(tooltip).to_have_count(0)
        left = right
    # The table's accessible rows: the verdict and the numbers of the mismatch run, in view.
    rows = page.locator('[data-testid="stDataFrame"] table tr')
    mismatch = rows.filter(has_text=f"run={runs['mismatch']}")
    expect(mismatch).to_contain_text("Serving feeds the draft the layers after 1, 2 and 3 blocks")
    expect(mismatch).to_contain_text("draft")
    no_exception_shown(page)
    SHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SHOTS / "runs.png"))
    page.context.close()


def test_the_runs_page_shows_a_queued_run_succeed_without_a_reload(
    world, runs, browser, logs_on_failure
) -> None:
    # The page is open before the run exists; it is never reloaded: its fragment polls while a
    # run is queued or running (a page drawn once would keep the old rows).
    page = new_page(browser)
    _open_runs(page, world["url"])
    store = world["store"]
    run_id = submit_diagnosis(
        store, None, _options(world["fixed"], world["fixed_double"], world["target"])
    )
    row = page.locator('[data-testid="stDataFrame"] table tr').filter(has_text=f"run={run_id}")
    expect(row).to_have_count(1, timeout=30_000)
    expect(row).to_contain_text("succeeded", timeout=RUN_S * 1000)
    assert db.get_run(store, run_id)["status"] == "succeeded"
    no_exception_shown(page)
    page.context.close()


def test_search_by_rule_id(world, runs, browser, logs_on_failure) -> None:
    page = new_page(browser)
    _open_runs(page, world["url"])
    search = page.get_by_role("textbox", name="Search", exact=True)
    search.fill("layout-mismatch")
    search.press("Enter")
    idle(page)
    expect(page.get_by_text(re.compile(r"^Runs 1–1 of 1 "))).to_be_visible()
    rows = page.locator('[data-testid="stDataFrame"] table tr')
    expect(rows.filter(has_text=f"run={runs['mismatch']}")).to_have_count(1)
    expect(rows.filter(has_text=f"run={runs['fixed']}")).to_have_count(0)
    no_exception_shown(page)
    page.context.close()


def test_a_live_header_status(world, slow, browser, logs_on_failure) -> None:
    store = world["store"]
    ahead = slow()
    _job_status(store, ahead, "running")
    waiting = slow()  # the same server: it waits behind the first, whatever the slots
    page = new_page(browser)
    page.goto(f"{world['url']}/run?run={waiting}")
    expect(page.get_by_role("heading", name=f"Run #{waiting}")).to_be_visible()
    expect(_header(page)).to_contain_text("queued")
    expect(
        page.get_by_text(f"Queued behind run #{ahead}, which is measuring 127.0.0.1:")
    ).to_be_visible()
    cancel_run(store, ahead)  # the worker stops the first run and takes this one
    # No reload: the progress panel notices the new status and redraws the page, header included.
    expect(_header(page)).to_contain_text("running", timeout=LIVE_MS)
    expect(_header(page)).not_to_contain_text("queued")
    bar = page.get_by_test_id("stProgress")
    expect(bar).to_contain_text(re.compile(r"stage \d+/\d+: "), timeout=LIVE_MS)
    expect(page.get_by_text(re.compile(r"\d+ s elapsed"))).to_be_visible(timeout=LIVE_MS)
    no_exception_shown(page)
    page.screenshot(path=str(SHOTS / "run_running.png"))
    page.context.close()


def test_a_cancel_shown_as_cancelled(world, slow, browser, logs_on_failure) -> None:
    store = world["store"]
    running = [
        r["id"] for r in db.list_runs(store, 50, 0, status="running") if r["endpoint_url"]
    ] or [slow()]
    run_id = running[0]
    _job_status(store, run_id, "running")
    page = new_page(browser)
    page.goto(f"{world['url']}/run?run={run_id}")
    expect(_header(page)).to_contain_text("running", timeout=LIVE_MS)
    idle(page)
    page.get_by_role("button", name="Cancel this run").click()
    notice = page.get_by_test_id("stAlertContentInfo").filter(has_text="This run was cancelled")
    expect(notice).to_contain_text(
        "This run was cancelled while it ran, so it has no results.", timeout=LIVE_MS
    )
    expect(_header(page)).to_contain_text("cancelled")
    expect(page.get_by_test_id("stAlertContentError")).to_have_count(0)
    expect(page.get_by_text("SIGTERM")).to_have_count(0)
    run = db.get_run(store, run_id)
    assert (run["status"], run["error"]) == ("cancelled", "cancelled while it ran")
    no_exception_shown(page)
    page.screenshot(path=str(SHOTS / "run_cancelled.png"))
    page.context.close()
