"""The three verdict statuses in a real headless Chromium at 1400x900, on the demo's seeded runs.

A module fixture copies the test world's seeded demo home (tests/conftest.py; `demo seed
--worker`: the mismatched, correct and fixed deployments, each with its target, baseline and
identity check) and serves the app on it. The mismatched run reads as a problem (red, its fix's
line to copy on the first screen), the correct and fixed runs as healthy (green, stating the
observed agreement, the served weights, measured against simulated and the speedup), and the Runs
page's verdict column says so, not the category note below; the correct deployment diagnosed
without its target reads as incomplete. The first screens go to verdict_problem.png,
verdict_healthy.png and verdict_incomplete.png, beside test_browser.py's screenshots (docs/ with
EAGLE3DASH_SCREENSHOTS=docs: the README's).
"""

from __future__ import annotations

import dataclasses
import shutil

import pytest
from playwright.sync_api import expect

from tests.browserkit import (
    RUN_S,
    SHOTS,
    idle,
    new_page,
    no_exception_shown,
    serving_app,
    skip_without_chromium,
)

skip_without_chromium()

HEALTHY = "healthy: every check ran and found nothing at warning or worse"


def _without_target(home) -> int:
    """The correct deployment diagnosed without its target (and with its baseline), run by a
    worker in this process: nothing found, but the layout is assumed, not checked."""
    from eagle3dash import store as db
    from eagle3dash.demo import deployments
    from eagle3dash.demo.serve import demo_options, serve_baseline, serve_deployment
    from eagle3dash.job_kinds import JOB_KINDS
    from eagle3dash.jobs.worker import run_worker
    from eagle3dash.preloaded import HEAVY
    from eagle3dash.submit import submit_diagnosis

    plan = deployments()["correct"]
    store = db.open_store(home)
    with serve_baseline(plan) as baseline, serve_deployment(plan) as server:
        options = demo_options(plan.draft_path, server.url, baseline.url, 2, 32)
        run_id = submit_diagnosis(store, None, dataclasses.replace(options, target=None))
        assert run_worker(home, JOB_KINDS, poll_interval=0.05, once=True, preload=HEAVY) == 1
    status = db.get_run(store, run_id)["status"]
    store.close()
    assert status == "succeeded"
    return run_id


@pytest.fixture(scope="module")
def world(tmp_path_factory, seeded_demo):
    """A copy of the test world's seeded demo home (its runs finished), one run without the
    target added, and the app serving them."""
    seeded_home, made = seeded_demo
    home = tmp_path_factory.mktemp("browser-verdict") / "home"
    shutil.copytree(seeded_home, home)  # the seeded home stays as the seed left it
    runs = {r.deployment: r.run_id for r in made}
    assert {r.status for r in made} == {"succeeded"}, made
    runs["without target"] = _without_target(home)
    with serving_app(home, home.parent) as served:
        yield {"url": served.url, "runs": runs, "served": served}


@pytest.fixture
def log_on_failure(world):
    """The app's log, printed at teardown: pytest shows it when a test fails."""
    yield
    world["served"].print_logs()


def _open_run(browser, world, name: str):
    page = new_page(browser)
    page.goto(f"{world['url']}/run?run={world['runs'][name]}")
    expect(page.get_by_role("heading", name="Findings")).to_be_visible()
    idle(page)
    return page


def test_the_mismatched_run_is_a_problem_with_its_fix_on_the_first_screen(
    world,
    browser,
    log_on_failure,
) -> None:
    page = _open_run(browser, world, "mismatched")
    error = page.get_by_test_id("stAlertContentError").first
    expect(error).to_contain_text("Serving feeds the draft")
    fix = page.get_by_test_id("stCode").filter(has_text="[-1, 0, 1]").first
    expect(fix).to_be_visible()
    # On the first screen (1400x900, not scrolled), polled: a rerun may still move elements.
    expect(fix).to_be_in_viewport(ratio=1, timeout=RUN_S * 1000)
    no_exception_shown(page)
    SHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SHOTS / "verdict_problem.png"))
    page.context.close()


def test_a_run_without_the_target_is_incomplete_and_says_what_would_check_it(
    world,
    browser,
    log_on_failure,
) -> None:
    page = _open_run(browser, world, "without target")
    expect(page.get_by_test_id("stAlertContentSuccess")).to_have_count(0)
    banner = page.get_by_test_id("stAlertContentInfo").first
    expect(banner).to_contain_text("No critical problem found in what was checked")
    expect(banner).to_contain_text("not checked: the training side, which taps the server feeds")
    no_exception_shown(page)
    SHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SHOTS / "verdict_incomplete.png"))
    page.context.close()


@pytest.mark.parametrize("name", ["correct", "fixed"])
def test_the_correct_and_fixed_runs_read_healthy(
    world,
    browser,
    log_on_failure,
    name: str,
) -> None:
    page = _open_run(browser, world, name)
    banner = page.get_by_test_id("stAlertContentSuccess").first
    expect(banner).to_contain_text(
        "Healthy: training and serving feed the same taps to every slot (inferred by the layout "
        "detective)"
    )
    expect(banner).to_contain_text("the endpoint serves this checkpoint's weights")
    expect(banner).to_contain_text("x the baseline's tok/s")
    expect(banner).to_be_in_viewport(ratio=1, timeout=RUN_S * 1000)  # the first screen
    expect(page.get_by_test_id("stAlertContentWarning")).to_have_count(0)
    no_exception_shown(page)
    if name == "correct":
        SHOTS.mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(SHOTS / "verdict_healthy.png"))
    page.context.close()


def test_the_runs_page_verdict_column_reads_healthy(
    world,
    browser,
    log_on_failure,
) -> None:
    page = new_page(browser)
    page.goto(world["url"])
    expect(page.get_by_role("heading", name="Runs")).to_be_visible()
    idle(page)
    rows = page.locator('[data-testid="stDataFrame"] table tr')
    for name in ("correct", "fixed"):
        row = rows.filter(has_text=f"run={world['runs'][name]}")
        expect(row).to_contain_text(HEALTHY)
        expect(row).not_to_contain_text("novel")  # the category note stays on the Run page
    mismatched = rows.filter(has_text=f"run={world['runs']['mismatched']}")
    expect(mismatched).to_contain_text("Serving feeds the draft")
    no_exception_shown(page)
    page.context.close()
