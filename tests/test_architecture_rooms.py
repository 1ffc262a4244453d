"""ARCHITECTURE.md's map names rooms that exist, a run's status is changed in one room only, only
the serving-engine adapters import an engine's HTTP client, and no test module imports another."""

from __future__ import annotations

import ast
import re

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


# The serving-engine seam's adapters (ARCHITECTURE.md, "The serving-engine seam"): the only
# modules that may import an engine's HTTP client class.
ENGINE_CLIENTS = {"eagle3dash.sglang": "SGLangClient", "eagle3dash.vllm": "VLLMClient"}
ADAPTER_ROOMS = {
    "eagle3dash/sglang.py",
    "eagle3dash/sglang_engine.py",
    "eagle3dash/capture/from_sglang.py",
    "eagle3dash/vllm.py",
    "eagle3dash/vllm_engine.py",
    "eagle3dash/capture/from_vllm.py",
}


def _absolute(node: ast.ImportFrom, module: str) -> str:
    """The dotted name an import-from in `module` names, a relative one resolved."""
    if not node.level:
        return node.module or ""
    package = module.split(".")[: -node.level]
    return ".".join([*package, *([node.module] if node.module else [])])


def client_imports(source: str, module: str) -> list[str]:
    """Each engine client class that `module`'s source imports ('eagle3dash.sglang.SGLangClient'):
    by name, by `*`, or with its whole module (`import eagle3dash.sglang`, `from eagle3dash import
    sglang`), under TYPE_CHECKING or inside a function too."""
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


def test_only_the_engine_adapters_import_an_engine_client() -> None:
    modules = {str(p.relative_to(ROOT)): p for p in ROOT.glob("eagle3dash/**/*.py")}
    importers = {
        name: client_imports(path.read_text(), name.removesuffix(".py").replace("/", "."))
        for name, path in modules.items()
        if name not in ADAPTER_ROOMS
    }
    assert {name: found for name, found in importers.items() if found} == {}
    assert sorted(ADAPTER_ROOMS - modules.keys()) == []
    # ARCHITECTURE.md's seam section names the same rooms
    seam = (ROOT / "ARCHITECTURE.md").read_text().split("## The serving-engine seam", 1)[1]
    named = set(re.findall(r"`(eagle3dash/[\w/]+\.py)`", seam.split("\n## ", 1)[0]))
    assert named == ADAPTER_ROOMS


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        ("from eagle3dash.sglang import SGLangClient", ["eagle3dash.sglang.SGLangClient"]),
        ("from eagle3dash.vllm import VLLMClient as C", ["eagle3dash.vllm.VLLMClient"]),
        ("from eagle3dash import sglang", ["eagle3dash.sglang.SGLangClient"]),
        ("import eagle3dash.vllm", ["eagle3dash.vllm.VLLMClient"]),
        ("from ..sglang import SGLangClient", ["eagle3dash.sglang.SGLangClient"]),
        ("from .. import vllm", ["eagle3dash.vllm.VLLMClient"]),
        ("from eagle3dash.sglang import *", ["eagle3dash.sglang.SGLangClient"]),
        ("from eagle3dash.sglang import parse_generate", []),
        ("from eagle3dash.vllm import VLLMSettings, acceptance_between", []),
        ("from eagle3dash.vllm_engine import VLLMEngine", []),
        ("from eagle3dash.sglang_rules import target_arch", []),
        ("from .sglang import SGLangClient", []),  # eagle3dash.demo.sglang: another module
    ],
)
def test_the_client_check_sees_every_form_of_import(line: str, expected: list[str]) -> None:
    """Each way a module can reach the SGLang or vLLM client is caught, inside a function too;
    other names from those modules are not."""
    source = f"def later():\n    {line}\n"
    assert client_imports(source, "eagle3dash.demo.build") == expected
