"""The main flow in a real headless Chromium: upload a draft, probe, submit, watch, share, compare.

A module fixture builds a tiny 4-layer target and a random SpecForge draft whose config ids are
[0, 1, 2] (SGLang's Llama +1 rule serves layers 1, 2, 3; a training layout of 0,1,2 gives the
layout finding), and the same weights with the fixed ids [-1, 0, 1]. Two SGLang API doubles serve
them in-process; a real worker subprocess runs the queued jobs and the real app subprocess serves
the dashboard. Playwright drives Debian's /usr/bin/chromium (no browser download). Screenshots go
to docs/run.png, docs/run_first_screen.png, docs/compare.png and docs/new_run.png.
"""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import pytest

CHROMIUM = "/usr/bin/chromium"
if not Path(CHROMIUM).exists() and not os.environ.get("CI"):
    pytest.skip(
        f"{CHROMIUM} is missing: the browser tests need Debian's chromium "
        "(`make browser` as root, or `apt-get install chromium`)",
        allow_module_level=True,
    )

from playwright.sync_api import Browser, Page, expect, sync_playwright  # noqa: E402

from eagle3dash import jobs as jobq  # noqa: E402
from eagle3dash import store as db  # noqa: E402
from eagle3dash.checkpoint import save  # noqa: E402
from eagle3dash.diagnosis.options import DiagnoseOptions  # noqa: E402
from eagle3dash.layout import Tap  # noqa: E402
from eagle3dash.submit import submit_diagnosis  # noqa: E402
from eagle3dash.testing.tensors import random_tensors  # noqa: E402
from eagle3dash.testing.tiny import make_tiny_target  # noqa: E402
from tests.appkit import speculative_double  # noqa: E402
from tests.specs import served_draft_spec  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
# Screenshots go to a temp folder; `EAGLE3DASH_SCREENSHOTS=docs pytest tests/test_browser.py`
# refreshes the README's pictures instead (a test run must not change the checkout).
SHOTS = Path(os.environ.get("EAGLE3DASH_SCREENSHOTS") or tempfile.mkdtemp(prefix="e3d-shots-"))
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
WIDTH, HEIGHT = 1400, 900  # the first screen the verdict must fit on
START_S = 60  # app health
RUN_S = 120  # a diagnosis, queued to finished
UI_MS = 30_000  # one UI step (rerun, upload, probe)
LAYOUT_TITLE = re.compile(r"shifted|one block (later|earlier)")
ROOT_CAUSE = (  # the verdict of the mismatch run: training declared 0,1,2, SGLang serves 1,2,3
    "Serving feeds the draft the layers after 1, 2 and 3 blocks, but training fed the embedding "
    "output and the layers after 1 and 2 blocks: every slot is one block later than in training."
)


# --- fixtures ----------------------------------------------------------------------------------


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _stop(proc: subprocess.Popen) -> None:
    """SIGTERM the process group we started (start_new_session), SIGKILL it if it lingers."""
    if proc.poll() is not None:
        return
    try:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=10)
    except (ProcessLookupError, subprocess.TimeoutExpired):
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            return
        proc.wait(timeout=10)


def wait_healthy(url: str, procs: dict[str, subprocess.Popen], logs: dict[str, Path]) -> None:
    """Until the app at url answers its health check; fail with the log of a process that died."""
    deadline = time.monotonic() + START_S
    while True:
        for name, proc in procs.items():
            if proc.poll() is not None:
                pytest.fail(f"the {name} exited ({proc.returncode}):\n{_tail(logs[name])}")
        try:
            with urllib.request.urlopen(f"{url}/_stcore/health", timeout=2) as r:
                if r.read().decode().strip() == "ok":
                    return
        except OSError:
            pass
        if time.monotonic() > deadline:
            pytest.fail(f"the app was not healthy within {START_S} s:\n{_tail(logs['app'])}")
        time.sleep(0.3)


