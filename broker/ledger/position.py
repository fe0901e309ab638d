"""Positions in a managed ledger.

Owns: ``Position(ledger_id, entry_id)``, ordered first by ledger then by entry. Ledger ids
grow over a managed ledger's life, so this order is the log order. ``entry_id == -1`` means
"before the first entry of that ledger" (used for mark-delete positions).
Must not know: what the entries contain.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True, order=True)
class Position:
    ledger_id: int
    entry_id: int

    def __str__(self) -> str:
        return f"{self.ledger_id}:{self.entry_id}"

    @classmethod
    def parse(cls, text: str) -> Position:
        ledger, _, entry = text.partition(":")
        return cls(int(ledger), int(entry))


EARLIEST = Position(-1, -1)
"""Sentinel for 'the oldest available position' (cursor initial position)."""

LATEST = Position(2**63 - 1, 2**63 - 1)
"""Sentinel for 'after the last confirmed entry' (cursor initial position)."""


__all__ = ["EARLIEST", "LATEST", "Position"]
