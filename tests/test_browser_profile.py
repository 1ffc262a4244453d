"""The acceptance profile on the Run page in a real headless Chromium at 1400x900: the section, the
category matrix and the downloads of a run whose diagnosis carries tests/test_profile_ui.py's
SAMPLE profile.

The world (two SGLang API doubles, a worker subprocess and the app on a fresh home) is
tests/conftest.py's app_world, made for this module. The real worker diagnoses the mismatch draft
once; its stored diagnosis with SAMPLE added is stored as a second run, the one the page opens. The
screenshot (run_profile.png) goes to the same folder as test_browser.py's.
"""

from __future__ import annotations

import json

import pytest
from playwright.sync_api import expect

from eagle3dash import store as db
from eagle3dash.diagnosis.options import DiagnoseOptions
from eagle3dash.layout import Tap
from eagle3dash.submit import submit_diagnosis
from tests.browserkit import (
    RUN_S,
    SHOTS,
    idle,
    new_page,
    no_exception_shown,
    screenshot,
    skip_without_chromium,
    wait_for_run,
)
from tests.profilekit import CATEGORY_TITLE, FLAGS, SAMPLE

skip_without_chromium()


@pytest.fixture(scope="module")
def world(app_world):
    """This module's app world (tests/conftest.py): its own home, worker and app."""
    return app_world


@pytest.fixture(scope="module")
def profiled_run(world) -> int:
    """A finished run whose stored diagnosis (made by the worker) carries SAMPLE as its profile."""
    store = world["store"]
    made = submit_diagnosis(
        store,
        None,
        DiagnoseOptions(
            draft=str(world["draft"]),
            endpoint=world["double"],
            num_prompts=2,
            max_new_tokens=8,
            concurrency=2,
            steps=3,
            training_layout=(Tap(0), Tap(1), Tap(2)),
        ),
    )
    wait_for_run(store, made)
    diagnosis = {**db.get_run(store, made)["diagnosis"], "profile": SAMPLE}
    run_id = db.create_run(store, None, world["double"])
    db.update_run(store, run_id, status="succeeded", diagnosis_json=json.dumps(diagnosis))
    return run_id


def test_the_run_page_shows_the_profile_matrix_and_downloads(
    world, profiled_run, browser, logs_on_failure
) -> None:
    page = new_page(browser)
    page.goto(f"{world['url']}/run?run={profiled_run}")
    heading = page.get_by_role("heading", name="Acceptance profile")
    # The page draws its charts above the profile: slow on a loaded machine.
    expect(heading).to_be_attached(timeout=RUN_S * 1000)
    idle(page)
    no_exception_shown(page)
    heading.scroll_into_view_if_needed()
    expect(heading).to_be_visible()
    # The category matrix: a chart drawn under "Per category", titled, with the weakest category
    # said in words beneath it.
    matrix = page.get_by_test_id("stVegaLiteChart").filter(has_text=CATEGORY_TITLE)
    matrix.scroll_into_view_if_needed()
    expect(matrix).to_be_visible()
    expect(matrix.locator("svg, canvas").first).to_be_visible()
    assert matrix.bounding_box()["height"] > 100  # drawn, not an empty frame
    expect(page.get_by_text("Weakest category: novel", exact=False)).to_be_visible()
    # the run's declared layout mismatches what is served (a root cause): its one paste block is
    # the fix, so the steps advice gives no command for the broken draft (issue 42)
    expect(page.get_by_text("No command for this setting yet", exact=False)).to_be_visible()
    expect(page.get_by_test_id("stCode").filter(has_text=FLAGS)).to_have_count(0)
    # The downloads, named by the run: the CSV's first lines are the long form's.
    button = page.get_by_role("button", name="Download the profile (CSV)")
    button.scroll_into_view_if_needed()
    with page.expect_download() as got:
        button.click()
    download = got.value
    assert download.suggested_filename == f"eagle3dash-run-{profiled_run}-profile.csv"
    with open(download.path()) as f:
        lines = f.read().splitlines()
    assert lines[:3] == [
        "part,row,metric,value",
        "profile,,steps,3",
        "per_position,1,simulated_training,0.8",
    ]
    json_button = page.get_by_role("button", name="Download the profile (JSON)")
    with page.expect_download() as got:
        json_button.click()
    assert got.value.suggested_filename == f"eagle3dash-run-{profiled_run}-profile.json"
    with open(got.value.path()) as f:
        assert json.load(f)["profile"] == SAMPLE
    idle(page)
    screenshot(page, SHOTS / "run_profile.png")
