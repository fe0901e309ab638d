"""Positions in a managed ledger.

Owns: ``Position(ledger_id, entry_id)``, ordered first by ledger then by entry. Ledger ids
grow over a managed ledger's life, so this order is the log order. ``entry_id == -1`` means
"before the first entry of that ledger" (used for mark-delete positions).
Must not know: what the entries contain.

A record with the semantics of a frozen, ordered dataclass, written by hand because it is
made, hashed and compared several times per entry on the hot path (the generated dataclass
methods cost about twice as much). It is strict: a ``Position`` never equals, nor orders
against, a tuple or any other type. Immutability is checked statically (``Final``).
"""

from __future__ import annotations

from typing import Any, Final


class Position:
    __slots__ = ("entry_id", "ledger_id")
    __match_args__ = ("ledger_id", "entry_id")

    def __init__(self, ledger_id: int, entry_id: int) -> None:
        self.ledger_id: Final[int] = ledger_id
        self.entry_id: Final[int] = entry_id

    def __repr__(self) -> str:
        return f"Position(ledger_id={self.ledger_id!r}, entry_id={self.entry_id!r})"

    def __str__(self) -> str:
        return f"{self.ledger_id}:{self.entry_id}"

    def __hash__(self) -> int:
        return hash((self.ledger_id, self.entry_id))

    def __eq__(self, other: object) -> bool:
        if other.__class__ is not Position:
            return NotImplemented
        return self.ledger_id == other.ledger_id and self.entry_id == other.entry_id  # type: ignore[attr-defined, no-any-return]

    def __ne__(self, other: object) -> bool:
        if other.__class__ is not Position:
            return NotImplemented
        return self.ledger_id != other.ledger_id or self.entry_id != other.entry_id  # type: ignore[attr-defined, no-any-return]

    def __lt__(self, other: Position) -> bool:
        if other.__class__ is not Position:
            return NotImplemented
        a, b = self.ledger_id, other.ledger_id
        return a < b or (a == b and self.entry_id < other.entry_id)

    def __le__(self, other: Position) -> bool:
        if other.__class__ is not Position:
            return NotImplemented
        a, b = self.ledger_id, other.ledger_id
        return a < b or (a == b and self.entry_id <= other.entry_id)

    def __gt__(self, other: Position) -> bool:
        if other.__class__ is not Position:
            return NotImplemented
        a, b = self.ledger_id, other.ledger_id
        return a > b or (a == b and self.entry_id > other.entry_id)

    def __ge__(self, other: Position) -> bool:
        if other.__class__ is not Position:
            return NotImplemented
        a, b = self.ledger_id, other.ledger_id
        return a > b or (a == b and self.entry_id >= other.entry_id)

    def __reduce__(self) -> tuple[Any, ...]:
        return (Position, (self.ledger_id, self.entry_id))

    @classmethod
    def parse(cls, text: str) -> Position:
        ledger, _, entry = text.partition(":")
        return cls(int(ledger), int(entry))


EARLIEST = Position(-1, -1)
"""Sentinel for 'the oldest available position' (cursor initial position)."""

LATEST = Position(2**63 - 1, 2**63 - 1)
"""Sentinel for 'after the last confirmed entry' (cursor initial position)."""


__all__ = ["EARLIEST", "LATEST", "Position"]
