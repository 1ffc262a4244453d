"""Every page in a real headless Chromium at 1400x900, on the demo's seeded runs: no emoji, no
character that no installed font draws, Material icons in their font, and no table, code line or
chart drawn wider than its box; and a sweep started from the Sweep page and followed there
until its evaluations finish.

A module fixture copies the test world's seeded demo home (tests/conftest.py; the mismatched,
correct and fixed deployments' runs, each with its serving capture) and serves the app on it with
a worker. Each page's screenshot goes beside test_browser.py's (docs/ with
EAGLE3DASH_SCREENSHOTS=docs).
"""

from __future__ import annotations

import io
import json
import re
import shutil
from pathlib import Path

import pytest
from playwright.sync_api import Page, expect

from eagle3dash import store as db
from eagle3dash.demo import FIXTURES
from eagle3dash.uploads import register_upload
from tests.browserkit import (
    RUN_S,
    SHOTS,
    clipped,
    glyph_problems,
    idle,
    new_page,
    no_exception_shown,
    screenshot,
    serving_app,
    skip_without_chromium,
)
from tests.runfolders import speculators_run_of

skip_without_chromium()


@pytest.fixture(scope="module")
def world(tmp_path_factory, seeded_demo):
    """A copy of the seeded demo home, a speculators run folder of the demo's drafts A and B
    (epoch 1, B, the trainer's best), and the app with a worker serving them."""
    seeded_home, made = seeded_demo
    root = tmp_path_factory.mktemp("browser-pages")
    home = root / "home"
    shutil.copytree(seeded_home, home)
    assert {r.status for r in made} == {"succeeded"}, made
    with db.open_store(home) as store:
        for run in made:  # more runs than a default-height grid shows at once
            copy = db.create_run(store, None, f"http://gpubox:3000{run.run_id}")
            stored = db.get_run(store, run.run_id)
            assert stored is not None
            diagnosis = json.dumps(stored["diagnosis"])
            db.update_run(store, copy, status="succeeded", diagnosis_json=diagnosis)
        # an uploaded draft: its files under the home, a long content-addressed path
        config = json.loads((FIXTURES / "draft-a" / "config.json").read_text())
        files = {
            "config.json": json.dumps({**config, "uploaded": "by a browser"}).encode(),
            "model.safetensors": (FIXTURES / "draft-a" / "model.safetensors").read_bytes(),
        }
        uploads = [io.BytesIO(blob) for blob in files.values()]
        for upload, name in zip(uploads, files, strict=True):
            upload.name = name  # type: ignore[attr-defined]
        uploaded = register_upload(store, uploads, name="uploaded draft A")
    folder = speculators_run_of(root / "run", [FIXTURES / "draft-a", FIXTURES / "draft-b"])
    with serving_app(home, root, worker=True) as served:
        yield {
            "url": served.url,
            "runs": {r.deployment: r.run_id for r in made},
            "folder": folder,
            "served": served,
            "uploaded": uploaded.path,
        }


@pytest.fixture
def log_on_failure(world):
    """The app's and the worker's logs, printed at teardown: pytest shows them on a failure."""
    yield
    world["served"].print_logs()


def _open(browser, url: str, heading: str) -> Page:
    page = new_page(browser)
    page.goto(url)
    expect(page.get_by_role("heading", name=heading).first).to_be_visible()
    idle(page)
    page.wait_for_timeout(1000)  # charts and tables lay out after the script ran
    return page


def _drawn_whole(page: Page, name: str) -> None:
    """The page's glyphs and widths, then its screenshot; every problem named at once."""
    problems = glyph_problems(page) + clipped(page)
    no_exception_shown(page)
    screenshot(page, SHOTS / f"page_{name}.png")
    assert problems == [], f"{name}: " + "\n".join(problems)


def test_the_check_fails_on_a_glyph_no_font_has_and_on_an_emoji(browser) -> None:
    """The check itself: a private-use character no installed font maps is a blank box, and an
    emoji is refused whatever the fonts (the app must not need one)."""
    page = new_page(browser)
    page.set_content("<body><p>ok \U0010fffd and \u26a0 here</p></body>")
    assert glyph_problems(page) == [
        "no installed font draws '\\U0010fffd' (U+10FFFD ?)",
        "an emoji: '\u26a0' (U+26A0)",
    ]
    page.context.close()


