"""Checkpoint sweep: eight checkpoints built to rank in a known order (the demo's draft B, which
does well on the taps SGLang serves it, with its weights noised more and more; the noise levels
given to steps out of order), one serving capture of the demo target, ranked the same by the local
worker (serially, through the CLI) and by the Ray backend on a two-node local cluster (in
parallel, both nodes used)."""

from __future__ import annotations

import threading

import pytest
import torch

from eagle3dash import checkpoint
from eagle3dash.cli import main as cli_main
from eagle3dash.jobs.backend import ServeSettings, serve
from eagle3dash.jobs.worker import run_worker
from eagle3dash.preloaded import HEAVY
from eagle3dash.store import open_store
from eagle3dash.sweep import SweepCheckpoint, submit_sweep, sweep_checkpoints, sweep_results

# Noise (times each weight matrix's std) per step: 0 is draft B itself, 1.2 all but random.
NOISE_BY_STEP = {500: 0.0, 300: 0.2, 800: 0.3, 100: 0.4, 700: 0.5, 200: 0.65, 600: 0.85, 400: 1.2}
RANKING = [500, 300, 800, 100, 700, 200, 600, 400]  # least noise first


@pytest.fixture(scope="module")
def world(tmp_path_factory) -> dict:
    """The serving capture (taps 1, 2, 3: what SGLang feeds draft B) and the eight checkpoints."""
    from eagle3dash.capture import capture_with_transformers, save_capture
    from eagle3dash.demo import FIXTURES
    from eagle3dash.demo.language import STREAMS, sequences
    from eagle3dash.layout import Tap

    root = tmp_path_factory.mktemp("sweep")
    seqs = sequences(STREAMS["eval"], 2)
    capture = capture_with_transformers(FIXTURES / "target", seqs, (Tap(1), Tap(2), Tap(3)))
    save_capture(capture, root / "capture")
    spec, tensors, _ = checkpoint.load(FIXTURES / "draft-b")
    g = torch.Generator().manual_seed(0)
    paths = {}
    for step, sigma in NOISE_BY_STEP.items():
        noised = {
            k: (v + sigma * v.float().std() * torch.randn(v.shape, generator=g)).to(v.dtype)
            if v.is_floating_point() and v.ndim >= 2
            else v
            for k, v in tensors.items()
        }
        paths[step] = str(checkpoint.save(spec, noised, root / f"draft-step{step}", spec.format))
    return {"capture": str(root / "capture"), "paths": paths, "root": root}


def test_a_list_of_checkpoints_takes_each_step_from_its_name(world) -> None:
    got = sweep_checkpoints([world["paths"][800], world["paths"][100]])
    assert got == [
        SweepCheckpoint(world["paths"][800], 800, False),
        SweepCheckpoint(world["paths"][100], 100, False),
    ]


def test_the_local_worker_ranks_the_checkpoints_by_their_noise(world, tmp_path, capsys) -> None:
    home = tmp_path / "home"
    args = ["sweep", *world["paths"].values(), "--capture", world["capture"], "--home", str(home)]
    assert cli_main(args) == 0
    assert (
        run_worker(home, _kinds(), once=True, preload=HEAVY) == 8
    )  # one job per checkpoint, one at a time
    store = open_store(home)
    sweep_id = capsys.readouterr().out.split()[1].rstrip(":")
    entries = sweep_results(store, sweep_id)
    assert [e.status for e in entries] == ["succeeded"] * 8, [e.error for e in entries]
    assert [e.step for e in entries] == RANKING
    assert entries[0].sim_serving > 2.0 > 1.1 > entries[-1].sim_serving  # B's skill, then none
    assert all(e.placement is None for e in entries)  # the local worker records no Ray node
    store.close()


