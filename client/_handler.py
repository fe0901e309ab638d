"""What producers and consumers share: a per-topic handler's connection life cycle.

Owns: ``HandlerState`` and its transition table (state machine as data), the ``ClientContext``
a handler needs (pool, lookup, clock, id counters, timeouts), and ``Handler``: first connection
with retries until the operation timeout (retriable errors only), then, whenever the
connection is lost or the broker closes the producer/consumer, re-lookup and reconnect with
exponential backoff (100 ms doubling to ``max_backoff_ms``, 60 s unless the client sets it,
jitter from the client's seeded ``Random``).
Subclasses implement ``_establish(cnx)`` (PRODUCER / SUBSCRIBE on that connection).

States::

    INITIAL -> CONNECTING -> READY -> CONNECTING (connection lost) -> READY ...
    any live state -> CLOSING -> CLOSED;  CONNECTING -> FAILED (fatal error) -> CLOSED

Must not know: what is sent on the connection once ready.
"""

from __future__ import annotations

import asyncio
import enum
import itertools
import logging
import random
from dataclasses import dataclass, field

from magnetar.client._backoff import Backoff
from magnetar.client._connection import ClientConnection
from magnetar.client._errors import AlreadyClosed, PulsarException, Timeout
from magnetar.client._lookup import LookupService
from magnetar.client._pool import ConnectionPool
from magnetar.client.protocol import TopicName
from magnetar.clock import Clock

log = logging.getLogger(__name__)


class HandlerState(enum.Enum):
    INITIAL = "initial"
    CONNECTING = "connecting"
    READY = "ready"
    CLOSING = "closing"
    CLOSED = "closed"
    FAILED = "failed"


TRANSITIONS: dict[HandlerState, frozenset[HandlerState]] = {
    HandlerState.INITIAL: frozenset(
        {HandlerState.CONNECTING, HandlerState.CLOSING, HandlerState.CLOSED}
    ),
    HandlerState.CONNECTING: frozenset(
        {
            HandlerState.CONNECTING,
            HandlerState.READY,
            HandlerState.CLOSING,
            HandlerState.CLOSED,
            HandlerState.FAILED,
        }
    ),
    HandlerState.READY: frozenset(
        {HandlerState.CONNECTING, HandlerState.CLOSING, HandlerState.CLOSED, HandlerState.FAILED}
    ),
    HandlerState.CLOSING: frozenset({HandlerState.CLOSED}),
    HandlerState.FAILED: frozenset({HandlerState.CLOSED}),
    HandlerState.CLOSED: frozenset(),
}


class InvalidTransition(RuntimeError):
    pass


def next_state(current: HandlerState, wanted: HandlerState) -> HandlerState:
    if wanted not in TRANSITIONS[current]:
        raise InvalidTransition(f"{current.value} -> {wanted.value}")
    return wanted


@dataclass(slots=True)
class ClientContext:
    pool: ConnectionPool
    lookup: LookupService
    clock: Clock
    operation_timeout_ms: int
    rng: random.Random = field(default_factory=random.Random)
    max_backoff_ms: float = 60_000.0
    """The longest wait between two reconnection attempts of a handler."""
    _request_ids: itertools.count[int] = field(default_factory=itertools.count)
    _producer_ids: itertools.count[int] = field(default_factory=itertools.count)
    _consumer_ids: itertools.count[int] = field(default_factory=itertools.count)

    def next_request_id(self) -> int:
        return next(self._request_ids)

    def next_producer_id(self) -> int:
        return next(self._producer_ids)

    def next_consumer_id(self) -> int:
        return next(self._consumer_ids)


