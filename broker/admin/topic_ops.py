"""Admin operations on topics, subscriptions, namespaces and the cluster beyond CRUD.

Owns: ``TopicOperations``, what the admin REST API's operation endpoints do (Pulsar's
semantics): create a subscription at a position, skip N messages, clear a backlog, expire
messages older than T, reset a cursor to a time or a position, peek the Nth message of a
subscription or examine a topic's, last message id, internal (managed-ledger) stats,
partitioned stats and subscriptions, unload of a partitioned topic, a namespace or a bundle,
bundle split, topic terminate and truncate, the broker and bookie lists, owned bundles, a
topic's bundle. Decisions are
made here; the cursor moves go through the subscription's ``TopicCursor``. Must not know:
HTTP (errors are ``ResourceError``s with their status), the wire protocol beyond reading
stored entries.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import aiohttp

from magnetar.broker.compaction import CompactionAlreadyRunning, TopicCompaction
from magnetar.broker.errors import OwnedElsewhere, ServerError
from magnetar.broker.ledger.position import EARLIEST, LATEST, Position
from magnetar.broker.namespace.lookup import NotOwnedHere, to_resource_error
from magnetar.broker.namespace.ownership import NamespaceBundle
from magnetar.broker.namespace.resources import (
    PreconditionFailed,
    ResourceConflict,
    ResourceError,
    ResourceNotFound,
)
from magnetar.broker.naming import InvalidTopicName, TopicName
from magnetar.broker.replication.stats import merge_replication
from magnetar.broker.storage.contract import Entry
from magnetar.broker.topics.contract import Topic
from magnetar.broker.topics.persistent import PersistentTopic
from magnetar.broker.topics.subscription import Subscription, SubscriptionError
from magnetar.client.protocol import EntryView, RemoteProtocolError
from magnetar.zk import paths

if TYPE_CHECKING:
    from magnetar.broker.service import BrokerService

READ_CHUNK = 1000
"""Entries read per step when an operation walks a backlog (skip, expire, peek)."""
INT64_MAX = (1 << 63) - 1


def not_allowed(reason: str) -> ResourceError:
    err = ResourceError(reason)
    err.http_status = 405
    return err


def parse_position(body: Any) -> Position:
    """Pulsar's MessageId JSON: ``{"ledgerId": L, "entryId": E}``; -1 = earliest, MAX = latest;
    an empty body = latest (Pulsar's default for a new subscription)."""
    if body is None:
        return LATEST
    if not isinstance(body, dict):
        raise PreconditionFailed('The body must be a MessageId: {"ledgerId": L, "entryId": E}')
    try:
        ledger_id = int(body.get("ledgerId", INT64_MAX))
        entry_id = int(body.get("entryId", INT64_MAX))
    except (TypeError, ValueError):
        raise PreconditionFailed("ledgerId and entryId must be integers") from None
    if ledger_id < 0:
        return EARLIEST
    if ledger_id >= INT64_MAX:
        return LATEST
    return Position(ledger_id, entry_id)


@dataclass(frozen=True, slots=True)
class PeekedMessage:
    """One stored entry as ``peek``/``examine`` answer it: headers and the payload bytes."""

    position: Position
    headers: dict[str, str]
    payload: bytes


def _peeked(entry: Entry) -> PeekedMessage:
    pos = entry.position
    headers = {"X-Pulsar-Message-ID": f"{pos.ledger_id}:{pos.entry_id}"}
    try:
        stored = EntryView.parse(entry.data, verify_checksum=False)
    except Exception:
        return PeekedMessage(pos, headers, bytes(entry.data))
    md = stored.metadata
    headers["X-Pulsar-publish-time"] = (
        time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(md.publish_time / 1000))
        + f".{md.publish_time % 1000:03d}Z"
    )
    headers["X-Pulsar-producer-name"] = md.producer_name
    headers["X-Pulsar-sequence-id"] = str(md.sequence_id)
    if md.HasField("partition_key"):
        headers["X-Pulsar-partition-key"] = md.partition_key
    if md.HasField("num_messages_in_batch"):
        headers["X-Pulsar-num-batch-message"] = str(md.num_messages_in_batch)
    if md.HasField("event_time") and md.event_time:
        headers["X-Pulsar-event-time"] = str(md.event_time)
    if md.HasField("replicated_from"):
        headers["X-Pulsar-replicated-from"] = md.replicated_from
    for kv in md.properties:
        headers[f"X-Pulsar-PROPERTY-{kv.key}"] = kv.value
    return PeekedMessage(pos, headers, bytes(stored.payload))


