"""The package layout stays walkable: no import cycles, small modules, a short top level.

    .venv/bin/python -m pytest tests/test_structure.py

Imports are read from the source (every `import`, including those inside functions,
which run later but still tie two modules together), so nothing is executed.
"""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
PACKAGES = ("trainer", "tooling")
MAX_LINES = 300
MAX_TOP_LEVEL = 10


def _module_name(path: Path) -> str:
    parts = path.relative_to(REPO).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _modules() -> dict[str, Path]:
    found = {_module_name(p): p for pkg in PACKAGES for p in (REPO / pkg).rglob("*.py")}
    found["tasks"] = REPO / "tasks.py"
    return found


def _imports(path: Path, name: str, known: set[str]) -> set[str]:
    """The project modules `path` imports, resolving `from pkg import submodule` to the submodule."""
    is_package = path.name == "__init__.py"
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out.update(alias.name for alias in node.names if alias.name in known)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = name.split(".")[: len(name.split(".")) - node.level + (1 if is_package else 0)]
                base = ".".join(anchor + ([base] if base else []))
            for alias in node.names:
                target = f"{base}.{alias.name}"
                if target in known:
                    out.add(target)
                elif base in known:
                    out.add(base)
    out.discard(name)
    return out


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in graph.get(node, ()):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                top = stack.pop()
                on_stack.discard(top)
                component.append(top)
                if top == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def _graph() -> dict[str, set[str]]:
    modules = _modules()
    known = set(modules)
    return {name: _imports(path, name, known) for name, path in modules.items()}


def test_no_import_cycles() -> None:
    assert _cycles(_graph()) == []


def test_cycle_finder_sees_a_cycle() -> None:  # negative control for the test above
    graph = _graph()
    graph["trainer.errors"] = graph["trainer.errors"] | {"trainer.fit.loop"}
    assert any("trainer.errors" in c and "trainer.fit.loop" in c for c in _cycles(graph))


@pytest.mark.parametrize("name, path", sorted(_modules().items()))
def test_module_is_small(name: str, path: Path) -> None:
    lines = len(path.read_text().splitlines())
    assert lines <= MAX_LINES, f"{path.relative_to(REPO)} has {lines} lines (> {MAX_LINES}): probably two concepts"


def test_top_level_of_trainer_is_short() -> None:
    top = sorted(p.name for p in (REPO / "trainer").glob("*.py"))
    assert len(top) <= MAX_TOP_LEVEL, top