def _tail(path: Path, chars: int = 6000) -> str:
    text = path.read_text(errors="replace") if path.exists() else "(no log)"
    return text[-chars:]


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    """Models, two doubles, a home, the worker and the app, all running; logs in the tmp dir."""
    root = tmp_path_factory.mktemp("browser")
    target = make_tiny_target(root / "target", num_layers=4, hidden_size=64)
    tensors = random_tensors(served_draft_spec(), seed=1)
    draft = save(served_draft_spec(), tensors, root / "draft", "specforge")
    fixed = save(served_draft_spec((-1, 0, 1)), tensors, root / "fixed", "specforge")
    home = root / "home"
    store = db.open_store(home)
    env = {
        **os.environ,
        "EAGLE3DASH_HOME": str(home),
        "PYTHONUNBUFFERED": "1",
        "OMP_NUM_THREADS": "1",
    }
    logs = {"app": root / "app.log", "worker": root / "worker.log"}
    port = _free_port()
    servers, procs = [], []
    try:
        servers += [speculative_double(target, draft), speculative_double(target, fixed)]
        with logs["worker"].open("wb") as log:
            procs.append(
                subprocess.Popen(
                    [sys.executable, "-m", "eagle3dash", "worker", "--home", str(home)],
                    cwd=ROOT,
                    env=env,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                )
            )
        with logs["app"].open("wb") as log:
            procs.append(
                subprocess.Popen(
                    [
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
                    ],
                    cwd=ROOT,
                    env=env,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                )
            )
        url = f"http://127.0.0.1:{port}"
        wait_healthy(url, dict(zip(("worker", "app"), procs, strict=True)), logs)
        yield {
            "url": url,
            "home": home,
            "store": store,
            "target": target,
            "draft": draft,
            "fixed": fixed,
            "double": servers[0].url,
            "fixed_double": servers[1].url,
            "logs": logs,
            "runs": {},
        }
    finally:
        for proc in reversed(procs):
            _stop(proc)
        for server in servers:
            server.stop()
        store.close()


@pytest.fixture(scope="module")
def browser():
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS)
        try:
            yield b
        finally:
            b.close()


@pytest.fixture
def logs_on_failure(world):
    """The app's and the worker's logs, printed at teardown: pytest shows them when a test fails."""
    yield
    for name, path in world["logs"].items():
        print(f"\n===== {name} log ({path}) =====\n{_tail(path)}")


def _page(browser: Browser) -> Page:
    context = browser.new_context(viewport={"width": WIDTH, "height": HEIGHT})
    context.set_default_timeout(UI_MS)
    return context.new_page()


def _idle(page: Page, timeout_ms: float | None = None) -> None:
    """Wait until the script is not running (Streamlit renders over a websocket)."""
    expect(page.locator('[data-testid="stApp"]')).to_have_attribute(
        "data-test-script-state", "notRunning", timeout=timeout_ms
    )


def _no_exception(page: Page) -> None:
    expect(page.get_by_test_id("stException")).to_have_count(0, timeout=1000)


def _screenshot(page: Page, path: Path) -> None:
    """The whole page: Streamlit scrolls inside its own container, so grow the viewport to fit."""
    height = page.evaluate(
        """() => Math.max(...[...document.querySelectorAll('*')]
              .filter(e => e.scrollHeight > e.clientHeight + 1 &&
                           ['auto', 'scroll'].includes(getComputedStyle(e).overflowY))
              .map(e => e.scrollHeight), document.documentElement.scrollHeight)"""
    )
    page.set_viewport_size({"width": WIDTH, "height": min(int(height) + 40, 12_000)})
    page.wait_for_timeout(500)  # charts re-lay out at the new size
    path.parent.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(path), full_page=True)
    page.set_viewport_size({"width": WIDTH, "height": HEIGHT})


def _fill(page: Page, label: str, value: str) -> None:
    box = page.get_by_label(label, exact=True)
    box.fill(value)
    box.press("Enter")
    _idle(page)


def _expect_finished_run(page: Page, run_id: int) -> None:
    """The Run page of a finished mismatch run: the verdict banner on the first screen, findings
    (layout), then the layout diff."""
    expect(page.get_by_role("heading", name=f"Run #{run_id}")).to_be_visible()
    expect(page.get_by_role("heading", name="Findings")).to_be_visible(timeout=RUN_S * 1000)
    _idle(page)
    # The verdict opens the page: on the first screen (1400x900, not scrolled), the root cause,
    # the accept lengths and speedup, and what was not checked with the form field to fill in.
    assert page.viewport_size == {"width": WIDTH, "height": HEIGHT}
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
    diff = page.get_by_test_id("stAlert").filter(has_text=re.compile(r"off-by-one|shifted-slot"))
    expect(diff).to_contain_text("Serving feeds every slot one block later than training")
    slots = page.get_by_test_id("stDataFrame").filter(has_text="serving feeds")
    expect(slots).to_contain_text("DIFFERS")  # the slot table
    expect(page.locator('[data-testid="stVegaLiteChart"]').first).to_be_visible()
    expect(page.get_by_test_id("stSpinner")).to_have_count(0)
    _no_exception(page)


