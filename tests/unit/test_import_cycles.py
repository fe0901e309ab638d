"""No import cycles inside the server packages and the codec (issue 14 §2).

A cycle (two modules importing each other, directly or through others, at module level, in a
function or under ``TYPE_CHECKING``) means neither can be understood or tested alone; the
broker breaks them with small Protocols and context objects instead. ``magctl`` is checked
too: its verb modules still load lazily (start-up), but only downwards: ``cli`` imports a
verb's module when it runs, and no verb module imports ``cli`` or another verb's module.
"""

from __future__ import annotations

import grimp

CHECKED = (
    "magnetar.zk",
    "magnetar.bookie",
    "magnetar.broker",
    "magnetar.client.protocol",
    "magnetar.client.magctl",
    "magnetar.spark",
)


def test_no_import_cycles() -> None:
    graph = grimp.build_graph("magnetar", include_external_packages=False)
    modules = [m for m in graph.modules if m.startswith(CHECKED)]
    cycles = set()
    for importer in modules:
        for imported in graph.find_modules_directly_imported_by(importer):
            if imported == importer or not imported.startswith(CHECKED):
                continue
            if graph.chain_exists(importer=imported, imported=importer):
                cycles.add(tuple(sorted((importer, imported))))
    assert not cycles, "import cycles: " + ", ".join(" <-> ".join(c) for c in sorted(cycles))