class Handler:
    """Connection life cycle of one producer/consumer on one topic (or partition)."""

    kind = "handler"

    def __init__(self, ctx: ClientContext, topic: TopicName) -> None:
        self.ctx = ctx
        self.topic = topic
        self.state = HandlerState.INITIAL
        self.cnx: ClientConnection | None = None
        self.backoff = Backoff(100, ctx.max_backoff_ms, ctx.rng)
        self._reconnect_task: asyncio.Task[None] | None = None
        self.reconnects = 0
        self.failure: PulsarException | None = None
        self._ready_event = asyncio.Event()

    def _set_state(self, wanted: HandlerState) -> None:
        self.state = next_state(self.state, wanted)
        if wanted is HandlerState.READY:
            self._ready_event.set()
        else:
            self._ready_event.clear()

    @property
    def is_connected(self) -> bool:
        return self.state is HandlerState.READY and self.cnx is not None

    # ------------------------------------------------------------------ subclass hooks

    async def _establish(self, cnx: ClientConnection) -> None:
        """Register on ``cnx`` and create the producer/consumer there; raise on refusal."""
        raise NotImplementedError

    def _on_ready(self) -> None:
        """Called synchronously right after the state became READY."""

    def _on_disconnected(self) -> None:
        """Called synchronously when the connection was lost (state is CONNECTING)."""

    def _on_fatal(self, exc: PulsarException) -> None:
        """Called when reconnection gave up with a non-retriable error."""

    # ------------------------------------------------------------------ connecting

    async def _connect_once(self) -> None:
        result = await self.ctx.lookup.lookup(self.topic)
        cnx = await self.ctx.pool.get(result.logical_url, result.physical_url)
        if self.state not in (HandlerState.CONNECTING,):
            raise AlreadyClosed(f"{self.kind} closed while connecting")
        await self._establish(cnx)

    async def start(self) -> None:
        """First connection: retry retriable errors until the operation timeout."""
        self._set_state(HandlerState.CONNECTING)
        deadline = self.ctx.clock.monotonic_ms() + self.ctx.operation_timeout_ms
        while True:
            try:
                await self._connect_once()
            except PulsarException as exc:
                if not exc.retriable or self.state is not HandlerState.CONNECTING:
                    self._fail_start()
                    raise
                delay = self.backoff.next_ms()
                if self.ctx.clock.monotonic_ms() + delay >= deadline:
                    self._fail_start()
                    raise Timeout(f"{self.kind} on {self.topic}: {exc}") from exc
                log.debug("%s %s: retrying in %.0f ms: %s", self.kind, self.topic, delay, exc)
                await self.ctx.clock.sleep(delay / 1000)
                continue
            except BaseException:
                self._fail_start()
                raise
            self.backoff.reset()
            self._set_state(HandlerState.READY)
            self._on_ready()
            return

    def _fail_start(self) -> None:
        if self.state is HandlerState.CLOSING or self.state is HandlerState.CONNECTING:
            self._set_state(HandlerState.CLOSED)
        self._detach()

    def _detach(self) -> None:
        """Forget the current connection (subclasses unregister their id)."""
        self.cnx = None

    def connection_lost(self) -> None:
        """The connection dropped or the broker closed us: reconnect in the background."""
        if self.state is not HandlerState.READY:
            return
        self._detach()
        self._set_state(HandlerState.CONNECTING)
        self._on_disconnected()
        self._reconnect_task = asyncio.get_running_loop().create_task(self._reconnect_loop())

    async def _reconnect_loop(self) -> None:
        while self.state is HandlerState.CONNECTING:
            delay = self.backoff.next_ms()
            await self.ctx.clock.sleep(delay / 1000)
            if self.state is not HandlerState.CONNECTING:
                return
            try:
                await self._connect_once()
            except PulsarException as exc:
                if self.state is not HandlerState.CONNECTING:
                    return
                if not exc.retriable and not isinstance(exc, Timeout):
                    log.warning("%s %s: giving up: %s", self.kind, self.topic, exc)
                    self.failure = exc
                    self._set_state(HandlerState.FAILED)
                    self._on_fatal(exc)
                    return
                log.info("%s %s: reconnect failed (%s), retrying", self.kind, self.topic, exc)
                continue
            except asyncio.CancelledError:
                return
            except Exception:  # pragma: no cover - a bug must not kill reconnection silently
                log.exception("%s %s: reconnect error", self.kind, self.topic)
                continue
            self.reconnects += 1
            self.backoff.reset()
            self._set_state(HandlerState.READY)
            self._on_ready()
            return

    async def wait_ready(self, timeout_s: float) -> bool:
        try:
            await asyncio.wait_for(self._ready_event.wait(), timeout_s)
        except TimeoutError:
            return False
        return True

    def _stop_reconnecting(self) -> None:
        task = self._reconnect_task
        if task is not None and task is not asyncio.current_task():
            task.cancel()


__all__ = ["TRANSITIONS", "ClientContext", "Handler", "HandlerState", "next_state"]