def _wait_for_run(store, run_id: int) -> None:
    deadline = time.monotonic() + RUN_S
    while time.monotonic() < deadline:
        job = jobq.list_jobs(store, run_id)[0]
        if job["status"] not in ("queued", "running"):
            assert job["status"] == "succeeded", jobq.job_log(store, job["id"])
            return
        time.sleep(0.3)
    pytest.fail(f"run {run_id} did not finish within {RUN_S} s")


# --- tests -------------------------------------------------------------------------------------


def test_upload_probe_submit_watch_and_share_a_run(world, browser, logs_on_failure) -> None:
    page = _page(browser)
    page.goto(f"{world['url']}/new_run")
    expect(page.get_by_role("heading", name="New run")).to_be_visible()
    _idle(page)

    # 1. Upload the draft's files through the hidden file input.
    page.get_by_test_id("stRadio").first.get_by_text("An upload", exact=True).click()
    files = page.locator('[data-testid="stFileUploaderDropzoneInput"]')
    expect(files).to_have_count(1)
    files.set_input_files([world["draft"] / "config.json", world["draft"] / "model.safetensors"])
    expect(
        page.get_by_text(re.compile(r"Registered checkpoint #\d+ .*\(specforge\)"))
    ).to_be_visible()
    expect(page.get_by_text("No problems found in the checkpoint.")).to_be_visible()
    _idle(page)

    # 2. The endpoint: the probe summary appears.
    _fill(page, "Endpoint URL (the server running the target with this draft)", world["double"])
    metrics = page.get_by_test_id("stMetric")
    expect(metrics.filter(has_text="SGLang version")).to_contain_text("0.5.23")
    expect(metrics.filter(has_text="Speculative")).to_contain_text("EAGLE3")
    expect(metrics.filter(has_text="Hidden states")).to_contain_text("on")

    # 4. Options: 2 prompts, 16 new tokens, 3 steps, the training layout and the local target.
    page.get_by_test_id("stExpander").filter(has_text="Number of prompts").locator(
        "summary"
    ).click()
    _fill(page, "Number of prompts", "2")
    _fill(page, "Max new tokens", "16")
    _fill(page, "Draft steps evaluated", "3")
    _fill(page, "Concurrency", "2")
    _fill(page, "Training layout override (taps the training data used)", "0,1,2")
    _fill(page, "Local target path (for training-side states)", str(world["target"]))
    _no_exception(page)
    _screenshot(page, SHOTS / "new_run.png")

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
    _screenshot(page, SHOTS / "run.png")

    # The share link, opened in a fresh context (no cookies, no session), shows the same run.
    link = page.get_by_test_id("stCode").filter(has_text="run?run=").first.inner_text().strip()
    assert link == f"{world['url']}/run?run={run_id}"
    fresh = _page(browser)
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
    _wait_for_run(store, a)
    _wait_for_run(store, b)
    assert db.get_findings(store, b) == [], "the fixed draft still has findings"

    page = _page(browser)
    page.goto(f"{world['url']}/compare?a={a}&b={b}")
    expect(page.get_by_role("heading", name="Compare runs")).to_be_visible()
    expect(page.get_by_role("heading", name=f"Run A: #{a}")).to_be_visible()
    expect(page.get_by_role("heading", name=f"Run B: #{b}")).to_be_visible()
    _idle(page)
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
    _no_exception(page)
    _screenshot(page, SHOTS / "compare.png")
    page.context.close()


def test_a_deep_link_goes_through_the_apps_navigation(world, browser, logs_on_failure) -> None:
    page = _page(browser)
    try:
        page.goto(f"{world['url']}/new_run")
        expect(page.get_by_role("heading", name="New run")).to_be_visible()
        _idle(page)
        nav = page.get_by_test_id("stSidebarNav")
        expect(nav).to_contain_text("Checkpoints", timeout=5000)  # st.Page titles, not file names
        expect(nav.get_by_text("app", exact=True)).to_have_count(0, timeout=1000)
        width = page.get_by_test_id("stMainBlockContainer").bounding_box()["width"]
        assert width > 1000, f"not the wide layout of app.py's set_page_config: {width}px"
    finally:
        page.context.close()
