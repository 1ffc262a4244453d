"""What the Chromium tests share: the session's one headless Chromium, the real app (and worker)
started as subprocesses, and the page steps every browser test takes.

Playwright drives Debian's /usr/bin/chromium (no browser download). The Chromium is launched by the
first test that asks for the `browser` fixture and closed when the next test does not ask for it
(tests/conftest.py): while it is open, Playwright's event loop is the thread's running loop, which
the tests after it must not inherit.
"""

from __future__ import annotations

import functools
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import time
import unicodedata
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest
from playwright.sync_api import Browser, Page, Playwright, expect, sync_playwright

from eagle3dash import jobs as jobq

ROOT = Path(__file__).resolve().parent.parent
CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
# Screenshots go to a temp folder; `EAGLE3DASH_SCREENSHOTS=docs pytest tests/test_browser.py`
# refreshes the README's pictures instead (a test run must not change the checkout).
SHOTS = Path(os.environ.get("EAGLE3DASH_SCREENSHOTS") or tempfile.mkdtemp(prefix="e3d-shots-"))
WIDTH, HEIGHT = 1400, 900  # the first screen the verdict must fit on
START_S = 60  # app health
RUN_S = 120  # a diagnosis, queued to finished
UI_MS = 30_000  # one UI step (rerun, upload, probe)
# expect() waits 5 s unless told: too short for a rerun while the other test worker (make test
# runs two) keeps both cores busy; a wait still ends as soon as the page is ready.
expect.set_options(timeout=UI_MS)


def skip_without_chromium() -> None:
    """Skip the calling test module when Debian's chromium is missing (outside CI, which must
    have it)."""
    if not Path(CHROMIUM).exists() and not os.environ.get("CI"):
        pytest.skip(
            f"{CHROMIUM} is missing: the browser tests need Debian's chromium "
            "(`make browser` as root, or `apt-get install chromium`)",
            allow_module_level=True,
        )


_open: list[tuple[Playwright, Browser]] = []  # the session's Chromium while browser tests run


def shared_browser() -> Browser:
    """The session's headless Chromium, launched by the first test that asks."""
    if not _open:
        playwright = sync_playwright().start()
        try:
            launched = playwright.chromium.launch(
                executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS
            )
        except BaseException:
            playwright.stop()
            raise
        _open.append((playwright, launched))
    return _open[0][1]


def close_shared_browser() -> None:
    """Close the session's Chromium and stop Playwright's event loop, if they are open."""
    while _open:
        playwright, launched = _open.pop()
        try:
            launched.close()
        finally:
            playwright.stop()


# --- the app and the worker as subprocesses ----------------------------------------------------


@dataclass(frozen=True)
class ServedApp:
    """The real app serving a home: its URL, and the logs of the app and the worker (if any)."""

    url: str
    port: int
    logs: dict[str, Path]

    def print_logs(self) -> None:
        """Each log's tail, on stdout: pytest shows it when a test fails."""
        for name, path in self.logs.items():
            print(f"\n===== {name} log ({path}) =====\n{tail(path)}")


@contextmanager
def serving_app(
    home: Path,
    logs: Path,
    *,
    script: str = "eagle3dash/dashboard/app.py",
    host: str = "127.0.0.1",
    worker: bool = False,
    env: dict[str, str] | None = None,
) -> Iterator[ServedApp]:
    """`streamlit run SCRIPT` on a free port of `host` over `home` (and `eagle3dash worker` on
    the same home when `worker`), this environment plus `env`, logs in the folder `logs`;
    healthy on entry, stopped on exit."""
    port = free_port(host)
    full_env = {
        **os.environ,
        "EAGLE3DASH_HOME": str(home),
        "PYTHONUNBUFFERED": "1",
        "OMP_NUM_THREADS": "1",
        **(env or {}),
    }
    app = [sys.executable, "-m", "streamlit", "run", script, "--server.port", str(port)]
    app += ["--server.address", host, "--server.headless", "true"]
    commands: dict[str, list[str]] = {}
    if worker:
        commands["worker"] = [sys.executable, "-m", "eagle3dash", "worker", "--home", str(home)]
    commands["app"] = app
    paths = {name: logs / f"{name}.log" for name in commands}
    procs: dict[str, subprocess.Popen] = {}
    try:
        for name, command in commands.items():
            with paths[name].open("wb") as log:
                procs[name] = subprocess.Popen(
                    command,
                    cwd=ROOT,
                    env=full_env,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                )
        url = f"http://{host}:{port}"
        wait_healthy(url, procs, paths)
        yield ServedApp(url, port, paths)
    finally:
        for proc in reversed(procs.values()):
            stop(proc)


