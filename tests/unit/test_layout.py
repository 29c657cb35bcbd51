"""The code's layout keeps the shape docs/architecture.md describes: rooms of a size one can read,
and a core that knows nothing of its HTTP face but through the one lazy door (``face.py``).

Static checks of the source (ast), no imports of the product.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("harness_core", "harness_asgi")
#: A module past this many lines holds more than one concept: split it by concept.
MAX_MODULE_LINES = 600
#: A class past this many lines does several jobs (the issue's "~400").
MAX_CLASS_LINES = 400


def _modules() -> list[Path]:
    return sorted(p for package in PACKAGES for p in (ROOT / package).rglob("*.py"))


def test_the_modules_are_found() -> None:
    assert len(_modules()) > 50  # a wrong root would make the checks below pass vacuously


def test_no_module_is_over_600_lines() -> None:
    long = {
        str(p.relative_to(ROOT)): n
        for p in _modules()
        if (n := len(p.read_text().splitlines())) > MAX_MODULE_LINES
    }
    assert long == {}


def test_no_class_is_over_400_lines() -> None:
    long: dict[str, int] = {}
    for path in _modules():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ClassDef) and node.end_lineno is not None:
                lines = node.end_lineno - node.lineno + 1
                if lines > MAX_CLASS_LINES:
                    long[f"{path.relative_to(ROOT)}:{node.name}"] = lines
    assert long == {}


def _imports_of(tree: ast.AST) -> list[tuple[str, ast.AST]]:
    found: list[tuple[str, ast.AST]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.extend((alias.name, node) for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.append((node.module, node))
    return found


def test_the_core_imports_its_http_face_only_lazily_through_face_py() -> None:
    at_top: list[str] = []
    elsewhere: list[str] = []
    for path in sorted((ROOT / "harness_core").rglob("*.py")):
        tree = ast.parse(path.read_text())
        top_level = set(map(id, tree.body))
        for name, node in _imports_of(tree):
            if name.split(".")[0] != "harness_asgi":
                continue
            where = f"{path.relative_to(ROOT)}:{getattr(node, 'lineno', 0)} {name}"
            if path.name != "face.py" or path.parent.name != "harness_core":
                elsewhere.append(where)
            elif id(node) in top_level:
                at_top.append(where)
    assert elsewhere == []
    assert at_top == []  # face.py imports the face when asked for it, not on import
