"""Replicated subscriptions (PIP-33) of one topic: markers written, read and acted on.

Owns: ``ReplicatedSubscriptions`` (Pulsar's ``ReplicatedSubscriptionsController``), attached
to a loaded persistent topic with remotes. It

- every ``frequency_ms``, while the topic has a replicated subscription, asks
  ``snapshots.SnapshotTaker`` whether to start a snapshot, and stores its request marker;
- answers another cluster's request (stored here through that cluster's replicator) with
  this topic's last position then, in a response marker for that cluster only;
- collects the responses (their position here is the snapshot's local side); a completed
  snapshot is offered to each replicated subscription (``SubscriptionSnapshots``);
- when a replicated subscription's mark-delete position passes one of its snapshots, stores
  an update marker naming the subscription and each remote's position;
- applies another cluster's update: the same subscription here moves to this cluster's
  position (made there when it does not exist), never backwards.
Markers go to the other clusters through the topic's replicators, which send them in order
with the messages; the topic never delivers them (``topics/markers.py``).
Must not know: how markers are encoded (``client.protocol.markers``), the replicators' insides.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any

from magnetar.broker.ledger.position import Position
from magnetar.broker.replication.snapshots import (
    SNAPSHOT_FREQUENCY_MS,
    SNAPSHOT_TIMEOUT_S,
    SNAPSHOTS_CACHED,
    AskAgain,
    Snapshot,
    SnapshotTaker,
    SubscriptionSnapshots,
)
from magnetar.broker.topics.persistent import PersistentTopic
from magnetar.broker.topics.subscription import Subscription
from magnetar.client.protocol import EntryView, RemoteProtocolError, markers
from magnetar.clock import Clock, TimerHandle

log = logging.getLogger(__name__)


class ReplicatedSubscriptions:
    """One topic's replicated subscriptions; ``start()`` once attached, ``close()``."""

    def __init__(
        self,
        topic: PersistentTopic,
        local: str,
        clock: Clock,
        *,
        remotes: Callable[[], frozenset[str]],
        connected: Callable[[], bool],
        frequency_ms: int = SNAPSHOT_FREQUENCY_MS,
        timeout_s: int = SNAPSHOT_TIMEOUT_S,
        max_cached: int = SNAPSHOTS_CACHED,
        enabled: bool = True,
    ) -> None:
        self.topic = topic
        self.local = local
        self.clock = clock
        self._remotes = remotes
        self._connected = connected
        self.frequency_ms = frequency_ms
        self.max_cached = max_cached
        self.enabled = enabled
        self.taker = SnapshotTaker(timeout_s * 1000)
        self._caches: dict[str, SubscriptionSnapshots] = {}
        self._timer: TimerHandle | None = None
        self._tasks: set[asyncio.Task[Any]] = set()
        self.closed = False
        self.ticks = 0
        self.markers_written = 0
        self.updates_sent = 0
        self.updates_applied = 0

    def __repr__(self) -> str:
        return f"<ReplicatedSubscriptions {self.topic.full_name} {self.taker!r}>"

    def start(self) -> None:
        self.topic.marker_listener = self._on_marker
        self.topic.mark_delete_listener = self._on_mark_delete
        self._arm()

    async def close(self) -> None:
        self.closed = True
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self.topic.marker_listener == self._on_marker:
            self.topic.marker_listener = None
        if self.topic.mark_delete_listener == self._on_mark_delete:
            self.topic.mark_delete_listener = None
        if self._tasks:
            await asyncio.gather(*list(self._tasks), return_exceptions=True)

    def _arm(self) -> None:
        if not self.closed and self.enabled and self.frequency_ms > 0:
            self._timer = self.clock.call_later(self.frequency_ms / 1000, self._tick)

    def _spawn(self, coro: Any) -> None:
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        task.add_done_callback(_log_failure)

    # -- taking snapshots ---------------------------------------------------------------------
    def _replicated(self) -> list[Subscription]:
        return [s for s in self.topic.subscriptions.values() if s.replicated]

    def _tick(self) -> None:
        self._timer = None
        if self.closed:
            return
        self.ticks += 1
        try:
            if self._replicated() and not self.topic.closed:
                snapshot_id = self.taker.start(
                    self.clock.now_ms(),
                    self._remotes(),
                    self.topic.markers.last_data,
                    all_connected=self._connected(),
                )
                if snapshot_id is not None:
                    self._write(
                        markers.snapshot_request(
                            snapshot_id, self.local, publish_time_ms=self.clock.now_ms()
                        )
                    )
        finally:
            self._arm()

    def _write(self, data: bytes) -> None:
        if self.closed or self.topic.closed:
            return
        self.markers_written += 1
        fut = self.topic.publish_marker(data)
        fut.add_done_callback(_log_failure)

    # -- markers stored in the topic ----------------------------------------------------------
    def _on_marker(self, position: Position, data: bytes, over_link: bool) -> None:
        if not over_link or self.closed:
            return  # ours: nothing to do once stored
        try:
            marker = markers.decode_marker(EntryView(data))
        except RemoteProtocolError as exc:
            log.warning("%s: unreadable marker at %s: %s", self.topic.name, position, exc)
            return
        if isinstance(marker, markers.SnapshotRequest):
            self._answer(marker)
        elif isinstance(marker, markers.SnapshotResponse):
            self._collect(marker, position)
        elif isinstance(marker, markers.SubscriptionUpdate):
            self._apply(marker)

    def _answer(self, request: markers.SnapshotRequest) -> None:
        if request.source_cluster == self.local or not request.source_cluster:
            return
        last = self.topic.ledger.last_confirmed
        if last is None:
            return
        here = markers.ClusterPosition(self.local, last.ledger_id, last.entry_id)
        self._write(
            markers.snapshot_response(
                request.snapshot_id,
                request.source_cluster,
                here,
                publish_time_ms=self.clock.now_ms(),
            )
        )

    def _collect(self, response: markers.SnapshotResponse, local: Position) -> None:
        remote = response.position
        got = self.taker.response(
            response.snapshot_id,
            remote.cluster,
            Position(remote.ledger_id, remote.entry_id),
            local,
        )
        if isinstance(got, AskAgain):
            self._write(
                markers.snapshot_request(
                    got.snapshot_id, self.local, publish_time_ms=self.clock.now_ms()
                )
            )
        elif isinstance(got, Snapshot):
            for sub in self._replicated():
                cache = self._cache(sub.name)
                cache.add(got, sub.cursor.mark_delete_position)
                self._on_mark_delete(sub)  # already past it (acked meanwhile): send now

    def _cache(self, name: str) -> SubscriptionSnapshots:
        cache = self._caches.get(name)
        if cache is None:
            cache = self._caches[name] = SubscriptionSnapshots(self.max_cached)
        return cache

    # -- subscriptions moving -------------------------------------------------------------------
    def _on_mark_delete(self, sub: Subscription) -> None:
        if self.closed:
            return
        cache = self._caches.get(sub.name)
        if cache is None:
            return
        passed = cache.advanced(sub.cursor.mark_delete_position)
        if passed is None:
            return
        self.updates_sent += 1
        self._write(
            markers.subscription_update(
                sub.name, passed.positions(), publish_time_ms=self.clock.now_ms()
            )
        )

    def _apply(self, update: markers.SubscriptionUpdate) -> None:
        for p in update.positions:
            if p.cluster == self.local:
                self._spawn(self._move(update.subscription, Position(p.ledger_id, p.entry_id)))
                return

    async def _move(self, name: str, position: Position) -> None:
        if await self.topic.move_replicated_subscription(name, position):
            self.updates_applied += 1
            log.debug("%s: replicated subscription %s moved to %s", self.topic, name, position)

    def statistics(self) -> dict[str, int]:
        return {
            "snapshotsCompleted": self.taker.completed,
            "snapshotsTimedOut": self.taker.timed_out,
            "snapshotsPending": self.taker.pending,
            "upToDate": int(self.taker.covers(self.topic.markers.last_data)),
            "ticks": self.ticks,
            "markersWritten": self.markers_written,
            "updatesSent": self.updates_sent,
            "updatesApplied": self.updates_applied,
        }


def _log_failure(fut: asyncio.Future[Any]) -> None:
    if fut.cancelled():
        return
    exc = fut.exception()
    if exc is not None:
        log.debug("replicated subscriptions: %s", exc)


__all__ = ["ReplicatedSubscriptions"]
