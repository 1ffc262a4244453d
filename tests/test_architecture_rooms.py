"""ARCHITECTURE.md's map names rooms that exist, a run's status is changed in one room only, only
the serving-engine adapters import an engine's HTTP client, the findings, the detective and the
profile ask the engine through its protocol, and no test module imports another."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

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
    folders = {p.name for p in (ROOT / "eagle3dash").rglob("*") if p.is_dir()}
    named_modules = set(re.findall(r"\b(\w+\.py)\b", the_map()))
    named_folders = set(re.findall(r"\b(\w+)/", the_map()))
    assert {"lifecycle.py", "backend.py", "worker.py", "store_faults.py"} <= named_modules
    assert sorted(named_modules - modules) == []
    assert sorted(named_folders - folders) == []


def test_only_the_lifecycle_room_writes_a_status() -> None:
    product = list(ROOT.glob("eagle3dash/**/*.py"))  # the dashboard's app.py and views/ too
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


# Each engine's room (ARCHITECTURE.md, "The serving engines"): only its own modules import its
# HTTP client class; everything else reaches a server through the seam's adapter.
ENGINE_CLIENTS = {
    "eagle3dash.engines.sglang.client": "SGLangClient",
    "eagle3dash.engines.vllm.client": "VLLMClient",
}
ENGINES = ROOT / "eagle3dash" / "engines"
SGLANG_CLIENT = "eagle3dash.engines.sglang.client.SGLangClient"


def _absolute(node: ast.ImportFrom, module: str) -> str:
    """The dotted name an import-from in `module` names, a relative one resolved."""
    if not node.level:
        return node.module or ""
    package = module.split(".")[: -node.level]
    return ".".join([*package, *([node.module] if node.module else [])])


def client_imports(source: str, module: str) -> list[str]:
    """Each engine client class that `module`'s source imports
    ('eagle3dash.engines.sglang.client.SGLangClient'): by name, by `*`, or with its whole module
    (`import eagle3dash.engines.vllm.client`, `from eagle3dash.engines.sglang import client`),
    under TYPE_CHECKING or inside a function too."""
    reached: list[str] = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom):
            base = _absolute(node, module)
            for alias in node.names:
                if alias.name in (ENGINE_CLIENTS.get(base), "*") and base in ENGINE_CLIENTS:
                    reached.append(base)
                elif f"{base}.{alias.name}" in ENGINE_CLIENTS:
                    reached.append(f"{base}.{alias.name}")
        elif isinstance(node, ast.Import):
            reached += [alias.name for alias in node.names if alias.name in ENGINE_CLIENTS]
    return [f"{name}.{ENGINE_CLIENTS[name]}" for name in reached]


def _module(path) -> str:
    return str(path.relative_to(ROOT)).removesuffix(".py").replace("/", ".")


def test_only_an_engines_own_room_imports_its_client() -> None:
    found = {}
    for path in ROOT.glob("eagle3dash/**/*.py"):
        module = _module(path)
        foreign = [
            name
            for name in client_imports(path.read_text(), module)
            if not module.startswith(name.rsplit(".", 2)[0] + ".")
        ]
        if foreign:
            found[module] = foreign
    assert found == {}
    assert {p.name for p in ENGINES.iterdir() if p.is_dir() and p.name != "__pycache__"} == {
        "sglang",
        "vllm",
    }


def _imports(path) -> set[str]:
    """Every eagle3dash module a file imports (from-imports resolved to their module)."""
    return _imports_in(path.read_text(), _module(path))


def _imports_in(source: str, module: str) -> set[str]:
    """Every eagle3dash name `module`'s source imports: each from-import's module (a relative
    one resolved) and that module dotted with each name, under TYPE_CHECKING or in a function
    too."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom):
            base = _absolute(node, module)
            names |= {base} | {f"{base}.{alias.name}" for alias in node.names}
        elif isinstance(node, ast.Import):
            names |= {alias.name for alias in node.names}
    return {n for n in names if n.startswith("eagle3dash")}


def test_the_capture_package_imports_no_engine() -> None:
    # capture/ is below the engines: an engine's capture builds on its format, never the reverse
    # (the circle capture -> from_sglang -> engine -> capture is gone).
    found = {
        _module(path): sorted(n for n in _imports(path) if n.startswith("eagle3dash.engines"))
        for path in (ROOT / "eagle3dash" / "capture").glob("*.py")
    }
    assert {module: names for module, names in found.items() if names} == {}


# One engine's room: what only the engines' own code and the dispatch (engines/rules.py) import.
ENGINE_ROOMS = ("eagle3dash.engines.sglang", "eagle3dash.engines.vllm")
# What asks the run's engine through engines/protocol.py's EngineRules (Evidence.rules(),
# engines.rules.rules_for), so that a third engine needs no branch in them.
ASK_THE_ENGINE = ("eagle3dash/findings/*.py", "eagle3dash/detective.py", "eagle3dash/profile.py")


def room_imports(source: str, module: str) -> list[str]:
    """The names under an engine's room that `module`'s source imports."""
    return sorted(
        name
        for name in _imports_in(source, module)
        if any(name == room or name.startswith(room + ".") for room in ENGINE_ROOMS)
    )


