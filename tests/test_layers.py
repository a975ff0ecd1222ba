"""The layers run one way: a package imports only from the layers below it (or its own)."""

from __future__ import annotations

import ast
from pathlib import Path

import prmkit

LAYERS = [
    {"errors", "progress", "metrics", "__init__"},
    {"data"},
    {"grading"},
    {"models"},
    {"training", "scoring"},
    {"selection", "evaluation"},
    {"generation", "search", "rewards"},
    {"active"},
    {"labeling", "demo"},
    {"cli"},
]
# Same-layer packages that must not import each other.
SIBLINGS_APART = {("scoring", "training"), ("training", "scoring")}


def _level(package: str) -> int:
    for i, layer in enumerate(LAYERS):
        if package in layer:
            return i
    raise AssertionError(f"prmkit.{package} is in no layer of this test; add it")


def _imports(path: Path) -> set[str]:
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [node.module]
        elif isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        else:
            continue
        for name in names:
            parts = name.split(".")
            if parts[0] == "prmkit" and len(parts) > 1:
                found.add(parts[1])
    return found


def test_scoring_does_not_import_training_and_no_layer_imports_a_higher_one():
    root = Path(prmkit.__file__).parent
    wrong = []
    files = sorted(root.rglob("*.py"))
    assert len(files) > 50
    for f in files:
        rel = f.relative_to(root)
        package = rel.parts[0] if len(rel.parts) > 1 else rel.stem
        for imported in _imports(f) - {package}:
            if (_level(imported) > _level(package)
                    or (package, imported) in SIBLINGS_APART):
                wrong.append(f"{rel} imports prmkit.{imported}")
    assert not wrong, "\n".join(wrong)


def _modules() -> dict[str, Path]:
    """Every prmkit module by dotted name (a package by its __init__)."""
    root = Path(prmkit.__file__).parent
    found = {}
    for f in sorted(root.rglob("*.py")):
        parts = ("prmkit", *f.relative_to(root).with_suffix("").parts)
        found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = f
    return found


def _private(name: str) -> bool:
    return name.startswith("_") and not name.endswith("__")


def _arrows(name: str, path: Path, modules: dict[str, Path]) -> tuple[set[str], list[str]]:
    """The prmkit modules `name` imports (in functions too), and the private names it takes
    from other modules (imported, or read off an imported module)."""
    imported, private, bound = set(), [], {}
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            for a in node.names:
                if a.name.startswith("prmkit."):
                    imported.add(a.name)
                    if a.asname:
                        bound[a.asname] = a.name
        elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("prmkit"):
            assert node.level == 0, f"{path}: relative import"
            for a in node.names:
                sub = f"{node.module}.{a.name}"
                if sub in modules:
                    imported.add(sub)
                    bound[a.asname or a.name] = sub
                else:
                    imported.add(node.module)
                    if _private(a.name):
                        private.append(f"{name} imports {a.name} from {node.module}")
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name)
                and node.value.id in bound and _private(node.attr)):
            private.append(f"{name} reads {bound[node.value.id]}.{node.attr}")
    return imported & modules.keys() - {name}, private


def _graph() -> tuple[dict[str, set[str]], list[str]]:
    modules = _modules()
    graph, private = {}, []
    for name, path in modules.items():
        graph[name], found = _arrows(name, path, modules)
        private += found
    return graph, private


def _path(graph: dict[str, set[str]], start: str, goal: str) -> list[str] | None:
    """The import path start -> ... -> goal, if any (breadth first)."""
    came = {start: None}
    todo = [start]
    while todo:
        here = todo.pop(0)
        if here == goal:
            path = [here]
            while came[path[-1]] is not None:
                path.append(came[path[-1]])
            return path[::-1]
        for nxt in sorted(graph[here] - came.keys()):
            came[nxt] = here
            todo.append(nxt)
    return None


def test_no_module_imports_a_module_that_imports_it_back():
    graph, _ = _graph()
    assert len(graph) > 100
    circles = {}
    for name in graph:
        for imported in graph[name]:
            back = _path(graph, imported, name)
            if back is not None:
                circles.setdefault(frozenset(back), " -> ".join([name, *back]))
    assert not circles, "import circles:\n" + "\n".join(sorted(circles.values()))


def test_no_private_name_is_imported_from_another_module():
    _, private = _graph()
    assert not private, "\n".join(private)
