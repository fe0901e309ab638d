"""Backlog quotas: is a topic over its quota, and ``consumer_backlog_eviction``.

Owns: the backlog estimate Pulsar uses for ``destination_storage`` quotas (the slowest
durable subscription's backlog in entries times the topic's average entry size), the
``message_age`` check (publish time of the slowest subscription's oldest unacknowledged
entry), and eviction: the oldest messages of the subscriptions over the quota are skipped
(mark-delete moved forward) until the backlog fits (on a managed ledger the target position
is counted from the ledger sizes, and a ``message_age`` eviction is TTL's binary search:
neither reads the evicted entries). Producer-side actions
(``producer_request_hold``, ``producer_exception``) are carried out by ``policy_manager``.
Must not know: producers, connections.
"""

from __future__ import annotations

from magnetar.broker.ledger.position import Position
from magnetar.broker.policies.model import BacklogQuota, BacklogQuotaType
from magnetar.broker.policies.ttl import (
    LedgerSpans,
    expire_messages,
    next_position,
    publish_time_of,
)
from magnetar.broker.topics.persistent import PersistentTopic
from magnetar.broker.topics.subscription import Subscription

EVICTION_READ_ENTRIES = 500


def average_entry_size(topic: PersistentTopic) -> float:
    n = topic.ledger.num_entries
    return topic.ledger.total_size / n if n > 0 else 0.0


def backlog_bytes(topic: PersistentTopic, sub: Subscription) -> int:
    return int(sub.cursor.backlog() * average_entry_size(topic))


def _durable_subs(topic: PersistentTopic) -> list[Subscription]:
    return [s for s in topic.subscriptions.values() if s.durable]


async def oldest_unacked_publish_time(topic: PersistentTopic, sub: Subscription) -> int | None:
    start = next_position(sub.cursor.mark_delete_position)
    last = topic.ledger.last_confirmed
    if last is None or start > last:
        return None
    entries = await topic.ledger.read_entries(start, 1)
    if not entries:
        return None
    return publish_time_of(entries[0].data)


async def backlog_exceeded(
    topic: PersistentTopic, kind: BacklogQuotaType, quota: BacklogQuota, now_ms: int
) -> bool:
    subs = _durable_subs(topic)
    if not subs:
        return False
    if kind is BacklogQuotaType.DESTINATION_STORAGE:
        if quota.limit_size < 0:
            return False
        return max(backlog_bytes(topic, s) for s in subs) > quota.limit_size
    if quota.limit_time_s < 0:
        return False
    for s in subs:
        t = await oldest_unacked_publish_time(topic, s)
        if t is not None and now_ms - t > quota.limit_time_s * 1000:
            return True
    return False


async def evict_backlog(
    topic: PersistentTopic, kind: BacklogQuotaType, quota: BacklogQuota, now_ms: int
) -> int:
    """Skip the oldest messages of every subscription over the quota; returns entries."""
    if kind is BacklogQuotaType.MESSAGE_AGE:
        total = 0
        for s in _durable_subs(topic):
            total += await expire_messages(topic, s, now_ms - quota.limit_time_s * 1000)
        return total
    avg = average_entry_size(topic)
    if avg <= 0:
        return 0
    keep = int(quota.limit_size // avg)
    total = 0
    for s in _durable_subs(topic):
        excess = s.cursor.backlog() - keep
        if excess <= 0:
            continue
        target = await _position_after_skipping(topic, s, excess)
        if target is not None and target > s.cursor.mark_delete_position:
            await s.skip_to(target)
            total += excess
    return total


async def _position_after_skipping(
    topic: PersistentTopic, sub: Subscription, n: int
) -> Position | None:
    """The position of the ``n``-th entry after the mark-delete position (the last entry if
    there are fewer). On a managed ledger it is counted from the ledger sizes, reading
    nothing (reading ``n`` entries to count them cost a bookie read per entry: a 1,000,000
    entry excess read a million entries)."""
    start = next_position(sub.cursor.mark_delete_position)
    spans = LedgerSpans.of(topic.ledger)
    first = spans.index_of(start)
    if n <= 0 or first >= spans.total:
        return None
    return spans.at(min(first + n, spans.total) - 1)


__all__ = ["average_entry_size", "backlog_bytes", "backlog_exceeded", "evict_backlog"]
