"""No two modules of the kiln package import each other, through any chain.

An import cycle works until someone imports the modules in the other order, and then a name is
missing half-way through a module's start. Every import statement counts, those inside functions
and ``TYPE_CHECKING`` blocks too (a lazy import is still a module that needs the other), and
importing ``kiln.torch.x`` from outside ``kiln.torch`` counts as importing ``kiln.torch`` too,
since Python runs the package's ``__init__`` first. Where two modules need each other, a leaf
module or a protocol takes what they share (``kiln._torch_results``)."""

from __future__ import annotations

import ast
from pathlib import Path

import kiln

PACKAGE = Path(kiln.__file__).parent


def module_name(path: Path) -> str:
    parts = ("kiln", *path.relative_to(PACKAGE).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports() -> dict[str, set[str]]:
    """Each module of the package, with the modules of the package it imports."""
    graph: dict[str, set[str]] = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        if "_proto" in path.parts:
            continue
        name = module_name(path)
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        found: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text())):
            targets: list[str] = []
            if isinstance(node, ast.ImportFrom):
                base = package.split(".")
                if node.level > 1:
                    base = base[: -(node.level - 1)]
                root = ".".join(base) if node.level else ""
                module = ".".join(p for p in (root, node.module or "") if p)
                targets = [module] + [f"{module}.{a.name}" for a in node.names]
            elif isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            for target in targets:
                parts = target.split(".")
                # The module, and each package above it that the importer is not already inside.
                for i in range(2, len(parts) + 1):
                    candidate = ".".join(parts[:i])
                    if not name.startswith(candidate + ".") and candidate != name:
                        found.add(candidate)
        graph[name] = found
    return {m: {t for t in targets if t in graph} for m, targets in graph.items()}


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The cycles of ``graph``, one per strongly connected group of two or more modules."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                group.append(w)
                if w == v:
                    break
            if len(group) > 1:
                found.append(sorted(group))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_the_package_has_no_import_cycle() -> None:
    assert cycles(imports()) == []


def test_the_check_finds_a_cycle() -> None:
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
