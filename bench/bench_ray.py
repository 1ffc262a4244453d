"""The Ray backend's cost and reach: `python bench/bench_ray.py`.

1. A checkpoint sweep (8 checkpoints: the demo's draft B noised, over one serving capture of the
   demo target) on a local Ray cluster of 1 node vs 2 nodes (one CPU each): wall time from submit
   to the last result, median of `--repeats`; the ratio 1-node / 2-node. On a 2-core machine the
   point is that the evaluations overlap across nodes, not the speed.
2. One demo diagnosis (the "correct" deployment on the SGLang API double) run by the local worker
   vs by the Ray backend on a local cluster already up: wall time from submit to settled, median
   of `--repeats`; the ratio Ray / local (goal <= 1.2).

The clusters use their own temp folder (a short mkdtemp) and GCS port.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
GCS_PORT = 8690
NOISE = (0.0, 0.2, 0.3, 0.4, 0.5, 0.65, 0.85, 1.2)


def build_sweep(root: Path) -> tuple[str, list[str]]:
    """The capture and 8 noised copies of draft B (as tests/test_sweep.py builds them)."""
    import torch

    from eagle3dash import checkpoint
    from eagle3dash.capture import capture_with_transformers, save_capture
    from eagle3dash.demo import FIXTURES
    from eagle3dash.demo.language import STREAMS, sequences
    from eagle3dash.layout import Tap

    seqs = sequences(STREAMS["eval"], 2)
    capture = capture_with_transformers(FIXTURES / "target", seqs, (Tap(1), Tap(2), Tap(3)))
    save_capture(capture, root / "capture")
    spec, tensors, _ = checkpoint.load(FIXTURES / "draft-b")
    g = torch.Generator().manual_seed(0)
    paths = []
    for i, sigma in enumerate(NOISE):
        noised = {
            k: (v + sigma * v.float().std() * torch.randn(v.shape, generator=g)).to(v.dtype)
            if v.is_floating_point() and v.ndim >= 2
            else v
            for k, v in tensors.items()
        }
        out = root / f"draft-step{(i + 1) * 100}"
        paths.append(str(checkpoint.save(spec, noised, out, spec.format)))
    return str(root / "capture"), paths


def drain(backend, home: Path, job_ids: list[int], slots: int) -> float:
    """Serve `home` with `backend` until these jobs finished; the wall time."""
    from eagle3dash.job_kinds import JOB_KINDS
    from eagle3dash.jobs import wait_for_job
    from eagle3dash.jobs.backend import ServeSettings, serve
    from eagle3dash.store import open_store

    stop = threading.Event()
    start = time.perf_counter()
    settings = ServeSettings(poll_interval=0.05, slots=slots)
    t = threading.Thread(
        target=serve, args=(backend, home, JOB_KINDS, settings), kwargs={"stop_event": stop}
    )
    t.start()
    store = open_store(home)
    try:
        for job_id in job_ids:
            job = wait_for_job(store, job_id, timeout=1800)
            assert job["status"] == "succeeded", job["error"]
        return time.perf_counter() - start
    finally:
        stop.set()
        t.join()
        store.close()


def start_cluster(nodes: int):
    """A local cluster of `nodes` one-CPU nodes, this process connected as its driver."""
    import ray
    from ray.cluster_utils import Cluster

    node = {"num_cpus": 1, "object_store_memory": 80 << 20}
    head = {**node, "gcs_server_port": GCS_PORT, "include_dashboard": False}
    cluster = Cluster(initialize_head=True, head_node_args=head)
    for _ in range(nodes - 1):
        cluster.add_node(**node)
    cluster.wait_for_nodes()
    ray.init(address=cluster.address, namespace="eagle3dash", log_to_driver=False)
    return cluster


def stop_cluster(cluster) -> None:
    import ray

    ray.shutdown()
    cluster.shutdown()


def sweep_times(nodes: int, capture: str, paths: list[str], repeats: int) -> tuple[list, int]:
    """Wall times of the sweep on a cluster of `nodes`, and how many nodes the last one used."""
    from eagle3dash.jobs.ray_backend import RayBackend
    from eagle3dash.store import open_store
    from eagle3dash.sweep import submit_sweep, sweep_checkpoints, sweep_results

    cluster = start_cluster(nodes)
    times, used = [], 0
    try:
        for _ in range(repeats):
            home = Path(tempfile.mkdtemp(prefix="sweep-home-"))
            store = open_store(home)
            sweep_id = submit_sweep(store, sweep_checkpoints(paths), capture)
            ids = [e.job_id for e in sweep_results(store, sweep_id)]
            times.append(drain(RayBackend(), home, ids, slots=8))
            used = len({e.placement["node"] for e in sweep_results(store, sweep_id)})
            store.close()
    finally:
        stop_cluster(cluster)
    return times, used


def diagnosis_times(repeats: int, num_prompts: int, max_new_tokens: int) -> tuple[list, list]:
    """Wall times of the demo's "correct" diagnosis: by the local worker (its jobs forked warm,
    as `python -m eagle3dash worker` runs them), by the Ray backend."""
    from eagle3dash.demo import deployments
    from eagle3dash.demo.serve import demo_options, serve_baseline, serve_deployment
    from eagle3dash.jobs import list_jobs
    from eagle3dash.jobs.ray_backend import RayBackend
    from eagle3dash.jobs.worker import LocalProcessBackend
    from eagle3dash.preloaded import HEAVY
    from eagle3dash.store import open_store
    from eagle3dash.submit import submit_diagnosis

    plan = deployments()["correct"]
    server, baseline = serve_deployment(plan), serve_baseline(plan)
    cluster = start_cluster(1)
    local, on_ray = [], []
    try:
        for _ in range(repeats):
            warm = LocalProcessBackend(preload=HEAVY)
            for backend, times in ((warm, local), (RayBackend(), on_ray)):
                home = Path(tempfile.mkdtemp(prefix="diag-home-"))
                store = open_store(home)
                options = demo_options(
                    plan.draft_path, server.url, baseline.url, num_prompts, max_new_tokens
                )
                run_id = submit_diagnosis(store, None, options)
                ids = [j["id"] for j in list_jobs(store, run_id)]
                store.close()
                os.environ["EAGLE3DASH_HOME"] = str(home)
                times.append(drain(backend, home, ids, slots=1))
    finally:
        stop_cluster(cluster)
        server.stop()
        baseline.stop()
    return local, on_ray


def main(argv: list[str] | None = None) -> int:
    """Print the sweep's 1- vs 2-node times and the Ray-over-local diagnosis ratio."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--num-prompts", type=int, default=8)
    parser.add_argument("--max-new-tokens", type=int, default=48)
    args = parser.parse_args(argv)
    os.environ["RAY_TMPDIR"] = tempfile.mkdtemp(prefix="e3d-ray-bench-")
    os.environ["PYTHONPATH"] = str(ROOT)
    capture, paths = build_sweep(Path(tempfile.mkdtemp(prefix="sweep-")))
    one, used_one = sweep_times(1, capture, paths, args.repeats)
    two, used_two = sweep_times(2, capture, paths, args.repeats)
    m1, m2 = statistics.median(one), statistics.median(two)
    print(f"sweep of 8 checkpoints, 1 node : {m1:6.1f} s median of {one} ({used_one} node used)")
    print(f"sweep of 8 checkpoints, 2 nodes: {m2:6.1f} s median of {two} ({used_two} nodes used)")
    print(f"ratio 1-node / 2-node: {m1 / m2:.2f}")
    local, on_ray = diagnosis_times(args.repeats, args.num_prompts, args.max_new_tokens)
    ml, mr = statistics.median(local), statistics.median(on_ray)
    print(f"demo diagnosis, local worker: {ml:6.1f} s median of {local}")
    print(f"demo diagnosis, Ray backend : {mr:6.1f} s median of {on_ray}")
    print(f"ratio Ray / local: {mr / ml:.2f} (goal <= 1.2)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
