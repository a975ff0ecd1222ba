"""The layers run one way: a package imports only from the layers below it (or its own)."""

from __future__ import annotations

import ast
from pathlib import Path

import prmkit

LAYERS = [
    {"errors", "__init__"},
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
