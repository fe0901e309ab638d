"""Reading an offloaded ledger: the read-handle shape over ranged GETs of whole blocks.

Owns: ``OffloadedReadHandle`` (``ledger_id``, ``last_add_confirmed``, ``is_closed``,
``length``, ``read_lac``, ``wait_for_lac``, ``read(first, last)`` -> ``LedgerEntry`` list,
``close``), ``ReadCounters`` (shared with the offloader's statistics).

- A read fetches the blocks holding first..last (one ranged GET per block, as long as the
  index says), parses each and verifies every entry's checksum before returning anything.
- Read-ahead: when a read starts where the previous one ended (a sequential reader), the next
  blocks are fetched in the background while the buffered bytes (fetched or in flight) stay
  within ``read_ahead_bytes_max``. Back-pressure: nothing more is prefetched until the reader
  consumes buffered blocks; a block a read needs is always fetched, so one read may hold the
  blocks it spans beyond the bound (a block is ``readBufferSizeInBytes`` unless one entry is
  bigger). A read elsewhere drops the buffer. With a ``ReadBudget`` (the broker-wide budget
  every read-ahead draws from), a block is prefetched only while the budget has room for it,
  and its bytes go back when it leaves the buffer; blocks a read needs are not drawn from it.
- An unavailable store is retried with back-off (``RetryPolicy``): the read waits, up to the
  policy's deadline, then fails with the retriable ``StoreUnavailable``; it never skips an
  entry. A block that does not verify is fetched once more (a damaged transfer); if it
  still does not, ``OffloadCorrupt`` is raised: wrong bytes are never returned.
Must not know: managed ledgers, topics, the library behind ``BlobStore``.
"""

from __future__ import annotations

import asyncio
import logging
import random
from dataclasses import dataclass
from typing import Protocol

from magnetar.broker.bookkeeper.entry import LedgerEntry
from magnetar.broker.offload.blocks import ParsedBlock, parse_block
from magnetar.broker.offload.errors import EntryOutOfRange, OffloadCorrupt, OffloadError
from magnetar.broker.offload.index import OffloadIndex
from magnetar.broker.offload.retry import RetryPolicy, with_retries
from magnetar.broker.offload.store import BlobStore
from magnetar.clock import Clock

log = logging.getLogger(__name__)


class ReadCounters:
    """Counters of every read handle of one offloader (plain ints: one event loop)."""

    __slots__ = (
        "block_bytes_fetched",
        "block_fetch_ms_total",
        "blocks_fetched",
        "corrupt_reads",
        "index_fetch_ms_total",
        "index_fetches",
        "read_ahead_bytes",
        "read_errors",
        "read_retries",
        "reads",
    )

    def __init__(self) -> None:
        self.reads = 0
        self.read_errors = 0
        """Reads that raised (the store unavailable past the deadline, corrupt data)."""
        self.blocks_fetched = 0
        self.block_bytes_fetched = 0
        self.block_fetch_ms_total = 0.0
        """Time from a block's ranged GET to its bytes (retries included)."""
        self.index_fetches = 0
        self.index_fetch_ms_total = 0.0
        self.read_retries = 0
        self.corrupt_reads = 0
        self.read_ahead_bytes = 0


class ReadBudget(Protocol):
    """Bytes shared by every read-ahead of a process (the managed ledger's budget)."""

    def available(self) -> int: ...

    def take(self, nbytes: int) -> None: ...

    def give_back(self, nbytes: int) -> None: ...


@dataclass(frozen=True, slots=True)
class ReadHandleStatistics:
    ledger_id: int
    buffered_blocks: int
    buffered_bytes: int
    read_ahead_bytes_max: int


def _retrieve(task: asyncio.Task[ParsedBlock]) -> None:
    """Mark a prefetch's failure as seen: it is raised again when a read needs that block."""
    if not task.cancelled():
        task.exception()


