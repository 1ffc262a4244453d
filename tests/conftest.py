"""Shared test set-up: one torch thread (2-core machines thrash with more)."""

from __future__ import annotations

import os

import pytest
import torch


@pytest.fixture(autouse=True, scope="session")
def one_torch_thread():
    """Every test runs torch on one thread: faster and steadier than two on a loaded 2-core box."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(autouse=True, scope="session")
def temp_data_roots(tmp_path_factory):
    """The app's path boxes accept paths under pytest's temp folders, where tests make their
    checkpoints (EAGLE3DASH_DATA_ROOTS; the app and worker subprocesses inherit it)."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("EAGLE3DASH_DATA_ROOTS", str(tmp_path_factory.getbasetemp()))
        yield


@pytest.fixture
def home(tmp_path, monkeypatch):
    """A fresh, empty home for the app (EAGLE3DASH_HOME points at it)."""
    from eagle3dash import store as db

    path = tmp_path / "home"
    monkeypatch.setenv("EAGLE3DASH_HOME", str(path))
    store = db.open_store(path)
    yield store
    store.close()


@pytest.fixture
def world_home(world, monkeypatch):
    """The requesting module's `world`, its home the app's (EAGLE3DASH_HOME)."""
    monkeypatch.setenv("EAGLE3DASH_HOME", str(world["home"]))
    return world


@pytest.fixture(scope="session")
def ray_cluster():
    """A two-node local Ray cluster, started once for the session by the first test that asks
    (only the Ray backend's tests import Ray), shut down at its end."""
    from tests.raykit import start_cluster

    with pytest.MonkeyPatch.context() as mp:
        for name in ("RAY_TMPDIR", "PYTHONPATH", "RAY_ADDRESS"):
            mp.setenv(name, os.environ.get(name, ""))  # restored when the session ends
        cluster = start_cluster()
        import ray

        ray.init(address=cluster.address, namespace="eagle3dash", log_to_driver=False)
        yield cluster
        ray.shutdown()
        cluster.shutdown()
