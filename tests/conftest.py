"""Shared test set-up: one torch thread (2-core machines thrash with more), and the one test world
built once per run: the tiny target and its drafts, the SGLang API doubles serving them, the
session's Chromium (tests/browserkit.py), the Ray cluster and the real vLLM servers; and the
bad-input tests' `draft` and `place`."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
import torch

if TYPE_CHECKING:
    from eagle3dash.testing.sglang_double import RunningDouble
    from eagle3dash.testing.sglang_double_engine import DoubleConfig


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


@pytest.fixture(scope="module")
def draft(tmp_path_factory) -> Path:
    """A good tiny draft (config.json + model.safetensors) that the bad-input tests break copies
    of (tests/badinputkit.py SPEC)."""
    from eagle3dash.checkpoint import save
    from eagle3dash.testing.tensors import random_tensors
    from tests.badinputkit import SPEC

    return save(
        SPEC, random_tensors(SPEC, seed=0), tmp_path_factory.mktemp("bad") / "d", "specforge"
    )


@pytest.fixture
def place(tmp_path, monkeypatch) -> Iterator[Path]:
    """A bad-input case's folder, also the working directory and the home: afterwards nothing new
    may exist in it outside the home (the case's own inputs are made before the snapshot)."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("EAGLE3DASH_HOME", str(tmp_path / "home"))
    yield tmp_path


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


# --- the one test world: built by the first test that asks, shared by the rest -----------------


@pytest.fixture(scope="session")
def served_models(tmp_path_factory) -> dict[str, Path]:
    """The tiny 4-layer target and its SpecForge drafts, built once per run: "draft" (random
    weights, config ids [0, 1, 2]: SGLang's Llama +1 rule serves layers 1, 2, 3), "fixed" (the
    same weights, ids [-1, 0, 1]) and "other" (other weights, ids [0, 1, 2]). Tests only read
    them (a test that edits a draft edits its own copy)."""
    from eagle3dash.checkpoint import save
    from eagle3dash.testing.tensors import random_tensors
    from tests.specs import served_draft_spec, tiny_models

    root = tmp_path_factory.mktemp("world")
    models = tiny_models(root)
    weights = random_tensors(served_draft_spec(), seed=1)  # tiny_models' draft's
    fixed = save(served_draft_spec((-1, 0, 1)), weights, root / "fixed", "specforge")
    other_weights = random_tensors(served_draft_spec(), seed=7)
    other = save(served_draft_spec(), other_weights, root / "epoch-7", "specforge")
    return {**models, "fixed": fixed, "other": other}


def _serving(config: DoubleConfig) -> Iterator[RunningDouble]:
    from eagle3dash.testing.sglang_double import start_double

    double = start_double(config)
    try:
        yield double
    finally:
        double.stop()


@pytest.fixture(scope="session")
def eagle3_double(served_models) -> Iterator[RunningDouble]:
    """The SGLang API double serving the draft over the target (tests/appkit.py's
    speculative_double: EAGLE3, 3 chain steps, hidden states returned)."""
    from tests.appkit import speculative_config

    yield from _serving(speculative_config(served_models["target"], served_models["draft"]))


@pytest.fixture(scope="session")
def fixed_double(served_models) -> Iterator[RunningDouble]:
    """eagle3_double's configuration serving the fixed draft (ids [-1, 0, 1])."""
    from tests.appkit import speculative_config

    yield from _serving(speculative_config(served_models["target"], served_models["fixed"]))


@pytest.fixture(scope="session")
def hidden_states_off_double(served_models) -> Iterator[RunningDouble]:
    """The double serving the draft over the target WITHOUT hidden states (EAGLE3, 3 steps)."""
    from eagle3dash.testing.sglang_double_engine import DoubleConfig

    config = DoubleConfig(
        target_path=str(served_models["target"]),
        draft_path=str(served_models["draft"]),
        speculative_algorithm="EAGLE3",
        num_steps=3,
        num_draft_tokens=4,
    )
    yield from _serving(config)


@pytest.fixture(scope="session")
def seeded_demo(tmp_path_factory) -> tuple[Path, list]:
    """(the home, its DemoRuns) of the demo seeded once per run as `demo seed --worker` seeds it,
    with 2 prompts of 32 new tokens: the mismatched, correct and fixed deployments' runs,
    finished. Tests only read that home (one that adds runs copies it first)."""
    from eagle3dash.demo.seed import seed

    home = tmp_path_factory.mktemp("seeded-demo")
    return home, seed(home, num_prompts=2, max_new_tokens=32, worker=True)


@pytest.fixture(scope="session")
def real_vllm(tmp_path_factory) -> Iterator[dict]:
    """The real-engine lane's four real vLLM servers of the demo (tests/vllmkit.py LANE: plain,
    draft A, draft B as shipped, draft B fixed), started at once by the first test that asks and
    stopped at the session's end; the test skips, saying why, where vLLM's venv is not installed
    (`make vllm`). {"home": the folder of their logs and the fixed draft, "servers": {name:
    RealVLLM}}."""
    from tests.vllmkit import skip_without_vllm, start_lane

    skip_without_vllm()
    home = tmp_path_factory.mktemp("real-vllm")
    servers = start_lane(home)
    try:
        yield {"home": home, "servers": servers}
    finally:
        for server in servers.values():
            server.stop()


@pytest.fixture(scope="session")
def speculators_run(tmp_path_factory) -> dict:
    """The trainers lane's speculators 0.9.0 run, trained once per test run on this CPU
    (tests/trainerlane/speculators.py); skips, saying why, without `.venv-speculators`."""
    from tests.trainerlane.speculators import train

    return train(tmp_path_factory.mktemp("speculators-run"))


@pytest.fixture(scope="session")
def specforge_run(tmp_path_factory) -> dict:
    """The trainers lane's SpecForge 0.2.0 runs, trained once per test run on this CPU
    (tests/trainerlane/specforge.py); skips, saying why, without `.venv-specforge`."""
    from tests.trainerlane.specforge import train

    return train(tmp_path_factory.mktemp("specforge-run"))


@pytest.fixture(scope="session")
def nemo_run(tmp_path_factory) -> dict:
    """The trainers lane's NeMo AutoModel 0.7.0 run, trained once per test run on this CPU
    (tests/trainerlane/nemo_automodel.py); skips, saying why, without `.venv-nemo-automodel`."""
    from tests.trainerlane.nemo_automodel import train

    return train(tmp_path_factory.mktemp("nemo-run"))


@pytest.fixture(scope="module")
def app_world(tmp_path_factory, served_models, eagle3_double, fixed_double):
    """The world's models and its two doubles (the draft's and the fixed draft's), and a fresh
    home with the real worker and the real app serving it (subprocesses, logs in the tmp dir);
    each module that asks gets its own home."""
    from eagle3dash import store as db
    from tests.browserkit import serving_app

    root = tmp_path_factory.mktemp("app-world")
    home = root / "home"
    store = db.open_store(home)
    try:
        with serving_app(home, root, worker=True) as served:
            yield {
                "url": served.url,
                "home": home,
                "store": store,
                "target": served_models["target"],
                "draft": served_models["draft"],
                "fixed": served_models["fixed"],
                "double": eagle3_double.url,
                "fixed_double": fixed_double.url,
                "served": served,
                "runs": {},
            }
    finally:
        store.close()


@pytest.fixture
def logs_on_failure(app_world):
    """The app world's app and worker logs, printed at teardown: pytest shows them when a test
    fails."""
    yield
    app_world["served"].print_logs()


@pytest.fixture
def browser():
    """The session's one headless Chromium (tests/browserkit.py): launched by the first test that
    asks, closed after the last of a row of tests that ask; the test skips without Debian's
    chromium (outside CI)."""
    from tests.browserkit import shared_browser, skip_without_chromium

    skip_without_chromium()
    return shared_browser()


def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None) -> None:
    """Close the session's Chromium when the next test does not use it: while it is open,
    Playwright's event loop is this thread's running loop (asyncio.run would refuse to start)."""
    if nextitem is None or "browser" not in getattr(nextitem, "fixturenames", ()):
        kit = sys.modules.get("tests.browserkit")
        if kit is not None:
            kit.close_shared_browser()


