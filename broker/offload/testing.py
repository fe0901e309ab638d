"""Test kit for tiered storage (shipped with the package, as ``trio.testing`` is).

Owns: ``MemoryLedgerSource`` (a sealed ledger held in memory, with the read-handle shape an
offloader reads: entries framed exactly as a ledger handle returns them, cumulative lengths
adding up to ``length``; counts its reads; ``fail_reads_from`` makes reads of an entry onwards
fail, as a bookie outage would) and ``payloads_of`` (deterministic payloads from a seed).
Used by the contract and unit tests and ``bench/offload_perf.py``; never by the broker.
"""

from __future__ import annotations

import random
from collections.abc import Sequence

from magnetar.broker.bookkeeper.entry import LedgerEntry


def payloads_of(sizes: Sequence[int], seed: int = 0) -> list[bytes]:
    rng = random.Random(seed)
    return [rng.randbytes(size) for size in sizes]


class MemoryLedgerSource:
    def __init__(self, ledger_id: int, payloads: Sequence[bytes], *, closed: bool = True) -> None:
        self._ledger_id = ledger_id
        self._closed = closed
        self.entries: list[LedgerEntry] = []
        cumulative = 0
        for entry_id, payload in enumerate(payloads):
            cumulative += len(payload)
            self.entries.append(LedgerEntry(ledger_id, entry_id, bytes(payload), cumulative))
        self._length = cumulative
        self.reads = 0
        self.fail_reads_from: int | None = None

    def __repr__(self) -> str:
        return f"<MemoryLedgerSource ledger={self._ledger_id} entries={len(self.entries)}>"

    @property
    def ledger_id(self) -> int:
        return self._ledger_id

    @property
    def last_add_confirmed(self) -> int:
        return len(self.entries) - 1

    @property
    def length(self) -> int:
        return self._length

    @property
    def is_closed(self) -> bool:
        return self._closed

    @property
    def payloads(self) -> list[bytes]:
        return [e.payload for e in self.entries]

    async def read(self, first_entry_id: int, last_entry_id: int) -> list[LedgerEntry]:
        self.reads += 1
        if (
            first_entry_id < 0
            or last_entry_id < first_entry_id
            or last_entry_id >= len(self.entries)
        ):
            raise ValueError(f"bad range {first_entry_id}..{last_entry_id}")
        if self.fail_reads_from is not None and last_entry_id >= self.fail_reads_from:
            raise ConnectionError(f"source read of {first_entry_id}..{last_entry_id} failed")
        return self.entries[first_entry_id : last_entry_id + 1]


__all__ = ["MemoryLedgerSource", "payloads_of"]
