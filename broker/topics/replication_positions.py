"""The exactly-once link: each replicated entry named by its position in the source topic.

Here, below ``replication/``, because both sides use it: the replicator sends the positions,
the receiving topic recognises them (``inbound_links``).

Owns: ``SourcePosition`` (ledger id, entry id in the source cluster's topic partition),
its 64-bit ``sequence_id`` (the SEND's sequence id; the position's order is the id's
order) and the message property that carries it in the replicated entry
(``__MSG_PROP_REPL_SOURCE_POSITION = "<ledger>:<entry>"``, the name Pulsar 4 uses), so the
remote cluster can tell a replicated entry it already stored from a new one after any
restart of either side: the property is stored in the same entry as the data it names,
atomically, and a new owner of the remote topic recovers the highest stored position of
each link by reading its log.

Layout of the sequence id: ``ledger_id << 32 | entry_id``; a ledger id below 2**31 and an
entry id below 2**32 (a ledger rolls over long before: ``managedLedgerMaxEntriesPerLedger``
is 50,000), else ``ValueError``: the replicator stops with that reason rather than send
an id that would not sort.

What the remote side does with them (the producer path of the receiving broker), whatever
the namespace's deduplication policy, for a producer whose name is a
``replication_names.ReplicationLink`` one (``inbound_links`` carries it out): per (topic,
producer name), the highest source sequence id stored; a SEND at or below it is answered
with a receipt and not stored; a SEND above it (and above what is being stored) is stored
and raises it when persisted; the highest is exactly the SEND's sequence id (an entry is one
id, whatever its number of messages); a SEND that cannot be stored breaks the link until its
producer reconnects, so nothing it sent later is stored before it (so what is stored of a
link is always a prefix of what it sent); on loading the topic, the highest of each link is
recovered from the stored entries' ``replicated_from`` and source position property (from a
snapshot on). The replicator sends in source order and, after any failure, again from its
cursor, so this recognises exactly the entries already stored. Pure. Must not know: topics,
producers, the wire.
"""

from __future__ import annotations

from dataclasses import dataclass

SOURCE_POSITION_PROPERTY = "__MSG_PROP_REPL_SOURCE_POSITION"
LEDGER_ID_MAX = (1 << 31) - 1
ENTRY_ID_MAX = (1 << 32) - 1


@dataclass(frozen=True, slots=True, order=True)
class SourcePosition:
    ledger_id: int
    entry_id: int

    def __post_init__(self) -> None:
        if not 0 <= self.ledger_id <= LEDGER_ID_MAX:
            raise ValueError(f"ledger id {self.ledger_id} outside [0, {LEDGER_ID_MAX}]")
        if not 0 <= self.entry_id <= ENTRY_ID_MAX:
            raise ValueError(f"entry id {self.entry_id} outside [0, {ENTRY_ID_MAX}]")

    def __str__(self) -> str:
        return f"{self.ledger_id}:{self.entry_id}"

    @property
    def sequence_id(self) -> int:
        return self.ledger_id << 32 | self.entry_id

    @classmethod
    def of_sequence_id(cls, sequence_id: int) -> SourcePosition:
        if not 0 <= sequence_id < 1 << 63:
            raise ValueError(f"sequence id {sequence_id} is not a source position")
        return cls(sequence_id >> 32, sequence_id & ENTRY_ID_MAX)

    @classmethod
    def parse(cls, text: str) -> SourcePosition | None:
        """From the property's ``<ledger>:<entry>``; None for anything else."""
        ledger, sep, entry = text.partition(":")
        if not sep or not (ledger + entry).isascii() or not ledger.isdigit() or not entry.isdigit():
            return None
        try:
            return cls(int(ledger), int(entry))
        except ValueError:
            return None


__all__ = ["ENTRY_ID_MAX", "LEDGER_ID_MAX", "SOURCE_POSITION_PROPERTY", "SourcePosition"]
