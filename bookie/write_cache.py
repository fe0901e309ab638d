"""The bookie's write cache: entries accepted but not yet in an entry log.

Owns: two halves of ``half_bytes_max`` each. Adds go into the *active* half; a checkpoint
``swap``s it into the *flushing* half (frozen while a worker thread writes it, sorted by
(ledger, entry), to the entry log), and ``release_flushed`` drops it once the index points at
the entry log. If a flush fails, ``unswap`` merges the frozen half back so nothing is lost.

Layout per half: ``{ledger id: {entry id: (entry header, payload)}}``; the 32-byte entry
header is the same bytes the journal and the entry log carry (see ``journal.ENTRY_HEADER``),
so a flush copies no payload. Large payloads of received adds are ``memoryview`` slices of the
gRPC message they came in (no copy on the add path); small ones are ``bytes`` copies.

Back-pressure (decided by the caller, ``core.py``): ``is_full`` says the active half holds at
least ``half_bytes_max``; the caller then starts a flush (if none runs) or waits for the
running one for a bounded time, then rejects with ``TooManyRequests``. One batch may overshoot
the bound (the check precedes the insert), so memory is bounded by 2 x (half + one batch).
Invariant: the flushing half is never modified while ``flushing`` is set.
Must not know: files, the index, the journal.
"""

from __future__ import annotations

from dataclasses import dataclass

from magnetar.bookie.journal import ENTRY_HEADER_LEN

Buffer = bytes | memoryview
"""A cached header or payload: ``bytes``, or a ``memoryview`` into the received gRPC message
(large payloads: the add path keeps no copy of its own; readers get ``bytes``)."""
CachedValue = tuple[Buffer, Buffer]
Half = dict[int, dict[int, CachedValue]]


@dataclass(frozen=True, slots=True)
class WriteCacheStatistics:
    active_bytes: int
    active_entries: int
    flushing_bytes: int
    flushing: bool
    half_bytes_max: int
    swaps: int


class WriteCache:
    def __init__(self, half_bytes_max: int = 64 * 1024 * 1024) -> None:
        self.half_bytes_max = half_bytes_max
        self.active: Half = {}
        self.active_bytes = 0
        self.flushing_half: Half | None = None
        self.flushing_bytes = 0
        self._swaps = 0

    def __repr__(self) -> str:
        return (
            f"<WriteCache active={self.active_bytes}B flushing={self.flushing_bytes}B "
            f"half_max={self.half_bytes_max}B>"
        )

    # -- writes (loop thread) --

    def ledger(self, ledger_id: int) -> dict[int, CachedValue]:
        """The active half's map for a ledger (created on demand): the add path fills it
        directly and then calls ``account`` with the bytes it added."""
        d = self.active.get(ledger_id)
        if d is None:
            d = self.active[ledger_id] = {}
        return d

    def account(self, nbytes: int) -> None:
        self.active_bytes += nbytes

    def put(self, ledger_id: int, entry_id: int, header: Buffer, payload: Buffer) -> None:
        self.ledger(ledger_id)[entry_id] = (header, payload)
        self.active_bytes += ENTRY_HEADER_LEN + len(payload)

    @property
    def is_full(self) -> bool:
        return self.active_bytes >= self.half_bytes_max

    @property
    def flushing(self) -> bool:
        return self.flushing_half is not None

    # -- flush protocol --

    def swap(self) -> Half:
        """Freeze the active half for flushing. Precondition: no flush is in progress."""
        assert self.flushing_half is None, "a flush is already in progress"
        half = self.active
        self.flushing_half = half
        self.flushing_bytes = self.active_bytes
        self.active = {}
        self.active_bytes = 0
        self._swaps += 1
        return half

    def release_flushed(self) -> None:
        self.flushing_half = None
        self.flushing_bytes = 0

    def unswap(self) -> None:
        """The flush failed: merge the frozen half back under the (newer) active half."""
        half = self.flushing_half
        if half is None:
            return
        for ledger_id, old in half.items():
            new = self.active.get(ledger_id)
            if new is None:
                self.active[ledger_id] = old
                self.active_bytes += sum(ENTRY_HEADER_LEN + len(p) for _, p in old.values())
                continue
            for entry_id, value in old.items():
                if entry_id not in new:
                    new[entry_id] = value
                    self.active_bytes += ENTRY_HEADER_LEN + len(value[1])
        self.release_flushed()

    def drop_ledger(self, ledger_id: int) -> None:
        """Forget a deleted ledger in both halves. The caller guarantees that no flush thread
        is reading the frozen half (GC holds the bookie's maintenance lock)."""
        old = self.active.pop(ledger_id, None)
        if old:
            self.active_bytes -= sum(ENTRY_HEADER_LEN + len(p) for _, p in old.values())
        if self.flushing_half is not None:
            old = self.flushing_half.pop(ledger_id, None)
            if old:
                self.flushing_bytes -= sum(ENTRY_HEADER_LEN + len(p) for _, p in old.values())

    # -- reads (loop thread) --

    def get(self, ledger_id: int, entry_id: int) -> CachedValue | None:
        d = self.active.get(ledger_id)
        if d is not None:
            v = d.get(entry_id)
            if v is not None:
                return v
        half = self.flushing_half
        if half is not None:
            d = half.get(ledger_id)
            if d is not None:
                return d.get(entry_id)
        return None

    def last_entry_id(self, ledger_id: int) -> int:
        """Highest entry id of the ledger in either half, -1 if none."""
        last = -1
        d = self.active.get(ledger_id)
        if d:
            last = max(d)
        half = self.flushing_half
        if half is not None:
            d = half.get(ledger_id)
            if d:
                last = max(last, *d)
        return last

    def statistics(self) -> WriteCacheStatistics:
        return WriteCacheStatistics(
            active_bytes=self.active_bytes,
            active_entries=sum(len(d) for d in self.active.values()),
            flushing_bytes=self.flushing_bytes,
            flushing=self.flushing,
            half_bytes_max=self.half_bytes_max,
            swaps=self._swaps,
        )

    def check_invariants(self) -> None:
        total = sum(ENTRY_HEADER_LEN + len(p) for d in self.active.values() for _, p in d.values())
        assert total == self.active_bytes, (total, self.active_bytes)


__all__ = ["Buffer", "CachedValue", "Half", "WriteCache", "WriteCacheStatistics"]
