"""The codec stays sans-I/O: no module of ``client/protocol`` imports I/O or event loops."""

from __future__ import annotations

import ast
import pathlib

from magnetar.client import protocol

FORBIDDEN = {
    "asyncio",
    "socket",
    "selectors",
    "ssl",
    "threading",
    "trio",
    "uvloop",
    "grpc",
    "kazoo",
}


def test_no_io_imports() -> None:
    root = pathlib.Path(protocol.__file__).parent
    offenders = []
    for path in root.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            names: list[str] = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                names = [node.module]
            offenders += [f"{path.name}: {n}" for n in names if n.split(".")[0] in FORBIDDEN]
            offenders += [f"{path.name}: {n}" for n in names if n.startswith("magnetar.")]
    assert offenders == []


def test_public_names_are_exported() -> None:
    assert sorted(protocol.__all__) == sorted(set(protocol.__all__))
    for name in protocol.__all__:
        assert hasattr(protocol, name), name