_SUMMED = (
    "msgInCounter",
    "bytesInCounter",
    "storageSize",
    "offloadedStorageSize",
    "numberOfEntries",
)
"""Counters a partitioned topic's stats add up over its partitions (as Pulsar's)."""


class TopicOperations:
    def __init__(self, service: BrokerService, *, clock_ms: Callable[[], int] | None = None):
        self.service = service
        self.clock_ms = clock_ms or (lambda: int(time.time() * 1000))

    def __repr__(self) -> str:
        return f"TopicOperations({self.service!r})"

    # -- subscriptions, stats and compaction (the admin REST's topic resources) ----------
    async def list_subscriptions(self, topic: str) -> list[str]:
        return sorted((await self.service.existing_topic(topic)).subscriptions)

    async def delete_subscription(self, topic: str, subscription: str, *, force: bool) -> None:
        t = await self.service.existing_topic(topic)
        try:
            await t.delete_subscription(subscription, force=force)
        except SubscriptionError as exc:
            if exc.code == ServerError.SubscriptionNotFound:
                raise ResourceNotFound("Subscription not found") from None
            raise PreconditionFailed(exc.message) from None

    async def _compaction_of(self, topic: str) -> tuple[PersistentTopic, TopicCompaction]:
        if not self.parse(topic).persistent:
            err = ResourceError("Compaction is not supported on non-persistent topics")
            err.http_status = 405
            raise err
        t = await self.service.existing_topic(topic)
        if not isinstance(t, PersistentTopic) or t.compaction is None:
            raise ResourceError("Topic has no compaction state")
        return t, t.compaction

    async def trigger_compaction(self, topic: str) -> None:
        """Start compacting ``topic`` up to its current end; ResourceConflict (409) while a
        compaction of it runs."""
        tn = self.parse(topic)
        if tn.persistent:
            n = await self.partitions(topic)
            if n > 0:  # a partitioned topic: every partition (Pulsar does the same)
                for i in range(n):
                    try:
                        await self.trigger_compaction(f"{tn.full}-partition-{i}")
                    except (ResourceConflict, ResourceNotFound):
                        pass  # running already, or a partition never written to
                return
        t, compaction = await self._compaction_of(topic)
        try:
            compaction.trigger(t)
        except CompactionAlreadyRunning as exc:
            raise ResourceConflict(str(exc)) from None

    async def compaction_status(self, topic: str) -> dict[str, Any]:
        _, compaction = await self._compaction_of(topic)
        return compaction.status_json()

    async def topic_stats(self, topic: str) -> dict[str, Any]:
        from magnetar.broker.admin.offload_stats import offload_topic_stats

        t = await self.service.existing_topic(topic)
        return {
            **t.stats(),
            **self.service.policies.topic_stats(t),
            **self.service.replication.topic_stats(t),
            **(offload_topic_stats(t.ledger) if isinstance(t, PersistentTopic) else {}),
        }

    # -- lookup helpers ------------------------------------------------------------------
    def parse(self, topic: str) -> TopicName:
        """The topic's name, or 412 (Pulsar's answer to an invalid topic name)."""
        try:
            return TopicName.parse(topic)
        except InvalidTopicName as exc:
            raise PreconditionFailed(str(exc)) from None

    async def partitions(self, topic: str) -> int:
        """Partitions of ``topic`` (0 = not partitioned, or a partition itself)."""
        tn = self.parse(topic)
        if tn.partition_index >= 0:
            return 0
        return await self.service.resources.get_partitions(
            tn.tenant, tn.namespace, tn.domain, tn.local
        )

    async def topic(self, topic: str) -> Topic:
        """The loaded or stored topic; ``OwnedElsewhere`` when another broker owns it (the
        API redirects there), ``ResourceNotFound`` for the rest."""
        from magnetar.broker.service import ServiceError

        try:
            got = await self.service.get_topic(topic, create=False)
        except NotOwnedHere as exc:
            raise to_resource_error(exc) from None
        except ServiceError as exc:
            raise ResourceNotFound(exc.message) from None
        if got is None:
            raise ResourceNotFound("Topic not found")
        return got

    async def persistent(self, topic: str) -> PersistentTopic:
        if not self.parse(topic).persistent:
            raise not_allowed("The operation is not supported on non-persistent topics")
        got = await self.topic(topic)
        assert isinstance(got, PersistentTopic)  # a persistent name loads one
        return got

    async def subscription(self, topic: str, sub: str) -> tuple[PersistentTopic, Subscription]:
        t = await self.persistent(topic)
        s = t.subscriptions.get(sub)
        if s is None:
            raise ResourceNotFound("Subscription not found")
        return t, s

    async def _each_partition(self, topic: str) -> list[str]:
        n = await self.partitions(topic)
        if n == 0:
            return [topic]
        base = self.parse(topic).full
        return [f"{base}-partition-{i}" for i in range(n)]

    async def _partition_subscriptions(
        self, topic: str, sub: str
    ) -> AsyncIterator[tuple[PersistentTopic, Subscription]]:
        """``sub`` on each partition that has it (the topic itself when not partitioned); a
        missing one is ``ResourceNotFound`` only for a non-partitioned topic."""
        for name in await self._each_partition(topic):
            try:
                got = await self.subscription(name, sub)
            except ResourceNotFound:
                if name == topic:
                    raise
                continue
            yield got

    # -- subscriptions -------------------------------------------------------------------
    async def create_subscription(self, topic: str, sub: str, position: Position) -> None:
        """Pulsar: ``PUT .../subscription/{sub}``; on every partition of a partitioned topic
        (partitions not yet created are created, as Pulsar does)."""
        n = await self.partitions(topic)
        targets = await self._each_partition(topic)
        existing = 0
        for name in targets:
            if n > 0:
                from magnetar.broker.service import ServiceError

                try:
                    t = await self.service.get_topic(name, create=True)
                except ServiceError as exc:
                    raise ResourceNotFound(exc.message) from None
                assert t is not None
            else:
                t = await self.persistent(name)
            if sub in t.subscriptions:
                existing += 1
                continue
            await t.create_subscription(sub, earliest=position == EARLIEST)
            if position not in (EARLIEST, LATEST):
                await t.subscriptions[sub].reset_cursor(position)
        if existing == len(targets):
            raise ResourceConflict("Subscription already exists for topic")

    async def subscriptions(self, topic: str) -> list[str]:
        names: set[str] = set()
        for name in await self._each_partition(topic):
            try:
                names.update((await self.topic(name)).subscriptions)
            except ResourceNotFound:
                if name == topic:
                    raise
        return sorted(names)

    async def _unacked(
        self, t: PersistentTopic, s: Subscription, stop: Callable[[Entry, int], bool]
    ) -> list[Entry]:
        """Unacknowledged entries after the mark-delete position, in order, until ``stop``
        (entry, messages so far) says so or the ledger ends."""
        out: list[Entry] = []
        md = s.cursor.mark_delete_position
        start = Position(md.ledger_id, md.entry_id + 1)
        last = t.ledger.last_confirmed
        messages = 0
        while last is not None:
            entries = await t.ledger.read_entries(start, READ_CHUNK)
            if not entries:
                break
            for e in entries:
                if s.cursor.is_acked(e.position):
                    continue
                if stop(e, messages):
                    return out
                out.append(e)
                messages += self._count(t, e)
            tail = entries[-1].position
            if tail >= last:
                break
            start = Position(tail.ledger_id, tail.entry_id + 1)
        return out

    async def skip(self, topic: str, sub: str, count: int) -> int:
        """Acknowledge the next ``count`` messages (whole entries: a batch is skipped whole
        once any of it is due). Returns the messages skipped."""
        if count < 0:
            raise PreconditionFailed("The number of messages to skip must be 0 or more")
        t, s = await self.subscription(topic, sub)
        entries = await self._unacked(t, s, lambda e, n: n >= count)
        if entries:
            await s.cursor.ack([e.position for e in entries])
        return len(entries)

    async def clear_backlog(self, topic: str, sub: str) -> None:
        async for t, s in self._partition_subscriptions(topic, sub):
            last = t.ledger.last_confirmed
            if last is not None:
                await s.cursor.ack_cumulative(last)

    async def expire(self, topic: str, sub: str, seconds: int) -> None:
        """Acknowledge every message published more than ``seconds`` ago."""
        if seconds < 0:
            raise PreconditionFailed("The expiry time must be 0 or more seconds")
        async for t, s in self._partition_subscriptions(topic, sub):
            cutoff = await t.find_position_by_time(self.clock_ms() - seconds * 1000)
            if cutoff == LATEST:
                last = t.ledger.last_confirmed
                if last is not None:
                    await s.cursor.ack_cumulative(last)
                continue

            def reached(e: Entry, _n: int, c: Position = cutoff) -> bool:
                return e.position >= c

            entries = await self._unacked(t, s, reached)
            if entries:
                await s.cursor.ack([e.position for e in entries])

    async def reset_cursor(
        self,
        topic: str,
        sub: str,
        *,
        position: Position | None = None,
        timestamp_ms: int | None = None,
    ) -> None:
        """Seek: consumers are disconnected (they reconnect and read from there)."""
        async for t, s in self._partition_subscriptions(topic, sub):
            pos = position
            if timestamp_ms is not None:
                pos = await t.find_position_by_time(timestamp_ms)
            assert pos is not None
            for consumer in s.consumers:
                if consumer.sink is not None:
                    consumer.sink.send_close_consumer(consumer)
            await s.reset_cursor(pos)

    async def peek(self, topic: str, sub: str, nth: int) -> PeekedMessage:
        if nth < 1:
            raise PreconditionFailed("The message position starts at 1")
        t, s = await self.subscription(topic, sub)
        entries = await self._unacked(t, s, lambda e, n: n >= nth)
        if sum(self._count(t, e) for e in entries) < nth:
            raise ResourceNotFound("Message not found")
        return _peeked(entries[-1])

    @staticmethod
    def _count(t: PersistentTopic, e: Entry) -> int:
        try:
            return t.count_of(e)
        except RemoteProtocolError:
            return 1

    async def examine(self, topic: str, initial: str, nth: int) -> PeekedMessage:
        """Pulsar's ``examinemessage``: the ``nth`` entry from the start or from the end."""
        if nth < 1:
            raise PreconditionFailed("messagePosition starts at 1")
        t = await self.persistent(topic)
        last = t.ledger.last_confirmed
        first = t.ledger.first_position
        if last is None or first is None:
            raise ResourceNotFound("Message not found: the topic is empty")
        if initial == "earliest":
            got = await t.ledger.read_entries(first, nth)
            if len(got) < nth:
                raise ResourceNotFound("Message not found")
            return _peeked(got[nth - 1])
        if initial != "latest":
            raise PreconditionFailed("initialPosition must be earliest or latest")
        window: list[Entry] = []
        start = first
        while True:
            got = await t.ledger.read_entries(start, READ_CHUNK)
            if not got:
                break
            window = (window + got)[-nth:]
            if got[-1].position >= last:
                break
            start = Position(got[-1].position.ledger_id, got[-1].position.entry_id + 1)
        if len(window) < nth:
            raise ResourceNotFound("Message not found")
        return _peeked(window[0])

    # -- topics --------------------------------------------------------------------------
    async def last_message_id(self, topic: str) -> dict[str, Any]:
        t = await self.persistent(topic)
        got = await t.resolve_last_message_id(None)
        out: dict[str, Any] = {
            "ledgerId": got.ledger_id,
            "entryId": got.entry_id,
            "partitionIndex": self.parse(topic).partition_index,
        }
        if got.batch_index >= 0:
            out["batchIndex"] = got.batch_index
        return out

    async def terminate(self, topic: str) -> dict[str, Any]:
        """Pulsar's ``terminate``: no more messages on ``topic`` (one topic or partition),
        ever; answers the last message id. Terminating twice answers the same id."""
        tn = self.parse(topic)
        if await self.partitions(topic) > 0:
            raise not_allowed(
                "Termination of a partitioned topic is not allowed: "
                "terminate its partitions (terminate/partitions)"
            )
        t = await self.persistent(topic)
        try:
            last = await t.terminate()
        except NotImplementedError as exc:
            raise not_allowed(str(exc)) from None
        return {
            "ledgerId": last.ledger_id,
            "entryId": last.entry_id,
            "partitionIndex": tn.partition_index,
        }

    async def terminate_partitions(self, topic: str) -> dict[str, Any]:
        """Pulsar's ``terminate/partitions``: every partition of a partitioned topic; answers
        ``{partition index: last message id}``."""
        n = await self.partitions(topic)
        if n == 0:
            raise ResourceNotFound("Partitioned topic does not exist")
        base = self.parse(topic).full
        out: dict[str, Any] = {}
        for i in range(n):
            from magnetar.broker.service import ServiceError

            name = f"{base}-partition-{i}"
            try:
                await self.service.get_topic(name, create=True)
            except ServiceError as exc:
                raise ResourceNotFound(exc.message) from None
            out[str(i)] = await self.terminate(name)
        return out

    async def truncate(self, topic: str) -> None:
        """Pulsar's ``truncate``: move every subscription to the end, roll the ledger over and
        delete every ledger before the current one (retention notwithstanding); on every
        partition of a partitioned topic."""
        from magnetar.broker.ledger.errors import ManagedLedgerError

        for name in await self._each_partition(topic):
            try:
                t = await self.persistent(name)
            except ResourceNotFound:
                if name == topic:
                    raise
                continue  # a partition nobody has written to yet: nothing to delete
            if t.terminated:
                raise not_allowed("The topic is terminated: it cannot be truncated")
            last = t.ledger.last_confirmed
            if last is not None:
                for s in list(t.subscriptions.values()):
                    await s.cursor.ack_cumulative(last)
            try:
                await t.ledger.truncate()
            except ManagedLedgerError as exc:
                raise ResourceConflict(f"Cannot truncate {name}: {exc}") from None

    async def internal_stats(self, topic: str) -> dict[str, Any]:
        """Pulsar's PersistentTopicInternalStats (the managed ledger's view)."""
        from magnetar.broker.storage.managed_adapter import ManagedLedgerAdapter

        t = await self.persistent(topic)
        ledger = t.ledger
        last = ledger.last_confirmed
        ledgers: list[dict[str, Any]] = []
        state = "LedgerOpened"
        if isinstance(ledger, ManagedLedgerAdapter):
            ledgers = ledger.ledger_details()  # with each ledger's tiered-storage state
            state = ledger.ml.state.name.title().replace("_", "")
        cursors = {}
        for name, s in sorted(t.subscriptions.items()):
            c = s.cursor
            cursors[name] = {
                "markDeletePosition": str(c.mark_delete_position),
                "readPosition": str(c.read_position),
                "numberOfEntriesSinceFirstNotAckedMessage": c.backlog(),
                "state": "Open",
                "active": bool(s.consumers),
                "properties": {},
            }
        for remote, c in sorted(self.service.replication.replicator_cursors(t).items()):
            cursors[c.name] = {
                "markDeletePosition": str(c.mark_delete_position),
                "readPosition": str(c.read_position),
                "numberOfEntriesSinceFirstNotAckedMessage": c.backlog(),
                "state": "Open",
                "active": True,
                "properties": {},
                "remoteCluster": remote,
            }
        current = ledgers[-1] if ledgers else {"entries": 0, "size": 0}
        return {
            "entriesAddedCounter": t.counters.entries_in,
            "numberOfEntries": ledger.num_entries,
            "totalSize": ledger.total_size,
            "currentLedgerEntries": current["entries"],
            "currentLedgerSize": current["size"],
            "lastConfirmedEntry": str(last) if last is not None else "-1:-1",
            "state": state,
            "ledgers": ledgers,
            "cursors": cursors,
            **self.service.replication.topic_stats(t),
        }

    async def partitioned_stats(self, topic: str, *, per_partition: bool) -> dict[str, Any]:
        n = await self.partitions(topic)
        if n == 0:
            raise ResourceNotFound("Partitioned topic does not exist")
        base = self.parse(topic).full
        totals: dict[str, Any] = {
            "msgInCounter": 0,
            "bytesInCounter": 0,
            "storageSize": 0,
            "offloadedStorageSize": 0,
            "numberOfEntries": 0,
            "publishers": [],
            "subscriptions": {},
            "metadata": {"partitions": n},
        }
        parts: dict[str, Any] = {}
        replication: list[dict[str, Any]] = []
        for i in range(n):
            name = f"{base}-partition-{i}"
            try:
                stats = await self.topic_stats(name)
            except ResourceNotFound:
                continue  # a partition nobody has written to or subscribed yet
            except OwnedElsewhere as elsewhere:
                got = await self._owner_stats(name, elsewhere)
                if got is None:
                    continue
                stats = got
            parts[name] = stats
            replication.append(stats.get("replication") or {})
            for key in _SUMMED:
                totals[key] += int(stats.get(key, 0))
            totals["publishers"] += stats.get("publishers") or []
            for sub, s in (stats.get("subscriptions") or {}).items():
                into = totals["subscriptions"].setdefault(
                    sub,
                    {
                        "type": s.get("type"),
                        "msgBacklog": 0,
                        "unackedMessages": 0,
                        "isDurable": s.get("isDurable", True),
                        "consumers": [],
                    },
                )
                into["msgBacklog"] += int(s.get("msgBacklog", 0))
                into["unackedMessages"] += int(s.get("unackedMessages", 0))
                into["consumers"] += s.get("consumers") or []
        totals["replication"] = merge_replication(replication)
        if per_partition:
            totals["partitions"] = parts
        return totals

    async def _owner_stats(self, name: str, elsewhere: OwnedElsewhere) -> dict[str, Any] | None:
        """A partition's stats asked of the broker that owns it (Pulsar's partitioned stats
        gather them the same way); None if it does not know the partition. Without a cluster
        to ask through, the request is redirected as a whole."""
        cluster = self.service.cluster
        if cluster is None:
            raise elsewhere
        try:
            return await cluster.topic_stats(
                elsewhere.http_url, elsewhere.http_url_tls, self.parse(name)
            )
        except (OSError, RuntimeError, aiohttp.ClientError, TimeoutError) as exc:
            err = ResourceError(f"Stats of {name} from its owner {elsewhere.http_url}: {exc}")
            err.http_status = 503
            raise err from None

    async def unload(self, topic: str) -> int:
        """Unload the topic, or every partition of a partitioned topic; how many were loaded."""
        count = 0
        for name in await self._each_partition(topic):
            if self.parse(name).full in self.service.topics:
                count += 1
            await self.service.unload_topic(name)
        return count

    async def _owned_bundles(self, tenant: str, namespace: str) -> list[NamespaceBundle]:
        if not await self.service.resources.namespace_exists(tenant, namespace):
            raise ResourceNotFound("Namespace does not exist")
        ownership = self.service.namespaces.ownership
        if ownership is None:
            return []
        bundles = await self.service.resources.bundles(tenant, namespace)
        return [
            b
            for r in bundles.ranges
            if ownership.is_owned(b := NamespaceBundle(tenant, namespace, r))
        ]

    async def unload_namespace(self, tenant: str, namespace: str) -> None:
        for bundle in await self._owned_bundles(tenant, namespace):
            await self.service.namespaces.unload_bundle(bundle)

    # -- cluster -------------------------------------------------------------------------
    # -- properties (magctl's labels) -----------------------------------------------------
    @staticmethod
    def _check_properties(body: Any) -> dict[str, str]:
        if not isinstance(body, dict) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in body.items()
        ):
            raise PreconditionFailed("Properties must be a JSON object of strings")
        return body

    async def namespace_properties(self, tenant: str, namespace: str) -> dict[str, str]:
        policies = await self.service.resources.get_policies(tenant, namespace)
        return dict(policies.get("properties") or {})

    async def update_namespace_properties(
        self, tenant: str, namespace: str, changes: Any, *, clear: bool = False
    ) -> None:
        """Merge ``changes`` (Pulsar's PUT ``.../properties``), or remove every property."""
        merged = (
            {}
            if clear
            else {
                **await self.namespace_properties(tenant, namespace),
                **self._check_properties(changes),
            }
        )
        await self.service.resources.update_policies(
            tenant, namespace, {"properties": merged or None}
        )

    def _topic_key(self, topic: str) -> tuple[str, str, str, str]:
        tn = self.parse(topic)
        if tn.partition_index >= 0:  # a partition's properties are its topic's
            tn = tn.partitioned_base
        return tn.tenant, tn.namespace, tn.domain, tn.local

    async def topic_properties(self, topic: str) -> dict[str, str]:
        key = self._topic_key(topic)
        if not await self.service.resources.namespace_exists(key[0], key[1]):
            raise ResourceNotFound("Namespace does not exist")
        policies = await self.service.resources.get_topic_policies(*key)
        return dict(policies.get("properties") or {})

    async def update_topic_properties(
        self, topic: str, changes: Any, *, remove: str | None = None
    ) -> None:
        """Merge ``changes`` (PUT), or remove the key ``remove`` (DELETE ``?key=``)."""
        props = await self.topic_properties(topic)
        if remove is not None:
            if remove not in props:
                raise ResourceNotFound(f"Property {remove!r} not found")
            props.pop(remove)
        else:
            props.update(self._check_properties(changes))
        await self.service.resources.update_topic_policies(
            *self._topic_key(topic), {"properties": props or None}
        )

    async def topic_bundle(self, topic: str) -> str:
        tn = self.parse(topic)
        if not await self.service.resources.namespace_exists(tn.tenant, tn.namespace):
            raise ResourceNotFound("Namespace does not exist")
        return (await self.service.namespaces.bundle_of(tn)).range.name

    async def bookies(self) -> list[dict[str, Any]]:
        """Registered bookies (Pulsar's ``BookiesClusterInfo`` entries), with what each one
        registered: address, HTTP (metrics) port, read-only state."""
        import json

        store = self.service.store
        out = []
        for parent, state in (
            (paths.AVAILABLE_BOOKIES, "writable"),
            (paths.READONLY_BOOKIES, "readonly"),
        ):
            for name in sorted(await store.children(parent)):
                if name == "readonly":
                    continue
                entry: dict[str, Any] = {"bookieId": name, "state": state}
                got = await store.get(f"{parent}/{name}")
                try:
                    reg = json.loads(got.value) if got is not None and got.value else {}
                except ValueError:
                    reg = {}
                if isinstance(reg, dict):
                    for src, dst in (
                        ("address", "address"),
                        ("http_port", "httpPort"),
                        ("instance_id", "instanceId"),
                    ):
                        if reg.get(src) is not None:
                            entry[dst] = reg[src]
                out.append(entry)
        return out

    async def broker_stats_topics(self) -> dict[str, Any]:
        """Pulsar's ``/broker-stats/topics``: namespace -> bundle -> domain -> topic -> stats."""
        out: dict[str, Any] = {}
        for name, t in sorted(self.service.topics.items()):
            tn = t.name
            try:
                bundle = (await self.service.namespaces.bundle_of(tn)).range.name
                stats = await self.topic_stats(name) if tn.persistent else t.stats()
            except ResourceError:
                continue
            domain = "persistent" if tn.persistent else "non-persistent"
            out.setdefault(tn.namespace_name, {}).setdefault(bundle, {}).setdefault(domain, {})[
                name
            ] = stats
        return out

    def runtime_configuration(self) -> dict[str, str]:
        import dataclasses

        cfg = self.service.config
        return {f.name: str(getattr(cfg, f.name)) for f in dataclasses.fields(cfg)}


__all__ = ["PeekedMessage", "TopicOperations", "not_allowed", "parse_position"]