def test_ray_on_two_nodes_ranks_the_same_using_both(ray_cluster, world, tmp_path) -> None:
    from eagle3dash.jobs.ray_backend import RayBackend

    store = open_store(tmp_path / "home")
    sweep_id = submit_sweep(
        store, sweep_checkpoints(list(world["paths"].values())), world["capture"]
    )
    stop = threading.Event()
    settings = ServeSettings(poll_interval=0.05, slots=8)
    args = (RayBackend(), store.home, _kinds(), settings)
    t = threading.Thread(target=serve, args=args, kwargs={"stop_event": stop}, daemon=True)
    t.start()
    try:
        from eagle3dash.jobs import wait_for_job

        for e in sweep_results(store, sweep_id):
            wait_for_job(store, e.job_id, timeout=300)
    finally:
        stop.set()
        t.join(60)
    entries = sweep_results(store, sweep_id)
    assert [e.status for e in entries] == ["succeeded"] * 8, [e.error for e in entries]
    assert [e.step for e in entries] == RANKING
    nodes = {e.placement["node"] for e in entries if e.placement}
    assert len(nodes) == 2  # both nodes of the cluster ran evaluations
    store.close()


def _kinds() -> dict:
    from eagle3dash.job_kinds import JOB_KINDS

    return JOB_KINDS


def test_the_sweep_page_ranks_marks_the_trainers_best_and_diagnoses_one(home, tmp_path) -> None:
    """Three evaluations settled as a backend would; the page's verdict, table and the diagnose
    button (a run queued for the picked checkpoint, its page opened)."""
    from eagle3dash.jobs.lifecycle import Status, claim_job, settle_job
    from tests.appkit import app, frames, no_exception, texts

    (tmp_path / "capture").mkdir()
    given = [
        SweepCheckpoint("/runs/r/step100", 100, True),
        SweepCheckpoint("/runs/r/step200", 200),
        SweepCheckpoint("/runs/r/step300", 300),
    ]
    sweep_id = submit_sweep(home, given, str(tmp_path / "capture"), "http://gpubox:30000")
    for score in (1.8, 2.4, 2.1):
        job = claim_job(home, 1)
        settle_job(home, job["id"], Status.SUCCEEDED, result={"sim_serving": score})
    at = app("sweep", sweep=sweep_id)
    no_exception(at)
    assert (
        "Step 200 serves best: 2.40 simulated accept length. The trainer's best (step 100) "
        "ranks 3 of 3 with 1.80." in texts(at, "markdown")
    )
    table = frames(at)[0]
    assert table["step"].tolist() == [200, 300, 100]
    assert table["trainer's best"].tolist() == ["", "", "yes"]
    at.selectbox[1].select_index(1).run()  # step 300, second in the ranking
    at.button(key="sweep_diagnose").click().run()
    no_exception(at)
    from eagle3dash.store import list_runs

    runs = list_runs(home)
    assert [(r["options"]["draft"], r["endpoint_url"]) for r in runs] == [
        ("/runs/r/step300", "http://gpubox:30000")
    ]


def test_a_run_folder_gives_every_checkpoint_and_the_trainers_best(tmp_path) -> None:
    """SpecForge 0.2: its step folders, `-best` links step 10; speculators 0.9: its epoch
    folders, `checkpoint_best` links epoch 1."""
    from tests.runfolders import specforge_run, speculators_run

    sf = specforge_run(tmp_path / "sf").absolute()
    assert sweep_checkpoints(str(sf)) == [
        SweepCheckpoint(str(sf / "r1-step10"), 10, True),
        SweepCheckpoint(str(sf / "r1-step20"), 20, False),
    ]
    sp = speculators_run(tmp_path / "sp").absolute()
    assert sweep_checkpoints(str(sp)) == [
        SweepCheckpoint(str(sp / "0"), 0, False),
        SweepCheckpoint(str(sp / "1"), 1, True),
        SweepCheckpoint(str(sp / "2"), 2, False),
    ]


def test_a_folder_of_no_run_is_one_message(tmp_path) -> None:
    from eagle3dash.errors import InputError

    with pytest.raises(InputError, match="no checkpoints found"):
        sweep_checkpoints(str(tmp_path))


def test_without_a_capture_run_or_endpoint_the_sweep_says_what_to_give(world, tmp_path) -> None:
    from eagle3dash.cli import UsageError, build_parser, cmd_sweep

    args = build_parser().parse_args(["sweep", world["paths"][100], "--home", str(tmp_path / "h")])
    with pytest.raises(UsageError, match=r"give --endpoint .*, --run N or --capture"):
        cmd_sweep(args)


