"""A managed ledger's list of ledgers: what its metadata node holds, and how to walk it.

Owns: ``LedgerInfo`` (one ledger: id, entries, bytes, creation then close time, and its
``OffloadContext`` once an offload of it was attempted: Pulsar's ``uid``, ``complete``,
``bookkeeperDeleted``, timestamp, driver name and metadata, and the offload record once
complete) and ``LedgerList``: the ledgers in log order and the managed ledger's
properties, their JSON codec (``zk.paths.managed_ledger(name)`` holds ``{ledgers: [{id,
entries, size, ts[, offload]}], properties}``), appending a new ledger, and navigation over
the list (how many entries a ledger has, the next ledger, the next position that names an
entry, the next readable range, sizes) up to the last confirmed position. The current
ledger's numbers are its writer's (confirmed so far): ``current`` is that writer.
Invariants: ledger ids strictly increase along the list, and a new ledger's id is above
every id this managed ledger has had (``max_ledger_id``, dropped empty ledgers included):
positions compare by ledger id first, so cursors, backlog, trimming and publish-time search
rely on it. ``append`` refuses a ledger that is not above (``LedgerOutOfOrder``).
A complete ``OffloadContext`` always carries its record (the data and index keys of a
verified upload); an incomplete one names only the attempt that may have left objects.
Must not know: bookies, cursors, the metadata store (the owner stores ``to_bytes``).
"""

from __future__ import annotations

import itertools
import json
import logging
import uuid as uuid_mod
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from magnetar.broker.bookkeeper.write_handle import WriteHandle
from magnetar.broker.ledger.errors import LedgerOutOfOrder
from magnetar.broker.ledger.position import Position
from magnetar.broker.offload.records import OffloadedLedger

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class OffloadContext:
    """Pulsar's ``OffloadContext`` of one ledger: the attempt recorded before it started
    (``uid``), whether it completed (then ``record`` says where the objects are), whether
    the bookies' copy was deleted since."""

    uid: uuid_mod.UUID
    complete: bool = False
    bookkeeper_deleted: bool = False
    timestamp_ms: int = 0
    """When the attempt started, then when it completed."""
    driver_name: str = ""
    driver_metadata: Mapping[str, str] = field(default_factory=dict)
    record: OffloadedLedger | None = None

    def __post_init__(self) -> None:
        if self.complete != (self.record is not None):
            raise ValueError("a complete offload context carries its record, only then")
        if self.bookkeeper_deleted and not self.complete:
            raise ValueError("only an offloaded ledger's bookie copy is deleted")

    def to_json(self) -> dict[str, Any]:
        doc: dict[str, Any] = {
            "uid": str(self.uid),
            "complete": self.complete,
            "bookkeeperDeleted": self.bookkeeper_deleted,
            "timestamp": self.timestamp_ms,
            "driverName": self.driver_name,
            "driverMetadata": dict(self.driver_metadata),
        }
        if self.record is not None:
            doc["record"] = self.record.to_json()
        return doc

    @classmethod
    def from_json(cls, doc: Mapping[str, Any]) -> OffloadContext:
        record = doc.get("record")
        return cls(
            uid=uuid_mod.UUID(str(doc["uid"])),
            complete=bool(doc.get("complete", False)),
            bookkeeper_deleted=bool(doc.get("bookkeeperDeleted", False)),
            timestamp_ms=int(doc.get("timestamp", 0)),
            driver_name=str(doc.get("driverName", "")),
            driver_metadata={
                str(k): str(v) for k, v in dict(doc.get("driverMetadata", {})).items()
            },
            record=OffloadedLedger.from_json(record) if record is not None else None,
        )


@dataclass(slots=True)
class LedgerInfo:
    ledger_id: int
    entries: int = 0
    size: int = 0
    timestamp_ms: int = 0
    """Creation time, then close time once closed: retention counts from the close, as in
    Pulsar (a ledger written for hours is not expired by the age of its first entry)."""
    offload: OffloadContext | None = None
    """Set when an offload of this ledger was attempted (see ``OffloadContext``)."""

    @property
    def offloaded(self) -> bool:
        """A verified copy is in the object store (and recorded)."""
        return self.offload is not None and self.offload.complete

    @property
    def bookkeeper_deleted(self) -> bool:
        """The bookies' copy is gone: only the object store holds the entries."""
        return self.offload is not None and self.offload.bookkeeper_deleted

    def to_json(self) -> dict[str, Any]:
        doc: dict[str, Any] = {
            "id": self.ledger_id,
            "entries": self.entries,
            "size": self.size,
            "ts": self.timestamp_ms,
        }
        if self.offload is not None:
            doc["offload"] = self.offload.to_json()
        return doc

    @classmethod
    def from_json(cls, doc: Mapping[str, Any]) -> LedgerInfo:
        offload = doc.get("offload")
        return cls(
            int(doc["id"]),
            int(doc["entries"]),
            int(doc["size"]),
            int(doc["ts"]),
            OffloadContext.from_json(offload) if offload is not None else None,
        )


