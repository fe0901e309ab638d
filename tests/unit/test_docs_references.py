"""Every test, bench script and source file the documentation names exists (and a named test
function is defined in the file named): a doc that points at a moved or deleted proof is
caught here, not by a reader."""

from __future__ import annotations

import pathlib
import re

import pytest

pytestmark = pytest.mark.unit

ROOT = pathlib.Path(__file__).resolve().parents[2]
DOCS = [*sorted((ROOT / "docs").glob("*.md")), ROOT / "README.md"]
PATH = re.compile(
    r"`((?:tests|bench|broker|bookie|client|spark|zk|magnetar|deploy|tools)/[\w./-]+\.\w+)(?:::(\w+))?"
)


def test_named_files_and_tests_exist() -> None:
    missing = []
    for doc in DOCS:
        for path, name in PATH.findall(doc.read_text()):
            target = ROOT / path
            if not target.exists():
                missing.append(f"{doc.name}: {path}")
            elif name and not re.search(rf"\bdef {name}\b", target.read_text(errors="replace")):
                missing.append(f"{doc.name}: {path}::{name}")
    assert not missing, "named in the docs but not there: " + ", ".join(sorted(set(missing)))
