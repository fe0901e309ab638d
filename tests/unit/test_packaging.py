"""Every package folder is declared in pyproject.toml, so installs ship all of it."""

from __future__ import annotations

import pathlib
import tomllib

ROOT = pathlib.Path(__file__).resolve().parents[2]


def test_every_package_folder_is_declared() -> None:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    declared = set(config["packages"])
    mapping: dict[str, str] = config["package-dir"]
    found = set()
    for package, folder in mapping.items():
        for init in (ROOT / folder).rglob("__init__.py"):
            rel = init.parent.relative_to(ROOT / folder)
            found.add(".".join([package, *rel.parts]) if rel.parts else package)
    assert found, "no packages found"
    assert found - declared == set(), f"add to pyproject.toml packages: {sorted(found - declared)}"
    assert declared - found == set(), f"declared but missing: {sorted(declared - found)}"
