"""Applies namespace policies to the loaded topics of one broker, live.

Owns: the per-topic policy state (resolved ``TopicPolicies``, publish and dispatch rate
limiters, the backlog-quota verdict, sends held by ``producer_request_hold``), the watch on
``/admin/policies/<tenant>/<ns>`` (metadata-store notifications; each one re-reads the node,
which re-arms the watch, and re-applies the policies to that namespace's loaded topics),
the periodic message-expiry (TTL), backlog-quota, retention (trim) and inactive-topic
(``delete_inactive_topics``) checks on an injected ``Clock``, and the small hooks the
connection calls: ``check_producer``, ``check_consumer``,
``admit_send``, ``hold_queue`` (where a SEND waits while held or throttled).

Applying a policy to a loaded topic: the topic applies deduplication, unacked limits,
delayed delivery, retention and offload policies itself (``Topic.apply_policies``); here:
rate limiters (a subscription's ``DispatchThrottle``) and the backlog-quota verdict. Nothing
here awaits between a check and the change it guards: verdicts are computed by the periodic
check and read synchronously by the hooks.
Must not know: frames (the connection answers errors), HTTP, dispatchers (a subscription
takes its throttle), a topic's insides.
"""

from __future__ import annotations

import asyncio
import collections
import logging
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol
from urllib.parse import unquote

from magnetar.broker.compaction import COMPACTION_SUBSCRIPTION
from magnetar.broker.config import BrokerConfig
from magnetar.broker.dispatch.consumer import Consumer
from magnetar.broker.errors import ResourceError, ServerError
from magnetar.broker.naming import TopicName
from magnetar.broker.policies.backlog_quota import backlog_bytes, backlog_exceeded, evict_backlog
from magnetar.broker.policies.inactive import InactivityTracker
from magnetar.broker.policies.model import (
    TOPIC_POLICIES,
    BacklogQuotaType,
    InactiveTopicDeleteMode,
    RetentionPolicy,
    TopicPolicies,
    resolve_policies,
)
from magnetar.broker.policies.rate_limit import RateLimiter
from magnetar.broker.policies.ttl import expire_messages
from magnetar.broker.topics.contract import AppliedPolicies, Topic, TopicSubscription
from magnetar.broker.topics.persistent import PersistentTopic
from magnetar.broker.topics.producer import ProducerError
from magnetar.broker.topics.subscription import SubscriptionError
from magnetar.client.protocol import EntryView, RemoteProtocolError
from magnetar.clock import Clock, SystemClock, TimerHandle
from magnetar.zk import paths
from magnetar.zk.store import MetadataStore, Notification

log = logging.getLogger(__name__)

HELD_SENDS_MAX = 10_000
"""Sends held per topic by ``producer_request_hold``; beyond it they fail (bounded memory)."""
HOLD_RECHECK_S = 1.0
"""While sends are held, the quota is checked this often (not only every 60 s)."""


@dataclass(slots=True)
class TopicPolicyState:
    policies: TopicPolicies
    publish_limiter: RateLimiter | None = None
    dispatch_limiter: RateLimiter | None = None
    quota_action: RetentionPolicy | None = None
    """The backlog-quota action in force (None: within quota)."""
    held: collections.deque[Callable[[], None]] = field(default_factory=collections.deque)
    subscription_limiters: dict[str, RateLimiter] = field(default_factory=dict)
    recheck_armed: bool = False
    throttled_publishes: int = 0
    expired_entries: int = 0
    evicted_entries: int = 0


@dataclass(frozen=True, slots=True)
class PolicyStatistics:
    topics: int
    held_sends: int
    throttled_publishes: int
    expired_entries: int
    evicted_entries: int


def _topic_key(tn: TopicName) -> tuple[str, str, str, str]:
    """Whose topic-level policies apply: a partition's are its partitioned topic's."""
    base = tn.partitioned_base if tn.partition_index >= 0 else tn
    return (base.tenant, base.namespace, base.domain, base.local)


