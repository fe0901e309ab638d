"""A topic's recovery point of sequence ids, and its encoding in a ledger property.

Owns: ``SequenceSnapshot`` (names' highest persisted sequence ids up to a position, inclusive:
deduplication's per producer name, the inbound replication links' per link) and
``SnapshotCodec`` (its JSON under one key, optionally bounded in size; an absent or
unreadable value decodes to None, so the caller reads everything again instead).
Must not know: what the names are, how or when snapshots are written (``recovery_snapshots``).
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from magnetar.broker.ledger.position import Position


@dataclass(frozen=True, slots=True)
class SequenceSnapshot:
    position: Position
    ids: dict[str, int]


@dataclass(frozen=True, slots=True)
class SnapshotCodec:
    """``{"position": "L:E", <key>: {name: id}}``; ``max_bytes``: larger ones are not stored."""

    key: str
    max_bytes: int | None = None

    def encode(self, snap: SequenceSnapshot) -> str | None:
        """The property's value; None when it is over ``max_bytes``."""
        raw = json.dumps({"position": str(snap.position), self.key: snap.ids}, sort_keys=True)
        return raw if self.max_bytes is None or len(raw) <= self.max_bytes else None

    def decode(self, raw: str | None) -> SequenceSnapshot | None:
        """The stored snapshot (None when absent or unreadable)."""
        if not raw:
            return None
        try:
            doc = json.loads(raw)
            ledger, _, entry = str(doc["position"]).partition(":")
            ids = {str(k): int(v) for k, v in dict(doc[self.key]).items()}
            return SequenceSnapshot(Position(int(ledger), int(entry)), ids)
        except (ValueError, KeyError, TypeError):
            return None


__all__ = ["SequenceSnapshot", "SnapshotCodec"]