@dataclass(frozen=True, slots=True)
class _Encoded:
    entries: int
    size: int
    timestamp_ms: int
    offload: OffloadContext | None
    data: bytes


@dataclass(slots=True)
class LedgerList:
    """The ledgers of one managed ledger, oldest first, and its properties."""

    name: str = ""
    ledgers: list[LedgerInfo] = field(default_factory=list)
    properties: dict[str, str] = field(default_factory=dict)
    max_ledger_id: int = -1
    """The largest ledger id this managed ledger has had (dropped empty ledgers too)."""
    current: WriteHandle | None = None
    """The writer of the last ledger while it is open for adds."""
    last_confirmed: Position = field(default_factory=lambda: Position(-1, -1))
    """The last entry confirmed to a writer (entry -1 of a ledger: none in it yet). Only
    moves forward, but to the start of the current ledger when every entry is deleted."""

    _encoded: dict[int, _Encoded] = field(default_factory=dict, repr=False, compare=False)
    """Each ledger's JSON as last encoded, with the values it was encoded from."""

    # -- codec --------------------------------------------------------------------------------
    def to_bytes(self) -> bytes:
        """The stored form: ``{"ledgers":[...],"properties":{...}}``, compact JSON. Written at
        every change of the list (an offload of n ledgers writes it about 3n times), so each
        ledger's part is encoded again only when its values changed: the list of a topic with
        hundreds of offloaded ledgers cost a third of the broker's CPU while they offloaded."""
        cache = self._encoded
        parts = []
        for info in self.ledgers:
            hit = cache.get(info.ledger_id)
            if (
                hit is None
                or hit.entries != info.entries
                or hit.size != info.size
                or hit.timestamp_ms != info.timestamp_ms
                or hit.offload is not info.offload  # frozen: the same object, the same JSON
            ):
                hit = _Encoded(
                    info.entries,
                    info.size,
                    info.timestamp_ms,
                    info.offload,
                    json.dumps(info.to_json(), separators=(",", ":")).encode(),
                )
                cache[info.ledger_id] = hit
            parts.append(hit.data)
        if len(cache) > len(self.ledgers):
            listed = {i.ledger_id for i in self.ledgers}
            for ledger_id in [k for k in cache if k not in listed]:
                del cache[ledger_id]
        properties = json.dumps(self.properties, separators=(",", ":")).encode()
        return b'{"ledgers":[' + b",".join(parts) + b'],"properties":' + properties + b"}"

    @classmethod
    def from_bytes(cls, name: str, data: bytes) -> LedgerList:
        """The stored list; ``LedgerOutOfOrder`` when its ids do not increase (written by a
        version without per-managed-ledger ordering): never read out of order."""
        if not data:
            return cls(name)
        doc = json.loads(data)
        ledgers = [LedgerInfo.from_json(d) for d in doc["ledgers"]]
        ids = [i.ledger_id for i in ledgers]
        if any(a >= b for a, b in itertools.pairwise(ids)):
            log.error("%s: stored ledger ids are not increasing: %s", name, ids)
            raise LedgerOutOfOrder(
                f"{name}: stored ledger ids {ids} are not increasing; positions would "
                "misorder (written by a version without per-managed-ledger ordering)"
            )
        return cls(name, ledgers, dict(doc.get("properties", {})), max(ids, default=-1))

    # -- changes ------------------------------------------------------------------------------
    def append(self, ledger_id: int, now_ms: int) -> LedgerInfo:
        """Append a new ledger; refuses one that would not sort after every ledger this
        managed ledger has had (``LedgerOutOfOrder``, logged as an error)."""
        if ledger_id <= self.max_ledger_id:
            log.error(
                "%s: refusing new ledger %d: not above ledger %d",
                self.name,
                ledger_id,
                self.max_ledger_id,
            )
            raise LedgerOutOfOrder(
                f"{self.name}: new ledger {ledger_id} is not above ledger "
                f"{self.max_ledger_id}; its entries would sort before older ones"
            )
        self.max_ledger_id = ledger_id
        info = LedgerInfo(ledger_id, 0, 0, now_ms)
        self.ledgers.append(info)
        return info

    def remove(self, gone: set[int]) -> None:
        self.ledgers = [i for i in self.ledgers if i.ledger_id not in gone]

    def info(self, ledger_id: int) -> LedgerInfo | None:
        for info in self.ledgers:
            if info.ledger_id == ledger_id:
                return info
        return None

    # -- navigation (the cursors' ``LedgerNavigator``) -----------------------------------------
    @property
    def ids(self) -> list[int]:
        return [i.ledger_id for i in self.ledgers]

    def entries_in(self, ledger_id: int) -> int | None:
        """Entries of a ledger (confirmed ones for the current ledger); 0 for a ledger not
        in the list, None for one after the current ledger (not created yet)."""
        current = self.current
        if current is not None and ledger_id == current.ledger_id:
            return current.last_add_confirmed + 1
        for info in self.ledgers:
            if info.ledger_id == ledger_id:
                return info.entries
        if current is not None and ledger_id > current.ledger_id:
            return None
        return 0

    def next_ledger(self, ledger_id: int) -> int | None:
        for info in self.ledgers:
            if info.ledger_id > ledger_id:
                return info.ledger_id
        return None

    def sizes(self) -> list[tuple[int, int, int]]:
        """(ledger id, entries, bytes) of every ledger, the current one as confirmed so far."""
        current = self.current
        out = []
        for info in self.ledgers:
            if current is not None and info.ledger_id == current.ledger_id:
                out.append((info.ledger_id, current.last_add_confirmed + 1, current.length))
            else:
                out.append((info.ledger_id, info.entries, info.size))
        return out

    @property
    def first_position(self) -> Position:
        """The first position that names an entry; after the last confirmed one when no
        ledger holds any."""
        for ledger_id, entries, _ in self.sizes():
            if entries > 0:
                return Position(ledger_id, 0)
        return self.position_after(self.last_confirmed)

    @staticmethod
    def position_after(pos: Position) -> Position:
        return Position(pos.ledger_id, pos.entry_id + 1)

    def next_valid_position(self, pos: Position) -> Position:
        """``pos`` if it names an entry (or the next one to be written), else the next one."""
        while True:
            entries = self.entries_in(pos.ledger_id)
            if entries is None:
                return pos
            current = self.current is not None and pos.ledger_id == self.current.ledger_id
            if pos.ledger_id in self.ids and (pos.entry_id < entries or current):
                return pos if pos.entry_id >= 0 else Position(pos.ledger_id, 0)
            following = self.next_ledger(pos.ledger_id)
            if following is None:
                return pos
            pos = Position(following, 0)

    def next_range(self, pos: Position, n: int) -> tuple[int, int, int] | None:
        """The next readable range (ledger id, first, last entry) of at most ``n`` entries
        at or after ``pos``, not past the last confirmed position; None when there is none.
        The one stop rule of every forward read."""
        last = self.last_confirmed
        pos = self.next_valid_position(pos)
        while pos <= last:
            entries = self.entries_in(pos.ledger_id) or 0
            end = min(entries - 1, pos.entry_id + n - 1)
            if pos.ledger_id == last.ledger_id:
                end = min(end, last.entry_id)
            if end >= pos.entry_id:
                return pos.ledger_id, pos.entry_id, end
            nxt = self.next_valid_position(Position(pos.ledger_id, max(entries, pos.entry_id + 1)))
            if nxt == pos:
                return None
            pos = nxt
        return None

    def entries_from(self, pos: Position, limit: int) -> int:
        """Confirmed entries at ``pos`` and after, counted up to ``limit``."""
        last = self.last_confirmed
        if pos.ledger_id == last.ledger_id:
            return max(0, last.entry_id - pos.entry_id + 1)
        if pos > last:
            return 0
        count = 0
        for ledger_id, entries, _ in reversed(self.sizes()):
            if ledger_id < pos.ledger_id or count >= limit:
                break
            count += entries - max(0, pos.entry_id) if ledger_id == pos.ledger_id else entries
        return count

    def average_entry_bytes(self, ledger_id: int) -> int:
        """Bytes per entry of a ledger (at least 1): what a read of it is estimated at."""
        for lid, entries, size in self.sizes():
            if lid == ledger_id and entries > 0:
                return max(1, size // entries)
        return 1


__all__ = ["LedgerInfo", "LedgerList", "OffloadContext"]
