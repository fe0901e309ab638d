"""Dead code (issue 31 §5): a public function, class or method of Magnetar's packages that
nothing names — no other module, test, bench script or document, and its own module only
where it is defined — is deleted, not kept "in case".

Names a framework calls by convention (gRPC's interceptor hook, PySpark's stream-reader
hooks) are listed in ``CALLED_BY_FRAMEWORKS`` with the framework that calls them."""

from __future__ import annotations

import ast
import os
import pathlib
import re

ROOT = pathlib.Path(__file__).resolve().parents[2]
CHECKED = ("zk", "bookie", "broker", "client", "spark", "magnetar")
SEARCHED_SUFFIXES = (".py", ".md", ".toml", ".cfg", ".ini")
SKIPPED_DIRS = {".git", ".venv", "build", "data", "__pycache__", "node_modules"}

CALLED_BY_FRAMEWORKS = {
    "RoleCheck.intercept_service": "grpc.ServerInterceptor",
    "StreamReader.prepareForTriggerAvailableNow": "pyspark SupportsTriggerAvailableNow",
    "StreamReader.getDefaultReadLimit": "pyspark DataSourceStreamReader (admission control)",
    "StreamReader.reportLatestOffset": "pyspark DataSourceStreamReader (admission control)",
}


def _texts() -> dict[pathlib.Path, str]:
    """Every searched file of the repository, symlinked folders (``magnetar/``'s) not
    followed."""
    texts = {}
    for folder, dirs, files in os.walk(ROOT):
        dirs[:] = [d for d in dirs if d not in SKIPPED_DIRS and not d.startswith(".")]
        for name in files:
            path = pathlib.Path(folder, name)
            if name.endswith(SEARCHED_SUFFIXES) and not path.is_symlink():
                texts[path] = path.read_text(errors="replace")
    return texts


def _modules() -> list[pathlib.Path]:
    out = []
    for package in CHECKED:
        for folder, dirs, files in os.walk(ROOT / package):
            dirs[:] = [d for d in dirs if d not in SKIPPED_DIRS]
            for name in files:
                path = pathlib.Path(folder, name)
                if name.endswith(".py") and "_pb2" not in name and not path.is_symlink():
                    out.append(path)
    return sorted(out)


def _public_definitions(module: pathlib.Path) -> list[tuple[str, str]]:
    """(qualified name, name) of the module's public functions, classes and methods
    (dunder methods are the language's, not ours)."""
    tree = ast.parse(module.read_text())
    kinds = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)
    out = []
    for node in tree.body:
        if not isinstance(node, kinds) or node.name.startswith("_"):
            continue
        out.append((node.name, node.name))
        if isinstance(node, ast.ClassDef):
            for member in node.body:
                if isinstance(member, kinds[:2]) and not member.name.startswith("_"):
                    out.append((f"{node.name}.{member.name}", member.name))
    return out


def test_every_public_name_is_used_somewhere() -> None:
    texts = _texts()
    words: dict[str, int] = {}
    for text in texts.values():
        for word in re.findall(r"[A-Za-z_][A-Za-z0-9_]*", text):
            words[word] = words.get(word, 0) + 1
    unused = []
    for module in _modules():
        own = re.findall(r"[A-Za-z_][A-Za-z0-9_]*", texts[module])
        exported = set()
        for node in ast.parse(texts[module]).body:
            if isinstance(node, ast.Assign) and any(
                isinstance(t, ast.Name) and t.id == "__all__" for t in node.targets
            ):
                exported = {e.value for e in ast.walk(node.value) if isinstance(e, ast.Constant)}
        for qualified, name in _public_definitions(module):
            if qualified in CALLED_BY_FRAMEWORKS:
                continue
            mentions = 2 if name in exported else 1  # its definition, ``__all__``
            if words.get(name, 0) <= mentions and own.count(name) <= mentions:
                unused.append(f"{module.relative_to(ROOT)}: {qualified}")
    assert not unused, "referenced nowhere: " + ", ".join(unused)


def test_the_framework_list_names_real_definitions() -> None:
    """An entry whose definition is gone goes too (the list only shrinks with the code)."""
    defined = {q for module in _modules() for q, _ in _public_definitions(module)}
    assert set(CALLED_BY_FRAMEWORKS) <= defined