# The session worlds too heavy to build twice, and the modules that use each: under `make test`
# (two pytest-xdist workers) a worker runs a whole module (its module fixtures built once), and
# the modules of one world run on the same worker. A module that starts using one joins its list
# (collection says so).
WORLD_MODULES = {
    "seeded_demo": (
        "tests/test_browser_pages.py",
        "tests/test_browser_verdict.py",
        "tests/test_demo.py",
        "tests/test_sweep_demo.py",
    ),
    "ray_cluster": (
        "tests/test_backend_conformance.py",
        "tests/test_ray_backend.py",
        "tests/test_sweep.py",
    ),
    "real_vllm": ("tests/test_real_vllm.py", "tests/test_real_vllm_claims.py"),
    "nemo_run": ("tests/test_trainer_nemo.py", "tests/test_real_vllm_nemo.py"),
}


def _scope_of(nodeid: str) -> str:
    module = nodeid.split("::", 1)[0]
    return next((w for w, mods in WORLD_MODULES.items() if module in mods), module)


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: object) -> object:
    """xdist's scheduler by scope, the scope of a test being its module or its module's world.
    (Not `--dist loadgroup`: with pytest 9 xdist 3.8 no longer reads the groups it marks.)"""
    from xdist.scheduler import LoadScopeScheduling

    class ByModuleAndWorld(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return _scope_of(nodeid)

        def _assign_work_unit(self, node: object) -> None:
            # the heavy worlds first: the longest work, which last would leave a worker idle
            for scope in [scope for scope in self.workqueue if scope in WORLD_MODULES]:
                self.workqueue.move_to_end(scope, last=False)
            super()._assign_work_unit(node)

    return ByModuleAndWorld(config, log)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Refuse a run where a module uses a heavy world without being listed in WORLD_MODULES."""
    for item in items:
        module = item.nodeid.split("::", 1)[0]
        for world, modules in WORLD_MODULES.items():
            if world in item.fixturenames and module not in modules:
                raise pytest.UsageError(
                    f"{module} uses the {world} fixture: add it to WORLD_MODULES in "
                    "tests/conftest.py, so that make test's workers build that world once"
                )


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """Say which real vLLM the real-engine lane ran and which CPU kernels it loaded (its test
    records them as a "real_vllm" property, which reaches this process from any xdist worker)."""
    said = {
        str(value)
        for reports in terminalreporter.stats.values()
        for report in reports
        for name, value in getattr(report, "user_properties", ())
        if name == "real_vllm"
    }
    for line in sorted(said):
        terminalreporter.write_line(line)
