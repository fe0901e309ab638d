"""A ledger entry as bookies store it and as readers get it back.

Owns: the entry framing and its checksum. The stored bytes are an 8-byte big-endian
cumulative ledger length (every byte of the ledger up to and including this entry's
payload) followed by the payload; ``crc32c`` of the stored bytes is computed by the writer,
verified by the bookie on receipt and by every reader (``unframe``; a packed read's
``EntryRun`` is verified by the bookie client, once per entry): an entry that reaches a caller
as a ``LedgerEntry`` or in ``LedgerEntries`` has had its checksum verified.
``LedgerEntries`` is consecutive entries in one buffer (``unframe_run``: a run's stored bytes
without their headers, no object per entry), for readers that decode entries in bulk.
Must not know: bookies' transport, handles, managed ledgers.
"""

from __future__ import annotations

import operator
import struct
from collections.abc import Sequence
from dataclasses import dataclass
from typing import NamedTuple

import crc32c

from magnetar.bookie.api import Entry, EntryRun
from magnetar.broker.bookkeeper.errors import EntryCorrupt

HEADER = struct.Struct(">q")
HEADER_BYTES = HEADER.size

_pack_header = HEADER.pack
_unpack_header = HEADER.unpack_from
_new_tuple = tuple.__new__
_crc32c = crc32c.crc32c


def frame(cumulative_length: int, payload: bytes) -> bytes:
    """The stored bytes of an entry whose payload ends the ledger at ``cumulative_length``."""
    return _pack_header(cumulative_length) + payload


class LedgerEntry(NamedTuple):
    """An entry as read back: its id, the application payload and the cumulative length.
    A named tuple: one is made per entry read, and ``tuple.__new__`` is the cheapest record."""

    ledger_id: int
    entry_id: int
    payload: bytes
    cumulative_length: int


def unframe(entry: Entry) -> LedgerEntry:
    """Verify the checksum and strip the header; raises ``EntryCorrupt``."""
    data = entry.payload
    if _crc32c(data) != entry.crc32c or len(data) < HEADER_BYTES:
        raise EntryCorrupt(f"checksum mismatch for {entry.ledger_id}:{entry.entry_id}")
    return _new_tuple(
        LedgerEntry,
        (entry.ledger_id, entry.entry_id, data[HEADER_BYTES:], _unpack_header(data)[0]),
    )


@dataclass(frozen=True, slots=True)
class LedgerEntries:
    """Consecutive entries ``first_entry_id`` .. of one ledger, checksums verified: the
    payload of entry ``first_entry_id + i`` is ``data[starts[i]:ends[i]]``."""

    ledger_id: int
    first_entry_id: int
    data: bytes
    starts: Sequence[int]
    ends: Sequence[int]

    def __len__(self) -> int:
        return len(self.starts)

    @property
    def last_entry_id(self) -> int:
        return self.first_entry_id + len(self.starts) - 1

    def payloads(self) -> list[bytes]:
        data = self.data
        return [data[a:b] for a, b in zip(self.starts, self.ends, strict=True)]

    def entries(self) -> list[LedgerEntry]:
        """One ``LedgerEntry`` per entry (for readers of single entries)."""
        data, lid, first, new = self.data, self.ledger_id, self.first_entry_id, _new_tuple
        unpack = _unpack_header
        return [
            new(LedgerEntry, (lid, first + i, data[a:b], unpack(data, a - HEADER_BYTES)[0]))
            for i, (a, b) in enumerate(zip(self.starts, self.ends, strict=True))
        ]

    @classmethod
    def of(cls, entries: Sequence[LedgerEntry]) -> LedgerEntries:
        """Entries read one by one (consecutive, of one ledger) as one buffer."""
        starts: list[int] = []
        ends: list[int] = []
        parts: list[bytes] = []
        at = HEADER_BYTES
        for e in entries:
            parts.append(_pack_header(e.cumulative_length))
            parts.append(e.payload)
            starts.append(at)
            at += len(e.payload)
            ends.append(at)
            at += HEADER_BYTES
        first = entries[0].entry_id if entries else 0
        lid = entries[0].ledger_id if entries else -1
        return cls(lid, first, b"".join(parts), starts, ends)


def unframe_run(run: EntryRun) -> LedgerEntries:
    """A packed read's entries (their checksums verified by the bookie client) without their
    framing header; ``EntryCorrupt`` when one is too short to have it. Entries of one size
    (``range`` starts and ends) stay ``range``s."""
    starts, ends = run.starts, run.ends
    if type(starts) is range and type(ends) is range and starts.step == ends.step:
        short = len(starts) and ends[0] - starts[0] < HEADER_BYTES
        at = starts.start + HEADER_BYTES
        opened: Sequence[int] = range(at, at + len(starts) * starts.step, starts.step)
    else:
        short = len(starts) and min(map(operator.sub, ends, starts)) < HEADER_BYTES
        opened = [a + HEADER_BYTES for a in starts]
    if short:
        raise EntryCorrupt(f"an entry of {run.ledger_id}:{run.first_entry_id}.. has no header")
    return LedgerEntries(run.ledger_id, run.first_entry_id, run.data, opened, ends)


__all__ = [
    "HEADER",
    "HEADER_BYTES",
    "LedgerEntries",
    "LedgerEntry",
    "frame",
    "unframe",
    "unframe_run",
]
