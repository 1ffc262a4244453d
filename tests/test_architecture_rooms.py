"""ARCHITECTURE.md's map names rooms that exist, a run's status is changed in one room only, and no
test module imports another."""

from __future__ import annotations

import re

from tests.jobkit import ROOT

# A status written by SQL, or through `update_run` (its arguments may span lines).
STATUS_WRITES = re.compile(r"SET[^\"']*\bstatus\s*=|update_run\((?:[^()]|\([^()]*\))*\bstatus=")
LIFECYCLE = ROOT / "eagle3dash" / "jobs" / "lifecycle.py"


def the_map() -> str:
    """The code block under '## The rooms'."""
    text = (ROOT / "ARCHITECTURE.md").read_text()
    section = text.split("## The rooms", 1)[1]
    return section.split("```", 2)[1]


def test_the_map_names_rooms_that_exist() -> None:
    modules = {p.name for p in [*ROOT.glob("eagle3dash/**/*.py"), *ROOT.glob("*.py")]}
    folders = {p.name for p in (ROOT / "eagle3dash").rglob("*") if p.is_dir()} | {"views"}
    named_modules = set(re.findall(r"\b(\w+\.py)\b", the_map()))
    named_folders = set(re.findall(r"\b(\w+)/", the_map()))
    assert {"lifecycle.py", "backend.py", "worker.py", "store_faults.py"} <= named_modules
    assert sorted(named_modules - modules) == []
    assert sorted(named_folders - folders) == []


def test_only_the_lifecycle_room_writes_a_status() -> None:
    product = [*ROOT.glob("eagle3dash/**/*.py"), *ROOT.glob("views/*.py"), ROOT / "app.py"]
    writers = {
        str(path.relative_to(ROOT)): STATUS_WRITES.findall(path.read_text())
        for path in product
        if path != LIFECYCLE
    }
    assert {path: found for path, found in writers.items() if found} == {}


def test_no_test_module_imports_another() -> None:
    # What tests share lives in kits (tests/*kit.py, specs.py) and conftest.py; a test module
    # imported by another runs its module-level set-up twice and ties two suites together.
    imports = re.compile(
        r"^\s*(?:from tests\.test_\w+ import|from tests import test_|import tests\.test_)", re.M
    )
    found = sorted(p.name for p in (ROOT / "tests").glob("*.py") if imports.search(p.read_text()))
    assert found == []
