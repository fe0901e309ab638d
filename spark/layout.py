"""Where a topic-partition's entries are stored, as the broker's admin REST API tells it
(``GET .../{topic}/ledgers``, ``broker/admin/ledgers_api.py``).

Owns: the records ``Fragment``, ``LedgerLayout`` and ``PartitionLayout`` (frozen and
picklable: they travel to the executors inside the splits, so an executor needs the bookies'
addresses, or the offload record of a ledger offloaded to tiered storage, and nothing else:
no ZooKeeper, no driver state) and ``parse_layout``, which turns the endpoint's JSON into
them, refusing a body that does not have that shape.

Invariants: ledgers are in the topic's order (ascending ids); a ledger still on the bookies
has fragments sorted by first entry, the first at 0, each with at least ``write_quorum``
bookies; a ledger whose bookie copy is deleted has no fragments, is closed and has an offload
record (``offload``: where its objects are); ``entries`` is what a reader may take
(``0 .. entries-1``).

Must not know: Spark, HTTP, the bookies' protocol.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any


class LayoutError(ValueError):
    """The admin API answered something that is not a topic's storage layout."""


@dataclass(frozen=True, slots=True)
class Fragment:
    """Entries from ``first_entry`` (to the next fragment's first) live on ``bookies``."""

    first_entry: int
    bookies: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class LedgerLayout:
    ledger_id: int
    entries: int
    size: int
    closed: bool
    write_quorum: int
    fragments: tuple[Fragment, ...]
    ack_quorum: int = 1
    ensemble_size: int = 1
    last_entry_id: int = -1
    """The last entry of a closed ledger (-1 while open)."""
    length: int = 0
    """Bytes of a closed ledger (0 while open)."""
    offload: str | None = None
    """The ledger is offloaded to tiered storage: its offload record (the endpoint's
    ``offloadContext.record``: driver, bucket, keys), as JSON text. None: not offloaded."""

    @property
    def on_bookies(self) -> bool:
        """The bookies still hold the ledger (its copy is not deleted after an offload)."""
        return bool(self.fragments)

    @property
    def entry_bytes(self) -> float:
        """Average stored bytes per entry (1 when unknown)."""
        return self.size / self.entries if self.entries > 0 and self.size > 0 else 1.0

    @property
    def striped(self) -> bool:
        """Some bookie of an ensemble holds only part of its fragment's entries (E > Qw)."""
        return any(len(f.bookies) > self.write_quorum for f in self.fragments)


@dataclass(frozen=True, slots=True)
class PartitionLayout:
    topic: str
    ledgers: tuple[LedgerLayout, ...]
    messages_per_entry: float | None
    """Messages per entry published since the broker loaded the topic (None: unknown)."""
    bookie_tls: bool

    def ledger(self, ledger_id: int) -> LedgerLayout | None:
        for led in self.ledgers:
            if led.ledger_id == ledger_id:
                return led
        return None


def _int(doc: dict[str, Any], key: str) -> int:
    value = doc.get(key)
    if not isinstance(value, int) or isinstance(value, bool):
        raise LayoutError(f"{key!r} is {value!r}, not an integer")
    return value


def _offload_record(doc: dict[str, Any]) -> str | None:
    """A completely offloaded ledger's record as JSON text (None: not offloaded)."""
    if doc.get("offloaded") is not True:
        return None
    context = doc.get("offloadContext")
    record = context.get("record") if isinstance(context, dict) else None
    if not isinstance(record, dict) or not record:
        raise LayoutError(f"ledger {doc.get('ledgerId')}: offloaded without an offload record")
    return json.dumps(record, sort_keys=True)


def _ledger(doc: Any) -> LedgerLayout:
    if not isinstance(doc, dict):
        raise LayoutError(f"a ledger is {doc!r}, not an object")
    offload = _offload_record(doc)
    if doc.get("bookkeeperDeleted") is True or (offload is not None and not doc.get("ensembles")):
        if offload is None:
            raise LayoutError(
                f"ledger {doc.get('ledgerId')}: deleted from the bookies and not offloaded"
            )
        return LedgerLayout(
            ledger_id=_int(doc, "ledgerId"),
            entries=max(0, _int(doc, "entries")),
            size=max(0, _int(doc, "size")),
            closed=True,
            write_quorum=0,
            fragments=(),
            last_entry_id=_int(doc, "lastEntryId"),
            length=max(0, _int(doc, "length")),
            offload=offload,
        )
    fragments = []
    for f in doc.get("ensembles") or []:
        if not isinstance(f, dict) or not isinstance(f.get("bookies"), list):
            raise LayoutError(f"an ensemble is {f!r}")
        bookies = tuple(str(b) for b in f["bookies"])
        fragments.append(Fragment(_int(f, "firstEntryId"), bookies))
    qw = _int(doc, "writeQuorum")
    if not fragments or fragments[0].first_entry != 0:
        raise LayoutError(f"ledger {doc.get('ledgerId')}: its first fragment must start at 0")
    if [f.first_entry for f in fragments] != sorted({f.first_entry for f in fragments}):
        raise LayoutError(f"ledger {doc.get('ledgerId')}: fragments out of order")
    if qw < 1 or any(len(f.bookies) < qw for f in fragments):
        raise LayoutError(f"ledger {doc.get('ledgerId')}: an ensemble smaller than Qw={qw}")
    aq = doc.get("ackQuorum", 1)
    es = doc.get("ensembleSize", len(fragments[0].bookies))
    if not isinstance(aq, int) or not isinstance(es, int) or not es >= qw >= aq >= 1:
        raise LayoutError(f"ledger {doc.get('ledgerId')}: quorums {es}/{qw}/{aq}")
    closed = doc.get("state") == "CLOSED"
    return LedgerLayout(
        ledger_id=_int(doc, "ledgerId"),
        entries=max(0, _int(doc, "entries")),
        size=max(0, _int(doc, "size")),
        closed=closed,
        write_quorum=qw,
        fragments=tuple(fragments),
        ack_quorum=aq,
        ensemble_size=es,
        last_entry_id=_int(doc, "lastEntryId") if closed else -1,
        length=max(0, _int(doc, "length")) if closed else 0,
        offload=offload,
    )


def parse_layout(topic: str, doc: Any) -> PartitionLayout:
    """The layout of ``topic`` from the JSON body of its ``/ledgers`` endpoint."""
    if not isinstance(doc, dict) or not isinstance(doc.get("ledgers"), list):
        raise LayoutError(f"not a ledger layout: {str(doc)[:200]}")
    ledgers = tuple(_ledger(d) for d in doc["ledgers"])
    if [led.ledger_id for led in ledgers] != sorted({led.ledger_id for led in ledgers}):
        raise LayoutError("ledgers out of order")
    mpe = doc.get("messagesPerEntry")
    return PartitionLayout(
        topic=topic,
        ledgers=ledgers,
        messages_per_entry=float(mpe) if isinstance(mpe, int | float) and mpe > 0 else None,
        bookie_tls=bool(doc.get("bookieTls")),
    )


__all__ = ["Fragment", "LayoutError", "LedgerLayout", "PartitionLayout", "parse_layout"]
