"""The inactive-topic sweep's decisions (``policies/inactive.py``) and the policy's resolution
and REST body (``policies/model.py``), on small stand-in topics."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pytest

from magnetar.broker.config import BrokerConfig
from magnetar.broker.policies.inactive import InactivityTracker, is_active
from magnetar.broker.policies.model import (
    NAMESPACE_POLICIES,
    InactiveTopicDeleteMode,
    InactiveTopicPolicies,
    PolicyError,
    TopicPolicies,
    resolve_policies,
)

pytestmark = pytest.mark.unit

NO_SUBS = InactiveTopicDeleteMode.DELETE_WHEN_NO_SUBSCRIPTIONS
CAUGHT_UP = InactiveTopicDeleteMode.DELETE_WHEN_SUBSCRIPTIONS_CAUGHT_UP


@dataclass
class _Producers:
    producers: dict[str, object] = field(default_factory=dict)
    waiting: list[object] = field(default_factory=list)


@dataclass
class _Sub:
    consumers: list[object] = field(default_factory=list)
    behind: int = 0

    def backlog(self) -> int:
        return self.behind


@dataclass
class _Topic:
    producers: _Producers = field(default_factory=_Producers)
    subscriptions: dict[str, _Sub] = field(default_factory=dict)
    closed: bool = False


def _policies(**kw: Any) -> TopicPolicies:
    retention = kw.pop("retention_time_minutes", 0)
    return TopicPolicies(
        retention_time_minutes=retention, inactive_topic_policies=InactiveTopicPolicies(**kw)
    )


def test_activity_by_mode() -> None:
    idle = _Topic()
    assert not is_active(idle, NO_SUBS)  # type: ignore[arg-type]
    with_sub = _Topic(subscriptions={"s": _Sub()})
    assert is_active(with_sub, NO_SUBS)  # type: ignore[arg-type]
    assert not is_active(with_sub, CAUGHT_UP)  # type: ignore[arg-type]
    behind = _Topic(subscriptions={"s": _Sub(behind=3)})
    assert is_active(behind, CAUGHT_UP)  # type: ignore[arg-type]
    consumed = _Topic(subscriptions={"s": _Sub(consumers=[object()])})
    assert is_active(consumed, CAUGHT_UP)  # type: ignore[arg-type]
    producing = _Topic(producers=_Producers(waiting=[object()]))
    assert is_active(producing, CAUGHT_UP)  # type: ignore[arg-type]


def test_due_only_after_the_whole_duration_idle_and_activity_restarts_the_count() -> None:
    tracker = InactivityTracker()
    topic = _Topic()
    topics: dict[str, Any] = {"t": topic}
    policy = _policies(max_inactive_duration_s=60)
    assert tracker.due(topics, lambda t: policy, 0) == []  # first seen: counts as active
    assert tracker.due(topics, lambda t: policy, 60_000) == []  # not over 60 s yet
    topic.producers.producers["p"] = object()
    assert tracker.due(topics, lambda t: policy, 61_000) == []  # active: count restarts
    topic.producers.producers.clear()
    assert tracker.due(topics, lambda t: policy, 121_000) == []
    assert [d.name for d in tracker.due(topics, lambda t: policy, 121_001)] == ["t"]


def test_kept_by_policy_retention_or_unresolved_policies() -> None:
    topics: dict[str, Any] = {"t": _Topic()}
    for policy in (
        _policies(delete_while_inactive=False, max_inactive_duration_s=1),
        _policies(max_inactive_duration_s=1, retention_time_minutes=-1),
        None,
    ):
        tracker = InactivityTracker()
        tracker.due(topics, lambda t, p=policy: p, 0)
        assert tracker.due(topics, lambda t, p=policy: p, 10**9) == []
    tracker = InactivityTracker()
    retained = _policies(max_inactive_duration_s=1, retention_time_minutes=10)
    tracker.due(topics, lambda t: retained, 0)
    assert tracker.due(topics, lambda t: retained, 599_000) == []  # within retention
    assert len(tracker.due(topics, lambda t: retained, 600_000)) == 1


def test_unloaded_topics_are_forgotten() -> None:
    tracker = InactivityTracker()
    policy = _policies(max_inactive_duration_s=1)
    tracker.due({"t": _Topic()}, lambda t: policy, 0)
    tracker.due({}, lambda t: policy, 5_000)
    assert tracker.last_active_ms("t") is None
    # loaded again later: its count starts at that load
    assert tracker.due({"t": _Topic()}, lambda t: policy, 10_000) == []


def test_resolution_broker_namespace_and_topic() -> None:
    config = BrokerConfig(
        broker_delete_inactive_topics_frequency_seconds=30,
        broker_delete_inactive_topics_mode="delete_when_subscriptions_caught_up",
    )
    broker = resolve_policies(config, {}).inactive_topic_policies
    assert broker == InactiveTopicPolicies(True, CAUGHT_UP, 30)  # duration: the frequency
    ns = {"inactive_topic_policies": {"deleteWhileInactive": False}}
    assert resolve_policies(config, ns).inactive_topic_policies == InactiveTopicPolicies(
        False, CAUGHT_UP, 30
    )


def test_the_rest_body_is_checked() -> None:
    route = NAMESPACE_POLICIES["inactiveTopicPolicies"]
    good = {
        "inactiveTopicDeleteMode": "delete_when_no_subscriptions",
        "maxInactiveDurationSeconds": 5,
        "deleteWhileInactive": True,
    }
    stored = route.store(good, {}, "standalone")
    assert route.show(stored, "standalone") == good
    for bad in (
        {**good, "inactiveTopicDeleteMode": "never"},
        {**good, "maxInactiveDurationSeconds": 0},
        {**good, "deleteWhileInactive": "yes"},
        [],
    ):
        with pytest.raises(PolicyError):
            route.store(bad, {}, "standalone")
