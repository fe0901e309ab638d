"""A broker-wide budget for input bytes held by connections between reads.

Owns: ``InputBudget``: the total bytes of partial frames that all connections keep while
they wait for the rest of a frame (each is at most one frame: the maximum message size plus
padding). Without it, N connections each holding a frame's worth of bytes minus one grow
memory by N x 5 MiB. A connection whose buffered input would take the total past
``limit_bytes`` is refused the growth (its connection is closed by the caller: it is the one
asking for more). Invariant: 0 <= used_bytes <= limit_bytes. Must not know: sockets, frames.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class InputBudgetStatistics:
    used_bytes: int
    limit_bytes: int
    refused: int


class InputBudget:
    def __init__(self, limit_bytes: int) -> None:
        self.limit_bytes = limit_bytes
        self.used_bytes = 0
        self.refused = 0

    def __repr__(self) -> str:
        return f"<InputBudget {self.used_bytes}/{self.limit_bytes} refused={self.refused}>"

    def resize(self, held: int, wanted: int) -> bool:
        """A holder of ``held`` bytes now wants ``wanted``: True (and counted) if the total
        stays within the limit or shrinks; False (nothing changed) otherwise."""
        if wanted > held and self.used_bytes - held + wanted > self.limit_bytes:
            self.refused += 1
            return False
        self.used_bytes += wanted - held
        return True

    def release(self, held: int) -> None:
        self.used_bytes -= held

    def check_invariants(self) -> None:
        assert self.used_bytes >= 0, self

    def statistics(self) -> InputBudgetStatistics:
        return InputBudgetStatistics(self.used_bytes, self.limit_bytes, self.refused)


__all__ = ["InputBudget", "InputBudgetStatistics"]