class OffloadedReadHandle:
    """Reads of one offloaded ledger; see the module docstring."""

    def __init__(
        self,
        store: BlobStore,
        data_key: str,
        index: OffloadIndex,
        *,
        read_ahead_bytes_max: int,
        retry: RetryPolicy,
        clock: Clock,
        rng: random.Random,
        counters: ReadCounters,
        budget: ReadBudget | None = None,
    ) -> None:
        if read_ahead_bytes_max < 0:
            raise ValueError("read_ahead_bytes_max must be >= 0")
        self._store = store
        self._data_key = data_key
        self._index = index
        self._read_ahead_bytes_max = read_ahead_bytes_max
        self._retry = retry
        self._clock = clock
        self._rng = rng
        self._counters = counters
        self._budget = budget
        self._budgeted: set[int] = set()
        """Blocks prefetched with bytes of the budget (given back when they leave)."""
        self._buffer: dict[int, asyncio.Task[ParsedBlock]] = {}
        self._pins: dict[int, int] = {}
        """Blocks reads are waiting for, and how many reads."""
        self._buffered_bytes = 0
        self._next_entry: int | None = None
        self._closed = False

    def __repr__(self) -> str:
        return (
            f"<OffloadedReadHandle ledger={self.ledger_id} lac={self.last_add_confirmed} "
            f"key={self._data_key} buffered={len(self._buffer)}>"
        )

    # -- the read-handle shape --------------------------------------------------------------
    @property
    def ledger_id(self) -> int:
        return self._index.ledger_id

    @property
    def last_add_confirmed(self) -> int:
        return self._index.last_entry_id

    @property
    def is_closed(self) -> bool:
        return True

    @property
    def length(self) -> int:
        return self._index.ledger.length

    @property
    def index(self) -> OffloadIndex:
        return self._index

    @property
    def released(self) -> bool:
        """Closed by its owner: reads fail, a new handle must be opened."""
        return self._closed

    async def read_lac(self) -> int:
        return self.last_add_confirmed

    async def wait_for_lac(self, previous_lac: int, timeout_ms: int) -> int:
        """A sealed ledger: its last entry is final, there is nothing to wait for."""
        return self.last_add_confirmed

    async def read(self, first_entry_id: int, last_entry_id: int) -> list[LedgerEntry]:
        if self._closed:
            raise OffloadError(f"read handle of ledger {self.ledger_id} is closed")
        if first_entry_id < 0 or last_entry_id < first_entry_id:
            raise ValueError(f"bad range {first_entry_id}..{last_entry_id}")
        if last_entry_id > self.last_add_confirmed:
            raise EntryOutOfRange(
                f"ledger {self.ledger_id}: {last_entry_id} > last entry {self.last_add_confirmed}"
            )
        self._counters.reads += 1
        try:
            return await self._read(first_entry_id, last_entry_id)
        except BaseException as exc:
            if not isinstance(exc, asyncio.CancelledError):
                self._counters.read_errors += 1
            raise

    async def _read(self, first_entry_id: int, last_entry_id: int) -> list[LedgerEntry]:
        index = self._index
        first_block = index.block_of(first_entry_id)
        last_block = index.block_of(last_entry_id)
        sequential = self._next_entry is not None and first_entry_id == self._next_entry
        if not sequential:
            self._drop_buffer(keep=range(first_block, last_block + 1))
        out: list[LedgerEntry] = []
        for block in range(first_block, last_block + 1):
            parsed = await self._block(block)
            lo = max(first_entry_id, parsed.first_entry_id) - parsed.first_entry_id
            hi = min(last_entry_id, parsed.last_entry_id) - parsed.first_entry_id
            out.extend(parsed.entries[lo : hi + 1])
            if last_entry_id >= parsed.last_entry_id:
                self._release(block)
        self._next_entry = last_entry_id + 1
        if sequential:
            self._prefetch(
                last_block + 1 if self._next_entry > index.last_entry_of(last_block) else last_block
            )
        return out

    async def close(self) -> None:
        self.close_now()

    def close_now(self) -> None:
        """Close without awaiting anything: what is buffered or in flight is dropped (its
        budget given back)."""
        self._closed = True
        for block in list(self._buffer):
            self._release(block, force=True)

    def statistics(self) -> ReadHandleStatistics:
        return ReadHandleStatistics(
            self.ledger_id, len(self._buffer), self._buffered_bytes, self._read_ahead_bytes_max
        )

    def check_invariants(self) -> None:
        held = sum(self._index.blocks[b].length for b in self._buffer)
        assert held == self._buffered_bytes, (held, self._buffered_bytes)
        assert self._budgeted <= set(self._buffer), (self._budgeted, set(self._buffer))

    # -- blocks -----------------------------------------------------------------------------
    async def _block(self, block: int) -> ParsedBlock:
        """The parsed block, fetched (or awaited: prefetched). Reads of one handle may run
        concurrently (a cursor's read-ahead issues several): a block a read waits for is
        pinned, so another read's drop leaves it; one dropped anyway (the handle closed, a
        failed fetch) is fetched again, or the read fails with ``OffloadError``."""
        while True:
            task = self._buffer.get(block)
            if task is None:
                task = self._start(block)
            self._pins[block] = self._pins.get(block, 0) + 1
            try:
                return await asyncio.shield(task)
            except asyncio.CancelledError:
                me = asyncio.current_task()
                if not task.cancelled() or (me is not None and me.cancelling()):
                    raise  # our caller was cancelled
                if self._closed:
                    raise OffloadError(f"read handle of ledger {self.ledger_id} closed") from None
            except BaseException:
                if task.done():
                    self._release(block, force=True)
                raise
            finally:
                left = self._pins[block] - 1
                if left:
                    self._pins[block] = left
                else:
                    del self._pins[block]

    def _start(self, block: int) -> asyncio.Task[ParsedBlock]:
        task = asyncio.ensure_future(self._fetch(block))
        task.add_done_callback(_retrieve)
        self._buffer[block] = task
        length = self._index.blocks[block].length
        self._buffered_bytes += length
        self._counters.read_ahead_bytes += length
        return task

    def _release(self, block: int, *, force: bool = False) -> None:
        """Drop a buffered block (not one another read waits for, unless ``force``)."""
        if not force and self._pins.get(block):
            return
        task = self._buffer.pop(block, None)
        if task is None:
            return
        if not task.done():
            task.cancel()
        length = self._index.blocks[block].length
        self._buffered_bytes -= length
        self._counters.read_ahead_bytes -= length
        if block in self._budgeted:
            self._budgeted.discard(block)
            assert self._budget is not None
            self._budget.give_back(length)

    def _drop_buffer(self, keep: range) -> None:
        for block in [b for b in self._buffer if b not in keep]:
            self._release(block)

    def _prefetch(self, start: int) -> None:
        blocks = self._index.blocks
        block = start
        while block < len(blocks):
            if block not in self._buffer:
                length = blocks[block].length
                if self._buffered_bytes + length > self._read_ahead_bytes_max:
                    return
                if self._budget is not None:
                    if self._budget.available() < length:
                        return
                    self._budget.take(length)
                    self._budgeted.add(block)
                self._start(block)
            block += 1

    async def _fetch(self, block: int) -> ParsedBlock:
        ref = self._index.blocks[block]

        def retried(exc: OffloadError) -> None:
            self._counters.read_retries += 1
            log.info("offloaded ledger %d block %d: retrying (%s)", self.ledger_id, block, exc)

        for attempt in (1, 2):
            started_ms = self._clock.monotonic_ms()
            data = await with_retries(
                lambda: self._store.get_range(self._data_key, ref.offset, ref.length),
                self._retry,
                self._clock,
                self._rng,
                retried,
            )
            self._counters.blocks_fetched += 1
            self._counters.block_bytes_fetched += len(data)
            self._counters.block_fetch_ms_total += self._clock.monotonic_ms() - started_ms
            try:
                return parse_block(data, self.ledger_id, ref.first_entry_id)
            except OffloadCorrupt as exc:
                self._counters.corrupt_reads += 1
                if attempt == 2:
                    raise OffloadCorrupt(
                        f"{self._data_key} block {block} (entries from {ref.first_entry_id}): {exc}"
                    ) from exc
                log.warning(
                    "offloaded ledger %d block %d did not verify, fetching it again: %s",
                    self.ledger_id,
                    block,
                    exc,
                )
        raise AssertionError("unreachable")


__all__ = ["OffloadedReadHandle", "ReadBudget", "ReadCounters", "ReadHandleStatistics"]
