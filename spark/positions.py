"""Positions in a topic-partition and the offsets Spark checkpoints (pure, no I/O).

Owns: ``Position`` (ledger, entry, batch index: the order of message ids within one
topic-partition), its readable form ``"ledger:entry[:batch]"``, and ``Start``, the place a read
begins: ``earliest`` (nothing consumed yet), ``after`` a position (the last message consumed:
what a checkpoint records) or ``at`` a position (a user-given id, read inclusive).

A position with batch index -1 as a read's bound stands for its whole entry: a user gives
``"ledger:entry"``, and brokers before Pulsar's ``hasNumMessagesInBatch`` rule (older Pulsar
releases, Magnetar before it answered as Pulsar does) name the last message of a batch entry
of one message so in their "last message id" (current ones answer batch index 0). So
``after`` it excludes every message of that entry, ``at`` it includes them all, and an end at
it (``ends_by``) takes them all.

An offset, as Spark stores it in a checkpoint, is a flat JSON object mapping each
topic-partition's full name to the string form of its ``Start``: ``"earliest"``,
``"after:L:E:B"`` or ``"at:L:E:B"``. It survives Spark's JSON round trip unchanged.

Must not know: Spark, the client, the network.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal


class PositionError(ValueError):
    """A readable message id that does not parse."""


@dataclass(frozen=True, slots=True, order=True)
class Position:
    ledger: int
    entry: int
    batch: int = -1

    @staticmethod
    def parse(text: str) -> Position:
        parts = text.strip().split(":")
        if len(parts) not in (2, 3):
            raise PositionError(f"{text!r} is not a message id 'ledger:entry[:batch]'")
        try:
            nums = [int(p) for p in parts]
        except ValueError:
            raise PositionError(f"{text!r} is not a message id 'ledger:entry[:batch]'") from None
        if nums[0] < 0 or nums[1] < 0:
            raise PositionError(f"{text!r}: ledger and entry must not be negative")
        return Position(nums[0], nums[1], nums[2] if len(nums) == 3 else -1)

    def __str__(self) -> str:
        return f"{self.ledger}:{self.entry}:{self.batch}"


StartKind = Literal["earliest", "after", "at"]


@dataclass(frozen=True, slots=True)
class Start:
    kind: StartKind
    position: Position | None = None

    @staticmethod
    def earliest() -> Start:
        return Start("earliest")

    @staticmethod
    def after(position: Position) -> Start:
        return Start("after", position)

    @staticmethod
    def at(position: Position) -> Start:
        return Start("at", position)

    @staticmethod
    def parse(text: str) -> Start:
        if text == "earliest":
            return Start.earliest()
        kind, _, rest = text.partition(":")
        if kind == "after":
            return Start.after(Position.parse(rest))
        if kind == "at":
            return Start.at(Position.parse(rest))
        raise PositionError(f"{text!r} is not an offset ('earliest', 'after:L:E:B', 'at:L:E:B')")

    def __str__(self) -> str:
        if self.position is None:
            return "earliest"
        return f"{self.kind}:{self.position}"

    def is_before_or_at(self, last: Position | None) -> bool:
        """True when a message at or before ``last`` (inclusive) may still be read (a last
        position of a whole entry, batch index -1, may hold members after the start's)."""
        if last is None:
            return False
        p = self.position
        if p is None:
            return True
        if (last.ledger, last.entry) != (p.ledger, p.entry):
            return (last.ledger, last.entry) > (p.ledger, p.entry)
        if self.kind == "after":
            return p.batch >= 0 and (last.batch < 0 or last.batch > p.batch)
        return last.batch < 0 or p.batch < 0 or last.batch >= p.batch

    def includes(self, pos: Position) -> bool:
        """Whether a read starting here takes the message at ``pos``."""
        p = self.position
        if p is None:
            return True
        if self.kind == "after":
            if p.batch < 0:  # the whole entry was read
                return (pos.ledger, pos.entry) > (p.ledger, p.entry)
            return pos > p
        return pos >= p


def ends_by(pos: Position, end: Position) -> bool:
    """Whether ``pos`` is within a read ending at ``end`` inclusive (an end with batch index
    -1 takes its whole entry)."""
    if end.batch < 0:
        return (pos.ledger, pos.entry) <= (end.ledger, end.entry)
    return pos <= end


def encode_offset(starts: dict[str, Start]) -> dict[str, str]:
    return {name: str(start) for name, start in sorted(starts.items())}


def decode_offset(offset: dict[str, object] | None) -> dict[str, Start]:
    if not offset:
        return {}
    out: dict[str, Start] = {}
    for name, value in offset.items():
        if not isinstance(value, str):
            raise PositionError(f"offset of {name} is {value!r}, not a string")
        out[name] = Start.parse(value)
    return out


__all__ = [
    "Position",
    "PositionError",
    "Start",
    "decode_offset",
    "encode_offset",
    "ends_by",
]
