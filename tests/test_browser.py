"""The main flow in a real headless Chromium: upload a draft, probe, submit, watch, share, compare.

The test world (tests/conftest.py) gives the tiny 4-layer target and a random SpecForge draft whose
config ids are [0, 1, 2] (SGLang's Llama +1 rule serves layers 1, 2, 3; a training layout of 0,1,2
gives the layout finding), the same weights with the fixed ids [-1, 0, 1], and the two SGLang API
doubles serving them in-process. A module fixture starts a real worker subprocess that runs the
queued jobs and the real app subprocess serving the dashboard on a fresh home. Playwright drives
Debian's /usr/bin/chromium (no browser download). Screenshots go to docs/run.png,
docs/run_first_screen.png, docs/compare.png and docs/new_run.png.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from playwright.sync_api import Page, expect

from eagle3dash import store as db
from eagle3dash.diagnosis.options import DiagnoseOptions
from eagle3dash.layout import Tap
from eagle3dash.submit import submit_diagnosis
from tests.browserkit import (
    HEIGHT,
    RUN_S,
    SHOTS,
    WIDTH,
    fill,
    idle,
    new_page,
    no_exception_shown,
    open_expander,
    screenshot,
    skip_without_chromium,
    wait_for_run,
)

skip_without_chromium()

LAYOUT_TITLE = re.compile(r"shifted|one block (later|earlier)")
ROOT_CAUSE = (  # the verdict of the mismatch run: training declared 0,1,2, SGLang serves 1,2,3
    "Serving feeds the draft the layers after 1, 2 and 3 blocks, but training fed the embedding "
    "output and the layers after 1 and 2 blocks: every slot is one block later than in training."
)


@pytest.fixture(scope="module")
def world(app_world):
    """This module's app world (tests/conftest.py): its own home, worker and app."""
    return app_world


def _expect_finished_run(page: Page, run_id: int) -> None:
    """The Run page of a finished mismatch run: the verdict banner on the first screen, findings
    (layout), then the layout diff."""
    expect(page.get_by_role("heading", name=f"Run #{run_id}")).to_be_visible()
    expect(page.get_by_role("heading", name="Findings")).to_be_visible(timeout=RUN_S * 1000)
    idle(page)
    # The verdict opens the page: on the first screen (1400x900, not scrolled), the root cause,
    # the accept lengths and speedup, and what was not checked with the form field to fill in.
    assert page.viewport_size == {"width": WIDTH, "height": HEIGHT}
    # Arriving from New run, Streamlit may keep the form's scroll position (seen once in CI):
    # the first screen is the page's top.
    page.get_by_role("heading", name=f"Run #{run_id}").scroll_into_view_if_needed()
    banner = page.get_by_test_id("stAlert").filter(has_text=ROOT_CAUSE).first
    # The page reruns as its run finishes: an alert mid-rerender has no size for a moment.
    expect(banner).to_be_in_viewport(ratio=1, timeout=RUN_S * 1000)
    expect(banner.locator("strong")).to_have_text(ROOT_CAUSE)
    for label in ("Measured accept length", "Simulated, training layout", "Speedup vs baseline"):
        metric = page.get_by_test_id("stMetric").filter(has_text=label)
        expect(metric).to_be_in_viewport(ratio=1)
    expect(page.get_by_test_id("stMetric").filter(has_text="Speedup vs baseline")).to_contain_text(
        "—"
    )
    missing = page.get_by_test_id("stAlert").filter(has_text="Not checked: no baseline")
    expect(missing).to_contain_text("fill in 'Baseline URL")
    expect(missing).to_be_in_viewport(ratio=1)
    expect(page.get_by_text(re.compile(r"^rule ")).first).to_have_text("rule layout-mismatch")
    finding = page.get_by_test_id("stVerticalBlock").filter(
        has=page.get_by_text("rule layout-mismatch", exact=True)
    )
    title = finding.last.locator("strong").first
    expect(title).to_have_text(LAYOUT_TITLE)
    expect(title).to_contain_text("Serving feeds the draft")
    expect(page.get_by_role("heading", name="Layer layout")).to_be_visible()
    diff = page.get_by_test_id("stAlert").filter(has_text="How it is known:")
    expect(diff).to_contain_text("Serving feeds every slot one block later than training")
    expect(diff).not_to_contain_text("off-by-one")  # the sentence, not the kind's id
    slots = page.get_by_test_id("stDataFrame").filter(has_text="serving feeds")
    expect(slots).to_contain_text("DIFFERS")  # the slot table
    expect(page.locator('[data-testid="stVegaLiteChart"]').first).to_be_visible()
    expect(page.get_by_test_id("stSpinner")).to_have_count(0)
    no_exception_shown(page)


# --- tests -------------------------------------------------------------------------------------


