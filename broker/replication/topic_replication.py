"""The geo-replication of one loaded topic partition: its replicators and replicated subscriptions.

Owns: ``TopicReplication``, attached to a loaded ``PersistentTopic`` (a ``TopicAttachment``:
detached first when the topic closes). ``apply(plan, policies)`` makes the topic's
replicators match its replication plan, one at a time (a lock), as Pulsar's
``PersistentTopic.checkReplication`` does:

- a remote in the plan without a replicator: its durable cursor ``pulsar.repl.<remote>`` is
  opened (made at the end of the topic when new, Pulsar's ``replicationStartAt`` default:
  what was stored before the cluster was added is not sent), wrapped as a ``CursorSource``,
  and a ``Replicator`` started towards the remote (it connects in the background);
- a replicator whose remote left the plan is stopped and its cursor deleted: the backlog
  kept for that remote is released; so is a replicator cursor left by an earlier plan;
- running replicators take the topic's message TTL and ``replicatorDispatchRate``;
- with any remote, ``ReplicatedSubscriptions`` runs (snapshots, answers, updates), and the
  topic filters markers from then on.
``reconnect(remote)`` restarts a remote's replicator (its ``ClusterData`` changed).
``detach`` (unload, delete, broker stop) stops everything and deletes nothing: the next owner
reopens the cursors and sends again from them.
Must not know: the wire, HTTP, how remotes are reached (a ``RemoteCluster`` per name).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass

from magnetar.broker.policies.model import TopicPolicies
from magnetar.broker.replication.clusters import ReplicationPlan
from magnetar.broker.replication.contracts import RemoteCluster
from magnetar.broker.replication.replicator import Replicator, ReplicatorSettings
from magnetar.broker.replication.snapshots import (
    SNAPSHOT_FREQUENCY_MS,
    SNAPSHOT_TIMEOUT_S,
    SNAPSHOTS_CACHED,
)
from magnetar.broker.replication.source import CursorSource, SchemaLookup
from magnetar.broker.replication.stats import ReplicatorStatistics
from magnetar.broker.replication.subscriptions import ReplicatedSubscriptions
from magnetar.broker.storage.contract import TopicCursor
from magnetar.broker.topics.persistent import PersistentTopic
from magnetar.broker.topics.replication_names import (
    ReplicationLink,
    cursor_name,
    remote_of_cursor,
)
from magnetar.clock import Clock

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class ReplicationSettings:
    """The broker's settings of its replicators and replicated subscriptions."""

    producer_queue_size: int = 1000
    subscriptions_enabled: bool = True
    snapshot_frequency_ms: int = SNAPSHOT_FREQUENCY_MS
    snapshot_timeout_s: int = SNAPSHOT_TIMEOUT_S
    snapshots_cached: int = SNAPSHOTS_CACHED


