"""The access gate in a real headless Chromium: the app started as `make run` starts it
(`streamlit run serve.py`) on this machine's own network address, with EAGLE3DASH_BIND still saying
127.0.0.1 (the socket decides), shows neither its runs nor its pages until the browser gives the
token from EAGLE3DASH_TOKEN in the gate's form; then every door works, an upload included.
"""

from __future__ import annotations

import re

import pytest
from playwright.sync_api import expect

from eagle3dash import store as db
from eagle3dash.checkpoint import save
from eagle3dash.testing.tensors import random_tensors
from tests.browserkit import (
    UI_MS,
    idle,
    network_address,
    new_page,
    serving_app,
    skip_without_chromium,
)
from tests.specs import tiny_spec

skip_without_chromium()

TOKEN = "correct-horse-battery-staple"
ENDPOINT = "http://gpubox-secret:30000"  # the run's endpoint: shown only past the gate


@pytest.fixture(scope="module")
def gated(tmp_path_factory):
    """The app behind its gate on a network address with a token, its home holding one run."""
    host = network_address()
    if host is None:
        pytest.skip("this machine has no non-loopback IPv4 address to listen on")
    root = tmp_path_factory.mktemp("browser-access")
    home = root / "home"
    with db.open_store(home) as store:
        db.create_run(store, None, ENDPOINT, None, {})
    env = {
        "EAGLE3DASH_BIND": "127.0.0.1",  # ignored: the listening address decides
        "EAGLE3DASH_TOKEN": TOKEN,
    }
    with serving_app(home, root, script="serve.py", host=host, env=env) as served:
        try:
            yield {"url": served.url, "root": root, "store": home}
        finally:
            served.print_logs()


def test_the_gate_hides_every_page_until_the_token_is_given(gated, browser) -> None:
    page = new_page(browser)
    for path in ("/", "/run?run=1", "/new_run"):  # a deep link is gated too
        response = page.goto(gated["url"] + path)
        assert response is not None and response.status == 401
        expect(page.get_by_label("Access token")).to_be_visible(timeout=UI_MS)
        assert "gpubox-secret" not in page.content()
    box = page.get_by_label("Access token")
    box.fill("not-the-token")
    box.press("Enter")
    expect(page.get_by_text("That is not the access token.")).to_be_visible(timeout=UI_MS)
    assert "gpubox-secret" not in page.content()
    box = page.get_by_label("Access token")
    box.fill(TOKEN)
    box.press("Enter")
    expect(page.get_by_role("heading", name="Runs")).to_be_visible(timeout=UI_MS)
    expect(page.get_by_text("Runs 1–1 of 1")).to_be_visible(timeout=UI_MS)
    idle(page)
    # The browser keeps its access: another page and a deep link open without the form.
    page.get_by_role("link", name="Checkpoints").click()
    expect(page.get_by_role("heading", name="Checkpoints")).to_be_visible(timeout=UI_MS)
    page.goto(gated["url"] + "/run?run=1")
    expect(page.get_by_role("heading", name="Run #1")).to_be_visible(timeout=UI_MS)


def test_an_upload_passes_the_gate_with_the_token(gated, browser) -> None:
    spec = tiny_spec(aux_layer_ids=(1, 2, 3), aux_ids_location="eagle_config")
    draft = save(spec, random_tensors(spec, seed=3), gated["root"] / "gate-draft", "specforge")
    page = new_page(browser)
    page.goto(gated["url"] + "/")
    box = page.get_by_label("Access token")
    box.fill(TOKEN)
    box.press("Enter")
    expect(page.get_by_role("heading", name="Runs")).to_be_visible(timeout=UI_MS)
    page.goto(gated["url"] + "/new_run")
    idle(page)
    page.get_by_test_id("stRadio").first.get_by_text("An upload", exact=True).click()
    idle(page)
    uploader = page.locator('[data-testid="stFileUploaderDropzoneInput"]')
    uploader.set_input_files([draft / "config.json", draft / "model.safetensors"])
    expect(page.get_by_text(re.compile(r"^Registered checkpoint #\d+"))).to_be_visible(
        timeout=UI_MS
    )
    with db.open_store(gated["store"]) as store:
        assert len(db.list_checkpoints(store)) == 1
