"""The demo's layout, read from its imports: world below lm below core below recipes, no
import circle, no recipe importing another, no private name shared between files, small
modules, and a world that needs no torch."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import prmkit

SRC = Path(prmkit.__file__).parent
DEMO = SRC / "demo"
FILES = {**{p: p for p in DEMO.rglob("*.py")}, SRC / "cli" / "demo.py": SRC / "cli" / "demo.py"}
# Subpackages of prmkit.demo, each importing only from its own level and below.
LEVELS = {"settings": 0, "world": 0, "lm": 1, "core": 2, "recipes": 3}


def _module(path: Path) -> str:
    parts = path.relative_to(SRC.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {_module(p): p for p in FILES}


def _imports(path: Path) -> list[tuple[str, list[str]]]:
    """(module imported, names taken from it) of every import statement, lazy ones too."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.append((node.module, [a.name for a in node.names]))
        elif isinstance(node, ast.Import):
            found += [(a.name, []) for a in node.names]
    return found


def _edges(path: Path) -> set[str]:
    """The demo modules `path` imports (`from package import module` names the module)."""
    out = set()
    for module, names in _imports(path):
        out.update(f"{module}.{n}" for n in names if f"{module}.{n}" in MODULES)
        if module in MODULES and not all(f"{module}.{n}" in MODULES for n in names):
            out.add(module)
    return out


GRAPH = {m: _edges(p) for m, p in MODULES.items()}


def _part(module: str, depth: int) -> str:
    parts = module.split(".")
    return parts[depth] if len(parts) > depth else ""


def test_no_import_circle_in_the_demo():
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    circles = []

    def visit(m: str, path: list[str]) -> None:
        state[m] = 1
        for n in sorted(GRAPH[m]):
            if state.get(n) == 1:
                circles.append(" -> ".join(path[path.index(n):] + [n]))
            elif n not in state:
                visit(n, path + [n])
        state[m] = 2

    for m in sorted(GRAPH):
        if m not in state:
            visit(m, [m])
    assert len(MODULES) > 40 and not circles, "\n".join(circles)


def test_no_recipe_imports_another_and_every_layer_imports_only_from_below():
    wrong = []
    inside = [m for m in GRAPH if _part(m, 1) == "demo" and _part(m, 2)]
    for m in inside:
        level = LEVELS[_part(m, 2)]
        for t in GRAPH[m] & set(inside):
            if LEVELS[_part(t, 2)] > level:
                wrong.append(f"{m} imports {t}")
            if _part(m, 2) == _part(t, 2) == "recipes" and _part(m, 3) != _part(t, 3):
                wrong.append(f"recipe {m} imports recipe {t}")
    assert not wrong, "\n".join(wrong)


def test_no_private_name_is_imported_across_files():
    shared = [f"{_module(p)} imports {module}.{n}" for p in FILES
              for module, names in _imports(p) if module.startswith("prmkit")
              for n in names if n.startswith("_")]
    assert not shared, "\n".join(shared)


def test_every_demo_module_is_under_300_lines():
    long = {_module(p): n for p in FILES if (n := len(p.read_text().splitlines())) >= 300}
    assert not long, long


def test_the_world_is_read_without_torch():
    code = ("import sys, prmkit.demo.world, prmkit.demo.world.sampler, "
            "prmkit.demo.world.error_kinds, prmkit.demo.settings; "
            "sys.exit('torch' in sys.modules)")
    assert subprocess.run([sys.executable, "-c", code]).returncode == 0


def test_the_demo_world_page_imports_only_names_that_exist():
    import importlib
    import re

    page = (Path(__file__).resolve().parents[1] / "docs" / "demo-world.md").read_text()
    imported = 0
    for block in re.findall(r"```python\n(.*?)```", page, flags=re.S):
        for module, names in re.findall(r"^from (prmkit[\w.]*) import (\([^)]*\)|.*)$", block,
                                        flags=re.M):
            found = importlib.import_module(module)
            for name in re.findall(r"\w+", names):
                assert hasattr(found, name), f"{module}.{name}"
                imported += 1
    assert imported > 10
