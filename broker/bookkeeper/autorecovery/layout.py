"""The under-replication state in the metadata store (BookKeeper's ``/ledgers/underreplication``).

Owns: marking a ledger under-replicated (``zk.paths.underreplicated_ledger``: a persistent
node whose JSON value says which bookies were missing, why and when it was marked), listing
and unmarking the marks, the per-ledger replication lock (an ephemeral node at
``zk.paths.replication_lock``: one worker at a time, released by its session's death), and
the draining markers of bookies being decommissioned (``zk.paths.draining_bookie``).
Invariants: a mark is removed only by the worker holding the ledger's lock, after the ledger
was found fully replicated (or deleted); marking an already marked ledger merges the bookies.
Must not know: how ledgers are replicated, bookies' transport.
"""

from __future__ import annotations

import contextlib
import json
import logging
from dataclasses import dataclass

from magnetar.zk import paths
from magnetar.zk.errors import AlreadyExists, BadVersion, NotEmpty, NotFound
from magnetar.zk.recipes import OwnershipLock
from magnetar.zk.store import CREATE_ONLY, MetadataStore

log = logging.getLogger(__name__)

MARK_RETRIES = 5


@dataclass(frozen=True, slots=True)
class Mark:
    """One re-replication task."""

    ledger_id: int
    bookies: tuple[str, ...]
    reason: str
    marked_ms: int

    def encode(self) -> bytes:
        return json.dumps(
            {"bookies": list(self.bookies), "reason": self.reason, "marked_ms": self.marked_ms},
            sort_keys=True,
        ).encode()

    @classmethod
    def decode(cls, ledger_id: int, data: bytes) -> Mark:
        try:
            doc = json.loads(data) if data else {}
            return cls(
                ledger_id,
                tuple(str(b) for b in doc.get("bookies", ())),
                str(doc.get("reason", "")),
                int(doc.get("marked_ms", 0)),
            )
        except (ValueError, TypeError, AttributeError):
            return cls(ledger_id, (), "unreadable mark", 0)


class UnderReplication:
    """The marks, locks and draining markers."""

    def __init__(self, store: MetadataStore) -> None:
        self.store = store

    # -- marks ----------------------------------------------------------------------------
    async def mark(self, ledger_id: int, bookies: set[str], reason: str, now_ms: int) -> bool:
        """Mark (or add bookies to the mark of) a ledger; True when it was not marked yet."""
        path = paths.underreplicated_ledger(ledger_id)
        for _ in range(MARK_RETRIES):
            got = await self.store.get(path)
            if got is None:
                mark = Mark(ledger_id, tuple(sorted(bookies)), reason, now_ms)
                try:
                    await self.store.put(path, mark.encode(), expected_version=CREATE_ONLY)
                except AlreadyExists:
                    continue
                log.info("ledger %d under-replicated (%s): %s", ledger_id, reason, sorted(bookies))
                return True
            old = Mark.decode(ledger_id, got.value)
            if set(bookies) <= set(old.bookies):
                return False
            merged = Mark(
                ledger_id, tuple(sorted({*old.bookies, *bookies})), old.reason, old.marked_ms
            )
            try:
                await self.store.put(path, merged.encode(), expected_version=got.stat.version)
            except (BadVersion, NotFound):
                continue
            return False
        return False

    async def get(self, ledger_id: int) -> Mark | None:
        got = await self.store.get(paths.underreplicated_ledger(ledger_id))
        return None if got is None else Mark.decode(ledger_id, got.value)

    async def unmark(self, ledger_id: int) -> None:
        """Delete the mark and the now empty hex directories above it."""
        path = paths.underreplicated_ledger(ledger_id)
        with contextlib.suppress(NotFound):
            await self.store.delete(path)
        parent = path.rpartition("/")[0]
        while parent != paths.UNDERREPLICATED_LEDGERS:
            try:
                await self.store.delete(parent)
            except (NotEmpty, NotFound):
                break
            parent = parent.rpartition("/")[0]

    async def marked(self) -> list[int]:
        """Every marked ledger id, ascending (walks the 4 hex levels)."""
        out: list[int] = []
        level = [paths.UNDERREPLICATED_LEDGERS]
        for _ in range(4):
            nxt: list[str] = []
            for node in level:
                nxt.extend(f"{node}/{c}" for c in await self.store.children(node))
            level = nxt
        for node in level:
            for name in await self.store.children(node):
                ledger_id = paths.underreplicated_ledger_id_of(name)
                if ledger_id is not None:
                    out.append(ledger_id)
        return sorted(out)

    # -- locks -----------------------------------------------------------------------------
    def lock(self, ledger_id: int, owner: str) -> OwnershipLock:
        """The replication lock of a ledger (``acquire`` raises ``LockBusy`` when held)."""
        return OwnershipLock(self.store, paths.replication_lock(ledger_id), owner.encode())

    # -- draining --------------------------------------------------------------------------
    async def drain(self, bookie_id: str) -> None:
        with contextlib.suppress(AlreadyExists):
            await self.store.put(
                paths.draining_bookie(bookie_id), b"", expected_version=CREATE_ONLY
            )

    async def undrain(self, bookie_id: str) -> None:
        with contextlib.suppress(NotFound):
            await self.store.delete(paths.draining_bookie(bookie_id))

    async def draining(self) -> set[str]:
        return set(await self.store.children(paths.DRAINING_BOOKIES))


__all__ = ["Mark", "UnderReplication"]