class TopicReplication:
    """See the module docstring."""

    def __init__(  # noqa: PLR0917 - what a topic's replication is made of, each once
        self,
        topic: PersistentTopic,
        local: str,
        remote_of: Callable[[str], RemoteCluster],
        schema_of: SchemaLookup,
        clock: Clock,
        settings: ReplicationSettings,
    ) -> None:
        self.topic = topic
        self.local = local
        self._remote_of = remote_of
        self._schema_of = schema_of
        self.clock = clock
        self.settings = settings
        self.replicators: dict[str, Replicator] = {}
        self.cursors: dict[str, TopicCursor] = {}
        """Each replicator's cursor, by remote (internal stats show them)."""
        self.subscriptions: ReplicatedSubscriptions | None = None
        self._lock = asyncio.Lock()
        self.plan = ReplicationPlan(frozenset({local}), local)
        self._policies: TopicPolicies | None = None
        self.closed = False

    def __repr__(self) -> str:
        return f"<TopicReplication {self.topic.full_name} -> {sorted(self.replicators)}>"

    # -- following the plan ------------------------------------------------------------------
    async def apply(self, plan: ReplicationPlan, policies: TopicPolicies) -> None:
        async with self._lock:
            if self.closed or self.topic.closed:
                return
            self.plan, self._policies = plan, policies
            wanted = plan.remotes
            for remote in [r for r in self.replicators if r not in wanted]:
                await self._remove(remote)
            for name in self.topic.ledger.cursor_names():
                stale = remote_of_cursor(name)
                if stale is not None and stale not in wanted and stale != self.local:
                    log.info("%s: deleting the replicator cursor %s", self.topic.name, name)
                    await self.topic.ledger.delete_cursor(name)
            if wanted:
                await self.topic.markers.expect()
            for remote in sorted(wanted):
                rep = self.replicators.get(remote)
                if rep is None:
                    await self._add(remote, policies)
                else:
                    rep.update_settings(
                        message_ttl_s=policies.message_ttl_s,
                        dispatch_rate=policies.replicator_dispatch_rate,
                    )
            await self._follow_subscriptions(bool(wanted))

    async def _add(self, remote: str, policies: TopicPolicies) -> None:
        cursor = await self.topic.ledger.open_cursor(cursor_name(remote), initial_earliest=False)
        source = CursorSource(self.topic, cursor, self._schema_of)
        rep = Replicator(
            ReplicationLink(self.local, remote),
            source,
            self._remote_of(remote),
            ReplicatorSettings(
                producer_queue_size=self.settings.producer_queue_size,
                message_ttl_s=policies.message_ttl_s,
                dispatch_rate=policies.replicator_dispatch_rate,
            ),
            clock=self.clock,
        )
        self.replicators[remote] = rep
        self.cursors[remote] = cursor
        rep.start()
        log.info(
            "%s: replicating to %s from %s", self.topic.name, remote, cursor.mark_delete_position
        )

    async def _remove(self, remote: str) -> None:
        rep = self.replicators.pop(remote)
        self.cursors.pop(remote, None)
        await rep.stop()
        log.info("%s: stopped replicating to %s; its backlog is released", self.topic.name, remote)
        await self.topic.ledger.delete_cursor(cursor_name(remote))

    async def _follow_subscriptions(self, replicated: bool) -> None:
        if replicated and self.subscriptions is None:
            self.subscriptions = ReplicatedSubscriptions(
                self.topic,
                self.local,
                self.clock,
                remotes=lambda: frozenset(self.replicators),
                connected=self._all_connected,
                frequency_ms=self.settings.snapshot_frequency_ms,
                timeout_s=self.settings.snapshot_timeout_s,
                max_cached=self.settings.snapshots_cached,
                enabled=self.settings.subscriptions_enabled,
            )
            self.subscriptions.start()
        elif not replicated and self.subscriptions is not None:
            subs, self.subscriptions = self.subscriptions, None
            await subs.close()

    def _all_connected(self) -> bool:
        return all(r.statistics().connected for r in self.replicators.values())

    async def reconnect(self, remote: str) -> None:
        """The remote's registration changed: its replicator starts again with it."""
        async with self._lock:
            rep = self.replicators.get(remote)
            if rep is None or self.closed:
                return
            await rep.stop()
            rep.remote = self._remote_of(remote)
            rep.start()

    # -- TopicAttachment -------------------------------------------------------------------------
    async def detach(self) -> None:
        async with self._lock:
            self.closed = True
            if self.subscriptions is not None:
                subs, self.subscriptions = self.subscriptions, None
                await subs.close()
            reps = list(self.replicators.values())
            self.replicators.clear()
            self.cursors.clear()
            await asyncio.gather(*(r.stop() for r in reps), return_exceptions=True)

    # -- observability ------------------------------------------------------------------------
    def statistics(self) -> dict[str, ReplicatorStatistics]:
        return {name: rep.statistics() for name, rep in sorted(self.replicators.items())}


__all__ = ["ReplicationSettings", "TopicReplication"]
