"""The checkpoint sweep as a newcomer meets it: over the demo's drafts A, B and C (no step in
their names, no embed_tokens of their own) and a seeded demo run's serving capture, from the CLI
and from the Sweep page. Numbers pinned here are the seeded demo's (tests/test_demo.py: run
"correct" simulates 2.67 at its 4 draft steps, "mismatched" 1.36), never the sweep's own."""

from __future__ import annotations

import shutil
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from eagle3dash.cli import main as cli_main
from eagle3dash.demo import FIXTURES
from eagle3dash.store import open_store
from eagle3dash.sweep import sweep_results

DRAFTS = [str(FIXTURES / name) for name in ("draft-a", "draft-b", "draft-c")]
TARGET = str(FIXTURES / "target")


@pytest.fixture
def demo_home(seeded_demo, tmp_path, monkeypatch) -> dict:
    """A copy of the seeded demo home (the app's, EAGLE3DASH_HOME) and its runs by deployment."""
    seeded_home, made = seeded_demo
    assert {r.status for r in made} == {"succeeded"}, made
    home = tmp_path / "home"
    shutil.copytree(seeded_home, home)
    monkeypatch.setenv("EAGLE3DASH_HOME", str(home))
    return {"home": home, "runs": {r.deployment: r.run_id for r in made}}


@contextmanager
def worker(home: Path) -> Iterator[None]:
    """The local worker in a thread of this process while the block runs."""
    from eagle3dash.job_kinds import JOB_KINDS
    from eagle3dash.jobs.worker import run_worker
    from eagle3dash.preloaded import HEAVY

    stop = threading.Event()
    kwargs = {"poll_interval": 0.1, "stop_event": stop, "preload": HEAVY}
    t = threading.Thread(target=run_worker, args=(home, JOB_KINDS), kwargs=kwargs, daemon=True)
    t.start()
    try:
        yield
    finally:
        stop.set()
        t.join(60)


def test_the_pages_command_over_the_demos_drafts_ranks_them_as_their_runs_do(
    demo_home, capsys
) -> None:
    """`eagle3dash sweep CKPT... --run N --wait`, the command the Sweep page names, takes run N's
    target (the drafts have no embedding of their own) and draft steps: draft B scores what run
    "correct" (B served) reads as simulated serving, draft A what run "mismatched" does."""
    run = demo_home["runs"]["correct"]
    args = ["sweep", *DRAFTS, "--run", str(run), "--wait", "--home", str(demo_home["home"])]
    with worker(demo_home["home"]):
        assert cli_main(args) == 0, capsys.readouterr()
    out = capsys.readouterr().out
    assert (
        f"evaluated on run #{run}'s serving capture (its prompts as it sent them: raw, no chat "
        "template), 4 draft steps" in out
    )
    with open_store(demo_home["home"]) as store:
        sweep_id = out.split()[1].rstrip(":")
        assert sweep_id == "fixtures-1"  # the drafts' folder, numbered: no hex
        entries = sweep_results(store, sweep_id)
    assert [(Path(e.checkpoint).name, e.status) for e in entries] == [
        ("draft-b", "succeeded"),
        ("draft-c", "succeeded"),
        ("draft-a", "succeeded"),
    ]
    scores = {Path(e.checkpoint).name: e.sim_serving for e in entries}
    assert scores["draft-b"] == pytest.approx(2.67, abs=0.005)
    assert scores["draft-a"] == pytest.approx(1.36, abs=0.005)


def test_a_sweep_that_cannot_evaluate_says_why_and_exits_non_zero(demo_home, capsys) -> None:
    """Given the capture alone (no target, no run): every evaluation fails for want of the
    target's embedding; the CLI says so and exits 1, and the Sweep page says so too."""
    from tests.appkit import app, no_exception, texts

    capture = demo_home["home"] / "captures" / str(demo_home["runs"]["correct"])
    args = ["sweep", *DRAFTS, "--capture", str(capture), "--wait", "--home"]
    with worker(demo_home["home"]):
        assert cli_main([*args, str(demo_home["home"])]) == 1
    out, err = capsys.readouterr()
    why = (
        "this draft has no embed_tokens of its own (serving gives it the target's) and neither "
        "the sweep nor its capture holds the target's: give the sweep the target model folder "
        "(the Sweep page's target box, `eagle3dash sweep --target PATH`)"
    )
    assert f"draft-a failed: {why}" in err
    sweep_id = out.split()[1].rstrip(":")

    at = app("sweep", sweep=sweep_id)
    no_exception(at)
    assert "No checkpoint could be evaluated: why is below." in texts(at, "markdown")
    assert texts(at, "error") == f"draft-a, draft-b and draft-c could not be evaluated: {why}"
    assert f"Evaluated on the capture {capture}, at 5 draft steps." in texts(at, "caption")


def test_the_sweep_page_sweeps_the_demos_drafts_in_one_click(demo_home) -> None:
    """The demo offer fills the checkpoints one per line, the demo's target and its "correct"
    run (its capture and 4 draft steps); Start queues them under a readable name; once
    evaluated, the verdict names the best by its folder and the page says what it evaluated on."""
    from eagle3dash.jobs import list_jobs
    from tests.appkit import app, frame_with, no_exception, texts

    run = demo_home["runs"]["correct"]
    at = app("sweep")
    no_exception(at)
    assert at.text_area(key="sweep_folder").label == (
        "Checkpoints on this machine: a training run folder (SpecForge, speculators or NeMo "
        "AutoModel), or checkpoint folders one per line"
    )
    at.button(key="sweep_demo").click().run()
    no_exception(at)
    assert at.text_area(key="sweep_folder").value == "\n".join(DRAFTS)
    assert at.text_input(key="sweep_target").value == TARGET
    assert at.selectbox(key="sweep_run").value == run
    assert at.number_input(key="sweep_steps").value == 4
    assert "3 checkpoints: draft-a, draft-b and draft-c; the trainer chose no best." in texts(
        at, "caption"
    )
    at.button(key="sweep_start").click().run()
    no_exception(at)
    assert at.query_params["sweep"] == "demo-drafts-1"
    with open_store(demo_home["home"]) as store:
        queued = [j for j in list_jobs(store) if j["kind"] == "sweep-eval"]
    assert [(j["params"]["checkpoint"], j["params"]["target"]) for j in queued] == [
        (d, TARGET) for d in DRAFTS
    ]
    with worker(demo_home["home"]):
        from eagle3dash.jobs import wait_for_job

        with open_store(demo_home["home"]) as store:
            for job in queued:
                wait_for_job(store, job["id"], timeout=300)
    at.run()
    no_exception(at)
    assert (
        "Checkpoint draft-b serves best: 2.67 simulated accept length. The trainer chose no best"
        in texts(at, "markdown")
    )
    assert (
        f"Evaluated on run #{run}'s serving capture (its prompts as it sent them: raw, no chat "
        f"template), at 4 draft steps; target {TARGET}. A checkpoint that run served scores "
        "here what its Run page reads as simulated serving at 4 draft steps (not its "
        "chat-template row)." in texts(at, "caption")
    )
    assert frame_with(at, "sim serving")["status"].tolist() == ["succeeded"] * 3