def free_port(host: str = "127.0.0.1") -> int:
    """A port on `host` that nothing listens on now."""
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def network_address() -> str | None:
    """This machine's first non-loopback IPv4 address, or None."""
    try:
        out = subprocess.run(
            ["ip", "-4", "-o", "addr", "show", "scope", "global"], capture_output=True, text=True
        ).stdout
    except OSError:
        return None
    found = re.findall(r"inet (\d+\.\d+\.\d+\.\d+)/", out)
    return found[0] if found else None


def stop(proc: subprocess.Popen) -> None:
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
                pytest.fail(f"the {name} exited ({proc.returncode}):\n{tail(logs[name])}")
        try:
            with urllib.request.urlopen(f"{url}/_stcore/health", timeout=2) as r:
                if r.read().decode().strip() == "ok":
                    return
        except OSError:
            pass
        if time.monotonic() > deadline:
            pytest.fail(f"the app was not healthy within {START_S} s:\n{tail(logs['app'])}")
        time.sleep(0.1)


def tail(path: Path, chars: int = 6000) -> str:
    """The end of a log file, or "(no log)"."""
    text = path.read_text(errors="replace") if path.exists() else "(no log)"
    return text[-chars:]


def wait_for_run(store, run_id: int) -> None:
    """Until the worker has finished the run's job, which must have succeeded."""
    deadline = time.monotonic() + RUN_S
    while time.monotonic() < deadline:
        job = jobq.list_jobs(store, run_id)[0]
        if job["status"] not in ("queued", "running"):
            assert job["status"] == "succeeded", jobq.job_log(store, job["id"])
            return
        time.sleep(0.1)
    pytest.fail(f"run {run_id} did not finish within {RUN_S} s")


# --- page steps --------------------------------------------------------------------------------


def new_page(browser: Browser) -> Page:
    """A page in a fresh context (no cookies) at the first screen's size."""
    context = browser.new_context(viewport={"width": WIDTH, "height": HEIGHT})
    context.set_default_timeout(UI_MS)
    return context.new_page()


def idle(page: Page, timeout_ms: float | None = None) -> None:
    """Wait until the script is not running (Streamlit renders over a websocket)."""
    expect(page.locator('[data-testid="stApp"]')).to_have_attribute(
        "data-test-script-state", "notRunning", timeout=timeout_ms
    )


def no_exception_shown(page: Page) -> None:
    """No Streamlit exception box on the page."""
    expect(page.get_by_test_id("stException")).to_have_count(0, timeout=1000)


def open_expander(page: Page, inside: str) -> None:
    """Open the expander holding the box labelled `inside`, until that box shows: a click during a
    rerun can land on an expander that is then drawn again closed, so look, click only if closed,
    and look again."""
    box = page.get_by_label(inside, exact=True)
    summary = page.get_by_test_id("stExpander").filter(has=box).locator("summary")
    for _ in range(5):
        idle(page)
        if box.is_visible():
            return
        summary.click()
        try:
            expect(box).to_be_visible(timeout=3000)
            return
        except AssertionError:
            continue
    expect(box).to_be_visible()


