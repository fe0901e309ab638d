"""Where a durable cursor keeps its acknowledgement state: its znode and its own ledger.

Owns: ``CursorInfo`` (the znode's value: ``{cursor_ledger, mark_delete}``, changed only by
CAS: a lost CAS means another owner, the log is fenced) and ``CursorLog``: the cursor
ledger, which starts with a *snapshot* of the whole ack state (chunked into entries of at
most ``snapshot_chunk_bytes``) followed by *deltas*, one per group flush; reading it all
back at recovery (snapshot, then every delta); and rolling it over. A write starts a new
ledger with a fresh snapshot (the znode switched by CAS, then the old ledger closed and
deleted) instead of adding a delta when:
- the deltas would outweigh the snapshot (``cursor_snapshot_min_bytes`` at least): bounds
  the replay of a recovery;
- the ledger holds ``cursor_max_entries_per_ledger`` entries, or was started
  ``cursor_rollover_time_ms`` ago or more (Pulsar's ``managedLedgerCursorMaxEntriesPerLedger``
  / ``managedLedgerCursorRolloverTimeInSeconds``): bounds each ledger, as Pulsar, checked
  when the cursor writes (an idle cursor's ledger does not grow);
- a delta failed, the state was reset, or nothing was written since recovery.
Invariants: the znode names a ledger whose snapshot is durable; an old ledger is deleted
only after the znode names its successor.
Must not know: acknowledgement semantics (``ackstate.py`` encodes them), topics.
"""

from __future__ import annotations

import asyncio
import json
import logging
from dataclasses import dataclass
from typing import Protocol

from magnetar.broker.bookkeeper.client import LedgerClient
from magnetar.broker.bookkeeper.errors import LedgerError, LedgerNotFound
from magnetar.broker.bookkeeper.write_handle import WriteHandle
from magnetar.broker.ledger.ackstate import AckDelta, AckState, decode_delta, encode_delta
from magnetar.broker.ledger.config import ManagedLedgerConfig
from magnetar.broker.ledger.errors import CursorAlreadyExists, ManagedLedgerFenced
from magnetar.broker.ledger.position import Position
from magnetar.clock import Clock
from magnetar.zk import paths
from magnetar.zk.errors import AlreadyExists, BadVersion, NotFound
from magnetar.zk.store import CREATE_ONLY, MetadataStore

log = logging.getLogger(__name__)

SNAPSHOT_CHUNK = b"S"
DELTA = b"D"


@dataclass(frozen=True, slots=True)
class CursorInfo:
    """The cursor znode's value."""

    cursor_ledger_id: int
    mark_delete: Position

    def to_bytes(self) -> bytes:
        return json.dumps(
            {"cursor_ledger": self.cursor_ledger_id, "mark_delete": str(self.mark_delete)}
        ).encode()

    @classmethod
    def from_bytes(cls, data: bytes) -> CursorInfo:
        doc = json.loads(data)
        return cls(int(doc["cursor_ledger"]), Position.parse(doc["mark_delete"]))


class LogHost(Protocol):
    """What a cursor log needs of its managed ledger."""

    @property
    def name(self) -> str: ...

    @property
    def store(self) -> MetadataStore: ...

    @property
    def config(self) -> ManagedLedgerConfig: ...

    @property
    def ledger_client(self) -> LedgerClient: ...

    @property
    def clock(self) -> Clock: ...


