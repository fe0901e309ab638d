"""Positions in a topic-partition and the offsets Spark checkpoints (pure, no I/O).

Owns: ``Position`` (ledger, entry, batch index: the order of message ids within one
topic-partition), its readable form ``"ledger:entry[:batch]"``, and ``Start``, the place a read
begins: ``earliest`` (nothing consumed yet), ``after`` a position (the last message consumed:
what a checkpoint records) or ``at`` a position (a user-given id, read inclusive).

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
        """True when a message at or before ``last`` (inclusive) is still to be read."""
        if last is None:
            return False
        if self.position is None:
            return True
        if self.kind == "after":
            return last > self.position
        return last >= self.position


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


__all__ = ["Position", "PositionError", "Start", "decode_offset", "encode_offset"]
