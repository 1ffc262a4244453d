"""`pip install .` from a clean copy of the checkout gives a working `eagle3dash`: its --help, an
inspect of the demo's draft shipped inside the package, and `eagle3dash app` serving the
dashboard with its worker, all from a folder outside the checkout.

Installing torch and the rest anew would take minutes and gigabytes, and this machine reaches no
index, so the new venv sees the project's own venv through a .pth file and pip runs with
`--no-index`: pip's resolver still reads every declared dependency and must find each satisfied
by an installed distribution, or the install fails. What this proves: pyproject.toml builds, the
wheel holds the modules and the data the CLI and the dashboard read, the dependency ranges accept
the versions requirements.txt installs, and the console script works from anywhere. What it does
not prove: that an index serves those versions (torch 2.13.0's CPU wheel included), or that a
newer release inside a range still works.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import sysconfig
import tomllib
from pathlib import Path

from packaging.requirements import Requirement

from tests.browserkit import free_port, tail, wait_healthy

ROOT = Path(__file__).resolve().parent.parent
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())


def _pins() -> dict[str, str]:
    """requirements.txt's pins: name -> version."""
    pins = {}
    for line in (ROOT / "requirements.txt").read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            name, version = line.split("==")
            pins[name.lower()] = version
    return pins


def test_the_declared_ranges_hold_requirements_pins_and_torch_is_pinned() -> None:
    declared = [
        Requirement(text)
        for text in [
            *PYPROJECT["project"]["dependencies"],
            *(r for extra in PYPROJECT["project"]["optional-dependencies"].values() for r in extra),
        ]
    ]
    by_name = {r.name.lower(): r for r in declared}
    pins = _pins()
    assert sorted(pins.keys() - by_name.keys()) == []  # every pinned package is declared
    for name, version in pins.items():
        assert by_name[name].specifier.contains(version), (name, str(by_name[name].specifier))
    assert str(by_name["torch"].specifier) == "==2.13.0"
    assert set(PYPROJECT["project"]["optional-dependencies"]) == {"ray", "test"}
    assert PYPROJECT["project"]["scripts"] == {"eagle3dash": "eagle3dash.cli:main"}


def _clean_copy(to: Path) -> Path:
    """The checkout's files as a fresh clone of this working tree has them: tracked and new
    files, none that git ignores (no .venv, no home, no caches); links stay links."""
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=ROOT,
        capture_output=True,
        check=True,
    ).stdout.decode()
    for name in filter(None, listed.split("\0")):
        source, target = ROOT / name, to / name
        if not source.is_symlink() and not source.exists():  # deleted, not yet committed
            continue
        target.parent.mkdir(parents=True, exist_ok=True)
        if source.is_symlink():
            target.symlink_to(os.readlink(source))
        else:
            shutil.copy2(source, target)
    return to


def _run(command: list[str], cwd: Path, env: dict[str, str]) -> str:
    done = subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, f"{command} exited {done.returncode}:\n{done.stdout}{done.stderr}"
    return done.stdout


