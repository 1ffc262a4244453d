"""The Ray backend beyond the conformance suite: Ray stays out unless asked for, a run records the
node it ran on, inputs a node cannot read fail at once naming node and path, and a node removed
mid-job fails the job and its run with Ray's reason. On the session's local cluster (`ray_cluster`,
two nodes; a third one added and removed here)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from eagle3dash.diagnosis.stored_run import read_runs
from eagle3dash.jobs import job_status, list_jobs, submit_job, wait_for_job
from eagle3dash.jobs.backend import ServeSettings, serve
from eagle3dash.jobs.lifecycle import Status, claim_job, record_placement, settle_job
from eagle3dash.store import Store, create_run, get_run, open_store
from eagle3dash.ui import tables
from tests.appkit import app, frames, no_exception, texts
from tests.job_kinds_for_tests import ALL_KINDS
from tests.jobkit import ROOT, wait_until

FAST = ServeSettings(poll_interval=0.02, heartbeat_interval=0.2, cancel_grace=1.0, slots=4)


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    s = open_store(tmp_path / "home")
    yield s
    s.close()


@pytest.fixture
def driver(ray_cluster, store) -> Iterator[None]:
    """A Ray backend serving the store from a thread of this process."""
    from eagle3dash.jobs.ray_backend import RayBackend

    stop = threading.Event()
    args = (RayBackend(), store.home, ALL_KINDS, FAST)
    t = threading.Thread(target=serve, args=args, kwargs={"stop_event": stop}, daemon=True)
    t.start()
    yield
    stop.set()
    t.join(30)


_NO_RAY = """
import sys
from eagle3dash import cli, job_kinds
from eagle3dash.jobs import backend, worker
from eagle3dash.ui import tables, progress
cli.main(["worker", "--once", "--home", sys.argv[1]])
print("ray" in sys.modules)
"""


def test_without_jobs_ray_nothing_imports_ray(tmp_path: Path) -> None:
    """The embedded default: the CLI, the job kinds, the worker and the pages' modules, a worker
    run to the end, and Ray was never imported."""
    out = subprocess.run(
        [sys.executable, "-c", _NO_RAY, str(tmp_path / "home")],
        env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT), "EAGLE3DASH_JOBS": "local"},
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    assert out.stdout.strip() == "False", out.stderr


def test_a_run_records_the_node_host_and_pid_it_ran_on(ray_cluster, store, driver) -> None:
    import ray

    run_id = create_run(store, None, None)
    job_id = submit_job(store, "test-echo", {"x": 2}, run_id=run_id)
    job = wait_for_job(store, job_id, timeout=60)
    assert job["status"] == "succeeded", job["error"]
    where = job["placement"]
    nodes = {n["NodeID"] for n in ray.nodes() if n["Alive"]}
    assert where["node"] in nodes and where["host"] == socket.gethostname()
    assert (where["gpu"], where["pid"]) == ([], job["result"]["pid"])  # the task's own process
    assert job["child_pid"] == job["result"]["pid"]
    shown = tables.runs_frame(read_runs(store).runs)["ran on"].tolist()
    assert shown == [f"{socket.gethostname()} · node {where['node'][:8]} · CPU"]


def test_the_run_page_and_runs_table_say_where_a_run_ran(home) -> None:
    """A run whose job ran on a GPU node of a cluster (recorded as the Ray backend records it),
    and one the local worker ran (no placement: a dash, no caption)."""
    placed, local = create_run(home, None, None), create_run(home, None, None)
    for run_id in (placed, local):
        submit_job(home, "diagnose", {}, run_id=run_id)
        job = claim_job(home, 1)
        if run_id == placed:
            where = {"node": "8f3a9c0d11223344", "host": "gpubox-3", "gpu": ["0", "1"], "pid": 7}
            record_placement(home, job["id"], where)
        settle_job(home, job["id"], Status.FAILED, error="stopped for the test")
    at = app("run", run=str(placed))
    no_exception(at)
    assert "Ran on gpubox-3 · node 8f3a9c0d · GPU 0, 1 (Ray)" in texts(at, "caption")
    assert "Ran on" not in texts(app("run", run=str(local)), "caption")
    runs = app("runs")
    no_exception(runs)
    table = next(f for f in frames(runs) if "ran on" in f.columns)
    assert dict(zip(table["run"], table["ran on"], strict=True)) == {
        placed: "gpubox-3 · node 8f3a9c0d · GPU 0, 1",
        local: "—",
    }


def test_an_input_the_node_cannot_read_fails_naming_node_and_path(
    ray_cluster, store, driver
) -> None:
    run_id = create_run(store, None, None)
    job_id = submit_job(store, "test-echo", {"checkpoint": "/nowhere/draft"}, run_id=run_id)
    job = wait_for_job(store, job_id, timeout=60)
    node = job["placement"]["node"][:12]
    line = f"not readable on node {socket.gethostname()} ({node}): /nowhere/draft"
    assert (job["status"], job["error"], get_run(store, run_id)["error"]) == ("failed", line, line)
    assert "echo" not in (job["result"] or {})  # the job's function never ran


def test_a_node_removed_mid_job_fails_the_run_with_rays_reason(ray_cluster, store, driver) -> None:
    doomed = ray_cluster.add_node(num_cpus=1, resources={"doomed": 1}, object_store_memory=80 << 20)
    ray_cluster.wait_for_nodes()
    run_id = create_run(store, None, None)
    params = {"steps": 5000, "dt": 0.02, "ray_resources": {"doomed": 1}}
    job_id = submit_job(store, "test-sleepy", params, run_id=run_id)
    wait_until(lambda: job_status(store, job_id)["progress"] > 0, 60, "the job on the doomed node")
    ray_cluster.remove_node(doomed)
    job = wait_for_job(store, job_id, timeout=120)
    first = job["error"].splitlines()[0]
    assert job["status"] == "failed" and job["placement"]["node"] == doomed.node_id
    died = "Ray: its node died (Task failed because the node it was running on is dead"
    assert first.startswith(died) and doomed.node_id in first, job["error"]
    run = get_run(store, run_id)
    assert (run["status"], run["error"].splitlines()[0]) == ("failed", first)


def test_a_task_checks_its_inputs_not_the_home(tmp_path: Path) -> None:
    """Every input path is checked on the node (a diagnosis's options too); the home is not an
    input: without it, a run's serving capture is not kept, and the log line says so."""
    from eagle3dash.jobs.ray_backend import unreadable_paths, without_home

    draft = tmp_path / "draft"
    draft.mkdir()
    assert unreadable_paths({"run_id": 3, "checkpoint": str(draft)}) == []
    options = {"draft": "/gone/draft", "target": str(draft), "prompts": "chat"}  # a diagnosis's
    assert unreadable_paths({"options": options}) == ["/gone/draft"]
    run = {"run_id": 3, "options": {"draft": str(draft), "capture_dir": "/nowhere/home/captures/3"}}
    assert without_home(run, str(tmp_path)) == (run, None)  # the home is here: kept
    got, line = without_home(run, "/nowhere/home")
    assert got == {"run_id": 3, "options": {"draft": str(draft), "capture_dir": None}}
    assert line == (
        "the serving capture is not kept in /nowhere/home/captures/3: the home /nowhere/home is "
        "not on this node"
    )


# The node's Python cannot open any SQLite database, as a node that cannot reach the store.
_NO_SQLITE = """
import sqlite3

def _unreachable(*args, **kwargs):
    raise sqlite3.OperationalError("unable to open database file (no store on this node)")

sqlite3.connect = _unreachable
"""


def test_a_diagnosis_on_a_node_without_the_store_is_recorded_by_the_driver(
    ray_cluster, store, tmp_path
) -> None:
    """A node whose processes cannot open the store runs a demo diagnosis: the driver records it
    onto the run (the diagnosis, its findings, the run's summary columns), and the job's result
    points at it."""
    from eagle3dash.demo import deployments
    from eagle3dash.demo.serve import demo_options, serve_deployment
    from eagle3dash.job_kinds import JOB_KINDS
    from eagle3dash.jobs.ray_backend import RayBackend
    from eagle3dash.store import get_findings, to_json
    from eagle3dash.submit import submit_diagnosis

    site = tmp_path / "no-sqlite"
    site.mkdir()
    (site / "sitecustomize.py").write_text(_NO_SQLITE)
    node = ray_cluster.add_node(
        num_cpus=1,
        resources={"no_store": 1},
        object_store_memory=80 << 20,
        env_vars={"PYTHONPATH": f"{site}{os.pathsep}{ROOT}"},
    )
    ray_cluster.wait_for_nodes()
    stop = threading.Event()
    args = (RayBackend(), store.home, {**ALL_KINDS, **JOB_KINDS}, FAST)
    t = threading.Thread(target=serve, args=args, kwargs={"stop_event": stop}, daemon=True)
    plan = deployments()["correct"]
    try:
        with serve_deployment(plan) as server:
            options = demo_options(plan.draft_path, server.url, None, 2, 8)
            run_id = submit_diagnosis(store, None, options)
            (job,) = list_jobs(store, run_id)
            on_the_node = {**job["params"], "ray_resources": {"no_store": 1}}
            store.db.execute(
                "UPDATE jobs SET params_json = ? WHERE id = ?", (to_json(on_the_node), job["id"])
            )
            opens = {"home": str(store.home), "ray_resources": {"no_store": 1}}
            probe_id = submit_job(store, "test-opens-store", opens)
            t.start()
            refused = wait_for_job(store, probe_id, timeout=120)
            done = wait_for_job(store, job["id"], timeout=600)
    finally:
        stop.set()
        t.join(30)
        ray_cluster.remove_node(node)
    # the node really cannot open the store: today's job that recorded from the node failed here
    assert refused["status"] == "failed" and refused["placement"]["node"] == node.node_id
    assert "no store on this node" in refused["error"], refused["error"]
    assert done["status"] == "succeeded", done["error"]
    assert done["placement"]["node"] == node.node_id
    run = get_run(store, run_id)
    assert run["status"] == "succeeded" and run["diagnosis"]["options"]["draft"] == str(
        plan.draft_path
    )
    found = get_findings(store, run_id)
    assert done["result"] == {"run_id": run_id, "findings": len(run["diagnosis"]["findings"])}
    assert len(found) == len(run["diagnosis"]["findings"]) > 0
    assert run["measured_accept_length"] == run["diagnosis"]["verdict"]["measured_accept_length"]
    assert run["measured_accept_length"] > 1.0  # the correct deployment's draft is accepted
    assert (store.home / "captures" / str(run_id)).is_dir()  # the home is here: capture kept


@pytest.mark.parametrize("retries", [0, 1])
def test_a_crashed_worker_fails_the_job_unless_it_may_retry_once(
    ray_cluster, store, driver, tmp_path, retries
) -> None:
    params = {"marker": str(tmp_path / "died"), "ray_retries": retries}
    job = wait_for_job(store, submit_job(store, "test-dies-once", params), timeout=120)
    if retries:
        assert (job["status"], job["result"]) == ("succeeded", {"second": True}), job["error"]
    else:
        assert job["status"] == "failed"
        assert job["error"].startswith("Ray: its Ray worker crashed ("), job["error"]


def test_an_upload_too_large_to_ship_is_refused_with_its_size(ray_cluster, store) -> None:
    from eagle3dash.jobs.ray_backend import RayBackend

    upload = store.home / "checkpoints" / "ab12" / "model.safetensors"
    upload.parent.mkdir(parents=True)
    with open(upload, "wb") as f:
        f.truncate(3 << 19)  # 1.5 MiB
    run_id = create_run(store, None, None)
    job_id = submit_job(store, "test-echo", {"checkpoint": str(upload.parent)}, run_id=run_id)
    stop = threading.Event()
    args = (RayBackend(ship_limit=1 << 20), store.home, ALL_KINDS, FAST)
    t = threading.Thread(target=serve, args=args, kwargs={"stop_event": stop}, daemon=True)
    t.start()
    try:
        job = wait_for_job(store, job_id, timeout=60)
    finally:
        stop.set()
        t.join(30)
    line = (
        f"the uploaded checkpoint {upload.parent} is 1.5 MiB, over the 1.0 MiB shipped through "
        "Ray's object store; register it by a path every node can read"
    )
    assert (job["status"], job["error"], get_run(store, run_id)["error"]) == ("failed", line, line)


def test_a_node_without_the_home_unpacks_the_shipped_upload(ray_cluster, tmp_path) -> None:
    """What a task does on a node that cannot read the home: the shipped files are written to a
    folder of its own and the params (a diagnosis's options too) point there; a path the node
    can read is left alone."""
    import ray

    from eagle3dash.jobs.ray_backend import _receive

    files = {"config.json": b'{"a": 1}', "sub/model.safetensors": b"weights"}
    gone = "/nowhere/home/checkpoints/ab12"
    here = str(tmp_path)
    params = {"run_id": 1, "options": {"draft": gone, "target": here}, "checkpoint": gone}
    got = _receive({gone: ray.put(files), here: ray.put({})}, params)
    copy = Path(got["checkpoint"])
    assert got["options"] == {"draft": str(copy), "target": here} and got["run_id"] == 1
    assert copy != Path(gone) and copy.name == "0-ab12"
    assert (copy / "config.json").read_bytes() == b'{"a": 1}'
    assert (copy / "sub" / "model.safetensors").read_bytes() == b"weights"
