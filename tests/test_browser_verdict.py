"""The three verdict statuses in a real headless Chromium at 1400x900, on the demo's seeded runs.

A module fixture seeds the demo into a fresh home (`demo seed --worker`: the mismatched, correct
and fixed deployments, each with its target, baseline and identity check) and serves the app on
it. The mismatched run reads as a problem (red, its fix's line to copy on the first screen), the
correct and fixed runs as healthy (green, stating the observed agreement, the served weights,
measured against simulated and the speedup), and the Runs page's verdict column says so, not the
category note below. The first screens go to verdict_problem.png and verdict_healthy.png, beside
test_browser.py's screenshots (docs/ with EAGLE3DASH_SCREENSHOTS=docs: the README's);
verdict_incomplete.png is test_browser_new_run.py's (the demo without its target).
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from playwright.sync_api import expect

from tests.test_browser import (  # skips this module too when chromium is missing
    HEIGHT,
    ROOT,
    SHOTS,
    _free_port,
    _idle,
    _no_exception,
    _page,
    _stop,
    _tail,
    browser,  # noqa: F401 - the module's Chromium, a fixture
    wait_healthy,
)

HEALTHY = "✅ healthy: every check ran and found nothing at warning or worse"


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    """The demo seeded into a fresh home (its runs finished), and the app serving it."""
    from eagle3dash.demo.seed import seed

    home = tmp_path_factory.mktemp("browser-verdict")
    made = seed(home, num_prompts=2, max_new_tokens=32, worker=True)
    runs = {r.deployment: r.run_id for r in made}
    assert {r.status for r in made} == {"succeeded"}, made
    log = home / "app.log"
    port = _free_port()
    env = {**os.environ, "EAGLE3DASH_HOME": str(home), "PYTHONUNBUFFERED": "1"}
    command = [
        sys.executable,
        "-m",
        "streamlit",
        "run",
        "app.py",
        "--server.port",
        str(port),
        "--server.address",
        "127.0.0.1",
        "--server.headless",
        "true",
    ]
    with log.open("wb") as out:
        app = subprocess.Popen(
            command, cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
        )
    try:
        url = f"http://127.0.0.1:{port}"
        wait_healthy(url, {"app": app}, {"app": log})
        yield {"url": url, "runs": runs, "log": log}
    finally:
        _stop(app)


@pytest.fixture
def log_on_failure(world):
    """The app's log, printed at teardown: pytest shows it when a test fails."""
    yield
    print(f"\n===== app log =====\n{_tail(world['log'])}")


def _open_run(browser, world, name: str):  # noqa: F811 - the fixture's value
    page = _page(browser)
    page.goto(f"{world['url']}/run?run={world['runs'][name]}")
    expect(page.get_by_role("heading", name="Findings")).to_be_visible()
    _idle(page)
    return page


def test_the_mismatched_run_is_a_problem_with_its_fix_on_the_first_screen(
    world,
    browser,  # noqa: F811
    log_on_failure,
) -> None:
    page = _open_run(browser, world, "mismatched")
    error = page.get_by_test_id("stAlertContentError").first
    expect(error).to_contain_text("Serving feeds the draft")
    fix = page.get_by_test_id("stCode").filter(has_text="[-1, 0, 1]").first
    expect(fix).to_be_visible()
    box = fix.bounding_box()
    assert box is not None and box["y"] + box["height"] <= HEIGHT, box
    _no_exception(page)
    SHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SHOTS / "verdict_problem.png"))
    page.context.close()


@pytest.mark.parametrize("name", ["correct", "fixed"])
def test_the_correct_and_fixed_runs_read_healthy(
    world,
    browser,  # noqa: F811
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
    box = banner.bounding_box()
    assert box is not None and box["y"] + box["height"] <= HEIGHT, box
    expect(page.get_by_test_id("stAlertContentWarning")).to_have_count(0)
    _no_exception(page)
    if name == "correct":
        SHOTS.mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(SHOTS / "verdict_healthy.png"))
    page.context.close()


def test_the_runs_page_verdict_column_reads_healthy(
    world,
    browser,  # noqa: F811
    log_on_failure,
) -> None:
    page = _page(browser)
    page.goto(world["url"])
    expect(page.get_by_role("heading", name="Runs")).to_be_visible()
    _idle(page)
    rows = page.locator('[data-testid="stDataFrame"] table tr')
    for name in ("correct", "fixed"):
        row = rows.filter(has_text=f"run={world['runs'][name]}")
        expect(row).to_contain_text(HEALTHY)
        expect(row).not_to_contain_text("novel")  # the category note stays on the Run page
    mismatched = rows.filter(has_text=f"run={world['runs']['mismatched']}")
    expect(mismatched).to_contain_text("Serving feeds the draft")
    _no_exception(page)
    page.context.close()
