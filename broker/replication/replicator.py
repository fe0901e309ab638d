"""One replicator: a topic partition's entries, re-published on one remote cluster, once.

Owns: ``Replicator`` (drives ``states.TRANSITIONS`` over a ``ReplicationSource`` and a
``RemoteCluster``) and ``ReplicatorSettings``. While running it reads entries from the
durable cursor ``pulsar.repl.<remote>``, decides about each one (``republish.inspect``:
loop prevention, ``replicate_to``, markers, TTL), sends the others as stored with their
source position as sequence id, and moves the cursor's mark-delete position over every
entry up to the first one not yet receipted by the remote (or skipped), so the backlog kept
for the remote is exactly what it has not stored.

Flow control: at most ``producer_queue_size`` entries in flight (Pulsar's
``replicationProducerQueueSize``, 1000), reads of at most ``read_batch_max`` entries, and
the ``replicatorDispatchRate`` policy (messages and bytes per period, token buckets): when
any limit is reached the replicator stops reading until room is made; nothing is buffered
beyond the limit. Failures (the remote down, a refusal, a send timeout, an incompatible
schema) close the producer and retry after an exponential back-off (``retry_initial_ms``
doubling up to ``retry_max_ms``, 10 % jitter); the reason is kept in ``lastError`` until
an entry is stored again. Entering RUNNING rewinds the cursor, so entries in flight when it
failed are sent again: the remote recognises them (``positions``).

Invariants (``check_invariants``): the window holds read entries in position order, each
after the mark-delete position; at most ``producer_queue_size`` of them; the mark-delete
position only moves forward, and only over entries done with (receipted or skipped).
Decisions are synchronous (``_fire``); I/O happens in tasks it starts.
Must not know: how topics, cursors or the client are implemented.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import dataclasses
import logging
import random
from dataclasses import dataclass, field

from magnetar.broker.ledger.position import Position
from magnetar.broker.policies.model import NO_RATE, Rate
from magnetar.broker.policies.rate_limit import RateLimiter
from magnetar.broker.replication.contracts import (
    RemoteCluster,
    RemoteProducer,
    ReplicationError,
    ReplicationSource,
)
from magnetar.broker.replication.republish import Skip, SkipReason, inspect, rewrite
from magnetar.broker.replication.states import Action, Event, State, next_transition
from magnetar.broker.replication.stats import RateMeter, ReplicatorCounters, ReplicatorStatistics
from magnetar.broker.storage.contract import Entry
from magnetar.broker.topics.replication_names import ReplicationLink
from magnetar.clock import Clock, SystemClock, TimerHandle

log = logging.getLogger(__name__)

REPLICATION_PRODUCER_QUEUE_SIZE = 1000
"""Pulsar's ``replicationProducerQueueSize`` default."""


@dataclass(frozen=True, slots=True)
class ReplicatorSettings:
    producer_queue_size: int = REPLICATION_PRODUCER_QUEUE_SIZE
    read_batch_max: int = 100
    retry_initial_ms: float = 100.0
    retry_max_ms: float = 60_000.0
    message_ttl_s: int = 0
    """The topic's message TTL: entries older are not replicated (0: none)."""
    dispatch_rate: Rate = NO_RATE
    """The ``replicatorDispatchRate`` policy."""
    schema_cache_max: int = 64

    def __post_init__(self) -> None:
        if self.producer_queue_size < 1 or self.read_batch_max < 1:
            raise ValueError("producer_queue_size and read_batch_max must be >= 1")
        if not 0 < self.retry_initial_ms <= self.retry_max_ms:
            raise ValueError("need 0 < retry_initial_ms <= retry_max_ms")


@dataclass(slots=True)
class _Slot:
    """An entry read and not yet done with."""

    position: Position
    publish_time_ms: int = 0
    num_messages: int = 0
    size: int = 0
    done: bool = False


@dataclass(slots=True)
class _Retry:
    attempt: int = 0
    timer: TimerHandle | None = None
    rng: random.Random = field(default_factory=random.Random)

    def next_delay_s(self, initial_ms: float, max_ms: float) -> float:
        base = min(initial_ms * (2 ** min(self.attempt, 32)), max_ms)
        self.attempt += 1
        return max(0.001, base - base * 0.1 * self.rng.random()) / 1000


