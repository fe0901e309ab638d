"""The single writer of a ledger (``WriteHandle``), BookKeeper's client side of replication.

Owns, for one ledger:
- Add path (entries framed as ``entry.py`` says): entry e goes to the Qw bookies of its
  write set; it completes when Qa of them acked AND every earlier entry completed; LAC then
  moves to e (only forward) and rides on every later add. ``add_nowait`` decides
  synchronously (assigns the id) and returns a future; the adds of one loop iteration are
  sent together, one ``add_batch`` (one future) per bookie, and each bookie's answers are
  processed per batch; completions are delivered strictly in entry order.
- Bookie failure (error or no ack within ``add_timeout_ms``): the bookie is replaced by an
  ensemble change (new fragment from LAC+1, metadata CAS), unacknowledged entries are
  re-sent; no completion is delivered while a change is in progress. When no spare bookie
  exists the ensemble may shrink to the healthy members if at least Qw remain. When neither
  works within ``ensemble_change_timeout_ms`` the handle fails (ERRORED): its owner may take
  the unconfirmed adds (``take_unconfirmed``), and ``close`` closes the ledger at the LAC.
- A bookie of the open fragment that is draining (being decommissioned) is replaced the same
  way, when a spare bookie exists (checked on the add-timeout timer).
- ``Fenced`` from any bookie, or a CAS that finds the ledger IN_RECOVERY/CLOSED by someone
  else, puts the handle in FENCED: every pending and later add fails with ``LedgerFenced``.
- Reads are a ``BookieReadHandle``'s (``read_handle.py``) up to this writer's LAC; the
  metadata a read reloads is used for that read only (the writer's own changes by CAS).
Must not know: managed ledgers, topics, gRPC.
"""

from __future__ import annotations

import asyncio
import collections
import functools
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import crc32c

from magnetar.bookie.errors import BookieError, BookieUnavailable, Fenced, Unauthorized
from magnetar.broker.bookkeeper.context import HandleContext
from magnetar.broker.bookkeeper.entry import HEADER, HEADER_BYTES, LedgerEntry
from magnetar.broker.bookkeeper.errors import (
    LedgerClosed,
    LedgerError,
    LedgerFenced,
    NotEnoughBookies,
    TooManyPendingAdds,
)
from magnetar.broker.bookkeeper.metadata import LedgerMetadata, write_sets
from magnetar.broker.bookkeeper.placement import LedgerBookieClient
from magnetar.broker.bookkeeper.read_handle import BookieReadHandle
from magnetar.broker.bookkeeper.states import HANDLE_FSM, HandleEvent, HandleState, LedgerState
from magnetar.zk import paths
from magnetar.zk.errors import BadVersion, MetadataError

log = logging.getLogger(__name__)

# enum members as module constants: a class attribute lookup of an Enum member costs
# about 0.2 us on Python 3.11, and the add path checks the state several times per entry
_OPEN = HandleState.OPEN
_CLOSING = HandleState.CLOSING
_LIVE = (HandleState.OPEN, HandleState.CLOSING)

OUTBOX_MAX_ENTRIES = 1_000
OUTBOX_MAX_BYTES = 4 << 20
"""Adds of one loop iteration are sent as one batch per bookie, at most this big."""

COMPLETIONS_PER_STEP = 1 << 62
"""At most this many adds complete in one loop callback, the next ones in the next callback
(then what completions trigger, typically the next adds, is flushed to the bookies while
later completions are still being delivered). Unlimited by default: measured on a loaded
two-core machine, 128 cost the bookies more CPU per add (more, smaller journal groups) for
no clear throughput gain; ``bench/ledger_perf.py --completions-per-step`` to try."""

_pack_header = HEADER.pack
_unpack_header = HEADER.unpack_from


@dataclass(frozen=True, slots=True)
class HandleStatistics:
    ledger_id: int
    state: str
    last_add_confirmed: int
    next_entry_id: int
    pending_adds: int
    length: int
    ensemble_changes: int
    ensemble: tuple[str, ...]


