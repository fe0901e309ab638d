"""A ledger entry as bookies store it and as readers get it back.

Owns: the entry framing and its checksum. The stored bytes are an 8-byte big-endian
cumulative ledger length (every byte of the ledger up to and including this entry's
payload) followed by the payload; ``crc32c`` of the stored bytes is computed by the writer,
verified by the bookie on receipt and by every reader (``unframe``): an entry that reaches
a caller as a ``LedgerEntry`` has had its checksum verified.
Must not know: bookies' transport, handles, managed ledgers.
"""

from __future__ import annotations

import struct
from typing import NamedTuple

import crc32c

from magnetar.bookie.api import Entry
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


__all__ = ["HEADER", "HEADER_BYTES", "LedgerEntry", "frame", "unframe"]