def test_findings_the_detective_and_the_profile_import_no_engines_room() -> None:
    paths = [path for pattern in ASK_THE_ENGINE for path in ROOT.glob(pattern)]
    assert len(paths) > 3  # findings/*.py found, beside the two modules
    found = {_module(path): room_imports(path.read_text(), _module(path)) for path in paths}
    assert {module: names for module, names in found.items() if names} == {}


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        (
            "from eagle3dash.engines.sglang.rules import find_fix",
            ["eagle3dash.engines.sglang.rules", "eagle3dash.engines.sglang.rules.find_fix"],
        ),
        (
            "from eagle3dash.engines.vllm import rules as vllm_rules",
            ["eagle3dash.engines.vllm", "eagle3dash.engines.vllm.rules"],
        ),
        ("from eagle3dash.engines import vllm", ["eagle3dash.engines.vllm"]),
        ("import eagle3dash.engines.sglang.rules", ["eagle3dash.engines.sglang.rules"]),
        (
            "from ..engines.sglang import rules",
            ["eagle3dash.engines.sglang", "eagle3dash.engines.sglang.rules"],
        ),
        ("from eagle3dash.engines.rules import rules_for", []),
        ("from eagle3dash.engines.protocol import TOP_LEVEL_KEY", []),
        ("from eagle3dash.engines import rules", []),
        ("from eagle3dash.engines.sglang_notes import facts", []),  # another module's prefix
    ],
)
def test_the_room_check_sees_every_form_of_import(line: str, expected: list[str]) -> None:
    """An engine room reached by name, by module, by package or relatively, inside a function
    too, is caught; the protocol and the dispatch are not."""
    source = f"def later():\n    {line}\n"
    assert room_imports(source, "eagle3dash.findings.core") == expected


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        (
            "from eagle3dash.engines.sglang.client import SGLangClient",
            ["eagle3dash.engines.sglang.client.SGLangClient"],
        ),
        (
            "from eagle3dash.engines.vllm.client import VLLMClient as C",
            ["eagle3dash.engines.vllm.client.VLLMClient"],
        ),
        (
            "from eagle3dash.engines.sglang import client",
            [SGLANG_CLIENT],
        ),
        ("import eagle3dash.engines.vllm.client", ["eagle3dash.engines.vllm.client.VLLMClient"]),
        ("from ..engines.sglang.client import SGLangClient", [SGLANG_CLIENT]),
        ("from ..engines.vllm import client", ["eagle3dash.engines.vllm.client.VLLMClient"]),
        ("from eagle3dash.engines.sglang.client import *", [SGLANG_CLIENT]),
        ("from eagle3dash.engines.sglang.client import parse_generate", []),
        ("from eagle3dash.engines.vllm.client import acceptance_between", []),
        ("from eagle3dash.engines.vllm.adapter import VLLMEngine", []),
        ("from eagle3dash.engines.sglang.rules import target_arch", []),
        ("from .sglang import SGLangClient", []),  # eagle3dash.demo.sglang: another module
    ],
)
def test_the_client_check_sees_every_form_of_import(line: str, expected: list[str]) -> None:
    """Each way a module can reach the SGLang or vLLM client is caught, inside a function too;
    other names from those modules are not."""
    source = f"def later():\n    {line}\n"
    assert client_imports(source, "eagle3dash.demo.build") == expected


def _package_modules() -> dict[str, Path]:
    """Every module of the package by its dotted name (a package by its own, not `__init__`)."""
    modules = {}
    for path in ROOT.glob("eagle3dash/**/*.py"):
        modules[_module(path).removesuffix(".__init__")] = path
    return modules


def import_graph() -> dict[str, set[str]]:
    """Which package modules each module imports (`from package import submodule` as that
    submodule), under TYPE_CHECKING or in a function too: a circle there is one to mypy and to
    the reader even where Python would get away with it."""
    modules = _package_modules()
    graph = {}
    for name, path in modules.items():
        source = path.read_text()
        package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
        reached = set()
        for node in ast.walk(ast.parse(source)):
            if isinstance(node, ast.ImportFrom):
                base = _absolute(node, f"{package}.__init__")
                for alias in node.names:
                    full = f"{base}.{alias.name}"
                    reached.add(full if full in modules else base)
            elif isinstance(node, ast.Import):
                reached |= {alias.name for alias in node.names}
        graph[name] = {m for m in reached if m in modules and m != name}
    return graph


def import_circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected groups of more than one module (Tarjan's algorithm)."""
    order: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    circles: list[list[str]] = []

    def visit(module: str) -> None:
        order[module] = low[module] = len(order)
        stack.append(module)
        for other in sorted(graph[module]):
            if other not in order:
                visit(other)
                low[module] = min(low[module], low[other])
            elif other in stack:
                low[module] = min(low[module], order[other])
        if low[module] == order[module]:
            group = []
            while (top := stack.pop()) != module:
                group.append(top)
            if group:
                circles.append(sorted([module, *group]))

    for module in sorted(graph):
        if module not in order:
            visit(module)
    return circles


def test_no_import_goes_round_a_circle() -> None:
    graph = import_graph()
    assert import_circles(graph) == []
    # The walk sees a TYPE_CHECKING import (protocol.py's ServingEngine).
    assert "eagle3dash.engines.serving" in graph["eagle3dash.engines.protocol"]


def test_the_circle_check_finds_a_circle() -> None:
    """Three modules that import round are one circle; a module importing into it is not in
    it, and a chain is no circle."""
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert import_circles(graph) == [["a", "b", "c"]]
    assert import_circles({"a": {"b"}, "b": set()}) == []
