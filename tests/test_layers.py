"""The layers run one way: a package imports only from the layers below it (or its own)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import prmkit

# The intended order, bottom up: a package imports only from layers strictly below its own,
# so packages sharing a layer stay apart. Where the code is finer than the one-line order
# (data -> grading -> models -> training/scoring -> selection/evaluation ->
# generation/search/rewards -> active -> labeling, demo; cli on top), the layers follow the
# code: metrics imports errors, evaluation imports selection, search imports generation.
LAYERS = [
    {"__init__", "errors", "progress"},
    {"data", "metrics"},
    {"grading"},
    {"models"},
    {"training", "scoring"},
    {"selection"},
    {"evaluation"},
    {"generation", "rewards"},
    {"search"},
    {"active"},
    {"labeling", "demo"},
    {"cli"},
]
# How far down each package reaches: the highest layer (named by a package in it) it may
# import from, the lowest its imports allow. Its place in LAYERS says who may import it;
# its reach says what it may import. Where the reach sits far below the place, the code
# uses less than the intended order allows (labeling uses only data, selection only grading).
REACHES = {
    "data": "errors", "metrics": "errors", "grading": "errors",
    "models": "data",
    "training": "models", "scoring": "models",
    "selection": "grading",
    "evaluation": "selection",
    "generation": "scoring", "rewards": "scoring",
    "search": "generation",
    "active": "generation",
    "labeling": "data",
    "demo": "active",
    "cli": "demo",
}


def _level(package: str) -> int:
    for i, layer in enumerate(LAYERS):
        if package in layer:
            return i
    raise AssertionError(f"prmkit.{package} is in no layer of this test; add it")


def _reach(package: str) -> int:
    return _level(REACHES[package]) if package in REACHES else _level(package) - 1


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


def _package_graph() -> dict[str, dict[str, str]]:
    """{package: {imported package: the first file of package that imports it}}."""
    root = Path(prmkit.__file__).parent
    files = sorted(root.rglob("*.py"))
    assert len(files) > 50
    graph: dict[str, dict[str, str]] = {}
    for f in files:
        rel = f.relative_to(root)
        package = rel.parts[0] if len(rel.parts) > 1 else rel.stem
        edges = graph.setdefault(package, {})
        for imported in sorted(_imports(f) - {package}):
            edges.setdefault(imported, str(rel))
    return graph


def _wrong_imports(graph: dict[str, dict[str, str]]) -> list[str]:
    """Imports of a layer not strictly below the importer's, or above its reach."""
    wrong = []
    for package, edges in sorted(graph.items()):
        for imported, where in sorted(edges.items()):
            if _level(imported) >= _level(package):
                wrong.append(f"{where} imports prmkit.{imported}, which is not below it")
            elif _level(imported) > _reach(package):
                wrong.append(f"{where} imports prmkit.{imported}, above its reach "
                             f"(prmkit.{REACHES.get(package)})")
    return wrong


def _loose_reaches(graph: dict[str, dict[str, str]]) -> list[str]:
    """Packages whose declared reach lies above everything they import."""
    loose = []
    for package, edges in sorted(graph.items()):
        top = max((_level(i) for i in edges), default=-1)
        if _reach(package) > top:
            names = "/".join(sorted(LAYERS[top])) if top >= 0 else "no layer"
            loose.append(f"prmkit.{package} reaches layer {_reach(package)} but imports "
                         f"nothing above layer {top} ({names}); lower it")
    return loose


def test_scoring_does_not_import_training_and_no_layer_imports_a_higher_one():
    wrong = _wrong_imports(_package_graph())
    assert not wrong, "\n".join(wrong)


def test_every_package_sits_at_the_lowest_level_its_imports_allow():
    graph = _package_graph()
    assert set(graph) == set().union(*LAYERS), "LAYERS names packages that do not exist"
    loose = _loose_reaches(graph)
    assert not loose, "\n".join(loose)


@pytest.mark.parametrize("package, imported, found", [
    ("data", "models", "which is not below it"),
    ("scoring", "training", "which is not below it"),
    ("errors", "metrics", "which is not below it"),
    ("labeling", "grading", "above its reach"),
    ("selection", "models", "above its reach"),
    ("active", "search", "above its reach"),
])
def test_an_upward_import_added_to_the_real_graph_is_caught(package, imported, found):
    graph = _package_graph()
    assert not _wrong_imports(graph)
    graph[package][imported] = f"{package}/added.py"
    assert _wrong_imports(graph) == [f"{package}/added.py imports prmkit.{imported}, {found}"
                                     + (f" (prmkit.{REACHES[package]})" if "reach" in found else "")]


def test_a_reach_above_what_the_package_imports_is_reported_loose():
    graph = _package_graph()
    del graph["labeling"]["data"]
    assert _loose_reaches(graph) == [
        "prmkit.labeling reaches layer 1 but imports nothing above layer 0 (__init__/errors/progress); lower it"]


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
