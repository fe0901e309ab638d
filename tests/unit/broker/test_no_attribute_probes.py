"""No broker module asks another object what it is by probing its attributes.

``hasattr(obj, name)`` and ``getattr(obj, "name", default)`` on our own objects hide a missing
contract (``hasattr(topic, "publish_to")``): give the kinds one protocol instead, or narrow with
``isinstance`` on a class the module imports. This test walks every module under ``broker/``
and fails on any such call not in ``ALLOWED``, each entry with the reason it stays (an object
we do not own, or a probe another piece of work removes). ``getattr`` with a computed name
(copying a dataclass's fields by name) is reflection, not a probe, and is not flagged; a
protobuf message's optional field is asked with ``HasField``, never with these.
An entry that no longer matches anything fails too, so the list only ever shrinks.
"""

from __future__ import annotations

import ast
import pathlib

BROKER = pathlib.Path(__file__).resolve().parents[3] / "broker"

Probe = tuple[str, str, str]
"""(module path under broker/, ``getattr`` or ``hasattr``, attribute name or ``*`` if computed)."""

ALLOWED: dict[Probe, str] = {
    ("autorecovery_main.py", "getattr", "config"): (
        "argparse.Namespace (third-party): the subcommand may not define the flag"
    ),
    ("bookkeeper/autorecovery/config.py", "hasattr", "*"): (
        "AutoRecoveryConfig.from_config copies the fields it shares with a broker or bookie "
        "config by name (BookKeeper's client, another piece of work)"
    ),
}


def probes(root: pathlib.Path = BROKER) -> dict[Probe, list[int]]:
    found: dict[Probe, list[int]] = {}
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root).as_posix()
        tree = ast.parse(path.read_text(), filename=str(path))
        for node in ast.walk(tree):
            if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)):
                continue
            kind = node.func.id
            if kind not in ("getattr", "hasattr") or len(node.args) < 2:
                continue
            name = node.args[1]
            literal = isinstance(name, ast.Constant) and isinstance(name.value, str)
            if kind == "getattr" and not literal:
                continue  # reflection over computed names, not a probe
            attr = name.value if literal else "*"  # type: ignore[union-attr]
            found.setdefault((rel, kind, str(attr)), []).append(node.lineno)
    return found


def test_no_module_probes_attributes_outside_the_allowed_list() -> None:
    unexpected = {
        f"broker/{rel}:{lines[0]} {kind}(..., {attr!r})"
        for (rel, kind, attr), lines in probes().items()
        if (rel, kind, attr) not in ALLOWED
    }
    assert not unexpected, (
        "attribute probes of our own objects (use a protocol or isinstance):\n  "
        + "\n  ".join(sorted(unexpected))
    )


def test_every_allowed_probe_still_exists() -> None:
    stale = set(ALLOWED) - set(probes())
    assert not stale, f"remove these entries from ALLOWED: {sorted(stale)}"


def test_the_walk_finds_what_it_must_refuse(tmp_path: pathlib.Path) -> None:
    (tmp_path / "topics").mkdir()
    (tmp_path / "topics" / "old.py").write_text(
        "def f(topic, cfg, fields):\n"
        '    if hasattr(topic, "publish_to"):\n'
        '        return getattr(topic, "ledger", None)\n'
        "    return [getattr(cfg, f) for f in fields]\n"
    )
    assert set(probes(tmp_path)) == {
        ("topics/old.py", "hasattr", "publish_to"),
        ("topics/old.py", "getattr", "ledger"),
    }