def fill(page: Page, label: str, value: str) -> None:
    """Type `value` into the box labelled `label` and submit it, then wait for the rerun."""
    box = page.get_by_label(label, exact=True)
    box.fill(value)
    box.press("Enter")
    idle(page)


def to_top(page: Page) -> None:
    """Scroll to the page's top: Streamlit scrolls inside its own container, which keeps its
    place when a button switches pages, so `window.scrollTo` alone does not."""
    page.evaluate(
        "() => { window.scrollTo(0, 0);"
        " document.querySelectorAll('*').forEach(e => { if (e.scrollTop) e.scrollTop = 0; }); }"
    )


def screenshot(page: Page, path: Path) -> None:
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


# --- what a page draws: its glyphs and whether anything is cut off ------------------------------

# The page's text as the browser has it: every text node but scripts, styles and the Material
# icons' ligature names (drawn by Streamlit's icon font, checked below).
PAGE_TEXT_JS = """() => {
  const walk = document.createTreeWalker(document.body, NodeFilter.SHOW_TEXT);
  const out = [];
  for (let node; (node = walk.nextNode()); ) {
    const parent = node.parentElement;
    if (parent && !parent.closest('script, style, noscript, [data-testid="stIconMaterial"]')) {
      out.push(node.textContent);
    }
  }
  return out.join('\\n');
}"""
ICON_FONT_JS = """() => {
  const icons = [...document.querySelectorAll('[data-testid="stIconMaterial"]')];
  const loaded = [...document.fonts].some(
    (f) => /Material Symbols/.test(f.family) && f.status === 'loaded');
  const unstyled = icons.filter((e) => !/Material Symbols/.test(getComputedStyle(e).fontFamily));
  return {icons: icons.length, loaded, unstyled: unstyled.map((e) => e.textContent)};
}"""
# What is drawn wider than the box that shows it, so the rest is cut off: a data frame (its grid
# scrolls sideways, with no visible bar), a static table, a code block's line, a chart, a text
# cut with an ellipsis. Each named by the heading above it.
CLIPPED_JS = """() => {
  const headings = [...document.querySelectorAll('h1, h2, h3, h4, h5, h6')];
  const under = (e) => {
    const above = headings.filter(
      (h) => h.compareDocumentPosition(e) & Node.DOCUMENT_POSITION_FOLLOWING);
    return above.length ? above[above.length - 1].textContent.trim() : '(the top)';
  };
  const wider = (e) => e.clientWidth > 0 && e.scrollWidth > e.clientWidth + 1;
  const out = [];
  const check = (selector, what) => {
    for (const e of document.querySelectorAll(selector)) {
      if (wider(e)) {
        out.push(`${what} under "${under(e)}": ${e.scrollWidth} px drawn in ${e.clientWidth} px`
                 + ` (${e.textContent.trim().slice(0, 80)})`);
      }
    }
  };
  check('[data-testid="stDataFrame"] .dvn-scroller', 'a table');
  // a grid taller than its box hides rows until one scrolls inside it
  for (const e of document.querySelectorAll('[data-testid="stDataFrame"] .dvn-scroller')) {
    if (e.clientHeight > 0 && e.scrollHeight > e.clientHeight + 1) {
      out.push(`a table's rows under "${under(e)}": ${e.scrollHeight} px drawn in `
               + `${e.clientHeight} px (${e.textContent.trim().slice(0, 80)})`);
    }
  }
  // a chart's text (a legend's label, an axis title) drawn past its svg, which clips it there,
  // or cut short with '…' (a label longer than its limit)
  for (const svg of document.querySelectorAll('[data-testid="stVegaLiteChart"] svg')) {
    const chart = svg;
    const box = svg.getBoundingClientRect();
    for (const t of svg.querySelectorAll('text')) {
      const r = t.getBoundingClientRect();
      const said = t.textContent.trim();
      if (!said) continue;
      // a glyph box holds a few px of line spacing beyond the ink (a chart's title overlaps
      // its svg's top by 6 of 21 px, drawn whole): cut is a third of it outside
      const inside = Math.max(0, Math.min(r.right, box.right) - Math.max(r.left, box.left))
                   * Math.max(0, Math.min(r.bottom, box.bottom) - Math.max(r.top, box.top));
      if (said.endsWith('\u2026') || inside < (2 / 3) * r.width * r.height) {
        out.push(`a chart's text under "${under(chart)}": '${said.slice(0, 80)}'`
                 + ` drawn at ${Math.round(r.left)}-${Math.round(r.right)} x `
                 + `${Math.round(r.top)}-${Math.round(r.bottom)} px in `
                 + `${Math.round(box.left)}-${Math.round(box.right)} x `
                 + `${Math.round(box.top)}-${Math.round(box.bottom)} px`);
      }
    }
  }
  check('[data-testid="stTable"], [data-testid="stTable"] *', 'a table');
  check('[data-testid="stCode"] pre', 'a code block');
  check('[data-testid="stVegaLiteChart"]', 'a chart');
  check('[data-testid="stMainBlockContainer"]', 'the page');
  for (const e of document.querySelectorAll('[data-testid="stMain"] *')) {
    if (getComputedStyle(e).textOverflow === 'ellipsis' && wider(e)) {
      out.push(`a text cut short under "${under(e)}": ${e.textContent.trim().slice(0, 80)}`);
    }
  }
  return out;
}"""


