"""The access gate in a real headless Chromium: an app told it listens on a network address
(EAGLE3DASH_BIND=0.0.0.0, while the test server itself stays on 127.0.0.1) shows neither its runs
nor its pages until the browser session gives the token from EAGLE3DASH_TOKEN.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from playwright.sync_api import expect

from eagle3dash import store as db
from tests.test_browser import (  # skips this module too when chromium is missing
    ROOT,
    _free_port,
    _idle,
    _page,
    _stop,
    _tail,
    browser,  # noqa: F401 - the module's Chromium, a fixture
    wait_healthy,
)

TOKEN = "correct-horse-battery-staple"
ENDPOINT = "http://gpubox-secret:30000"  # the run's endpoint: shown only past the gate


@pytest.fixture(scope="module")
def gated(tmp_path_factory):
    """The app on a 'network bind' with a token, its home holding one run."""
    root = tmp_path_factory.mktemp("browser-access")
    home = root / "home"
    with db.open_store(home) as store:
        db.create_run(store, None, ENDPOINT, None, {})
    env = {
        **os.environ,
        "EAGLE3DASH_HOME": str(home),
        "EAGLE3DASH_BIND": "0.0.0.0",
        "EAGLE3DASH_TOKEN": TOKEN,
        "PYTHONUNBUFFERED": "1",
    }
    log = root / "app.log"
    port = _free_port()
    command = [sys.executable, "-m", "streamlit", "run", "app.py", "--server.port", str(port)]
    command += ["--server.address", "127.0.0.1", "--server.headless", "true"]
    with log.open("wb") as out:
        proc = subprocess.Popen(
            command, cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
        )
    try:
        url = f"http://127.0.0.1:{port}"
        wait_healthy(url, {"app": proc}, {"app": log})
        yield url
    finally:
        _stop(proc)
        print(f"\n===== app log ({log}) =====\n{_tail(log)}")


def test_the_gate_hides_the_runs_until_the_token_is_given(gated, browser) -> None:  # noqa: F811
    page = _page(browser)
    for path in ("/", "/run?run=1"):  # a deep link is gated too
        page.goto(gated + path)
        box = page.get_by_label("Access token", exact=True)
        expect(box).to_be_visible()
        _idle(page)
        body = page.locator('[data-testid="stApp"]').inner_text()
        assert "gpubox-secret" not in body and "Runs 1" not in body
        expect(page.get_by_role("heading", name="Runs")).to_have_count(0)
    box.fill("not-the-token")
    box.press("Enter")
    expect(page.get_by_text("That is not the access token.")).to_be_visible()
    assert "gpubox-secret" not in page.locator('[data-testid="stApp"]').inner_text()
    page.goto(gated + "/")
    box = page.get_by_label("Access token", exact=True)
    box.fill(TOKEN)
    box.press("Enter")
    expect(page.get_by_role("heading", name="Runs")).to_be_visible()
    expect(page.get_by_text("Runs 1–1 of 1")).to_be_visible()
    _idle(page)
    # The session keeps its access: another page opens without the gate.
    page.get_by_role("link", name="Checkpoints").click()
    expect(page.get_by_role("heading", name="Checkpoints")).to_be_visible()
    expect(page.get_by_label("Access token", exact=True)).to_have_count(0)
