"""Every setting does something: each field of the broker's and the bookie's configurations is
read somewhere in its package, and every ``config.<name>`` read there is a declared field.

Static (``ast``): a field counts as read when its name appears as an attribute access or a
string constant (``getattr``) in a module other than the one declaring it and the shared
settings table. A setting accepted and ignored is a bug; so is one read but never declared
(``getattr(config, "x", default)`` could never be set).
"""

from __future__ import annotations

import ast
import dataclasses
import pathlib

import pytest

from magnetar.bookie.core import BookieConfig as EngineConfig
from magnetar.bookie.main import BookieConfig
from magnetar.broker.config import BrokerConfig

ROOT = pathlib.Path(__file__).resolve().parents[2]
NOT_READERS = {"config.py", "settings.py"}


def _trees(*folders: str) -> list[tuple[pathlib.Path, ast.AST]]:
    out = []
    for folder in folders:
        for path in sorted((ROOT / folder).rglob("*.py")):
            if "_pb2" in path.name:
                continue
            out.append((path, ast.parse(path.read_text())))
    return out


def _names_read(
    trees: list[tuple[pathlib.Path, ast.AST]], declaring: pathlib.Path | None
) -> set[str]:
    names: set[str] = set()
    for path, tree in trees:
        if path == declaring or path.name in NOT_READERS:
            continue
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute):
                names.add(node.attr)
            elif isinstance(node, ast.Constant) and isinstance(node.value, str):
                names.add(node.value)
    return names


CASES = [
    (BrokerConfig, ("broker", "magnetar"), ROOT / "broker" / "config.py"),
    # declared beside the code that reads them: the declaration itself is not a read
    (BookieConfig, ("bookie", "broker", "magnetar"), None),
    (EngineConfig, ("bookie",), None),
]


@pytest.mark.parametrize(
    ("cls", "folders", "declaring"), CASES, ids=lambda c: getattr(c, "__module__", "")
)
def test_every_setting_is_read_somewhere(
    cls: type, folders: tuple[str, ...], declaring: pathlib.Path | None
) -> None:
    read = _names_read(_trees(*folders), declaring)
    unread = [f.name for f in dataclasses.fields(cls) if f.name not in read]
    assert unread == [], f"{cls.__module__}.{cls.__name__}: settings never read: {unread}"


def _config_classes() -> dict[str, set[str]]:
    """Every ``*Config`` dataclass of the server packages: its fields and attributes."""
    out: dict[str, set[str]] = {}
    for cls in (BrokerConfig, BookieConfig, EngineConfig):
        out[cls.__name__] = {f.name for f in dataclasses.fields(cls)} | set(dir(cls))
    return out


def test_every_config_read_is_declared() -> None:
    """``getattr(config, "name", ...)`` of a name no config declares is never settable."""
    known = set().union(*_config_classes().values())
    problems = []
    for path, tree in _trees("broker", "bookie"):
        for node in ast.walk(tree):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Name)
                and node.func.id == "getattr"
                and len(node.args) >= 2
                and isinstance(node.args[1], ast.Constant)
                and isinstance(node.args[0], (ast.Name, ast.Attribute))
            ):
                base = node.args[0]
                base_name = base.id if isinstance(base, ast.Name) else base.attr
                attr = node.args[1].value
                if base_name.lower().endswith("config") and attr not in known:
                    problems.append(
                        f"{path.relative_to(ROOT)}:{node.lineno} getattr(..., {attr!r})"
                    )
    assert problems == [], problems