class DispatchThrottle:
    """A dispatcher's rate limit: the topic's limiter (shared by its subscriptions) and the
    subscription's own. ``allowed`` caps a round's permits; when nothing is allowed it
    arms one wake-up (on the injected clock) for when a message may go again."""

    __slots__ = ("_clock", "_wake", "limiters")

    def __init__(self, limiters: list[RateLimiter], clock: Clock) -> None:
        self.limiters = limiters
        self._clock = clock
        self._wake: TimerHandle | None = None

    def __repr__(self) -> str:
        return f"<DispatchThrottle {self.limiters!r}>"

    def allowed(self, permits: int, wake: Callable[[], None]) -> int:
        n = permits
        for limiter in self.limiters:
            got = limiter.available_msgs()
            if got is not None:
                n = min(n, got)
        if n <= 0 and self._wake is None:
            delay = max(limiter.refill_delay_s() for limiter in self.limiters)

            def fire() -> None:
                self._wake = None
                wake()

            self._wake = self._clock.call_later(max(delay, 0.001), fire)
        return max(0, n)

    def charge(self, messages: int, size: int) -> None:
        for limiter in self.limiters:
            if messages and limiter.msgs is not None:
                limiter.msgs.consume(messages)
            if size and limiter.bytes_ is not None:
                limiter.bytes_.consume(size)

    def cancel(self) -> None:
        if self._wake is not None:
            self._wake.cancel()
            self._wake = None


class ReadThrottled(Protocol):
    """A connection whose reading publish throttling may hold (``ServerConnection``)."""

    def pause_reads(self, reason: str) -> bool: ...

    def resume_reads(self, reason: str) -> None: ...


class PolicyStore(Protocol):
    """Where namespace and topic policies are read (``namespace.resources.Resources``)."""

    async def get_policies(self, tenant: str, namespace: str) -> dict[str, Any]: ...

    async def get_topic_policies(
        self, tenant: str, namespace: str, domain: str, local: str
    ) -> dict[str, Any]: ...


class PolicyHost(Protocol):
    """What the policy manager needs of the broker (``BrokerService`` is one): its
    settings, the metadata store it watches, the policy documents and the loaded topics."""

    @property
    def config(self) -> BrokerConfig: ...

    @property
    def store(self) -> MetadataStore: ...

    @property
    def resources(self) -> PolicyStore: ...

    @property
    def topics(self) -> Mapping[str, Topic]: ...

    async def delete_if_inactive(self, name: str, mode: InactiveTopicDeleteMode) -> bool:
        """Delete the loaded topic ``name`` if it is still inactive by ``mode``."""
        ...


