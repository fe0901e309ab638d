"""The narrow storage contract topics are written against.

Owns: ``TopicStorageFactory`` / ``TopicLedger`` / ``TopicCursor`` (what a persistent topic
needs from a managed ledger: append a batch of entries and get positions back in order, read
forward, search by publish time, tail notifications, durable and non-durable cursors with
mark-delete, individual and batch-index acks, seek, terminate, truncate, retention and
trimming). ``memory.py`` is the reference implementation used by unit and fast integration
tiers; ``managed_adapter.py`` maps the same contract onto the real managed ledger
(``magnetar.broker.ledger``).

Invariants: positions returned by ``add_entries`` are increasing and complete in call order;
a cursor's mark-delete position only moves forward except through ``reset``; every
individually acked position is greater than the mark-delete position.
Must not know: the wire protocol, consumers, dispatch.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any, NamedTuple, Protocol

from magnetar.broker.ledger.offloading import OffloadStatistics
from magnetar.broker.ledger.position import Position
from magnetar.broker.offload import EffectiveOffloadPolicies

_WORD = 1 << 64


def words_to_int(words: list[int]) -> int:
    """A batch ack set on the wire (signed int64 words, Pulsar's ``long[]``) as one int."""
    value = 0
    for i, w in enumerate(words):
        value |= (w % _WORD) << (64 * i)
    return value


def int_to_words(value: int, size: int) -> list[int]:
    """The first ``size`` bits of ``value`` as signed int64 words (the wire's ack set)."""
    out = []
    for i in range((size + 63) // 64):
        w = (value >> (64 * i)) & (_WORD - 1)
        out.append(w - _WORD if w >= (1 << 63) else w)
    return out


class Entry(NamedTuple):
    position: Position
    data: bytes


class TopicCursor(Protocol):
    name: str
    durable: bool

    @property
    def mark_delete_position(self) -> Position: ...

    @property
    def read_position(self) -> Position: ...

    def is_acked(self, position: Position) -> bool: ...

    def batch_ack_set(self, position: Position) -> list[int] | None:
        """Words of the still-unacked bit set of a partially acked batch entry, else None."""
        ...

    async def read_entries(self, max_entries: int) -> list[Entry]:
        """Entries from the read position on, skipping acked ones; advances the read position."""
        ...

    async def read_positions(self, positions: list[Position]) -> list[Entry]: ...

    async def ack(self, positions: Iterable[Position]) -> None: ...

    async def ack_batch_index(self, position: Position, ack_set: list[int], size: int) -> bool:
        """Record a partial batch ack (``ack_set``: wire words, bit 1 = still unacked) of an
        entry of ``size`` messages; True when the whole entry is now acked."""
        ...

    def redelivery_count(self, position: Position) -> int: ...

    async def increment_redelivery(self, position: Position) -> int:
        """Count one more redelivery of ``position`` (durably where the cursor is)."""
        ...

    async def ack_cumulative(self, position: Position) -> None: ...

    def rewind(self) -> None:
        """Read position := first entry after the mark-delete position."""
        ...

    def seek(self, position: Position) -> None:
        """Read position := ``position`` (without changing acks)."""
        ...

    async def reset(self, position: Position) -> None:
        """Forget acks: mark-delete := just before ``position``; read from ``position``."""
        ...

    def backlog(self) -> int: ...

    def backlog_size(self) -> int:
        """Bytes of the entries after the mark-delete position not yet acknowledged
        (an estimate where the storage only knows sizes per ledger)."""
        ...


AddedCallback = Callable[[list[Position] | None, BaseException | None], None]
"""``add_entries_then``'s callback: (positions, None) or (None, the error)."""


class IndexHome(Protocol):
    """A managed ledger's factory and name: a subscription's side index is stored in a
    managed ledger of its own, named after this one."""

    @property
    def factory(self) -> Any: ...

    @property
    def name(self) -> str: ...


class TopicLedger(Protocol):
    """The storage of one topic: an ordered, append-only log of entries with cursors."""

    name: str

    @property
    def last_confirmed(self) -> Position | None: ...

    @property
    def first_position(self) -> Position | None: ...

    @property
    def num_entries(self) -> int: ...

    @property
    def total_size(self) -> int: ...

    async def add_entries(self, datas: list[bytes]) -> list[Position]: ...

    @property
    def properties(self) -> dict[str, str]:
        """The ledger's string properties (Pulsar: the managed ledger's), durable with it."""
        ...

    async def set_property(self, key: str, value: str) -> None: ...

    def add_entries_then(self, datas: list[bytes], then: AddedCallback) -> None:
        """``add_entries`` without a task or future of its own (the publish hot path):
        ``then(positions, None)`` after the tail listeners ran, or ``then(None, error)``.
        Raises at once if the ledger refuses an add."""
        ...

    async def read_entries(self, start: Position, max_entries: int) -> list[Entry]: ...

    def ledger_sizes(self) -> list[tuple[int, int, int]]:
        """(ledger id, entries, bytes) of every ledger in order; entries of a ledger are
        0..n-1 with no holes, so positions can be counted without reading."""
        ...

    async def find_by_publish_time(
        self, publish_time_ms: int, publish_time_of: Callable[[bytes], int]
    ) -> Position | None:
        """Binary search: the first entry whose ``publish_time_of`` is >= the target (None:
        none is). Publish times only grow within a topic, so a search reads O(log n)."""
        ...

    @property
    def terminated(self) -> bool:
        """Terminated (Pulsar's ``terminate``): no add is accepted again, durably."""
        ...

    async def terminate(self) -> Position:
        """No more adds, ever (reads continue); returns the last position."""
        ...

    async def truncate(self) -> list[int]:
        """Delete every ledger before the current one whatever the retention (after the
        caller moved the cursors to the end); returns the deleted ledger ids."""
        ...

    def set_retention(self, time_ms: int, size_bytes: int) -> None:
        """The retention the topic's policies resolve to (Pulsar's ``RetentionPolicies``)."""
        ...

    def trim_soon(self) -> None:
        """Delete the ledgers consumed and out of retention, soon (in the background)."""
        ...

    def set_offload_policies(self, policies: EffectiveOffloadPolicies | None) -> None:
        """The tiered-storage policies the topic's ``offloadPolicies`` resolve to (None:
        nothing is offloaded; what was offloaded is still read)."""
        ...

    def offload_statistics(self) -> OffloadStatistics | None:
        """The topic's tiered storage (None: this storage offloads nothing)."""
        ...

    @property
    def index_home(self) -> IndexHome | None:
        """Where durable subscriptions keep side indexes (the delayed-delivery index) in
        ledgers of their own, or None: this storage keeps them in memory."""
        ...

    def add_tail_listener(self, listener: Callable[[], None]) -> None: ...

    def remove_tail_listener(self, listener: Callable[[], None]) -> None: ...

    async def open_cursor(self, name: str, *, initial_earliest: bool) -> TopicCursor: ...

    def new_non_durable_cursor(self, name: str, start: Position) -> TopicCursor:
        """A cursor reading from ``start`` (EARLIEST / LATEST sentinels allowed), not persisted."""
        ...

    async def delete_cursor(self, name: str) -> None: ...

    def cursor_names(self) -> list[str]: ...

    async def close(self) -> None: ...


class StorageMemory(NamedTuple):
    """What a storage holds in memory for reads, broker-wide (``/metrics``)."""

    cache_used_bytes: int
    cache_max_bytes: int
    read_ahead_held_bytes: int
    read_ahead_max_bytes: int
    read_ahead_refused: int
    """Times a cursor's read-ahead found the broker-wide read-ahead budget spent."""


class StorageFailures(NamedTuple):
    """Storage failures a broker rode through, since it started (``/metrics`` counters)."""

    ledgers_given_up: int
    """Ledgers closed at their last confirmed entry for want of bookies."""
    adds_moved: int
    """Adds such a ledger had not confirmed, re-added to the next ledger."""


class OffloadWorkerStatistics(NamedTuple):
    """The broker's offload worker process, since the broker started (``/metrics``); a
    storage without one (none configured, or in memory) shows zeros."""

    running: bool
    starts: int
    jobs: int
    jobs_failed: int
    """Jobs that failed in the worker, or because it exited under them."""


class TopicStorageFactory(Protocol):
    async def open(self, name: str, *, keep_all: bool = False) -> TopicLedger:
        """Open (creating) ``name``. ``keep_all``: never trim it, whatever the retention
        (for ledgers no cursor holds, such as compacted views)."""
        ...

    async def exists(self, name: str) -> bool: ...

    async def delete(self, name: str) -> None: ...

    async def list(self, prefix: str) -> list[str]:
        """Names of the managed ledgers starting with ``prefix`` (e.g. ``t/ns/persistent/``)."""
        ...

    async def close(self) -> None:
        """Release what the storage holds (bookie connections); the broker is stopping."""
        ...

    def failure_statistics(self) -> StorageFailures: ...

    def memory_statistics(self) -> StorageMemory:
        """The entry cache and the read-ahead budget, broker-wide."""
        ...

    def offload_worker_statistics(self) -> OffloadWorkerStatistics: ...


__all__ = [
    "AddedCallback",
    "Entry",
    "IndexHome",
    "OffloadWorkerStatistics",
    "StorageFailures",
    "StorageMemory",
    "TopicCursor",
    "TopicLedger",
    "TopicStorageFactory",
    "int_to_words",
    "words_to_int",
]