PAGES = {
    "runs": ("", "Runs"),
    "new_run": ("/new_run", "New run"),
    "run_mismatched": ("/run?run={mismatched}", "Findings"),
    "run_correct": ("/run?run={correct}", "Findings"),
    "run_fixed": ("/run?run={fixed}", "Findings"),
    "compare": ("/compare?a={mismatched}&b={fixed}", "What differs"),
}


@pytest.mark.parametrize("name", list(PAGES))
def test_each_page_draws_every_glyph_and_cuts_nothing_off(
    world, browser, log_on_failure, name: str
) -> None:
    path, heading = PAGES[name]
    page = _open(browser, world["url"] + path.format(**world["runs"]), heading)
    if name.startswith("run_"):  # the candidate layouts wrap, whole: a grid's cell cut them
        candidates = page.get_by_test_id("stTable").filter(has_text="behind the best")
        expect(candidates).to_contain_text("framework defaults [2, N")  # a long row's end
    _drawn_whole(page, name)
    page.context.close()


def test_the_checkpoints_page_and_its_serving_matrix(world, browser, log_on_failure) -> None:
    """The matrix of a checkpoint, opened at the demo target's depth: its 'Against training'
    column and the one config.json for both engines, whole."""
    page = _open(browser, f"{world['url']}/checkpoints", "Checkpoints")
    page.get_by_text("Where can this draft be served?").first.click()
    layers = page.get_by_label("Target decoder layers (N)", exact=True).first
    layers.fill("4")
    layers.press("Enter")
    idle(page)
    expect(page.get_by_text("By the engines' rules (predicted, no server asked)")).to_be_visible()
    tables = page.locator('[data-testid="stTable"], [data-testid="stDataFrame"]')
    expect(tables.filter(has_text="Against training")).to_be_visible()
    expect(page.get_by_text("One file for both engines")).to_be_visible()
    # every inspect report open: the paths in them, an upload's under the home, drawn whole
    reports = page.get_by_test_id("stExpander").filter(has_text="Inspect report")
    for i in range(reports.count()):
        reports.nth(i).locator("summary").first.click()
    static = page.get_by_test_id("stTable")
    expect(static.filter(has_text=Path(world["uploaded"]).name).first).to_be_visible()
    idle(page)
    page.wait_for_timeout(1000)
    _drawn_whole(page, "checkpoints")
    page.context.close()


def test_a_sweep_starts_from_the_sweep_page_and_is_followed_there(
    world, browser, log_on_failure
) -> None:
    """The run folder typed, the newest served run kept as picked, Start: both epochs queued,
    evaluated by the worker and ranked on the page without a reload; then the page whole."""
    page = _open(browser, f"{world['url']}/sweep", "Checkpoint sweep")
    expect(page.get_by_text("No sweeps yet: start one above.")).to_be_visible()
    box = page.get_by_label(
        "Checkpoints on this machine: a training run folder (SpecForge, speculators or NeMo "
        "AutoModel), or checkpoint folders one per line",
        exact=True,
    )
    box.fill(str(world["folder"]))
    box.press("Control+Enter")  # a text area's value goes to the app on Ctrl+Enter
    idle(page)
    expect(
        page.get_by_text("2 checkpoints: steps 0 and 1; the trainer's best: step 1.")
    ).to_be_visible()
    page.get_by_role("button", name="Start the sweep").click()
    idle(page)
    table = page.get_by_test_id("stDataFrame").filter(has_text="sim serving")
    expect(table).to_be_visible()
    rows = table.locator("table tr")
    # followed live: both evaluations reach succeeded on this page, never reloaded
    expect(rows.filter(has_text="succeeded")).to_have_count(2, timeout=RUN_S * 1000)
    expect(page.get_by_text("This table updates itself")).to_have_count(0)
    # the newest served run is the fixed deployment's, whose server feeds draft A's training
    # taps: draft A (epoch 0) serves them best, the trainer's best (draft B) does not
    verdict = page.get_by_text(
        re.compile(
            r"^Step 0 serves best: .* The trainer's best \(step 1\) "
            r"ranks 2 of 2"
        )
    )
    expect(verdict).to_be_visible()
    idle(page)
    _drawn_whole(page, "sweep")
    page.context.close()