class PolicyManager:
    def __init__(self, service: PolicyHost, clock: Clock | None = None) -> None:
        self.service = service
        self.config = service.config
        self.clock: Clock = clock or SystemClock()
        self._states: dict[str, TopicPolicyState] = {}
        self._ns_cache: dict[tuple[str, str], dict[str, Any]] = {}
        self._topic_cache: dict[tuple[str, str, str, str], dict[str, Any]] = {}
        self._timers: dict[str, TimerHandle] = {}  # the periodic checks' next runs
        self._tasks: set[asyncio.Task[Any]] = set()
        self._checking = False
        self._inactivity = InactivityTracker()
        self.closed = False
        self.listeners: list[Callable[[Topic, TopicPolicies], None]] = []
        """Told after policies are applied to a loaded topic (geo-replication follows the
        topic's replication clusters and replicator rate)."""

    def __repr__(self) -> str:
        return f"<PolicyManager topics={len(self._states)}>"

    # -- lifecycle
    def start(self) -> None:
        self.service.store.add_listener(self._on_change)
        self._schedule(self.expire_all, self.config.message_expiry_check_interval_in_minutes * 60.0)
        if self.config.backlog_quota_check_enabled:
            self._schedule(
                self.check_backlog_quotas,
                float(self.config.backlog_quota_check_interval_in_seconds),
            )
        self._schedule(self.trim_all, float(self.config.retention_check_interval_in_seconds))
        self._schedule(
            self.delete_inactive_topics,
            float(self.config.broker_delete_inactive_topics_frequency_seconds),
        )

    def close(self) -> None:
        self.closed = True
        self.service.store.remove_listener(self._on_change)
        for t in self._timers.values():
            t.cancel()
        for task in list(self._tasks):
            task.cancel()

    def _spawn(self, coro: Any) -> None:
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def _schedule(self, check: Callable[[], Awaitable[object]], interval_s: float) -> None:
        """Run ``check`` every ``interval_s`` seconds (never when it is 0 or less)."""
        if self.closed or interval_s <= 0:
            return

        def fire() -> None:
            if self.closed:
                return
            self._spawn(check())
            self._schedule(check, interval_s)

        self._timers[check.__name__] = self.clock.call_later(interval_s, fire)

    # -- resolution and watching
    async def policies_for(
        self, tenant: str, namespace: str, topic: TopicName | None = None
    ) -> TopicPolicies:
        """Read (and watch) the namespace's policies and, for ``topic``, its topic-level
        policies (those of the partitioned topic for a partition): broker defaults,
        overridden by the namespace, overridden by the topic."""
        try:
            ns = await self.service.resources.get_policies(tenant, namespace)
        except ResourceError:
            ns = {}
        self._ns_cache[(tenant, namespace)] = ns
        if topic is None:
            return resolve_policies(self.config, ns)
        key = _topic_key(topic)
        try:
            own = await self.service.resources.get_topic_policies(*key)
        except ResourceError:
            own = {}
        self._topic_cache[key] = own
        return resolve_policies(self.config, {**ns, **own})

    def _on_change(self, n: Notification) -> None:
        if self.closed:
            return
        ns_prefix = paths.POLICIES + "/"
        topic_prefix = TOPIC_POLICIES + "/"
        if n.path.startswith(ns_prefix):
            parts = n.path[len(ns_prefix) :].split("/")
            if len(parts) == 2:
                self._spawn(self.refresh(parts[0], parts[1]))
        elif n.path.startswith(topic_prefix):
            parts = n.path[len(topic_prefix) :].split("/")
            if len(parts) == 4:
                self._spawn(self.refresh(parts[0], parts[1], (parts[2], unquote(parts[3]))))

    async def refresh(
        self, tenant: str, namespace: str, only: tuple[str, str] | None = None
    ) -> None:
        """Re-read the changed node (which re-arms its watch) and apply the policies to the
        namespace's loaded topics (``only``: the topics of one (domain, local name),
        partitions included). Two reads per change, whatever the number of topics: other
        topics' own policies come from the cache their watches keep fresh."""
        if only is None:
            await self.policies_for(tenant, namespace)
        else:
            key = (tenant, namespace, *only)
            try:
                self._topic_cache[key] = await self.service.resources.get_topic_policies(*key)
            except ResourceError:
                self._topic_cache[key] = {}
            if (tenant, namespace) not in self._ns_cache:
                await self.policies_for(tenant, namespace)
        ns = self._ns_cache.get((tenant, namespace), {})
        for topic in list(self.service.topics.values()):
            tn = topic.name
            if (tn.tenant, tn.namespace) != (tenant, namespace):
                continue
            key = _topic_key(tn)
            if only is not None and key[2:] != only:
                continue
            own = self._topic_cache.get(key, {})
            self.apply(topic, resolve_policies(self.config, {**ns, **own}))
        await self.check_backlog_quotas()

    # -- applying
    def attach(self, topic: Topic, policies: TopicPolicies) -> None:
        self.apply(topic, policies)

    def state_of(self, topic: Topic) -> TopicPolicyState | None:
        if topic.full_name not in self.service.topics:  # unloaded: forget its state
            self._states.pop(topic.full_name, None)
            return None
        return self._states.get(topic.full_name)

    def apply(self, topic: Topic, policies: TopicPolicies) -> None:
        old = self._states.get(topic.full_name)
        state = TopicPolicyState(policies)
        if old is not None:
            state.held = old.held
            state.quota_action = old.quota_action
            state.recheck_armed = old.recheck_armed
            state.throttled_publishes = old.throttled_publishes
            state.expired_entries = old.expired_entries
            state.evicted_entries = old.evicted_entries
            if old.policies.publish_rate == policies.publish_rate:
                state.publish_limiter = old.publish_limiter
            if old.policies.dispatch_rate == policies.dispatch_rate:
                state.dispatch_limiter = old.dispatch_limiter
            if old.policies.subscription_dispatch_rate == policies.subscription_dispatch_rate:
                state.subscription_limiters = old.subscription_limiters
        if policies.publish_rate.enabled and state.publish_limiter is None:
            state.publish_limiter = RateLimiter(policies.publish_rate, self.clock)
        if policies.dispatch_rate.enabled and state.dispatch_limiter is None:
            state.dispatch_limiter = RateLimiter(policies.dispatch_rate, self.clock)
        self._states[topic.full_name] = state
        restore = topic.apply_policies(applied_policies(policies))
        if restore is not None:
            self._spawn(restore)  # deduplication switched on: the topic's own recovery
        for sub in topic.subscriptions.values():
            self._set_throttle(state, sub)
        if state.quota_action is not None and not policies.backlog_quotas:
            self._quota_cleared(topic, state)
        for listener in self.listeners:
            listener(topic, policies)

    # -- hooks (called synchronously by the connection)
    def check_producer(self, topic: Topic) -> None:
        """Before admitting a producer: the producer cap and the backlog quota."""
        state = self.state_of(topic)
        if state is None:
            return
        cap = state.policies.max_producers
        if cap > 0 and len(topic.producers.producers) >= cap:
            raise ProducerError(ServerError.ProducerBusy, "Topic reached max producers limit")
        if state.quota_action is RetentionPolicy.PRODUCER_EXCEPTION:
            raise ProducerError(
                ServerError.ProducerBlockedQuotaExceededException,
                f"Cannot create producer on topic with backlog quota exceeded: {topic.full_name}",
            )
        if state.quota_action is RetentionPolicy.PRODUCER_REQUEST_HOLD:
            raise ProducerError(
                ServerError.ProducerBlockedQuotaExceededError,
                f"Cannot create producer on topic with backlog quota exceeded: {topic.full_name}",
            )

    def check_consumer(self, topic: Topic, consumer: Consumer) -> None:
        """Before a consumer joins: the consumer cap; sets its unacked limit."""
        state = self.state_of(topic)
        if state is None:
            return
        cap = state.policies.max_consumers
        if cap > 0:
            n = sum(len(s.consumers) for s in topic.subscriptions.values())
            if n >= cap:
                raise SubscriptionError(
                    ServerError.ConsumerBusy, "Topic reached max consumers limit"
                )
        consumer.max_unacked = state.policies.max_unacked_per_consumer

    def admit_send(self, topic: Topic, data: bytes | None = None) -> tuple[ServerError, str] | None:
        """Before a SEND is accepted: (ServerError name, message) to refuse it with, or None.
        ``data`` (metadata + payload) is checked against the maximum delivery delay."""
        state = self._states.get(topic.full_name)
        if state is None:
            return None
        if state.quota_action is RetentionPolicy.PRODUCER_EXCEPTION:
            return (ServerError.ProducerBlockedQuotaExceededException, "Backlog quota exceeded")
        if len(state.held) >= HELD_SENDS_MAX:
            return (ServerError.ProducerBlockedQuotaExceededError, "Backlog quota exceeded")
        max_delay = state.policies.delayed_delivery_max_delay_ms
        if max_delay > 0 and data is not None and state.policies.delayed_delivery:
            try:  # checked by the connection (``check_entry``): readable
                entry = EntryView(data)
                deliver_at = entry.deliver_at
            except RemoteProtocolError:
                deliver_at = 0
            if deliver_at > 0 and deliver_at - entry.publish_time > max_delay:
                # Pulsar's NotAllowedException text
                return (
                    ServerError.NotAllowedError,
                    f"Exceeds max allowed delivery delay of {max_delay} milliseconds",
                )
        return None

    def hold_queue(
        self, topic: Topic, cnx: ReadThrottled, num_msgs: int, size: int
    ) -> collections.deque[Callable[[], None]] | None:
        """None when the SEND is to be published now, else the queue its publish must join
        (held, in order, while ``producer_request_hold`` is in force). Charges the publish rate
        limiter; publish throttling pauses reading from ``cnx`` until the limiter is out of
        debt (other connections are not affected). No callable is made on the hot path."""
        state = self._states.get(topic.full_name)
        if state is None:
            return None
        limiter = state.publish_limiter
        if limiter is not None and not limiter.consume(num_msgs, size):
            state.throttled_publishes += 1
            self._pause(cnx, limiter.delay_s())
        if state.quota_action is RetentionPolicy.PRODUCER_REQUEST_HOLD or state.held:
            return state.held
        return None

    def _pause(self, cnx: ReadThrottled, delay_s: float) -> None:
        """Hold the connection's reading for ``delay_s`` (the limiter's refill time)."""
        if cnx.pause_reads("publish-rate"):
            self.clock.call_later(delay_s, lambda: cnx.resume_reads("publish-rate"))

    def after_subscribe(self, topic: Topic, sub: TopicSubscription) -> None:
        """A consumer joined (its subscription may have a new dispatcher): throttle it."""
        state = self.state_of(topic)
        if state is not None:
            self._set_throttle(state, sub)

    def _set_throttle(self, state: TopicPolicyState, sub: TopicSubscription) -> None:
        limiters: list[RateLimiter] = []
        if state.dispatch_limiter is not None:
            limiters.append(state.dispatch_limiter)
        rate = state.policies.subscription_dispatch_rate
        if rate.enabled:
            limiter = state.subscription_limiters.get(sub.name)
            if limiter is None:
                limiter = state.subscription_limiters[sub.name] = RateLimiter(rate, self.clock)
            limiters.append(limiter)
        old = sub.dispatch_throttle
        if isinstance(old, DispatchThrottle):
            if old.limiters == limiters:
                return
            old.cancel()
        sub.set_dispatch_throttle(DispatchThrottle(limiters, self.clock) if limiters else None)

    # -- periodic checks
    async def check_now(self) -> None:
        """Run the TTL, backlog-quota and retention checks once (tests, admin)."""
        await self.expire_all()
        await self.check_backlog_quotas()
        await self.trim_all()

    async def trim_all(self) -> int:
        """Ask every loaded persistent topic's managed ledger to trim what left retention
        (Pulsar's consumed-ledgers monitor, every ``retention_check_interval_in_seconds``):
        time alone takes consumed ledgers out of a time-based retention, and an idle topic
        has no ack, rollover or policy change to trigger a trim. Returns how many ledgers
        were asked."""
        asked = 0
        for topic in list(self.service.topics.values()):
            if isinstance(topic, PersistentTopic):
                topic.ledger.trim_soon()
                asked += 1
        return asked

    async def delete_inactive_topics(self) -> list[str]:
        """Pulsar's inactivity monitor (every ``brokerDeleteInactiveTopicsFrequencySeconds``):
        delete the loaded topics idle past their ``inactiveTopicPolicies`` (the broker's
        ``brokerDeleteInactiveTopics*`` unless the namespace or topic sets its own). Returns
        the names deleted."""
        due = self._inactivity.due(self.service.topics, self._resolved, self.clock.now_ms())
        deleted = []
        for d in due:
            try:
                if await self.service.delete_if_inactive(d.name, d.mode):
                    deleted.append(d.name)
                    log.info("deleted inactive topic %s (%s)", d.name, d.mode.value)
            except Exception as exc:  # one topic's failure must not stop the sweep
                log.warning("could not delete inactive topic %s: %s", d.name, exc)
        return deleted

    def _resolved(self, topic: Topic) -> TopicPolicies | None:
        state = self.state_of(topic)
        return None if state is None else state.policies

    async def expire_all(self) -> int:
        """Expire messages older than each topic's TTL in every subscription."""
        total = 0
        now = self.clock.now_ms()
        for topic in list(self.service.topics.values()):
            state = self.state_of(topic)
            if state is None or not isinstance(topic, PersistentTopic):
                continue
            ttl_s = state.policies.message_ttl_s
            if ttl_s <= 0:
                continue
            for sub in list(topic.subscriptions.values()):
                if sub.name == COMPACTION_SUBSCRIPTION:
                    continue  # as Pulsar: TTL never moves compaction past uncompacted data
                n = await expire_messages(topic, sub, now - ttl_s * 1000)
                state.expired_entries += n
                total += n
        return total

    async def check_backlog_quotas(self) -> None:
        for topic in list(self.service.topics.values()):
            state = self.state_of(topic)
            if state is None or not isinstance(topic, PersistentTopic):
                continue
            await self._check_quota(topic, state)

    async def _check_quota(self, topic: PersistentTopic, state: TopicPolicyState) -> None:
        action: RetentionPolicy | None = None
        now = self.clock.now_ms()
        for kind, quota in state.policies.backlog_quotas:
            if not await backlog_exceeded(topic, kind, quota, now):
                continue
            if quota.policy is RetentionPolicy.CONSUMER_BACKLOG_EVICTION:
                state.evicted_entries += await evict_backlog(topic, kind, quota, now)
                continue
            action = quota.policy
            if kind is BacklogQuotaType.DESTINATION_STORAGE:
                break
        if action is None:
            if state.quota_action is not None:
                self._quota_cleared(topic, state)
            return
        if state.quota_action is not action:
            log.info("%s: backlog quota exceeded, %s", topic.full_name, action.value)
        state.quota_action = action
        if action is RetentionPolicy.PRODUCER_EXCEPTION:
            # as Pulsar: disconnect the producers; reconnecting fails with the quota error
            for producer in list(topic.producers.producers.values()):
                if producer.cnx is not None:
                    producer.cnx.send_close_producer(producer)
                for admitted in topic.remove_producer(producer):
                    if admitted.cnx is not None:
                        admitted.cnx.producer_admitted(admitted)
        elif not state.recheck_armed:
            # held sends wait: look again soon rather than at the next periodic check
            state.recheck_armed = True

            def again() -> None:
                state.recheck_armed = False
                if not self.closed and self._states.get(topic.full_name) is state:
                    self._spawn(self._check_quota(topic, state))

            self.clock.call_later(HOLD_RECHECK_S, again)

    def _quota_cleared(self, topic: Topic, state: TopicPolicyState) -> None:
        state.quota_action = None
        held, state.held = state.held, collections.deque()
        for publish in held:
            publish()
        if held:
            log.info("%s: backlog within quota, released %d held sends", topic.full_name, len(held))

    def compaction_threshold(self, topic: Topic) -> int:
        """Bytes not yet compacted above which ``topic`` is compacted (0: never): its
        resolved ``compaction_threshold``, the broker setting while it has none."""
        state = self.state_of(topic)
        if state is not None:
            return int(state.policies.compaction_threshold_bytes)
        return int(self.config.broker_service_compaction_threshold_in_bytes)

    def topic_stats(self, topic: Topic) -> dict[str, Any]:
        """Pulsar's policy-related TopicStats fields for ``topic``."""
        state = self.state_of(topic)
        if state is None or not isinstance(topic, PersistentTopic):
            return {}
        size = state.policies.quota(BacklogQuotaType.DESTINATION_STORAGE)
        age = state.policies.quota(BacklogQuotaType.MESSAGE_AGE)
        subs = [s for s in topic.subscriptions.values() if s.durable]
        return {
            "backlogSize": max((backlog_bytes(topic, s) for s in subs), default=0),
            "backlogQuotaLimitSize": size.limit_size if size else -1,
            "backlogQuotaLimitTime": age.limit_time_s if age else -1,
            "publishRateLimitedTimes": state.throttled_publishes,
            "msgExpiredCounter": state.expired_entries,
            "heldSends": len(state.held),
        }

    def statistics(self) -> PolicyStatistics:
        states = list(self._states.values())
        return PolicyStatistics(
            len(states),
            sum(len(s.held) for s in states),
            sum(s.throttled_publishes for s in states),
            sum(s.expired_entries for s in states),
            sum(s.evicted_entries for s in states),
        )


def applied_policies(policies: TopicPolicies) -> AppliedPolicies:
    """What of ``policies`` a topic applies itself."""
    return AppliedPolicies(
        deduplication=policies.deduplication,
        max_unacked_per_consumer=policies.max_unacked_per_consumer,
        max_unacked_per_subscription=policies.max_unacked_per_subscription,
        delayed_delivery=policies.delayed_delivery,
        retention_time_ms=policies.retention_time_ms,
        retention_size_bytes=policies.retention_size_bytes,
        offload=policies.offload,
    )


__all__ = [
    "HELD_SENDS_MAX",
    "DispatchThrottle",
    "PolicyHost",
    "PolicyManager",
    "PolicyStatistics",
    "PolicyStore",
    "ReadThrottled",
    "TopicPolicyState",
    "applied_policies",
]