def test_pip_install_of_a_clean_copy_gives_a_working_eagle3dash(tmp_path) -> None:
    source = _clean_copy(tmp_path / "checkout")
    venv = tmp_path / "V"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=300)
    site = Path(
        _run(
            [
                str(venv / "bin" / "python"),
                "-c",
                "import sysconfig; print(sysconfig.get_paths()['purelib'])",
            ],
            tmp_path,
            dict(os.environ),
        ).strip()
    )
    (site / "project_env.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    # a folder outside the checkout: nothing may come from it but the installed package
    away = tmp_path / "elsewhere"
    away.mkdir()
    env = {
        **{k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "EAGLE3DASH_HOME")},
        "PIP_CONFIG_FILE": os.devnull,
        "PIP_DISABLE_PIP_VERSION_CHECK": "1",
        "PIP_NO_CACHE_DIR": "1",
        "OMP_NUM_THREADS": "1",
    }
    # Python 3.11's venv brings setuptools 65, older than pyproject's build requirement (no
    # bdist_wheel without `wheel`): drop it, so the build uses the project venv's, as pip's own
    # build isolation would install one that meets "setuptools>=70"
    _run([str(venv / "bin" / "pip"), "uninstall", "-y", "setuptools"], away, env)
    installed = _run(
        [str(venv / "bin" / "pip"), "install", "--no-index", "--no-build-isolation", str(source)],
        away,
        env,
    )
    assert "Successfully installed eagle3dash-0.1.0" in installed, installed
    eagle3dash = str(venv / "bin" / "eagle3dash")

    where = _run(
        [str(venv / "bin" / "python"), "-c", "import eagle3dash; print(eagle3dash.__file__)"],
        away,
        env,
    )
    assert Path(where.strip()).is_relative_to(site), where  # the installed copy, not the checkout

    helped = _run([eagle3dash, "--help"], away, env)
    assert helped.startswith("usage: eagle3dash")
    assert re.search(r"^    app +serve the dashboard", helped, re.M), helped
    assert re.search(r"^    sweep +rank a training run's checkpoints", helped, re.M), helped
    # the command the Sweep page names, `eagle3dash sweep RUN_FOLDER --run N`, exists
    swept = _run([eagle3dash, "sweep", "--help"], away, env)
    assert swept.startswith("usage: eagle3dash sweep") and "--run RUN" in swept, swept

    # the demo's draft A, shipped as package data: its config (eagle3dash/demo/build.py) gives
    # aux layer ids [0, 1, 2] in eagle_config, a 128-wide draft of a 128-wide target
    draft = site / "eagle3dash" / "demo" / "fixtures" / "draft-a"
    inspected = _run([eagle3dash, "inspect", str(draft)], away, env)
    assert inspected.startswith(f"{draft}  (specforge format, model.safetensors)"), inspected
    assert re.search(r"aux layer ids +\[0, 1, 2\] \(eagle_config\)", inspected), inspected
    assert re.search(r"hidden \(draft / target\) +128 / 128", inspected), inspected

    # the pages are found inside the package: the Runs page draws from the installed app.py
    # (AppTest reads the config of the folder it runs in, not the one beside its script: run in
    # the installed dashboard's, whose config says 127.0.0.1)
    dashboard = site / "eagle3dash" / "dashboard"
    env["EAGLE3DASH_HOME"] = str(tmp_path / "home")
    drawn = _run(
        [
            str(venv / "bin" / "python"),
            "-c",
            "import sys; from streamlit.testing.v1 import AppTest; "
            "at = AppTest.from_file(sys.argv[1], default_timeout=120).run(); "
            "assert not at.exception, [e.value for e in at.exception]; print(at.title[0].value)",
            str(dashboard / "app.py"),
        ],
        dashboard,
        env,
    )
    assert drawn.strip() == "Runs"
    # Streamlit reads the config shipped beside the script `eagle3dash app` serves: its upload
    # cap (8192 MB), not Streamlit's default 200
    read = _run(
        [
            str(venv / "bin" / "python"),
            "-c",
            "import sys; from streamlit import config; config._main_script_path = sys.argv[1]; "
            "config.get_config_options(force_reparse=True); "
            "print(config.get_option('server.maxUploadSize'))",
            str(dashboard / "serve.py"),
        ],
        away,
        env,
    )
    assert read.strip() == "8192"

    # `eagle3dash app`: the dashboard on the port asked, its worker beside it; both stopped
    # when it is stopped
    port = free_port()
    log = tmp_path / "app.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [eagle3dash, "app", "--no-demo", "--port", str(port)],
            cwd=away,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        wait_healthy(f"http://127.0.0.1:{port}", {"app": proc}, {"app": log})
        # its worker runs what is queued in its home: a sweep evaluation of a capture that is
        # not there, claimed and failed
        ran = _run([str(venv / "bin" / "python"), "-c", WORKER_RAN], away, env)
        assert ran.strip() == "failed", ran
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=60)
    assert proc.returncode == 143, tail(log)
    assert "worker stopped after 1 job(s)" in log.read_text(), tail(log)


