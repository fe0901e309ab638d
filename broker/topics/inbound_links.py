"""The receiving side of the exactly-once link: another cluster's replicated entries, stored once.

Owns: ``InboundLinks``, the rule ``replication_positions`` states for a topic receiving SENDs
from other clusters' replicators (a producer whose name ``ReplicationLink.of_producer``
recognises), applied whatever the namespace's deduplication policy:

- per link (the producer name), ``persisted``: the highest source sequence id stored, and
  ``accepted``: the highest handed to storage (maybe not stored yet). A SEND at or below
  ``persisted`` is a duplicate (answered with a receipt, not stored); above ``accepted`` it
  is stored; in between it is ``UNKNOWN`` (an earlier copy is still being written, Pulsar's
  ``MessageDupStatus.Unknown``): refused with a retriable error, so the sender sends it again
  once the first copy's fate is known. The highest is exactly the SEND's sequence id.
- a link whose SEND could not be stored is ``broken`` (and its producer closed by the
  topic): every later SEND of it is refused (never stored) until a new producer of the link
  is admitted, so what is stored of a link is
  always a prefix of what it sent. (The managed ledger fails every add after a failed one —
  it fences or closes — except a refusal at submission, which the topic sees at once.)
- the recovery point, stored in the managed ledger's properties as Pulsar's deduplication
  snapshot is: ``pulsar.repl.inbound`` = ``{"position": "L:E", "links": {name: highest}}``,
  everything of every link up to that position. On load the topic restores it and reads only
  the entries after the position (``recover``: an entry's ``replicated_from`` names the link,
  its ``__MSG_PROP_REPL_SOURCE_POSITION`` property the sequence id). A snapshot is taken when
  a new link's first producer is admitted (before it is ready: so a link missing from the
  snapshot never stored anything), every ``SNAPSHOT_EVERY_ENTRIES`` entries stored while a
  link is known, and when the topic closes.
Pure: the topic carries out the reads and writes. Must not know: the wire, storage.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from magnetar.broker.ledger.position import Position
from magnetar.broker.topics.replication_names import ReplicationLink
from magnetar.broker.topics.replication_positions import (
    SOURCE_POSITION_PROPERTY,
    SourcePosition,
)
from magnetar.broker.topics.sequence_snapshots import SequenceSnapshot, SnapshotCodec
from magnetar.client.protocol import pb

SNAPSHOT_PROPERTY = "pulsar.repl.inbound"
"""The managed-ledger property holding the recovery point."""
SNAPSHOT_EVERY_ENTRIES = 1000
"""Entries stored (of any producer, while a link is known) between two snapshots: a bound on
what a load after a crash reads again."""
LINKS_MAX = 1024
"""Links a topic keeps (each is one other cluster): more is a misconfiguration, refused."""


class Verdict(enum.Enum):
    STORE = "store"
    DUPLICATE = "duplicate"
    UNKNOWN = "unknown"
    """An earlier copy is being stored: refuse (retriable), the sender sends it again."""
    BROKEN = "broken"
    """The link failed to store an earlier SEND: refuse until its producer reconnects."""


@dataclass(slots=True)
class _Link:
    persisted: int = -1
    accepted: int = -1
    broken: bool = False


INBOUND_SNAPSHOTS = SnapshotCodec("links")
"""The links' recovery point (absent or unreadable: nothing is restored, which only ever
makes the receiving side store a resent entry again)."""


def link_of_producer(producer_name: str) -> str | None:
    """The link a producer of that name sends for (its name), None for any other producer."""
    return producer_name if ReplicationLink.of_producer(producer_name) is not None else None


class InboundLinks:
    """See the module docstring. ``local`` is this cluster's name."""

    def __init__(self, local: str) -> None:
        self.local = local
        self._links: dict[str, _Link] = {}
        self.entries_since_snapshot = 0
        self.snapshotted: frozenset[str] = frozenset()
        """Links the stored snapshot names."""

    def __repr__(self) -> str:
        return f"<InboundLinks {self.local} links={sorted(self._links)}>"

    def __bool__(self) -> bool:
        return bool(self._links)

    def _link(self, name: str) -> _Link:
        link = self._links.get(name)
        if link is None:
            if len(self._links) >= LINKS_MAX:
                raise ValueError(f"more than {LINKS_MAX} replication links on one topic")
            link = self._links[name] = _Link()
        return link

    # -- the publish path
    def admit(self, name: str, sequence_id: int) -> Verdict:
        """A SEND of link ``name`` arrives (decides and records at once)."""
        link = self._link(name)
        if link.broken:
            return Verdict.BROKEN
        if sequence_id <= link.persisted:
            return Verdict.DUPLICATE
        if sequence_id <= link.accepted:
            return Verdict.UNKNOWN
        link.accepted = sequence_id
        return Verdict.STORE

    def is_broken(self, name: str) -> bool:
        link = self._links.get(name)
        return link is not None and link.broken

    def stored(self, name: str, sequence_id: int) -> None:
        link = self._link(name)
        link.persisted = max(link.persisted, sequence_id)

    def failed(self, name: str) -> None:
        """A SEND of ``name`` could not be stored: the link is broken until it reconnects."""
        link = self._link(name)
        link.broken = True
        link.accepted = link.persisted

    def producer_admitted(self, name: str) -> None:
        """A new producer of the link: it sends again from its cursor."""
        self._link(name).broken = False

    def last_sequence_id(self, name: str) -> int:
        link = self._links.get(name)
        return link.persisted if link is not None else -1

    # -- snapshots and recovery
    def count_stored(self, entries: int) -> bool:
        """``entries`` more were stored: True when a snapshot is due."""
        if not self._links:
            return False
        self.entries_since_snapshot += entries
        return self.entries_since_snapshot >= SNAPSHOT_EVERY_ENTRIES

    def snapshot(self, position: Position) -> SequenceSnapshot:
        """The recovery point at ``position`` (every completed add up to it reported)."""
        self.entries_since_snapshot = 0
        return SequenceSnapshot(position, {n: link.persisted for n, link in self._links.items()})

    def snapshot_stored(self, snap: SequenceSnapshot) -> None:
        self.snapshotted = self.snapshotted | frozenset(snap.ids)

    def restore(self, snap: SequenceSnapshot) -> None:
        for name, highest in snap.ids.items():
            link = self._link(name)
            link.persisted = max(link.persisted, highest)
            link.accepted = max(link.accepted, link.persisted)
        self.snapshotted = frozenset(snap.ids)

    def recover(self, metadata: pb.MessageMetadata) -> None:
        """A stored entry read on load, after the snapshot's position."""
        if not metadata.HasField("replicated_from"):
            return
        source = metadata.replicated_from
        if not source or source == self.local:
            return
        for prop in metadata.properties:
            if prop.key == SOURCE_POSITION_PROPERTY:
                position = SourcePosition.parse(prop.value)
                if position is not None:
                    name = ReplicationLink(source, self.local).producer_name
                    link = self._link(name)
                    link.persisted = max(link.persisted, position.sequence_id)
                    link.accepted = max(link.accepted, link.persisted)
                return

    def check_invariants(self) -> None:
        for link in self._links.values():
            assert link.persisted <= link.accepted or link.broken, link


__all__ = [
    "INBOUND_SNAPSHOTS",
    "LINKS_MAX",
    "SNAPSHOT_EVERY_ENTRIES",
    "SNAPSHOT_PROPERTY",
    "InboundLinks",
    "Verdict",
    "link_of_producer",
]