class CursorLog:
    """The durable state of one cursor."""

    def __init__(
        self, host: LogHost, cursor: str, *, znode_version: int = -1, ledger_id: int = -1
    ) -> None:
        self._host = host
        self._cursor = cursor
        self._path = paths.managed_cursor(host.name, cursor)
        self._znode_version = znode_version
        self._ledger: WriteHandle | None = None
        self.ledger_id = ledger_id
        """The cursor ledger the znode names (-1: none)."""
        self.needs_snapshot = True
        """The next write starts a new ledger with a snapshot (set after a failed write)."""
        self._snapshot_bytes = 0
        self._delta_bytes = 0
        self._started_ms = 0.0
        self.snapshots = 0
        self.fenced = False

    def __repr__(self) -> str:
        return f"<CursorLog {self._path} ledger={self.ledger_id}>"

    @classmethod
    async def create(cls, host: LogHost, cursor: str, mark_delete: Position) -> CursorLog:
        """A new cursor's log: its znode created (create-only: ``CursorAlreadyExists`` when
        another owner made it), no ledger until the first write."""
        try:
            result = await host.store.put(
                paths.managed_cursor(host.name, cursor),
                CursorInfo(-1, mark_delete).to_bytes(),
                expected_version=CREATE_ONLY,
            )
        except AlreadyExists:
            raise CursorAlreadyExists(f"cursor {cursor} created by another owner") from None
        return cls(host, cursor, znode_version=result.stat.version)

    # -- writing ----------------------------------------------------------------------------------
    async def write(self, state: AckState, delta: AckDelta | None) -> None:
        """Make ``state`` durable: ``delta`` (what changed since the last write) appended to
        the cursor ledger, or a new ledger with a snapshot (see the module docstring)."""
        ledger = self._ledger
        if ledger is not None and not self.needs_snapshot and delta is not None:
            blob = DELTA + encode_delta(delta)
            if not self._rolls(ledger, len(blob)):
                try:
                    await ledger.add(blob)
                    self._delta_bytes += len(blob)
                    return
                except LedgerError as exc:
                    log.warning(
                        "cursor %s: delta write failed (%r); new snapshot", self._cursor, exc
                    )
                    if isinstance(exc, ManagedLedgerFenced):
                        raise
        await self._write_snapshot(state)

    def _rolls(self, ledger: WriteHandle, delta_bytes: int) -> bool:
        cfg = self._host.config
        return (
            self._delta_bytes + delta_bytes
            > max(cfg.cursor_snapshot_min_bytes, self._snapshot_bytes)
            or ledger.next_entry_id >= cfg.cursor_max_entries_per_ledger
            or self._host.clock.monotonic_ms() - self._started_ms >= cfg.cursor_rollover_time_ms
        )

    async def _write_snapshot(self, state: AckState) -> None:
        host = self._host
        blob = state.encode_snapshot()
        chunk = host.config.snapshot_chunk_bytes
        chunks = [blob[i : i + chunk] for i in range(0, len(blob), chunk)] or [b""]
        handle = await host.ledger_client.create_ledger(
            custom={"managed-ledger": host.name, "cursor": self._cursor}
        )
        futs = [
            handle.add_nowait(SNAPSHOT_CHUNK + len(chunks).to_bytes(4, "big") + c) for c in chunks
        ]
        await asyncio.gather(*futs)
        info = CursorInfo(handle.ledger_id, state.mark_delete)
        try:
            result = await host.store.put(
                self._path, info.to_bytes(), expected_version=self._znode_version
            )
        except (BadVersion, NotFound):
            self.fenced = True
            await handle.abort()
            raise ManagedLedgerFenced(
                f"cursor {self._cursor}: znode changed by another owner"
            ) from None
        self._znode_version = result.stat.version
        old, old_id = self._ledger, self.ledger_id
        self._ledger, self.ledger_id = handle, handle.ledger_id
        self._started_ms = host.clock.monotonic_ms()
        self.needs_snapshot = False
        self._snapshot_bytes = len(blob)
        self._delta_bytes = 0
        self.snapshots += 1
        if old is not None:
            try:
                await old.close()
            except LedgerError:
                pass
        if old_id >= 0:
            await host.ledger_client.delete_ledger(old_id)

    # -- recovery ---------------------------------------------------------------------------------
    @classmethod
    async def recover(cls, host: LogHost, cursor: str) -> tuple[CursorLog, AckState]:
        """The log of ``cursor`` and the state it holds (the cursor ledger recovered, its
        snapshot loaded and every delta replayed), the znode claimed (CAS, same value: a
        deposed owner's next snapshot switch fails)."""
        path = paths.managed_cursor(host.name, cursor)
        got = await host.store.get(path)
        if got is None:
            raise NotFound("cursor znode missing", path=path)
        info = CursorInfo.from_bytes(got.value)
        state = AckState(info.mark_delete)
        reader = None
        if info.cursor_ledger_id >= 0:
            try:
                reader = await host.ledger_client.open_ledger(info.cursor_ledger_id, recovery=True)
            except LedgerNotFound:
                # a stale reference (the ledger was deleted): start again from the znode's
                # mark-delete rather than never loading; later acks are redelivered, none lost
                log.warning(
                    "cursor %s/%s: cursor ledger %d is gone; recovered from mark-delete %s",
                    host.name,
                    cursor,
                    info.cursor_ledger_id,
                    info.mark_delete,
                )
        if reader is not None:
            lac = reader.last_add_confirmed
            entries = await reader.read(0, lac) if lac >= 0 else []
            chunks: list[bytes] = []
            deltas: list[bytes] = []
            for e in entries:
                kind, body = e.payload[:1], e.payload[1:]
                if kind == SNAPSHOT_CHUNK:
                    chunks.append(body[4:])
                elif kind == DELTA:
                    deltas.append(body)
            if chunks:
                state = AckState.decode_snapshot(b"".join(chunks))
            for blob in deltas:
                state.apply(decode_delta(blob))
        try:
            claimed = await host.store.put(path, got.value, expected_version=got.stat.version)
        except (BadVersion, NotFound):
            raise ManagedLedgerFenced(f"cursor {cursor}: taken over while recovering") from None
        log_ = cls(
            host,
            cursor,
            znode_version=claimed.stat.version,
            ledger_id=info.cursor_ledger_id if reader is not None else -1,
        )
        return log_, state

    # -- closing ----------------------------------------------------------------------------------
    async def close(self) -> None:
        if self._ledger is not None:
            try:
                await self._ledger.close()
            except LedgerError:
                pass

    async def delete(self) -> None:
        """Delete the cursor ledger and the znode."""
        if self._ledger is not None:
            await self._ledger.abort()
        if self.ledger_id >= 0:
            await self._host.ledger_client.delete_ledger(self.ledger_id)
        try:
            await self._host.store.delete(self._path)
        except NotFound:
            pass


__all__ = ["DELTA", "SNAPSHOT_CHUNK", "CursorInfo", "CursorLog"]
