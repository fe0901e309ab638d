"""Inactive-topic deletion: which loaded topics have been idle long enough to go.

Owns: ``is_active`` (Pulsar's ``PersistentTopic.isActive(deleteMode)``: a producer or a
consumer is attached, or, by the mode, a subscription exists / a subscription has a backlog)
and ``InactivityTracker``: the time each loaded topic was last seen active (its load counts
as activity, as Pulsar's ``lastActive`` starts at creation), and ``due``: the topics a sweep
should delete now — inactive for longer than their policy's ``maxInactiveDurationSeconds``,
``deleteWhileInactive`` on, and not kept by retention (a negative retention time keeps a
topic for ever; otherwise the topic stays until it has been inactive for the retention
time, as Pulsar's ``shouldTopicBeRetained``).
Invariant: a topic is due only after a sweep has seen it inactive for the whole duration;
any sweep that sees it active starts the count again. The deletion itself re-checks
``is_active`` with nothing awaited between the check and the topic's close (the service's
``delete_if_inactive``), so a producer or consumer arriving meanwhile keeps the topic.
Must not know: how a topic is deleted, the metadata store, sockets.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

from magnetar.broker.policies.model import InactiveTopicDeleteMode, TopicPolicies
from magnetar.broker.topics.contract import Topic


def is_active(topic: Topic, mode: InactiveTopicDeleteMode) -> bool:
    """Pulsar's ``isActive(deleteMode)``: producers or consumers attached, or (by mode) a
    subscription exists / one has a backlog."""
    if topic.producers.producers or topic.producers.waiting:
        return True
    subscriptions = list(topic.subscriptions.values())
    if any(s.consumers for s in subscriptions):
        return True
    if mode is InactiveTopicDeleteMode.DELETE_WHEN_NO_SUBSCRIPTIONS:
        return bool(subscriptions)
    return any(s.backlog() > 0 for s in subscriptions)


@dataclass(frozen=True, slots=True)
class Due:
    """A topic the sweep should delete, and the mode its policy names."""

    name: str
    mode: InactiveTopicDeleteMode


class InactivityTracker:
    """When each loaded topic was last seen active (milliseconds of the broker's clock)."""

    def __init__(self) -> None:
        self._last_active_ms: dict[str, int] = {}

    def __repr__(self) -> str:
        return f"<InactivityTracker topics={len(self._last_active_ms)}>"

    def last_active_ms(self, name: str) -> int | None:
        return self._last_active_ms.get(name)

    def due(
        self,
        topics: Mapping[str, Topic],
        policies_of: Callable[[Topic], TopicPolicies | None],
        now_ms: int,
    ) -> list[Due]:
        """One sweep: note the active topics, forget unloaded ones, and return those idle
        past their policy (topics whose policies are not resolved yet are left alone)."""
        for gone in self._last_active_ms.keys() - topics.keys():
            del self._last_active_ms[gone]
        due: list[Due] = []
        for name, topic in topics.items():
            last = self._last_active_ms.setdefault(name, now_ms)
            policies = policies_of(topic)
            if policies is None or topic.closed:
                continue
            inactive = policies.inactive_topic_policies
            if is_active(topic, inactive.mode):
                self._last_active_ms[name] = now_ms
                continue
            if not inactive.delete_while_inactive:
                continue
            idle_ms = now_ms - last
            if idle_ms <= inactive.max_inactive_duration_s * 1000:
                continue
            retention_ms = policies.retention_time_ms
            if retention_ms < 0 or idle_ms < retention_ms:
                continue  # kept by retention (Pulsar's shouldTopicBeRetained)
            due.append(Due(name, inactive.mode))
        return due


__all__ = ["Due", "InactivityTracker", "is_active"]