def test_a_sweep_starts_from_the_page_and_is_watched(home, tmp_path) -> None:
    """A speculators run folder (epochs 0, 1, 2; the trainer's best: 1) typed on the page, a
    served run picked (its capture, endpoint, target and draft steps): one evaluation queued per
    epoch on that capture, the page showing them queued and saying it follows them, then ranked
    once the backend settles them."""
    from eagle3dash.diagnosis.options import DiagnoseOptions
    from eagle3dash.jobs import cancel_run, list_jobs
    from eagle3dash.jobs.lifecycle import Status, claim_job, settle_job
    from eagle3dash.submit import submit_diagnosis
    from tests.appkit import app, frames, no_exception, texts
    from tests.runfolders import speculators_run

    folder = speculators_run(tmp_path / "run").absolute()
    options = DiagnoseOptions(
        draft=str(folder / "1"), endpoint="http://gpubox:30000", steps=3, target="/models/t"
    )
    served = submit_diagnosis(home, None, options)
    capture = home.home / "captures" / str(served)
    capture.mkdir(parents=True, exist_ok=True)
    (capture / "capture.json").write_text("{}")
    other = submit_diagnosis(home, None, options)  # a run without a capture: not offered
    for run_id in (served, other):  # nothing runs their jobs here: out of the queue
        cancel_run(home, run_id)
    run_jobs = {j["id"] for j in list_jobs(home)}

    at = app("sweep")
    no_exception(at)
    assert "No sweeps yet: start one above." in texts(at, "info")
    at.text_area(key="sweep_folder").set_value(str(folder)).run()
    no_exception(at)
    assert "3 checkpoints: steps 0, 1 and 2; the trainer's best: step 1." in texts(at, "caption")
    assert at.selectbox(key="sweep_run").options == [
        f"#{served} — @ http://gpubox:30000 (cancelled)"
    ]
    assert at.number_input(key="sweep_steps").value == 3  # the served run's
    at.button(key="sweep_start").click().run()
    no_exception(at)

    queued = [j for j in list_jobs(home) if j["id"] not in run_jobs]
    assert [j["kind"] for j in queued] == ["sweep-eval"] * 3
    params = [j["params"] for j in sorted(queued, key=lambda j: j["params"]["step"])]
    assert [(p["checkpoint"], p["step"], p["best"]) for p in params] == [
        (str(folder / "0"), 0, False),
        (str(folder / "1"), 1, True),
        (str(folder / "2"), 2, False),
    ]
    assert {(p["capture"], p["endpoint"], p["target"], p["steps"]) for p in params} == {
        (str(capture), "http://gpubox:30000", "/models/t", 3)
    }
    assert at.query_params["sweep"] == params[0]["sweep"]
    table = next(f for f in frames(at) if "sim serving" in f.columns)
    assert table["status"].tolist() == ["queued"] * 3
    assert "This table updates itself while checkpoints are queued or evaluated." in texts(
        at, "caption"
    )

    for job in sorted(queued, key=lambda j: j["id"]):
        claimed = claim_job(home, 1)
        assert claimed["id"] == job["id"]
        score = {0: 1.5, 1: 2.5, 2: 2.0}[job["params"]["step"]]
        settle_job(home, job["id"], Status.SUCCEEDED, result={"sim_serving": score})
    at.run()
    no_exception(at)
    assert "Step 1 serves best: 2.50 simulated accept length. The trainer's best is the same " in (
        texts(at, "markdown")
    )
    assert "This table updates itself" not in texts(at, "caption")


def test_a_run_that_kept_no_capture_is_one_message_and_nothing_is_queued(world, tmp_path) -> None:
    """`eagle3dash sweep RUN_FOLDER --run N` (the command the Sweep page names) with a run that
    saved no capture: one line naming it, no empty capture folder made, no job queued."""
    from eagle3dash.cli import build_parser, cmd_sweep
    from eagle3dash.errors import InputError
    from eagle3dash.jobs import list_jobs

    home = tmp_path / "h"
    args = build_parser().parse_args(
        ["sweep", world["paths"][100], "--run", "7", "--home", str(home)]
    )
    with pytest.raises(InputError, match=r"^run #7 kept no serving capture in "):
        cmd_sweep(args)
    assert not (home / "captures" / "7").exists()
    store = open_store(home)
    assert list_jobs(store) == []
    store.close()