class _PendingAdd:
    """One add not yet completed. It is also what the bookie clients encode (``entry_id``,
    ``lac``, ``crc32c``, ``payload`` = the stored bytes): no request object per entry.
    ``WriteHandle.add_nowait`` fills one in place (``object.__new__`` and slot stores cost
    about 40% less than a call to ``__init__`` with nine arguments); keep both in step."""

    __slots__ = (
        "acked",
        "crc32c",
        "data",
        "entry_id",
        "future",
        "lac",
        "payload",
        "result",
        "sent_ms",
        "ws",
    )

    def __init__(  # noqa: PLR0917
        self,
        entry_id: int,
        lac: int,
        stored: bytes,
        future: asyncio.Future[Any],
        ws: tuple[str, ...],
        sent_ms: float,
        result: object,
        data: bytes,
    ) -> None:
        self.entry_id = entry_id
        self.lac = lac
        self.payload = stored
        self.crc32c: int = crc32c.crc32c(stored)
        self.future = future
        self.ws = ws
        self.sent_ms = sent_ms
        self.result = result
        self.data = data
        """The application payload (``payload`` minus the header)."""
        self.acked: set[str] = set()


_new_pending = object.__new__
_crc32c = crc32c.crc32c


class WriteHandle(BookieReadHandle):
    """The single writer of an OPEN ledger (or the recoverer of an IN_RECOVERY one)."""

    _adopts_fresh_metadata = False

    def __init__(
        self,
        client: HandleContext,
        metadata: LedgerMetadata,
        version: int,
        *,
        recovery: bool = False,
        last_add_confirmed: int = -1,
        length: int = 0,
    ) -> None:
        super().__init__(client.registry, metadata, version, reload=client.reload_metadata)
        self._client = client
        cfg = client.config
        self._recovery = recovery
        self._expected_state = LedgerState.IN_RECOVERY if recovery else LedgerState.OPEN
        self._lac = last_add_confirmed
        self._next_entry_id = last_add_confirmed + 1
        self._length = length
        self._confirmed_length = length
        self._pending: collections.deque[_PendingAdd] = collections.deque()
        self._max_pending = cfg.max_pending_adds
        self._add_timeout_ms = cfg.add_timeout_ms
        self.state = HandleState.OPEN
        self._failed: set[str] = set()
        self._changing = False
        self._ledger_id = metadata.ledger_id
        self._master_key = metadata.master_key
        self._now_ms = client.clock.monotonic_ms
        # per bookie, the batches sent and not yet answered, in send order
        self._inflight: dict[
            str, collections.deque[tuple[list[_PendingAdd], asyncio.Future[None]]]
        ] = {}
        # adds of this loop iteration, not yet sent: sent together by _flush_outbox
        self._outbox: list[_PendingAdd] = []
        self._outbox_bytes = 0
        self._flush_scheduled = False
        self._complete_scheduled = False
        self._degraded_retry_ms = 0.0
        self._loop = asyncio.get_running_loop()
        self._clients: dict[str, LedgerBookieClient] = {}
        self._change_task: asyncio.Task[None] | None = None
        self._drain_check: asyncio.Future[None] | None = None
        self._ensemble_changes = 0
        self._error: LedgerError | None = None
        self._drained: asyncio.Event = asyncio.Event()
        self._drained.set()
        self._timer = client.clock.call_later(self._add_timeout_ms / 2000.0, self._on_timer)
        self._lac_listeners: list[Callable[[int], None]] = []
        self.on_confirmed: Callable[[int, list[bytes]], None] | None = None
        """Batch hook: (last entry id, payloads confirmed in this step, in order)."""
        self.on_failed: Callable[[LedgerError], None] | None = None
        """Called once when the handle is fenced or fails."""
        self.fenced_error: Callable[[str], LedgerError] = LedgerFenced
        self._ws_first = metadata.last_fragment_first_entry
        self._ws_table = write_sets(metadata.last_ensemble, metadata.write_quorum)
        self._ws_count = len(self._ws_table)
        self._outbox_ms = 0.0
        """When the first add of the current outbox was queued (its adds' ``sent_ms``)."""
        self.result_factory: Callable[[int, int], object] | None = None
        """What an add's future resolves to when no ``result`` is given:
        ``result_factory(ledger_id, entry_id)`` (the managed ledger's ``Position``)."""

    def __repr__(self) -> str:
        return (
            f"<WriteHandle ledger={self.ledger_id} {self.state.name} lac={self._lac} "
            f"pending={len(self._pending)} ensemble={self.metadata.last_ensemble}>"
        )

    # -- read side ----------------------------------------------------------------------------
    @property
    def length(self) -> int:
        return self._confirmed_length

    @property
    def next_entry_id(self) -> int:
        return self._next_entry_id

    @property
    def pending_adds(self) -> int:
        return len(self._pending)

    @property
    def is_closed(self) -> bool:
        return self.state is HandleState.CLOSED

    async def read_lac(self) -> int:
        return self._lac

    async def wait_for_lac(self, previous_lac: int, timeout_ms: int) -> int:
        if self._lac > previous_lac or self.state is not HandleState.OPEN:
            return self._lac
        fut: asyncio.Future[int] = asyncio.get_running_loop().create_future()

        def on_lac(lac: int) -> None:
            if not fut.done():
                fut.set_result(lac)

        self._lac_listeners.append(on_lac)
        try:
            return await asyncio.wait_for(fut, timeout_ms / 1000.0)
        except TimeoutError:
            return self._lac
        finally:
            if on_lac in self._lac_listeners:
                self._lac_listeners.remove(on_lac)

    def add_lac_listener(self, listener: Callable[[int], None]) -> None:
        """``listener(lac)`` runs on every LAC advance (used by tailing readers)."""
        self._lac_listeners.append(listener)

    # -- add path -------------------------------------------------------------------------------
    def add_nowait(self, payload: bytes, result: object = None) -> asyncio.Future[Any]:
        """Queue an add; the future resolves once it is acknowledged, to ``result`` if
        given, else to ``result_factory(ledger_id, entry_id)`` if set, else to the entry id."""
        # the hot path of every add: one call, no helper calls but the pending record's
        pending = self._pending
        if self.state is not _OPEN or self._recovery or len(pending) >= self._max_pending:
            raise self._add_refused()
        # HANDLE_FSM allows (OPEN, ADD) -> OPEN
        entry_id = self._next_entry_id
        n = len(payload)
        length = self._length + n
        stored = _pack_header(length) + payload
        if result is None:
            factory = self.result_factory
            result = entry_id if factory is None else factory(self._ledger_id, entry_id)
        outbox = self._outbox
        if not outbox:
            self._outbox_ms = self._now_ms()
        future: asyncio.Future[Any] = self._loop.create_future()
        add: _PendingAdd = _new_pending(_PendingAdd)  # as _PendingAdd.__init__ does
        add.entry_id = entry_id
        add.lac = self._lac
        add.payload = stored
        add.crc32c = _crc32c(stored)
        add.future = future
        add.ws = (
            self._ws_table[entry_id % self._ws_count]
            if entry_id >= self._ws_first
            else self.metadata.write_set(entry_id)
        )
        add.sent_ms = self._outbox_ms
        add.result = result
        add.data = payload
        add.acked = set()
        self._next_entry_id = entry_id + 1
        self._length = length
        if not pending:
            self._drained.clear()
        pending.append(add)
        outbox.append(add)
        self._outbox_bytes += n + HEADER_BYTES
        if len(outbox) >= OUTBOX_MAX_ENTRIES or self._outbox_bytes >= OUTBOX_MAX_BYTES:
            self._flush_outbox()
        elif not self._flush_scheduled:
            self._flush_scheduled = True
            self._loop.call_soon(self._on_flush)
        return future

    def _add_refused(self) -> LedgerError:
        if self.state is not _OPEN:
            return self._state_error()
        if self._recovery:
            return LedgerClosed("a recovery handle only re-writes recovered entries")
        return TooManyPendingAdds(f"{len(self._pending)} adds pending on {self.ledger_id}")

    async def add(self, payload: bytes) -> int:
        return await self.add_nowait(payload)

    def add_recovered(self, entry: LedgerEntry, stored: bytes) -> asyncio.Future[int]:
        """Recovery: re-write an entry found on some bookie to its whole write set."""
        if entry.entry_id != self._next_entry_id:
            raise ValueError(f"recovered entry {entry.entry_id} != next {self._next_entry_id}")
        if self.state is not HandleState.OPEN:
            raise self._state_error()
        entry_id = entry.entry_id
        n = entry.cumulative_length - self._length
        future: asyncio.Future[int] = self._loop.create_future()
        add = _PendingAdd(
            entry_id,
            self._lac,
            stored,
            future,
            self.metadata.write_set(entry_id),
            self._now_ms(),
            entry_id,
            entry.payload,
        )
        self._next_entry_id = entry_id + 1
        self._length += n
        if not self._pending:
            self._drained.clear()
        self._pending.append(add)
        self._outbox.append(add)
        self._outbox_bytes += len(stored)
        if len(self._outbox) >= OUTBOX_MAX_ENTRIES or self._outbox_bytes >= OUTBOX_MAX_BYTES:
            self._flush_outbox()
        elif not self._flush_scheduled:
            self._flush_scheduled = True
            self._loop.call_soon(self._on_flush)
        return future

    def _on_flush(self) -> None:
        self._flush_scheduled = False
        if self._outbox:
            self._flush_outbox()

    def hold_flush(self) -> bool:
        """Before a run of adds its caller ends with ``release_flush``: the run is sent when
        released, without a loop callback of its own. False (nothing held) if a flush is
        already due this loop iteration: the run then travels with it."""
        if self._flush_scheduled:
            return False
        self._flush_scheduled = True
        return True

    def release_flush(self) -> None:
        """Send the adds queued since ``hold_flush`` returned True (synchronously)."""
        self._flush_scheduled = False
        if self._outbox:
            self._flush_outbox()

    def _flush_outbox(self) -> None:
        """Send the adds of this loop iteration: one batch per bookie."""
        entries, self._outbox = self._outbox, []
        self._outbox_bytes = 0
        if self.state not in _LIVE:
            return  # failed or fenced: their futures have failed
        meta = self.metadata
        failed = self._failed
        if len(meta.last_ensemble) == meta.write_quorum and entries[0].entry_id >= self._ws_first:
            # every entry of the last fragment goes to every bookie of its ensemble (the
            # outbox is emptied by an ensemble change, so these entries are all in it)
            for bookie in meta.last_ensemble:
                if bookie not in failed:
                    self._send_batch(bookie, entries)
            return
        by_bookie: dict[str, list[_PendingAdd]] = {}
        for p in entries:
            for bookie in p.ws:
                if bookie not in failed:
                    lst = by_bookie.get(bookie)
                    if lst is None:
                        by_bookie[bookie] = [p]
                    else:
                        lst.append(p)
        for bookie, lst in by_bookie.items():
            self._send_batch(bookie, lst)

    def _send_batch(self, bookie: str, entries: list[_PendingAdd]) -> None:
        try:
            client = self._clients.get(bookie)
            if client is None:
                client = self._clients[bookie] = self._client.registry.client(bookie)
            fut = client.add_batch(
                self._ledger_id, self._master_key, entries, recovery=self._recovery
            )
        except BookieError as exc:
            self._on_batch_error(bookie, entries, exc)
            return
        queue = self._inflight.get(bookie)
        if queue is None:
            queue = self._inflight[bookie] = collections.deque()
        queue.append((entries, fut))
        fut.add_done_callback(functools.partial(self._on_progress, bookie))

    def _on_progress(self, bookie: str, _: asyncio.Future[None]) -> None:
        """Process every answered batch of ``bookie``, in send order, then deliver
        completions. (A bookie client answers in order; if a later batch is answered first,
        the head's own callback processes both.)"""
        queue = self._inflight.get(bookie)
        while queue:
            entries, fut = queue[0]
            if not fut.done():
                break
            queue.popleft()
            exc: BaseException | None
            exc = BookieUnavailable("add cancelled") if fut.cancelled() else fut.exception()
            if exc is None:
                for p in entries:
                    if bookie in p.ws:
                        p.acked.add(bookie)
            else:
                self._on_batch_error(bookie, entries, exc)
        if (
            self._pending
            and len(self._pending[0].acked) >= self.metadata.ack_quorum
            and self.state in _LIVE
        ):
            self._complete_ready()

    def _on_batch_error(self, bookie: str, entries: list[_PendingAdd], exc: BaseException) -> None:
        if isinstance(exc, Fenced | Unauthorized):
            self._fence(f"bookie {bookie} answered {type(exc).__name__}")
            return
        if self.state not in (HandleState.OPEN, HandleState.CLOSING):
            return
        if not any(bookie in p.ws for p in entries):
            return  # already replaced, or nothing left to do
        log.info("ledger %s: bookie %s failed an add: %r", self.ledger_id, bookie, exc)
        self._bookie_failed(bookie)

    def _complete_ready(self) -> None:
        """Deliver completions in entry order (never during an ensemble change)."""
        if self._changing:
            return
        qa = self.metadata.ack_quorum
        pending = self._pending
        popleft = pending.popleft
        confirmed: list[bytes] = []
        append = confirmed.append
        last = None
        budget = COMPLETIONS_PER_STEP
        while pending:
            head = pending[0]
            if len(head.acked) < qa:
                break
            if not budget:
                if not self._complete_scheduled:
                    self._complete_scheduled = True
                    self._loop.call_soon(self._complete_step)
                break
            budget -= 1
            last = popleft()
            append(head.data)
            future = head.future
            if not future.done():
                future.set_result(head.result)  # callbacks run later: LAC is set below
        if last is not None:
            self._lac += len(confirmed)  # the pending adds are consecutive from LAC + 1
            # the last confirmed entry's header holds the ledger's length up to it
            (self._confirmed_length,) = _unpack_header(last.payload)
            if self.on_confirmed is not None:
                self.on_confirmed(self._lac, confirmed)
            for listener in list(self._lac_listeners):
                listener(self._lac)
        if not pending:
            self._drained.set()

    def _complete_step(self) -> None:
        self._complete_scheduled = False
        if self.state in _LIVE:
            self._complete_ready()

    # -- failures -----------------------------------------------------------------------------
    def _on_timer(self) -> None:
        if self.state not in (HandleState.OPEN, HandleState.CLOSING):
            return
        self._timer = self._client.clock.call_later(self._add_timeout_ms / 2000.0, self._on_timer)
        if self._changing:
            return
        draining = self._client.registry.draining
        if draining and not self._drain_check:
            members = draining.intersection(self.metadata.last_ensemble) - self._failed
            if members:
                self._drain_check = asyncio.ensure_future(self._move_off_draining(members))
                self._drain_check.add_done_callback(self._drain_check_done)
        if self._degraded_retry_ms and self._client.clock.monotonic_ms() >= self._degraded_retry_ms:
            self._degraded_retry_ms = 0.0
            if self._failed & set(self.metadata.last_ensemble):
                self._changing = True
                self._change_task = asyncio.ensure_future(self._ensemble_change_loop())
                return
        if not self._pending:
            return
        head = self._pending[0]
        if self._client.clock.monotonic_ms() - head.sent_ms < self._add_timeout_ms:
            return
        for bookie in head.ws:
            if bookie not in head.acked:
                log.info("ledger %s: bookie %s timed out on an add", self.ledger_id, bookie)
                self._bookie_failed(bookie)

    async def _move_off_draining(self, members: frozenset[str]) -> None:
        """A bookie of the open fragment is being decommissioned: replace it like a failed
        one (ensemble change) if spare bookies exist; otherwise keep writing to it (the
        decommission waits)."""
        try:
            spare = await self._client.registry.healthy(self.metadata.last_ensemble)
        except MetadataError:
            return
        if len(spare) < len(members) or self.state not in (HandleState.OPEN, HandleState.CLOSING):
            return
        log.info("ledger %s: moving off draining bookies %s", self.ledger_id, sorted(members))
        for bookie in sorted(members):
            self._bookie_failed(bookie)

    def _drain_check_done(self, _: asyncio.Future[None]) -> None:
        self._drain_check = None

    def _bookie_failed(self, bookie: str) -> None:
        if bookie in self._failed:
            return  # already being replaced (a broken stream fails every in-flight add)
        if bookie not in self.metadata.last_ensemble and not any(
            bookie in p.ws for p in self._pending
        ):
            return
        self._failed.add(bookie)
        self._client.registry.quarantine(bookie)
        if self._change_task is None or self._change_task.done():
            self._changing = True
            self._change_task = asyncio.ensure_future(self._ensemble_change_loop())

    async def _ensemble_change_loop(self) -> None:
        cfg = self._client.config
        deadline = self._client.clock.monotonic_ms() + cfg.ensemble_change_timeout_ms
        backoff_s = 0.05
        try:
            while self.state in (HandleState.OPEN, HandleState.CLOSING):
                bad = {b for b in self._failed if b in self.metadata.last_ensemble}
                bad |= {b for p in self._pending for b in p.ws if b in self._failed}
                if not bad:
                    break
                try:
                    await self._change_ensemble(bad)
                except (NotEnoughBookies, MetadataError, BookieError) as exc:
                    if await self._fenced_in_metadata():
                        return
                    if isinstance(exc, NotEnoughBookies) and self._can_run_degraded():
                        # no replacement, but every write set still has Qa healthy bookies:
                        # keep writing under-replicated (BookKeeper's delayed ensemble
                        # change) and retry the replacement from the timer
                        log.warning(
                            "ledger %s: no replacement for %s; writing with Qa of Qw",
                            self.ledger_id,
                            sorted(bad),
                        )
                        self._degraded_retry_ms = (
                            self._client.clock.monotonic_ms() + cfg.degraded_retry_ms
                        )
                        return
                    if self._client.clock.monotonic_ms() >= deadline:
                        self._fail(NotEnoughBookies(f"ensemble change impossible: {exc}"))
                        return
                    log.info("ledger %s: ensemble change retry: %r", self.ledger_id, exc)
                    await self._client.clock.sleep(backoff_s)
                    backoff_s = min(1.0, backoff_s * 2)
        finally:
            self._changing = False
            if self.state in (HandleState.OPEN, HandleState.CLOSING):
                self._complete_ready()

    def _can_run_degraded(self) -> bool:
        qa = self.metadata.ack_quorum
        ensemble = self.metadata.last_ensemble
        return all(
            sum(1 for b in ws if b not in self._failed) >= qa
            for ws in write_sets(ensemble, self.metadata.write_quorum)
        )

    async def _fenced_in_metadata(self) -> bool:
        """Re-read the metadata: if someone else moved the state, this writer is deposed."""
        try:
            got = await self._client.store.get(paths.ledger_metadata(self.ledger_id))
        except MetadataError:
            return False
        if got is None or LedgerMetadata.from_bytes(got.value).state is not self._expected_state:
            self._fence("ledger recovered or deleted by someone else")
            return True
        return False

    async def _change_ensemble(self, bad: set[str]) -> None:
        # decide: the new fragment starts at the first entry not yet confirmed
        old = self.metadata
        first = self._lac + 1
        first = max(first, old.last_fragment_first_entry)
        current = list(old.last_ensemble)
        exclude = set(current) | self._failed
        wanted = [b for b in current if b in bad]
        candidates = await self._client.registry.healthy(exclude)
        new_ensemble: list[str]
        if len(candidates) >= len(wanted):
            new_ensemble = list(
                await self._client.registry.replace_bookies(
                    current, wanted, old.write_quorum, exclude
                )
            )
        else:
            kept = [b for b in current if b not in bad]
            fill = list(candidates)
            new_ensemble = kept + fill
            if not (
                self._client.config.allow_ensemble_shrink and len(new_ensemble) >= old.write_quorum
            ):
                raise NotEnoughBookies(
                    f"ledger {self.ledger_id}: no replacement for {sorted(bad)}, "
                    f"healthy: {candidates}"
                )
        await self._client.registry.resolve(new_ensemble)
        updated = old.with_ensemble(first, tuple(new_ensemble))
        path = paths.ledger_metadata(self.ledger_id)
        try:
            result = await self._client.store.put(
                path, updated.to_bytes(), expected_version=self.version
            )
        except BadVersion:
            got = await self._client.store.get(path)
            if got is None:
                self._fence("ledger metadata deleted")
                return
            theirs = LedgerMetadata.from_bytes(got.value)
            if theirs.state is not self._expected_state:
                self._fence(f"ledger is now {theirs.state.name}")
                return
            self.metadata, self.version = theirs, got.stat.version
            raise
        if self.state not in (HandleState.OPEN, HandleState.CLOSING):
            return
        # apply: re-send the unacknowledged entries to their (new) write sets
        self.metadata, self.version = updated, result.stat.version
        self._ws_first = updated.last_fragment_first_entry
        self._ws_table = write_sets(updated.last_ensemble, updated.write_quorum)
        self._ws_count = len(self._ws_table)
        self._ensemble_changes += 1
        self._failed -= bad
        log.info(
            "ledger %s: ensemble change at entry %d: %s -> %s",
            self.ledger_id,
            first,
            current,
            new_ensemble,
        )
        now = self._client.clock.monotonic_ms()
        # the outbox's adds are pending too: they are sent below, to their new write sets
        self._outbox = []
        self._outbox_bytes = 0
        in_flight: dict[str, set[int]] = {}
        resend: dict[str, list[_PendingAdd]] = {}
        for pending in self._pending:
            ws = updated.write_set(pending.entry_id)
            if ws != pending.ws:
                pending.ws = ws
                pending.acked &= set(ws)
            for bookie in ws:
                if bookie in pending.acked:
                    continue
                sent = in_flight.get(bookie)
                if sent is None:
                    sent = in_flight[bookie] = {
                        p.entry_id for batch, _ in self._inflight.get(bookie, ()) for p in batch
                    }
                if pending.entry_id not in sent:
                    pending.sent_ms = now
                    resend.setdefault(bookie, []).append(pending)
        for bookie, entries in resend.items():
            self._send_batch(bookie, entries)

    def _state_error(self) -> LedgerError:
        if self.state is HandleState.FENCED:
            return self.fenced_error(f"ledger {self.ledger_id} was fenced by another writer")
        if self._error is not None:
            return self._error
        return LedgerClosed(f"ledger {self.ledger_id} is {self.state.name}")

    def _fence(self, why: str) -> None:
        if self.state is HandleState.FENCED:
            return
        log.warning("ledger %s fenced: %s", self.ledger_id, why)
        self.state = HANDLE_FSM.next(self.state, HandleEvent.FENCED)
        self._fail_pending(self.fenced_error(f"ledger {self.ledger_id} fenced: {why}"))

    def _fail(self, error: LedgerError, *, expected: bool = False) -> None:
        if self.state not in (HandleState.OPEN, HandleState.CLOSING):
            return
        # an abort is the owner's decision (unload, fencing, a refused ledger): not alarming
        log.log(
            logging.DEBUG if expected else logging.WARNING,
            "ledger %s failed: %s",
            self.ledger_id,
            error,
        )
        self._error = error
        self.state = HANDLE_FSM.next(self.state, HandleEvent.FATAL)
        self._fail_pending(error)

    def _fail_pending(self, error: LedgerError) -> None:
        self._timer.cancel()
        if self.on_failed is not None:
            self.on_failed(error)
        pending, self._pending = self._pending, collections.deque()
        self._outbox = []
        self._outbox_bytes = 0
        for p in pending:
            if not p.future.done():
                p.future.set_exception(error)
                p.future.exception()  # mark retrieved: the owner may not await every add
        self._drained.set()
        for listener in list(self._lac_listeners):
            listener(self._lac)

    def take_unconfirmed(self) -> list[tuple[bytes, asyncio.Future[Any]]]:
        """Remove the adds this failed handle never confirmed and return them in entry order
        as (payload, future), the futures still pending: the owner completes them, by adding
        the payloads to its next ledger (Pulsar's managed ledger re-sends its pending adds
        when a ledger fails). Called from ``on_failed``; only for a writer (not a recovery)
        that failed for want of bookies, which ``close`` then closes at its LAC, so the
        entries are never part of this ledger."""
        if not self._closes_after_failure():
            raise LedgerClosed(f"ledger {self.ledger_id}: its adds stay with it")
        pending, self._pending = self._pending, collections.deque()
        self._outbox = []
        self._outbox_bytes = 0
        self._drained.set()
        return [(p.data, p.future) for p in pending if not p.future.done()]

    def _closes_after_failure(self) -> bool:
        # a writer that failed for want of bookies closes at its LAC (BookKeeper closes a
        # ledger so after an unrecoverable add error); an aborted handle is left for the next
        # owner to recover, and a failed recovery for the next recovery to finish
        return (
            self.state is HandleState.ERRORED
            and not self._recovery
            and isinstance(self._error, NotEnoughBookies)
        )

    # -- close --------------------------------------------------------------------------------
    async def close(self) -> None:
        """Wait for pending adds, then CAS the metadata to CLOSED at the LAC. A writer that
        failed for want of bookies closes at its LAC too: what it did not confirm is not
        part of the ledger (and needs no recovery)."""
        if self.state is HandleState.CLOSING:
            await self._drained.wait()
            return
        if self.state is HandleState.OPEN:
            self.state = HANDLE_FSM.next(self.state, HandleEvent.CLOSE)
            await self._drained.wait()
            if self.state is not HandleState.CLOSING and not self._closes_after_failure():
                raise self._state_error()
        elif not self._closes_after_failure():
            HANDLE_FSM.next(self.state, HandleEvent.CLOSE)
            return
        last, length = self._lac, self._confirmed_length
        path = paths.ledger_metadata(self.ledger_id)
        while True:
            meta = self.metadata
            closed = meta.recovered(last, length) if self._recovery else meta.closed(last, length)
            try:
                result = await self._client.store.put(
                    path, closed.to_bytes(), expected_version=self.version
                )
            except BadVersion:
                got = await self._client.store.get(path)
                theirs = None if got is None else LedgerMetadata.from_bytes(got.value)
                if theirs is not None and theirs.state is self._expected_state and got is not None:
                    self.metadata, self.version = theirs, got.stat.version
                    continue
                if (
                    theirs is not None
                    and theirs.state is LedgerState.CLOSED
                    and (theirs.last_entry_id == last)
                ):
                    self.metadata, self.version = theirs, got.stat.version if got else 0
                    break
                self._fence("closed or recovered by someone else")
                raise self._state_error() from None
            self.metadata, self.version = closed, result.stat.version
            break
        self._timer.cancel()
        self.state = HANDLE_FSM.next(self.state, HandleEvent.CLOSED)

    async def abort(self) -> None:
        """Stop without closing the metadata (the next owner will recover the ledger)."""
        if self.state in (HandleState.OPEN, HandleState.CLOSING):
            self._fail(LedgerClosed(f"ledger {self.ledger_id} aborted"), expected=True)
        if self._change_task is not None:
            self._change_task.cancel()

    def statistics(self) -> HandleStatistics:
        return HandleStatistics(
            ledger_id=self.ledger_id,
            state=self.state.name,
            last_add_confirmed=self._lac,
            next_entry_id=self._next_entry_id,
            pending_adds=len(self._pending),
            length=self._confirmed_length,
            ensemble_changes=self._ensemble_changes,
            ensemble=self.metadata.last_ensemble,
        )

    def check_invariants(self) -> None:
        ids = [p.entry_id for p in self._pending]
        assert ids == list(range(self._lac + 1, self._lac + 1 + len(ids))), ids
        if self.state in (HandleState.OPEN, HandleState.CLOSING):
            assert self._next_entry_id == self._lac + 1 + len(ids)
        else:  # a fenced / failed handle dropped its pending adds (they failed)
            assert not ids and self._next_entry_id >= self._lac + 1
        for p in self._pending:
            assert p.acked <= set(p.ws), (p.entry_id, p.acked, p.ws)
        outbox = [p.entry_id for p in self._outbox]
        assert outbox == ids[len(ids) - len(outbox) :], (outbox, ids)


__all__ = ["HandleStatistics", "WriteHandle"]
