"""Dead code (issue 31 §5): a public module-level function or class of the packages below that
nothing names (no other module, test, bench script or document, and its own module only
where it is defined) is deleted, not kept "in case". Packages join ``CHECKED`` once they
hold no such name."""

from __future__ import annotations

import ast
import os
import pathlib
import re

ROOT = pathlib.Path(__file__).resolve().parents[2]
CHECKED = ("broker/protocol", "client/protocol")
SEARCHED_SUFFIXES = (".py", ".md", ".toml", ".cfg", ".ini")
SKIPPED_DIRS = {".git", ".venv", "build", "data", "__pycache__", "node_modules"}


def _texts() -> dict[pathlib.Path, str]:
    """Every searched file of the repository, symlinked folders (``magnetar/``'s) not
    followed."""
    texts = {}
    for folder, dirs, files in os.walk(ROOT):
        dirs[:] = [d for d in dirs if d not in SKIPPED_DIRS and not d.startswith(".")]
        for name in files:
            if name.endswith(SEARCHED_SUFFIXES):
                path = pathlib.Path(folder, name)
                texts[path] = path.read_text(errors="replace")
    return texts


def _public_definitions(module: pathlib.Path) -> tuple[list[str], set[str]]:
    """The module's public functions and classes, and the names its ``__all__`` lists."""
    tree = ast.parse(module.read_text())
    kinds = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)
    defined = [n.name for n in tree.body if isinstance(n, kinds) and not n.name.startswith("_")]
    exported: set[str] = set()
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == "__all__" for t in node.targets
        ):
            exported = {e.value for e in ast.walk(node.value) if isinstance(e, ast.Constant)}
    return defined, exported


def test_every_public_name_is_used_somewhere() -> None:
    texts = _texts()
    unused = []
    for package in CHECKED:
        for module in sorted((ROOT / package).glob("*.py")):
            own = texts[module]
            others = [t for p, t in texts.items() if p != module]
            defined, exported = _public_definitions(module)
            for name in defined:
                word = re.compile(rf"\b{re.escape(name)}\b")
                mentions = 2 if name in exported else 1  # its definition, ``__all__``
                used_here = len(word.findall(own)) > mentions
                if not used_here and not any(word.search(t) for t in others):
                    unused.append(f"{module.relative_to(ROOT)}: {name}")
    assert not unused, "referenced nowhere: " + ", ".join(unused)