WORKER_RAN = """
from eagle3dash import jobs, store
home = store.open_store()
job = jobs.submit_job(home, "sweep-eval", {"checkpoint": "none", "capture": "/nonexistent"})
print(jobs.wait_for_job(home, job, timeout=300)["status"])
"""


def test_make_run_is_eagle3dash_app_with_its_bind_and_jobs() -> None:
    """`make run` starts `eagle3dash app` (BIND and JOBS passed on), which starts what `make run`
    started before it: the worker (two slots here, the cluster's on Ray), the demo's seed and
    the app behind its gate on the bind address."""
    from eagle3dash.cli import build_parser
    from eagle3dash.dashboard.launch import AppSettings, commands

    # as from a shell: under `make test` a nested make would print "Entering/Leaving directory"
    outside_make = {
        k: v for k, v in os.environ.items() if k not in ("MAKEFLAGS", "MAKELEVEL", "MFLAGS")
    }

    def make_run_plan(*variables: str) -> list[str]:
        return subprocess.run(
            ["make", "-n", "run", *variables],
            cwd=ROOT,
            env=outside_make,
            capture_output=True,
            text=True,
            check=True,
        ).stdout.splitlines()

    planned = make_run_plan("BIND=0.0.0.0", "JOBS=ray")
    assert planned[-1] == ".venv/bin/python -m eagle3dash app --bind 0.0.0.0 --jobs ray"
    args = build_parser().parse_args(planned[-1].split()[3:])
    assert (args.bind, args.jobs, args.slots, args.no_demo) == ("0.0.0.0", "ray", None, False)
    # another port, as the README says (issue 42: the Makefile took none)
    on_port = make_run_plan("PORT=8600")
    assert on_port[-1] == ".venv/bin/python -m eagle3dash app --bind 127.0.0.1 --port 8600"
    assert build_parser().parse_args(on_port[-1].split()[3:]).port == 8600

    here = [sys.executable, "-m", "eagle3dash"]
    serve = str(ROOT / "eagle3dash" / "dashboard" / "serve.py")
    assert commands(AppSettings()) == {
        "worker": [*here, "worker", "--jobs", "local", "--slots", "2"],
        "demo seed": [*here, "demo", "seed"],
        "app": [sys.executable, "-m", "streamlit", "run", serve, "--server.address", "127.0.0.1"],
    }
    on_ray = commands(AppSettings(bind="0.0.0.0", port=9000, jobs="ray", demo=False))
    assert on_ray == {
        "worker": [*here, "worker", "--jobs", "ray"],
        "app": [sys.executable, "-m", "streamlit", "run", serve, "--server.address", "0.0.0.0"]
        + ["--server.port", "9000"],
    }


def test_the_apps_data_roots_and_home_reach_its_children(tmp_path, monkeypatch) -> None:
    from eagle3dash.dashboard.launch import AppSettings, environment

    monkeypatch.setenv("EAGLE3DASH_DATA_ROOTS", "/srv/models")
    env = environment(AppSettings(home=str(tmp_path / "h"), data_roots=(str(tmp_path / "d"),)))
    assert env["EAGLE3DASH_HOME"] == str(tmp_path / "h")
    assert env["EAGLE3DASH_DATA_ROOTS"] == f"/srv/models:{tmp_path / 'd'}"


def test_the_checkouts_top_level_dashboard_files_are_links_into_the_package() -> None:
    """app.py, views/, serve.py and .streamlit/ at the top of a checkout are the packaged
    dashboard's own: a move inside the package that leaves one dangling fails here."""
    dashboard = ROOT / "eagle3dash" / "dashboard"
    for name in ("app.py", "views", "serve.py", ".streamlit"):
        link = ROOT / name
        assert link.is_symlink(), name
        assert link.resolve() == dashboard.resolve() / name, name