class Replicator:
    """See the module docstring. ``start()`` returns at once (it connects in the
    background); ``stop()`` returns once stopped."""

    def __init__(
        self,
        link: ReplicationLink,
        source: ReplicationSource,
        remote: RemoteCluster,
        settings: ReplicatorSettings | None = None,
        *,
        clock: Clock | None = None,
        rng: random.Random | None = None,
    ) -> None:
        if remote.name != link.remote:
            raise ValueError(f"remote cluster {remote.name!r} is not {link.remote!r}")
        self.link = link
        self.source = source
        self.remote = remote
        self.settings = settings or ReplicatorSettings()
        self.clock: Clock = clock or SystemClock()
        self.counters = ReplicatorCounters()
        self._meter = RateMeter(self.clock)
        self._state = State.STOPPED
        self._producer: RemoteProducer | None = None
        self._window: collections.deque[_Slot] = collections.deque()
        self._limiter = self._make_limiter(self.settings.dispatch_rate)
        self._retry = _Retry(rng=rng or random.Random())
        self._schema_versions: collections.OrderedDict[bytes, bytes] = collections.OrderedDict()
        self._connecting: asyncio.Task[None] | None = None
        self._running: asyncio.Task[None] | None = None
        self._closing: asyncio.Task[None] | None = None
        self._marking: asyncio.Task[None] | None = None
        self._mark_target: Position | None = None
        self._marked: Position = source.mark_delete_position
        self._wake = asyncio.Event()
        self._progress = asyncio.Event()
        self._stopped = asyncio.Event()
        self._stopped.set()
        self._listening = False
        self._connected_since_ms = 0
        self._stalled_publish_ms = 0
        self.last_error = ""

    def __repr__(self) -> str:
        return (
            f"<Replicator {self.source.topic} {self.link.local}->{self.link.remote} "
            f"{self._state.value} in_flight={len(self._window)}>"
        )

    @property
    def state(self) -> State:
        return self._state

    # -- lifecycle ----------------------------------------------------------------------------
    def start(self) -> None:
        """Start replicating (idempotent while started)."""
        if not self._listening:
            self.source.add_tail_listener(self._on_new_entries)
            self._listening = True
        self._fire(Event.START)

    async def stop(self) -> None:
        """Stop replicating; returns once the remote producer is closed. What was sent and
        not receipted is sent again by the next start."""
        if self._listening:
            self.source.remove_tail_listener(self._on_new_entries)
            self._listening = False
        self._fire(Event.STOP)
        await self._stopped.wait()
        if self._marking is not None:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._marking

    def update_settings(self, *, message_ttl_s: int, dispatch_rate: Rate) -> None:
        """The topic's policies changed (message TTL, ``replicatorDispatchRate``)."""
        old = self.settings
        self.settings = ReplicatorSettings(
            old.producer_queue_size,
            old.read_batch_max,
            old.retry_initial_ms,
            old.retry_max_ms,
            message_ttl_s,
            dispatch_rate,
            old.schema_cache_max,
        )
        if dispatch_rate != old.dispatch_rate:
            self._limiter = self._make_limiter(dispatch_rate)
            self._wake.set()

    def _make_limiter(self, rate: Rate) -> RateLimiter | None:
        return RateLimiter(rate, self.clock) if rate.enabled else None

    # -- the state machine: decide, then start the I/O ------------------------------------------
    def _fire(self, event: Event, reason: str = "") -> None:
        transition = next_transition(self._state, event)
        if transition is None:
            return
        log.debug("%r: %s -> %s", self, event.value, transition.next.value)
        self._state = transition.next
        if transition.next is State.STOPPED:
            self._stopped.set()
        else:
            self._stopped.clear()
        for action in transition.actions:
            self._perform(action, reason)

    def _perform(self, action: Action, reason: str) -> None:
        loop = asyncio.get_running_loop()
        if action is Action.CONNECT:
            self._connecting = loop.create_task(self._connect())
        elif action is Action.REWIND_AND_READ:
            producer = self._producer
            assert producer is not None
            self._window.clear()
            self.source.rewind()
            self._connected_since_ms = self.clock.now_ms()
            self._running = loop.create_task(self._run(producer))
        elif action is Action.CLOSE_PRODUCER:
            self._closing = loop.create_task(self._close(self._take_producer()))
        elif action is Action.SCHEDULE_RETRY:
            self.last_error = reason or self.last_error
            self.counters.retries += 1
            delay = self._retry.next_delay_s(
                self.settings.retry_initial_ms, self.settings.retry_max_ms
            )
            log.warning(
                "replicator %s -> %s of %s: %s; retrying in %.1f s",
                self.link.local,
                self.link.remote,
                self.source.topic,
                self.last_error,
                delay,
            )
            self._retry.timer = self.clock.call_later(delay, lambda: self._fire(Event.RETRY_DUE))
        elif action is Action.CANCEL_RETRY and self._retry.timer is not None:
            self._retry.timer.cancel()
            self._retry.timer = None

    def _take_producer(self) -> RemoteProducer | None:
        """Detach the producer and what it has in flight (the cursor re-sends it)."""
        producer, self._producer = self._producer, None
        if self._running is not None:
            self._running.cancel()
            self._running = None
        if self._window:
            head = self._window[0]
            self._stalled_publish_ms = head.publish_time_ms or self._stalled_publish_ms
        self._window.clear()
        self._progress.set()
        self._connected_since_ms = 0
        return producer

    # -- I/O ------------------------------------------------------------------------------------
    async def _connect(self) -> None:
        creating = asyncio.ensure_future(
            self.remote.create_producer(self.source.topic, self.link.producer_name)
        )
        try:
            producer = await asyncio.shield(creating)
        except asyncio.CancelledError:  # stopped meanwhile: close what is still being made
            creating.add_done_callback(_close_when_made)
            raise
        except ReplicationError as exc:
            self._fire(Event.FAILED, exc.reason)
            return
        except Exception as exc:  # a bug or an unexpected refusal: retried, and shown
            log.exception("replicator %s: creating the remote producer failed", self.link)
            self._fire(Event.FAILED, f"{type(exc).__name__}: {exc}")
            return
        self._producer = producer
        self._fire(Event.CONNECTED)

    async def _close(self, producer: RemoteProducer | None) -> None:
        connecting = self._connecting
        if connecting is not None and not connecting.done():
            connecting.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await connecting
            producer = producer or self._take_producer()
        if producer is not None:
            try:
                await producer.close()
            except Exception as exc:
                log.warning("replicator %s: closing the remote producer: %s", self.link, exc)
        self._fire(Event.CLOSED)

    async def _run(self, producer: RemoteProducer) -> None:
        try:
            while self._producer is producer:
                room = self.settings.producer_queue_size - len(self._window)
                if room <= 0:
                    self._progress.clear()
                    await self._progress.wait()
                    continue
                want = min(room, self.settings.read_batch_max)
                limiter = self._limiter
                if limiter is not None:
                    allowed = limiter.available_msgs()
                    if allowed == 0:
                        await self.clock.sleep(max(0.001, limiter.refill_delay_s()))
                        continue
                    if allowed is not None:
                        want = min(want, allowed)
                self._wake.clear()
                entries = await self.source.read_entries(want)
                if self._producer is not producer:
                    return
                if not entries:
                    await self._wake.wait()
                    continue
                for entry in entries:
                    await self._replicate(producer, entry)
                    if self._producer is not producer:
                        return
                self._advance()
        except asyncio.CancelledError:
            raise
        except ReplicationError as exc:
            if self._producer is producer:
                self._fire(Event.FAILED, exc.reason)
        except Exception as exc:  # reading or a bug: retried, and shown
            log.exception("replicator %s of %s failed", self.link, self.source.topic)
            if self._producer is producer:
                self._fire(Event.FAILED, f"{type(exc).__name__}: {exc}")

    async def _replicate(self, producer: RemoteProducer, entry: Entry) -> None:
        decided = inspect(
            entry.position,
            entry.data,
            self.link.remote,
            now_ms=self.clock.now_ms(),
            message_ttl_s=self.settings.message_ttl_s,
        )
        if isinstance(decided, Skip):
            self.counters.entries_skipped += 1
            if decided.reason is SkipReason.EXPIRED:
                self.counters.messages_expired += 1
            self._window.append(_Slot(entry.position, done=True))
            return
        remote_version = b""
        if decided.schema_version:
            remote_version = await self._remote_schema_version(producer, decided.schema_version)
            if self._producer is not producer:
                return
        out = rewrite(decided, self.link, remote_version)
        slot = _Slot(entry.position, out.publish_time_ms, out.num_messages, out.size)
        self._window.append(slot)
        if self._limiter is not None:
            self._limiter.consume(out.num_messages, out.size)
        future = producer.send(out)
        future.add_done_callback(lambda f: self._on_sent(producer, slot, f))

    async def _remote_schema_version(self, producer: RemoteProducer, local: bytes) -> bytes:
        cache = self._schema_versions
        found = cache.get(local)
        if found is not None:
            cache.move_to_end(local)
            return found
        schema = await self.source.schema_for_version(local)
        if schema is None:
            return local  # no schema stored under that version: sent as it is
        remote = await producer.schema_version_for(schema)
        cache[local] = remote
        if len(cache) > self.settings.schema_cache_max:
            cache.popitem(last=False)
        return remote

    def _on_sent(self, producer: RemoteProducer, slot: _Slot, future: asyncio.Future[None]) -> None:
        if self._producer is not producer:
            return  # a producer closed meanwhile: the entry is sent again after the rewind
        if future.cancelled():
            self._fire(Event.FAILED, "send cancelled")
            return
        exc = future.exception()
        if exc is not None:
            reason = (
                exc.reason if isinstance(exc, ReplicationError) else f"{type(exc).__name__}: {exc}"
            )
            self._fire(Event.FAILED, reason)
            return
        slot.done = True
        self.counters.entries_out += 1
        self.counters.messages_out += slot.num_messages
        self.counters.bytes_out += slot.size
        self._retry.attempt = 0
        self.last_error = ""
        self._stalled_publish_ms = 0
        self._progress.set()
        self._advance()

    def _advance(self) -> None:
        """Move the mark-delete position over the done entries at the head of the window."""
        window = self._window
        last: Position | None = None
        while window and window[0].done:
            last = window.popleft().position
        if last is None:
            return
        self._progress.set()
        self._mark_target = last
        if self._marking is None or self._marking.done():
            self._marking = asyncio.get_running_loop().create_task(self._mark_deleting())

    async def _mark_deleting(self) -> None:
        while self._mark_target is not None and self._marked < self._mark_target:
            target = self._mark_target
            try:
                await self.source.mark_delete(target)
            except Exception as exc:  # retried by the next receipt, or after a restart
                log.warning("replicator %s: mark-delete at %s failed: %s", self.link, target, exc)
                return
            self._marked = max(self._marked, target)

    def _on_new_entries(self) -> None:
        self._wake.set()

    # -- observability ----------------------------------------------------------------------
    def statistics(self) -> ReplicatorStatistics:
        c = self.counters
        rates = self._meter.rates(
            {
                "out": float(c.messages_out),
                "bytes": float(c.bytes_out),
                "expired": float(c.messages_expired),
            }
        )
        producer = self._producer
        connected = self._state is State.RUNNING and producer is not None and producer.connected
        backlog = self.source.backlog()
        error = self.last_error
        if not error and producer is not None and not producer.connected:
            error = producer.last_error
        return ReplicatorStatistics(
            remote=self.link.remote,
            state=self._state.value,
            connected=connected,
            msg_rate_out=rates["out"],
            msg_throughput_out=rates["bytes"],
            msg_rate_expired=rates["expired"],
            replication_backlog=backlog,
            replication_delay_s=self._delay_s(backlog),
            outbound_connection=producer.address if producer is not None else "",
            outbound_connected_since_ms=self._connected_since_ms,
            in_flight=sum(1 for s in self._window if not s.done),
            last_error=error,
            counters=dataclasses.replace(c),
        )

    def _delay_s(self, backlog: int) -> float:
        """Age of the oldest message not replicated yet (0 when there is none)."""
        if backlog == 0:
            return 0.0
        oldest = next((s.publish_time_ms for s in self._window if not s.done), 0)
        oldest = oldest or self._stalled_publish_ms
        if oldest <= 0:
            return 0.0
        return max(0.0, (self.clock.now_ms() - oldest) / 1000)

    def check_invariants(self) -> None:
        positions = [s.position for s in self._window]
        assert positions == sorted(positions), positions
        assert len(positions) <= self.settings.producer_queue_size
        assert all(p > self._marked for p in positions), (self._marked, positions)
        assert self._marked <= self.source.mark_delete_position or self._marking is not None


def _close_when_made(creating: asyncio.Future[RemoteProducer]) -> None:
    if creating.cancelled() or creating.exception() is not None:
        return
    producer = creating.result()
    task = asyncio.get_running_loop().create_task(producer.close())
    task.add_done_callback(lambda t: t.cancelled() or t.exception())


__all__ = ["REPLICATION_PRODUCER_QUEUE_SIZE", "Replicator", "ReplicatorSettings"]
