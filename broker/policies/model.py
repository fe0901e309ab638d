"""Message lifecycle policies: the model, Pulsar's JSON shapes, and resolution.

Owns: ``TopicPolicies`` (what a loaded topic obeys: TTL, retention, backlog quotas, producer
and consumer caps, unacked limits, deduplication, delayed delivery (on/off, tick, maximum
delay), the automatic compaction threshold, publish and dispatch rates, the replicators'
dispatch rate, the inactive-topic deletion policy),
``resolve_policies`` (broker default -> namespace policies; a namespace value that is
absent or ``null`` falls back to the broker default, as in Pulsar), and ``NAMESPACE_POLICIES``:
the table that maps each REST path segment under ``/admin/v2/namespaces/{t}/{ns}/`` to its
field in the namespace Policies JSON (Pulsar's names: ``message_ttl_in_seconds``,
``retention_policies``, ``backlog_quota_map``, ``max_producers_per_topic``, ...) with the
body validation Pulsar does; ``resolve_auto_topic_creation`` (the namespace's
``autoTopicCreationOverride`` over the broker's auto-creation settings).
Pure: no I/O, no asyncio. Must not know: HTTP, topics, the metadata store.
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from magnetar.broker.config import BrokerConfig
from magnetar.broker.offload import EffectiveOffloadPolicies
from magnetar.broker.policies.offload import resolve_offload

TOPIC_POLICIES = "/admin/topic-policies"
"""Metadata root of topic-level policies (one node per topic, as Pulsar's system topic
holds them; ``namespace.resources.topic_policies_path``)."""


class PolicyError(ValueError):
    """A policy body Pulsar would refuse (HTTP 400/412)."""


class BacklogQuotaType(enum.Enum):
    DESTINATION_STORAGE = "destination_storage"
    MESSAGE_AGE = "message_age"


class RetentionPolicy(enum.Enum):
    PRODUCER_REQUEST_HOLD = "producer_request_hold"
    PRODUCER_EXCEPTION = "producer_exception"
    CONSUMER_BACKLOG_EVICTION = "consumer_backlog_eviction"


@dataclass(frozen=True, slots=True)
class BacklogQuota:
    limit_size: int = -1
    """Bytes of backlog (destination_storage); -1 = no limit."""
    limit_time_s: int = -1
    """Age in seconds of the oldest unacknowledged message (message_age); -1 = no limit."""
    policy: RetentionPolicy = RetentionPolicy.PRODUCER_REQUEST_HOLD

    def to_json(self) -> dict[str, Any]:
        return {
            "limitSize": self.limit_size,
            "limitTime": self.limit_time_s,
            "policy": self.policy.value,
        }

    @classmethod
    def from_json(cls, data: Any) -> BacklogQuota:
        if not isinstance(data, dict):
            raise PolicyError("BacklogQuota must be a JSON object")
        try:
            policy = RetentionPolicy(data.get("policy") or "producer_request_hold")
        except ValueError:
            raise PolicyError(f"Unknown backlog quota policy {data.get('policy')!r}") from None
        size = data.get("limitSize", data.get("limit", -1))
        time_s = data.get("limitTime", -1)
        return cls(_int(size, "limitSize"), _int(time_s, "limitTime"), policy)


@dataclass(frozen=True, slots=True)
class Rate:
    """A throttling rate: at most ``msgs`` messages and ``bytes_`` bytes per ``period_s``;
    a value <= 0 means that dimension is not limited."""

    msgs: int = -1
    bytes_: int = -1
    period_s: int = 1

    @property
    def enabled(self) -> bool:
        return self.msgs > 0 or self.bytes_ > 0


NO_RATE = Rate()


class InactiveTopicDeleteMode(enum.Enum):
    """When an inactive topic may be deleted (Pulsar's ``InactiveTopicDeleteMode``)."""

    DELETE_WHEN_NO_SUBSCRIPTIONS = "delete_when_no_subscriptions"
    DELETE_WHEN_SUBSCRIPTIONS_CAUGHT_UP = "delete_when_subscriptions_caught_up"


@dataclass(frozen=True, slots=True)
class InactiveTopicPolicies:
    """Pulsar's ``InactiveTopicPolicies``: whether a topic idle for ``max_inactive_duration_s``
    (no producer, no consumer, and no subscription or none with a backlog, by ``mode``) is
    deleted by the inactive-topic sweep."""

    delete_while_inactive: bool = True
    mode: InactiveTopicDeleteMode = InactiveTopicDeleteMode.DELETE_WHEN_NO_SUBSCRIPTIONS
    max_inactive_duration_s: int = 60

    def to_json(self) -> dict[str, Any]:
        return {
            "inactiveTopicDeleteMode": self.mode.value,
            "maxInactiveDurationSeconds": self.max_inactive_duration_s,
            "deleteWhileInactive": self.delete_while_inactive,
        }


@dataclass(frozen=True, slots=True)
class TopicPolicies:
    message_ttl_s: int = 0
    retention_time_minutes: int = 0
    retention_size_mb: int = 0
    backlog_quotas: tuple[tuple[BacklogQuotaType, BacklogQuota], ...] = ()
    max_producers: int = 0
    max_consumers: int = 0
    max_unacked_per_consumer: int = 50_000
    max_unacked_per_subscription: int = 200_000
    deduplication: bool = False
    delayed_delivery: bool = True
    delayed_delivery_tick_ms: int = 1_000
    delayed_delivery_max_delay_ms: int = 0
    """A SEND whose ``deliver_at_time`` is further ahead is refused (NotAllowed); 0 = no cap."""
    compaction_threshold_bytes: int = 0
    """Compact automatically once this many bytes are not yet compacted; 0 = off."""
    publish_rate: Rate = NO_RATE
    dispatch_rate: Rate = NO_RATE
    """Per topic (all subscriptions together)."""
    subscription_dispatch_rate: Rate = NO_RATE
    """Per subscription."""
    replicator_dispatch_rate: Rate = NO_RATE
    """Per replicator (one topic partition towards one remote cluster)."""
    replication_clusters: tuple[str, ...] = ()
    """The clusters the topic lives in (the topic's own list over its namespace's); empty:
    the local cluster alone."""
    inactive_topic_policies: InactiveTopicPolicies = InactiveTopicPolicies()
    offload: EffectiveOffloadPolicies | None = None
    """Tiered storage (``policies/offload.py``): None = no driver, nothing is offloaded."""

    def quota(self, kind: BacklogQuotaType) -> BacklogQuota | None:
        for k, q in self.backlog_quotas:
            if k is kind:
                return q
        return None

    @property
    def retention_time_ms(self) -> int:
        m = self.retention_time_minutes
        return -1 if m < 0 else m * 60_000

    @property
    def retention_size_bytes(self) -> int:
        mb = self.retention_size_mb
        return -1 if mb < 0 else mb << 20


def _int(value: Any, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise PolicyError(f"{name} must be an integer")
    return value


def _rate_of(data: Any, msg_key: str, byte_key: str) -> Rate:
    if not isinstance(data, dict):
        return NO_RATE
    return Rate(
        int(data.get(msg_key, -1) or -1),
        int(data.get(byte_key, -1) or -1),
        max(1, int(data.get("ratePeriodInSecond", 1) or 1)),
    )


def _cluster_value(value: Any, cluster: str) -> Any:
    """Pulsar keeps rates per cluster (``{"<cluster>": {...}}``)."""
    if isinstance(value, dict):
        return value.get(cluster)
    return None


def _num(ns: dict[str, Any], key: str, default: int) -> int:
    """An integer policy of the namespace (a bool is not one), else ``default``."""
    v = ns.get(key)
    return v if isinstance(v, int) and not isinstance(v, bool) else default


def _retention(config: BrokerConfig, ns: dict[str, Any]) -> tuple[int, int]:
    """(minutes, MB): the namespace's ``retention_policies``, else the broker defaults."""
    retention = ns.get("retention_policies")
    if isinstance(retention, dict):
        return (
            int(retention.get("retentionTimeInMinutes", 0)),
            int(retention.get("retentionSizeInMB", 0)),
        )
    return config.default_retention_time_in_minutes, config.default_retention_size_in_mb


def _backlog_quotas(
    config: BrokerConfig, ns: dict[str, Any]
) -> tuple[tuple[BacklogQuotaType, BacklogQuota], ...]:
    """The broker's default quotas, each replaced by the namespace's of its type (one that
    does not parse is ignored), in type order."""
    quotas: dict[BacklogQuotaType, BacklogQuota] = {}
    default_policy = RetentionPolicy(config.backlog_quota_default_retention_policy)
    if config.backlog_quota_default_limit_bytes > 0:
        quotas[BacklogQuotaType.DESTINATION_STORAGE] = BacklogQuota(
            config.backlog_quota_default_limit_bytes, -1, default_policy
        )
    if config.backlog_quota_default_limit_second > 0:
        quotas[BacklogQuotaType.MESSAGE_AGE] = BacklogQuota(
            -1, config.backlog_quota_default_limit_second, default_policy
        )
    quota_map = ns.get("backlog_quota_map")
    if isinstance(quota_map, dict):
        for kind in BacklogQuotaType:
            if kind.value in quota_map:
                try:
                    quotas[kind] = BacklogQuota.from_json(quota_map[kind.value])
                except PolicyError:
                    pass
    return tuple(sorted(quotas.items(), key=lambda kv: kv[0].value))


def _delayed_delivery(config: BrokerConfig, ns: dict[str, Any]) -> tuple[bool, int, int]:
    """(active, tick ms, maximum delay ms): the namespace's ``delayed_delivery_policies``
    (its missing fields defaulted), else the broker settings."""
    delayed = ns.get("delayed_delivery_policies")
    if not isinstance(delayed, dict):
        return (
            config.delayed_delivery_enabled,
            config.delayed_delivery_tick_time_millis,
            config.delayed_delivery_max_delay_in_millis,
        )
    return (
        bool(delayed.get("active", True)),
        int(delayed.get("tickTime", config.delayed_delivery_tick_time_millis)),
        int(delayed.get("maxDeliveryDelayInMillis", config.delayed_delivery_max_delay_in_millis)),
    )


_DISPATCH_RATE_FIELDS = ("dispatchThrottlingRateInMsg", "dispatchThrottlingRateInByte")
"""A dispatch rate's message and byte fields (``_rate_of`` reads the period itself)."""


def _rates(config: BrokerConfig, ns: dict[str, Any]) -> tuple[Rate, Rate, Rate, Rate]:
    """(publish, topic dispatch, subscription dispatch, replicator dispatch): the
    namespace's rate for this cluster, else the broker default, for each."""

    def rate(key: str, fields: tuple[str, str], default: Rate) -> Rate:
        value = _cluster_value(ns.get(key), config.cluster_name)
        return default if value is None else _rate_of(value, *fields)

    return (
        rate(
            "publishMaxMessageRate",
            ("publishThrottlingRateInMsg", "publishThrottlingRateInByte"),
            Rate(
                config.max_publish_rate_per_topic_in_messages,
                config.max_publish_rate_per_topic_in_bytes,
            ),
        ),
        rate(
            "topicDispatchRate",
            _DISPATCH_RATE_FIELDS,
            Rate(
                config.dispatch_throttling_rate_per_topic_in_msg,
                config.dispatch_throttling_rate_per_topic_in_byte,
            ),
        ),
        rate(
            "subscriptionDispatchRate",
            _DISPATCH_RATE_FIELDS,
            Rate(
                config.dispatch_throttling_rate_per_subscription_in_msg,
                config.dispatch_throttling_rate_per_subscription_in_byte,
            ),
        ),
        rate("replicatorDispatchRate", _DISPATCH_RATE_FIELDS, NO_RATE),
    )


def broker_inactive_topic_policies(config: BrokerConfig) -> InactiveTopicPolicies:
    """The broker's ``brokerDeleteInactiveTopics*`` settings as a policy (the maximum
    inactive duration defaults to the sweep's frequency, as in Pulsar)."""
    max_s = config.broker_delete_inactive_topics_max_inactive_duration_seconds
    return InactiveTopicPolicies(
        config.broker_delete_inactive_topics_enabled,
        InactiveTopicDeleteMode(config.broker_delete_inactive_topics_mode),
        config.broker_delete_inactive_topics_frequency_seconds if max_s is None else max_s,
    )


def _inactive_topic_policies(config: BrokerConfig, ns: dict[str, Any]) -> InactiveTopicPolicies:
    """The namespace's (or topic's) ``inactive_topic_policies``, its missing fields from
    the broker settings; else the broker settings."""
    default = broker_inactive_topic_policies(config)
    own = ns.get("inactive_topic_policies")
    if not isinstance(own, dict):
        return default
    try:
        mode = InactiveTopicDeleteMode(own.get("inactiveTopicDeleteMode") or default.mode.value)
    except ValueError:
        mode = default.mode
    delete = own.get("deleteWhileInactive")
    return InactiveTopicPolicies(
        delete if isinstance(delete, bool) else default.delete_while_inactive,
        mode,
        _num(own, "maxInactiveDurationSeconds", default.max_inactive_duration_s),
    )


def resolve_policies(config: BrokerConfig, ns: dict[str, Any]) -> TopicPolicies:
    """Broker defaults overridden by the namespace Policies JSON (Pulsar's field names)."""
    r_time, r_size = _retention(config, ns)
    delayed, tick_ms, max_delay_ms = _delayed_delivery(config, ns)
    publish_rate, dispatch_rate, sub_rate, replicator_rate = _rates(config, ns)
    dedup = ns.get("deduplicationEnabled")
    return TopicPolicies(
        message_ttl_s=_num(ns, "message_ttl_in_seconds", config.ttl_duration_default_in_seconds),
        retention_time_minutes=r_time,
        retention_size_mb=r_size,
        backlog_quotas=_backlog_quotas(config, ns),
        max_producers=_num(ns, "max_producers_per_topic", config.max_producers_per_topic),
        max_consumers=_num(ns, "max_consumers_per_topic", config.max_consumers_per_topic),
        max_unacked_per_consumer=_num(
            ns, "max_unacked_messages_per_consumer", config.max_unacked_messages_per_consumer
        ),
        max_unacked_per_subscription=_num(
            ns,
            "max_unacked_messages_per_subscription",
            config.max_unacked_messages_per_subscription,
        ),
        deduplication=dedup if isinstance(dedup, bool) else config.broker_deduplication_enabled,
        delayed_delivery=delayed,
        delayed_delivery_tick_ms=tick_ms,
        delayed_delivery_max_delay_ms=max_delay_ms,
        compaction_threshold_bytes=_num(
            ns, "compaction_threshold", config.broker_service_compaction_threshold_in_bytes
        ),
        publish_rate=publish_rate,
        dispatch_rate=dispatch_rate,
        subscription_dispatch_rate=sub_rate,
        replicator_dispatch_rate=replicator_rate,
        replication_clusters=_replication_clusters(ns),
        inactive_topic_policies=_inactive_topic_policies(config, ns),
        offload=resolve_offload(config, ns),
    )


def _replication_clusters(policies: dict[str, Any]) -> tuple[str, ...]:
    value = policies.get("replication_clusters")
    if not isinstance(value, list):
        return ()
    return tuple(sorted({c for c in value if isinstance(c, str) and c}))


# -- the REST table ------------------------------------------------------------------------
# Each entry: how a POST body becomes the stored value(s), and how GET shows them.
# ``store`` returns the changes to merge into the Policies JSON (None deletes a key);
# ``show`` turns the Policies JSON into the GET answer; ``clear`` is what DELETE merges.


@dataclass(frozen=True, slots=True)
class PolicyRoute:
    name: str
    store: Callable[[Any, dict[str, Any], str], dict[str, Any]]
    show: Callable[[dict[str, Any], str], Any]
    clear: Callable[[dict[str, Any], str], dict[str, Any]]
    topic_level: bool = True
    """Also served under a topic's path (Pulsar has no topic-level form of some)."""


def _non_negative_int(body: Any, what: str) -> int:
    value = _int(body, what)
    if value < 0:
        raise PolicyError(f"{what} must be 0 or more")
    return value


def _scalar(name: str, key: str, kind: str = "int") -> PolicyRoute:
    def store(body: Any, policies: dict[str, Any], cluster: str) -> dict[str, Any]:
        if kind == "bool":
            if not isinstance(body, bool):
                raise PolicyError(f"{name} must be a boolean")
            return {key: body}
        return {key: _non_negative_int(body, name)}

    return PolicyRoute(
        name,
        store,
        lambda p, c: p.get(key),
        lambda p, c: {key: None},
    )


def _store_retention(body: Any, policies: dict[str, Any], cluster: str) -> dict[str, Any]:
    if not isinstance(body, dict):
        raise PolicyError("RetentionPolicies must be a JSON object")
    t = _int(body.get("retentionTimeInMinutes", 0), "retentionTimeInMinutes")
    s = _int(body.get("retentionSizeInMB", 0), "retentionSizeInMB")
    if t < -1 or s < -1:
        raise PolicyError("Retention values must be -1 (infinite), 0 or more")
    return {"retention_policies": {"retentionTimeInMinutes": t, "retentionSizeInMB": s}}


def _store_delayed(body: Any, policies: dict[str, Any], cluster: str) -> dict[str, Any]:
    if not isinstance(body, dict):
        raise PolicyError("DelayedDeliveryPolicies must be a JSON object")
    active = body.get("active", True)
    if not isinstance(active, bool):
        raise PolicyError("active must be a boolean")
    tick = _non_negative_int(body.get("tickTime", 1000), "tickTime")
    out: dict[str, Any] = {"active": active, "tickTime": tick}
    if "maxDeliveryDelayInMillis" in body:
        out["maxDeliveryDelayInMillis"] = _non_negative_int(
            body["maxDeliveryDelayInMillis"], "maxDeliveryDelayInMillis"
        )
    return {"delayed_delivery_policies": out}


def _store_inactive(body: Any, policies: dict[str, Any], cluster: str) -> dict[str, Any]:
    """Pulsar's InactiveTopicPolicies body (every field required, as its REST model)."""
    if not isinstance(body, dict):
        raise PolicyError("InactiveTopicPolicies must be a JSON object")
    try:
        mode = InactiveTopicDeleteMode(body.get("inactiveTopicDeleteMode"))
    except ValueError:
        modes = ", ".join(m.value for m in InactiveTopicDeleteMode)
        raise PolicyError(f"inactiveTopicDeleteMode must be one of {modes}") from None
    delete = body.get("deleteWhileInactive")
    if not isinstance(delete, bool):
        raise PolicyError("deleteWhileInactive must be a boolean")
    max_s = _int(body.get("maxInactiveDurationSeconds"), "maxInactiveDurationSeconds")
    if max_s <= 0:
        raise PolicyError("maxInactiveDurationSeconds must be greater than 0")
    policy = InactiveTopicPolicies(delete, mode, max_s)
    return {"inactive_topic_policies": policy.to_json()}


def _rate_route(name: str, key: str, fields: tuple[str, ...]) -> PolicyRoute:
    def store(body: Any, policies: dict[str, Any], cluster: str) -> dict[str, Any]:
        if not isinstance(body, dict):
            raise PolicyError(f"{name} must be a JSON object")
        rate: dict[str, Any] = {}
        for f in fields:
            rate[f] = _int(body.get(f, -1), f)
        if "ratePeriodInSecond" in fields and rate["ratePeriodInSecond"] <= 0:
            rate["ratePeriodInSecond"] = 1
        if key != "publishMaxMessageRate":
            rate["relativeToPublishRate"] = bool(body.get("relativeToPublishRate", False))
        per_cluster = dict(policies.get(key) or {})
        per_cluster[cluster] = rate
        return {key: per_cluster}

    def show(policies: dict[str, Any], cluster: str) -> Any:
        return _cluster_value(policies.get(key), cluster)

    def clear(policies: dict[str, Any], cluster: str) -> dict[str, Any]:
        per_cluster = dict(policies.get(key) or {})
        per_cluster.pop(cluster, None)
        return {key: per_cluster or None}

    return PolicyRoute(name, store, show, clear)


SCHEMA_COMPATIBILITY_STRATEGIES = (
    "UNDEFINED",
    "ALWAYS_INCOMPATIBLE",
    "ALWAYS_COMPATIBLE",
    "BACKWARD",
    "FORWARD",
    "FULL",
    "BACKWARD_TRANSITIVE",
    "FORWARD_TRANSITIVE",
    "FULL_TRANSITIVE",
)
"""Pulsar's ``SchemaCompatibilityStrategy`` names (``broker/schema`` applies them)."""


def _store_schema_strategy(body: Any, policies: dict[str, Any], cluster: str) -> dict[str, Any]:
    if not isinstance(body, str) or body.upper() not in SCHEMA_COMPATIBILITY_STRATEGIES:
        raise PolicyError(
            "schemaCompatibilityStrategy must be one of "
            + ", ".join(SCHEMA_COMPATIBILITY_STRATEGIES)
        )
    return {"schema_compatibility_strategy": body.upper()}


AUTO_TOPIC_TYPES = ("non-partitioned", "partitioned")


def _store_auto_topic(body: Any, policies: dict[str, Any], cluster: str) -> dict[str, Any]:
    """Pulsar's AutoTopicCreationOverride, checked as Pulsar's ``isValidOverride``."""
    if not isinstance(body, dict):
        raise PolicyError("AutoTopicCreationOverride must be a JSON object")
    allow = body.get("allowAutoTopicCreation")
    if not isinstance(allow, bool):
        raise PolicyError("allowAutoTopicCreation must be a boolean")
    out: dict[str, Any] = {"allowAutoTopicCreation": allow}
    kind = body.get("topicType")
    if allow or kind is not None:
        if kind not in AUTO_TOPIC_TYPES:
            raise PolicyError(f"topicType must be one of {', '.join(AUTO_TOPIC_TYPES)}")
        out["topicType"] = kind
    partitions = body.get("defaultNumPartitions")
    if kind == "partitioned":
        if partitions is None or _int(partitions, "defaultNumPartitions") <= 0:
            raise PolicyError("defaultNumPartitions must be 1 or more for partitioned topics")
        out["defaultNumPartitions"] = partitions
    elif partitions is not None and kind == "non-partitioned":
        raise PolicyError("defaultNumPartitions is only for topicType partitioned")
    return {"autoTopicCreationOverride": out}


@dataclass(frozen=True, slots=True)
class AutoTopicCreation:
    """The effective topic auto-creation rule of a namespace."""

    allow: bool
    topic_type: str
    default_num_partitions: int


def resolve_auto_topic_creation(config: BrokerConfig, ns: dict[str, Any]) -> AutoTopicCreation:
    """The namespace's ``autoTopicCreationOverride`` when set, else the broker settings."""
    override = ns.get("autoTopicCreationOverride")
    if isinstance(override, dict) and isinstance(override.get("allowAutoTopicCreation"), bool):
        kind = override.get("topicType")
        if kind not in AUTO_TOPIC_TYPES:
            kind = config.allow_auto_topic_creation_type
        partitions = override.get("defaultNumPartitions")
        if not isinstance(partitions, int) or partitions <= 0:
            partitions = config.default_num_partitions
        return AutoTopicCreation(override["allowAutoTopicCreation"], kind, partitions)
    return AutoTopicCreation(
        config.allow_auto_topic_creation,
        config.allow_auto_topic_creation_type,
        config.default_num_partitions,
    )


_DISPATCH_FIELDS = (
    "dispatchThrottlingRateInMsg",
    "dispatchThrottlingRateInByte",
    "ratePeriodInSecond",
)

NAMESPACE_POLICIES: dict[str, PolicyRoute] = {
    r.name: r
    for r in (
        _scalar("messageTTL", "message_ttl_in_seconds"),
        PolicyRoute(
            "retention",
            _store_retention,
            lambda p, c: p.get("retention_policies"),
            lambda p, c: {"retention_policies": None},
        ),
        _scalar("maxProducersPerTopic", "max_producers_per_topic"),
        _scalar("maxConsumersPerTopic", "max_consumers_per_topic"),
        _scalar("maxUnackedMessagesPerConsumer", "max_unacked_messages_per_consumer"),
        _scalar("maxUnackedMessagesPerSubscription", "max_unacked_messages_per_subscription"),
        _scalar("deduplication", "deduplicationEnabled", "bool"),
        _scalar("compactionThreshold", "compaction_threshold"),
        PolicyRoute(
            "delayedDelivery",
            _store_delayed,
            lambda p, c: p.get("delayed_delivery_policies"),
            lambda p, c: {"delayed_delivery_policies": None},
        ),
        _rate_route(
            "publishRate",
            "publishMaxMessageRate",
            ("publishThrottlingRateInMsg", "publishThrottlingRateInByte"),
        ),
        _rate_route("dispatchRate", "topicDispatchRate", _DISPATCH_FIELDS),
        _rate_route("subscriptionDispatchRate", "subscriptionDispatchRate", _DISPATCH_FIELDS),
        _rate_route("replicatorDispatchRate", "replicatorDispatchRate", _DISPATCH_FIELDS),
        PolicyRoute(
            "inactiveTopicPolicies",
            _store_inactive,
            lambda p, c: p.get("inactive_topic_policies"),
            lambda p, c: {"inactive_topic_policies": None},
        ),
        PolicyRoute(
            "schemaCompatibilityStrategy",
            _store_schema_strategy,
            lambda p, c: p.get("schema_compatibility_strategy") or "UNDEFINED",
            lambda p, c: {"schema_compatibility_strategy": None},
        ),
        PolicyRoute(
            "schemaValidationEnforced",
            _scalar("schemaValidationEnforced", "schema_validation_enforced", "bool").store,
            lambda p, c: bool(p.get("schema_validation_enforced", False)),
            lambda p, c: {"schema_validation_enforced": None},
        ),
        PolicyRoute(
            "isAllowAutoUpdateSchema",
            _scalar("isAllowAutoUpdateSchema", "is_allow_auto_update_schema", "bool").store,
            lambda p, c: p.get("is_allow_auto_update_schema"),
            lambda p, c: {"is_allow_auto_update_schema": None},
            topic_level=False,
        ),
        PolicyRoute(
            "autoTopicCreation",
            _store_auto_topic,
            lambda p, c: p.get("autoTopicCreationOverride"),
            lambda p, c: {"autoTopicCreationOverride": None},
            topic_level=False,
        ),
    )
}
"""REST path segment -> how to store, show and clear it."""


def set_backlog_quota(
    policies: dict[str, Any], body: Any, quota_type: str | None
) -> dict[str, Any]:
    """The changes for ``POST .../backlogQuota?backlogQuotaType=...``."""
    try:
        kind = BacklogQuotaType(quota_type or "destination_storage")
    except ValueError:
        raise PolicyError(f"Unknown backlogQuotaType {quota_type!r}") from None
    quota = BacklogQuota.from_json(body)
    quota_map = dict(policies.get("backlog_quota_map") or {})
    quota_map[kind.value] = quota.to_json()
    return {"backlog_quota_map": quota_map}


def remove_backlog_quota(policies: dict[str, Any], quota_type: str | None) -> dict[str, Any]:
    try:
        kind = BacklogQuotaType(quota_type or "destination_storage")
    except ValueError:
        raise PolicyError(f"Unknown backlogQuotaType {quota_type!r}") from None
    quota_map = dict(policies.get("backlog_quota_map") or {})
    quota_map.pop(kind.value, None)
    return {"backlog_quota_map": quota_map}


__all__ = [
    "AUTO_TOPIC_TYPES",
    "NAMESPACE_POLICIES",
    "NO_RATE",
    "SCHEMA_COMPATIBILITY_STRATEGIES",
    "TOPIC_POLICIES",
    "AutoTopicCreation",
    "BacklogQuota",
    "BacklogQuotaType",
    "InactiveTopicDeleteMode",
    "InactiveTopicPolicies",
    "PolicyError",
    "PolicyRoute",
    "Rate",
    "RetentionPolicy",
    "TopicPolicies",
    "broker_inactive_topic_policies",
    "remove_backlog_quota",
    "resolve_auto_topic_creation",
    "resolve_policies",
    "set_backlog_quota",
]