def test_upload_probe_submit_watch_and_share_a_run(world, browser, logs_on_failure) -> None:
    page = new_page(browser)
    page.goto(f"{world['url']}/new_run")
    expect(page.get_by_role("heading", name="New run")).to_be_visible()
    idle(page)

    # 1. Upload the draft's files through the hidden file input.
    page.get_by_test_id("stRadio").first.get_by_text("An upload", exact=True).click()
    files = page.locator('[data-testid="stFileUploaderDropzoneInput"]')
    expect(files).to_have_count(1)
    files.set_input_files([world["draft"] / "config.json", world["draft"] / "model.safetensors"])
    expect(
        page.get_by_text(re.compile(r"Registered checkpoint #\d+ .*\(specforge\)"))
    ).to_be_visible()
    expect(page.get_by_text("No problems found in the checkpoint.")).to_be_visible()
    idle(page)

    # 2. The endpoint: the probe summary appears.
    fill(page, "Endpoint URL (the server running the target with this draft)", world["double"])
    metrics = page.get_by_test_id("stMetric")
    expect(metrics.filter(has_text="SGLang version")).to_contain_text("0.5.23")
    expect(metrics.filter(has_text="Speculative")).to_contain_text("EAGLE3")
    expect(metrics.filter(has_text="Hidden states")).to_contain_text("on")

    # 4. Options: 2 prompts, 16 new tokens, 3 steps, the training layout and the local target.
    open_expander(page, "Number of prompts")
    fill(page, "Number of prompts", "2")
    fill(page, "Max new tokens", "16")
    fill(page, "Draft steps evaluated", "3")
    fill(page, "Concurrency", "2")
    fill(page, "Training layout override (taps the training data used)", "0,1,2")
    fill(page, "Local target path (for training-side states)", str(world["target"]))
    no_exception_shown(page)
    screenshot(page, SHOTS / "new_run.png")

    # Submit: the URL becomes the run's share link; the live progress ends in the findings.
    page.get_by_role("button", name="Run the diagnosis").click()
    page.wait_for_url(re.compile(r"/run\?run=\d+$"))
    run_id = int(re.search(r"run=(\d+)", page.url).group(1))
    world["runs"]["mismatch"] = run_id
    _expect_finished_run(page, run_id)
    run = db.get_run(world["store"], run_id)
    assert run["options"]["training_layout"] == "0,1,2"
    assert run["options"]["num_prompts"] == 2 and run["options"]["max_new_tokens"] == 16
    SHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SHOTS / "run_first_screen.png"))  # what the first screen shows
    screenshot(page, SHOTS / "run.png")

    # The share link, opened in a fresh context (no cookies, no session), shows the same run.
    link = page.get_by_test_id("stCode").filter(has_text="run?run=").first.inner_text().strip()
    assert link == f"{world['url']}/run?run={run_id}"
    fresh = new_page(browser)
    fresh.goto(link)
    _expect_finished_run(fresh, run_id)
    fresh.context.close()
    page.context.close()


def test_compare_the_mismatch_with_the_fixed_draft(world, browser, logs_on_failure) -> None:
    store = world["store"]

    def options(draft: Path, endpoint: str) -> DiagnoseOptions:
        return DiagnoseOptions(
            draft=str(draft),
            endpoint=endpoint,
            target=str(world["target"]),
            num_prompts=2,
            max_new_tokens=16,
            concurrency=2,
            steps=3,
            training_layout=(Tap(0), Tap(1), Tap(2)),
        )

    a = world["runs"].get("mismatch")
    if a is None:  # the first test did not get that far: make the run here
        ck = db.add_checkpoint(store, world["draft"], name="draft")
        a = submit_diagnosis(store, ck, options(world["draft"], world["double"]))
    fixed = db.add_checkpoint(store, world["fixed"], name="draft-fixed")
    b = submit_diagnosis(store, fixed, options(world["fixed"], world["fixed_double"]))
    wait_for_run(store, a)
    wait_for_run(store, b)
    assert db.get_findings(store, b) == [], "the fixed draft still has findings"

    page = new_page(browser)
    page.goto(f"{world['url']}/compare?a={a}&b={b}")
    expect(page.get_by_role("heading", name="Compare runs")).to_be_visible()
    expect(page.get_by_role("heading", name=f"Run A: #{a}")).to_be_visible()
    expect(page.get_by_role("heading", name=f"Run B: #{b}")).to_be_visible()
    idle(page)
    columns = page.get_by_test_id("stColumn")
    left = columns.filter(has=page.get_by_role("heading", name=f"Run A: #{a}")).last
    right = columns.filter(has=page.get_by_role("heading", name=f"Run B: #{b}")).last
    # What differs comes first: the fix, the draft's layer ids before -> after.
    expect(page.get_by_role("heading", name="What differs")).to_be_visible()
    expect(page.get_by_text("[0, 1, 2] → [-1, 0, 1]", exact=True)).to_be_visible()
    expect(left.get_by_text("rule layout-mismatch", exact=True)).to_be_visible()
    expect(right.get_by_text("No findings.")).to_be_visible()
    expect(page.get_by_test_id("stDataFrame").first).to_be_visible()
    expect(page.locator('[data-testid="stVegaLiteChart"]').first).to_be_visible()
    expect(page.get_by_test_id("stSpinner")).to_have_count(0)
    no_exception_shown(page)
    screenshot(page, SHOTS / "compare.png")
    page.context.close()


def test_a_deep_link_goes_through_the_apps_navigation(world, browser, logs_on_failure) -> None:
    page = new_page(browser)
    try:
        page.goto(f"{world['url']}/new_run")
        expect(page.get_by_role("heading", name="New run")).to_be_visible()
        idle(page)
        nav = page.get_by_test_id("stTopNav")  # on top: the tables get the window's width
        expect(nav).to_contain_text("Checkpoints", timeout=5000)  # st.Page titles, not file names
        expect(nav.get_by_text("app", exact=True)).to_have_count(0, timeout=1000)
        width = page.get_by_test_id("stMainBlockContainer").bounding_box()["width"]
        assert width > 1000, f"not the wide layout of app.py's set_page_config: {width}px"
    finally:
        page.context.close()