UNDRAWN = {"Zs", "Zl", "Zp", "Cc", "Cf"}  # Unicode categories with no glyph to draw


@functools.cache
def font_coverage() -> frozenset[int]:
    """Every code point some installed font draws (fontconfig: what Chromium falls back on)."""
    listed = subprocess.run(
        ["fc-list", "--format", "%{charset}\\n"], capture_output=True, text=True, check=True
    ).stdout
    covered: set[int] = set()
    for span in listed.split():
        low, _, high = span.partition("-")
        covered.update(range(int(low, 16), int(high or low, 16) + 1))
    return frozenset(covered)


def is_emoji(ch: str) -> bool:
    """An emoji or a pictograph the app must not draw (it depends on the viewer's emoji font):
    the emoji planes, the miscellaneous symbols and dingbats, and the emoji variation selector."""
    code = ord(ch)
    return (
        0x1F000 <= code <= 0x1FAFF
        or 0x2300 <= code <= 0x23FF
        or 0x2600 <= code <= 0x27BF
        or 0x2B00 <= code <= 0x2BFF
        or ch in "\ufe0f\u2139"
    )


def glyph_problems(page: Page) -> list[str]:
    """What the page draws without a glyph: an emoji (the app draws none), a character no
    installed font has (a blank box), or Material icons without their font (their names as
    words)."""
    text = page.evaluate(PAGE_TEXT_JS)
    # drawn: all but spaces, controls and format characters (zero-width: nothing to draw)
    drawn = sorted({ch for ch in text if unicodedata.category(ch) not in UNDRAWN})
    covered = font_coverage()
    problems = [
        f"no installed font draws {ch!r} (U+{ord(ch):04X} {unicodedata.name(ch, '?')})"
        for ch in drawn
        if ord(ch) not in covered
    ]
    problems += [f"an emoji: {ch!r} (U+{ord(ch):04X})" for ch in drawn if is_emoji(ch)]
    icons = page.evaluate(ICON_FONT_JS)
    if icons["icons"] and not icons["loaded"]:
        problems.append(f"{icons['icons']} Material icons, but their font did not load")
    problems += [f"a Material icon not in its font: {name}" for name in icons["unstyled"]]
    return problems


def clipped(page: Page) -> list[str]:
    """What the page draws wider than its box (see CLIPPED_JS)."""
    return page.evaluate(CLIPPED_JS)
