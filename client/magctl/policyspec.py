"""Namespace and topic policies in manifest form, and Pulsar's REST bodies for them.

Owns: ``POLICIES``, one entry per manifest key under ``spec.policies`` (``retention``,
``messageTTL``, ``backlogQuotas``, ``deduplication``, ``delayedDelivery``, ``dispatchRate``,
``subscriptionDispatchRate``, ``publishRate``, ``maxProducersPerTopic``, tiered storage's
``offloadPolicies``, ``offloadThreshold``, ``offloadThresholdInSeconds``,
``offloadDeletionLag``, ...): the REST path
segment under ``/admin/v2/namespaces/{t}/{ns}/`` (or a topic's path), how the value the
server shows becomes the manifest's canonical value, and how a manifest value becomes the
body to POST. ``canonical`` of a manifest value and ``from_server`` of the stored value are
equal exactly when nothing would change: that is what ``apply`` and ``diff`` compare.
Must not know: HTTP (``read``/``write`` take the transport's get/post/delete).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from magnetar.client.magctl.errors import UsageError
from magnetar.client.magctl.units import (
    format_duration_s,
    format_size_bytes,
    parse_duration_s,
    parse_size_bytes,
)


@dataclass(frozen=True, slots=True)
class PolicySpec:
    key: str
    segment: str
    from_server: Callable[[Any], Any]
    """The server's GET answer -> canonical manifest value (None = not set)."""
    canonical: Callable[[Any], Any]
    """A manifest value -> its canonical form (raises UsageError when invalid)."""
    to_body: Callable[[Any], Any]
    """A canonical manifest value -> the POST body."""
    description: str
    topic_level: bool = True
    """Also a topic policy (Pulsar has no topic-level autoTopicCreation)."""


def _int(value: Any, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise UsageError(f"spec.policies.{what}: expected an integer, got {value!r}")
    return value


def _bool(value: Any, what: str) -> bool:
    if not isinstance(value, bool):
        raise UsageError(f"spec.policies.{what}: expected true or false, got {value!r}")
    return value


def _dict(value: Any, what: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise UsageError(f"spec.policies.{what}: expected a mapping, got {value!r}")
    return value


def _scalar_int(key: str, segment: str, description: str) -> PolicySpec:
    return PolicySpec(
        key,
        segment,
        lambda v: v if isinstance(v, int) and not isinstance(v, bool) else None,
        lambda v: _int(v, key),
        lambda v: v,
        description,
    )


# -- retention: {time: 7d, size: 10G}; -1 is infinite, 0 none
def _retention_from_server(v: Any) -> Any:
    if not isinstance(v, dict):
        return None
    minutes = int(v.get("retentionTimeInMinutes", 0))
    mb = int(v.get("retentionSizeInMB", 0))
    return {
        "time": format_duration_s(minutes * 60) if minutes > 0 else minutes,
        "size": format_size_bytes(mb << 20) if mb > 0 else mb,
    }


def _retention_canonical(v: Any) -> Any:
    d = _dict(v, "retention")
    unknown = set(d) - {"time", "size"}
    if unknown:
        raise UsageError(f"spec.policies.retention: unknown field(s) {sorted(unknown)}")
    seconds = parse_duration_s(d.get("time", 0), "spec.policies.retention.time")
    size = parse_size_bytes(d.get("size", 0), "spec.policies.retention.size")
    minutes = seconds // 60 if seconds > 0 else seconds
    mb = size >> 20 if size > 0 else size
    return _retention_from_server({"retentionTimeInMinutes": minutes, "retentionSizeInMB": mb})


def _retention_body(v: Any) -> Any:
    seconds = parse_duration_s(v["time"])
    size = parse_size_bytes(v["size"])
    return {
        "retentionTimeInMinutes": seconds // 60 if seconds > 0 else seconds,
        "retentionSizeInMB": size >> 20 if size > 0 else size,
    }


# -- messageTTL: 1h (seconds on the wire)
def _ttl_from_server(v: Any) -> Any:
    if not isinstance(v, int) or isinstance(v, bool):
        return None
    return format_duration_s(v)


# -- backlogQuotas: [{type, limit, limitTime, policy}]
_QUOTA_TYPES = ("destination_storage", "message_age")
_QUOTA_POLICIES = ("producer_request_hold", "producer_exception", "consumer_backlog_eviction")


def _quota_entry(qtype: str, limit: int, limit_time: int, policy: str) -> dict[str, Any]:
    return {
        "type": qtype,
        "limit": format_size_bytes(limit) if limit > 0 else limit,
        "limitTime": format_duration_s(limit_time) if limit_time > 0 else limit_time,
        "policy": policy,
    }


def _quotas_from_server(v: Any) -> Any:
    if not isinstance(v, dict) or not v:
        return None
    out = []
    for qtype in sorted(v):
        q = v[qtype] or {}
        out.append(
            _quota_entry(
                qtype,
                int(q.get("limitSize", q.get("limit", -1))),
                int(q.get("limitTime", -1)),
                str(q.get("policy", "producer_request_hold")),
            )
        )
    return out


def _quotas_canonical(v: Any) -> Any:
    if not isinstance(v, list):
        raise UsageError("spec.policies.backlogQuotas: expected a list")
    out: dict[str, dict[str, Any]] = {}
    for i, item in enumerate(v):
        d = _dict(item, f"backlogQuotas[{i}]")
        qtype = d.get("type", "destination_storage")
        if qtype not in _QUOTA_TYPES:
            raise UsageError(f"spec.policies.backlogQuotas[{i}].type: one of {_QUOTA_TYPES}")
        policy = d.get("policy", "producer_request_hold")
        if policy not in _QUOTA_POLICIES:
            raise UsageError(f"spec.policies.backlogQuotas[{i}].policy: one of {_QUOTA_POLICIES}")
        limit = parse_size_bytes(d.get("limit", -1), f"backlogQuotas[{i}].limit")
        limit_time = parse_duration_s(d.get("limitTime", -1), f"backlogQuotas[{i}].limitTime")
        out[qtype] = _quota_entry(qtype, limit, limit_time, policy)
    return [out[k] for k in sorted(out)] or None


def _quota_body(q: dict[str, Any]) -> dict[str, Any]:
    return {
        "limitSize": parse_size_bytes(q["limit"]),
        "limitTime": parse_duration_s(q["limitTime"]),
        "policy": q["policy"],
    }


# -- rates: Pulsar's field names, passed through with Pulsar's defaults
_Convert = Callable[[Any], Any]


def _rate(fields: tuple[str, ...], relative: bool) -> tuple[_Convert, _Convert, _Convert]:
    def from_server(v: Any) -> Any:
        if not isinstance(v, dict):
            return None
        out = {f: int(v.get(f, -1)) for f in fields}
        if "ratePeriodInSecond" in fields and out["ratePeriodInSecond"] <= 0:
            out["ratePeriodInSecond"] = 1
        if relative:
            out["relativeToPublishRate"] = bool(v.get("relativeToPublishRate", False))
        return out

    def canonical(v: Any) -> Any:
        d = _dict(v, "rate")
        allowed = set(fields) | ({"relativeToPublishRate"} if relative else set())
        unknown = set(d) - allowed
        if unknown:
            raise UsageError(f"unknown rate field(s) {sorted(unknown)}; known: {sorted(allowed)}")
        for f in fields:
            if f in d:
                _int(d[f], f)
        return from_server(d)

    return from_server, canonical, lambda v: v


_DISPATCH = ("dispatchThrottlingRateInMsg", "dispatchThrottlingRateInByte", "ratePeriodInSecond")
_PUBLISH = ("publishThrottlingRateInMsg", "publishThrottlingRateInByte")


def _delayed_from_server(v: Any) -> Any:
    if not isinstance(v, dict):
        return None
    out = {"active": bool(v.get("active", True)), "tickTime": int(v.get("tickTime", 1000))}
    if "maxDeliveryDelayInMillis" in v:
        out["maxDeliveryDelayInMillis"] = int(v["maxDeliveryDelayInMillis"])
    return out


def _delayed_canonical(v: Any) -> Any:
    d = _dict(v, "delayedDelivery")
    unknown = set(d) - {"active", "tickTime", "maxDeliveryDelayInMillis"}
    if unknown:
        raise UsageError(f"spec.policies.delayedDelivery: unknown field(s) {sorted(unknown)}")
    return _delayed_from_server(d)


_AUTO_TOPIC_KEYS = ("allowAutoTopicCreation", "topicType", "defaultNumPartitions")


def _auto_topic_from_server(v: Any) -> Any:
    if not isinstance(v, dict) or not isinstance(v.get("allowAutoTopicCreation"), bool):
        return None
    return {k: v[k] for k in _AUTO_TOPIC_KEYS if v.get(k) is not None}


def _auto_topic_canonical(v: Any) -> Any:
    what = "autoTopicCreation"
    d = _dict(v, what)
    unknown = set(d) - set(_AUTO_TOPIC_KEYS)
    if unknown:
        raise UsageError(f"spec.policies.{what}: unknown field(s) {sorted(unknown)}")
    allow = _bool(d.get("allowAutoTopicCreation"), f"{what}.allowAutoTopicCreation")
    kind = d.get("topicType")
    if (allow or kind is not None) and kind not in ("non-partitioned", "partitioned"):
        raise UsageError(
            f"spec.policies.{what}.topicType: expected non-partitioned or partitioned, got {kind!r}"
        )
    n = d.get("defaultNumPartitions")
    if kind == "partitioned" and (n is None or _int(n, f"{what}.defaultNumPartitions") < 1):
        raise UsageError(
            f"spec.policies.{what}.defaultNumPartitions: 1 or more is needed "
            "for topicType partitioned"
        )
    if kind != "partitioned" and n is not None:
        raise UsageError(
            f"spec.policies.{what}.defaultNumPartitions: only for topicType partitioned"
        )
    return _auto_topic_from_server(d)


# -- tiered storage: offloadPolicies as Pulsar's JSON; thresholds and lag with units
_OFFLOAD_TWINS = frozenset(
    {
        "managedLedgerOffloadThresholdInBytes",
        "managedLedgerOffloadThresholdInSeconds",
        "managedLedgerOffloadDeletionLagInMillis",
    }
)
"""Kept by the server in step with offloadThreshold, offloadThresholdInSeconds and
offloadDeletionLag: a manifest sets them through those keys."""


def _offload_policies_from_server(v: Any) -> Any:
    if not isinstance(v, dict):
        return None
    return {k: v[k] for k in sorted(v) if v[k] is not None and k not in _OFFLOAD_TWINS} or None


def _offload_policies_canonical(v: Any) -> Any:
    d = _dict(v, "offloadPolicies")
    for k in d:
        if not isinstance(k, str):
            raise UsageError(f"spec.policies.offloadPolicies: field names are strings, got {k!r}")
    return _offload_policies_from_server(d)


def _threshold_bytes_from_server(v: Any) -> Any:
    if not isinstance(v, int) or isinstance(v, bool) or v < 0:
        return None  # -1: not set (the broker's threshold applies)
    return format_size_bytes(v) if v > 0 else 0


def _threshold_seconds_from_server(v: Any) -> Any:
    if not isinstance(v, int) or isinstance(v, bool) or v < 0:
        return None
    return format_duration_s(v) if v > 0 else 0


def _lag_from_server(v: Any) -> Any:
    if not isinstance(v, int) or isinstance(v, bool) or v < 0:
        return None
    return format_duration_s(v // 1000) if v % 1000 == 0 and v > 0 else v // 1000


POLICIES: dict[str, PolicySpec] = {
    p.key: p
    for p in (
        PolicySpec(
            "retention",
            "retention",
            _retention_from_server,
            _retention_canonical,
            _retention_body,
            "{time: 7d, size: 10G}; -1 infinite, 0 none",
        ),
        PolicySpec(
            "messageTTL",
            "messageTTL",
            _ttl_from_server,
            lambda v: _ttl_from_server(parse_duration_s(v, "spec.policies.messageTTL")),
            parse_duration_s,
            "time to live of unacknowledged messages: 1h",
        ),
        PolicySpec(
            "backlogQuotas",
            "backlogQuotaMap",
            _quotas_from_server,
            _quotas_canonical,
            lambda v: v,
            "[{type: destination_storage|message_age, limit: 10G, "
            "limitTime: 1h, policy: producer_request_hold|producer_exception|"
            "consumer_backlog_eviction}]",
        ),
        PolicySpec(
            "deduplication",
            "deduplication",
            lambda v: v if isinstance(v, bool) else None,
            lambda v: _bool(v, "deduplication"),
            lambda v: v,
            "true: the broker drops re-sent messages (producer sequence ids)",
        ),
        PolicySpec(
            "delayedDelivery",
            "delayedDelivery",
            _delayed_from_server,
            _delayed_canonical,
            lambda v: v,
            "{active: true, tickTime: 1000, maxDeliveryDelayInMillis: 0}",
        ),
        PolicySpec(
            "dispatchRate",
            "dispatchRate",
            *_rate(_DISPATCH, True),
            "per topic: {dispatchThrottlingRateInMsg, dispatchThrottlingRateInByte, "
            "ratePeriodInSecond}",
        ),
        PolicySpec(
            "subscriptionDispatchRate",
            "subscriptionDispatchRate",
            *_rate(_DISPATCH, True),
            "per subscription: same fields as dispatchRate",
        ),
        PolicySpec(
            "publishRate",
            "publishRate",
            *_rate(_PUBLISH, False),
            "{publishThrottlingRateInMsg, publishThrottlingRateInByte}",
        ),
        _scalar_int("maxProducersPerTopic", "maxProducersPerTopic", "0 = no limit"),
        _scalar_int("maxConsumersPerTopic", "maxConsumersPerTopic", "0 = no limit"),
        _scalar_int(
            "maxUnackedMessagesPerConsumer", "maxUnackedMessagesPerConsumer", "0 = no limit"
        ),
        _scalar_int(
            "maxUnackedMessagesPerSubscription", "maxUnackedMessagesPerSubscription", "0 = no limit"
        ),
        _scalar_int(
            "compactionThreshold",
            "compactionThreshold",
            "bytes not yet compacted that trigger compaction; 0 = off",
        ),
        PolicySpec(
            "offloadPolicies",
            "offloadPolicies",
            _offload_policies_from_server,
            _offload_policies_canonical,
            lambda v: v,
            "tiered storage, Pulsar's OffloadPolicies JSON names: {managedLedgerOffloadDriver: "
            "S3, s3ManagedLedgerOffloadBucket: b, s3ManagedLedgerOffloadServiceEndpoint: ...} "
            "(thresholds and deletion lag: their own keys below)",
        ),
        PolicySpec(
            "offloadThreshold",
            "offloadThreshold",
            _threshold_bytes_from_server,
            lambda v: _threshold_bytes_from_server(
                parse_size_bytes(v, "spec.policies.offloadThreshold")
            ),
            parse_size_bytes,
            "namespace only: bytes kept on bookies before older ledgers are offloaded: 10G "
            "(0: offload every sealed ledger)",
            topic_level=False,
        ),
        PolicySpec(
            "offloadThresholdInSeconds",
            "offloadThresholdInSeconds",
            _threshold_seconds_from_server,
            lambda v: _threshold_seconds_from_server(
                parse_duration_s(v, "spec.policies.offloadThresholdInSeconds")
            ),
            parse_duration_s,
            "namespace only: ledgers closed longer ago are offloaded: 1d",
            topic_level=False,
        ),
        PolicySpec(
            "offloadDeletionLag",
            "offloadDeletionLagMs",
            _lag_from_server,
            lambda v: _lag_from_server(
                parse_duration_s(v, "spec.policies.offloadDeletionLag") * 1000
            ),
            lambda v: parse_duration_s(v) * 1000,
            "namespace only: how long an offloaded ledger stays on bookies too: 4h",
            topic_level=False,
        ),
        PolicySpec(
            "autoTopicCreation",
            "autoTopicCreation",
            _auto_topic_from_server,
            _auto_topic_canonical,
            lambda v: v,
            "namespace only: {allowAutoTopicCreation: true, topicType: "
            "non-partitioned|partitioned, defaultNumPartitions: 3}",
            topic_level=False,
        ),
    )
}


TOPIC_POLICIES: list[str] = [k for k, p in POLICIES.items() if p.topic_level]
"""The keys a Topic manifest may carry (all but the namespace-only ones)."""


def canonical_policies(spec: Any, *, topic: bool = False) -> dict[str, Any]:
    """Validate ``spec.policies`` of a manifest; canonical values (None = remove)."""
    if spec is None:
        return {}
    if not isinstance(spec, dict):
        raise UsageError("spec.policies: expected a mapping")
    out: dict[str, Any] = {}
    for key, value in spec.items():
        policy = POLICIES.get(key)
        if policy is None:
            raise UsageError(f'spec.policies: unknown policy "{key}"; known: {", ".join(POLICIES)}')
        if topic and not policy.topic_level:
            raise UsageError(f'spec.policies: "{key}" is a namespace policy, not a topic one')
        out[key] = None if value is None else policy.canonical(value)
    return out


def read_policies(get: Callable[[str], Any], base: str, keys: list[str]) -> dict[str, Any]:
    """The canonical values of ``keys`` as the server shows them under ``base``."""
    return {k: POLICIES[k].from_server(get(f"{base}/{POLICIES[k].segment}")) for k in keys}


def write_policy(
    post: Callable[..., Any],
    delete: Callable[..., Any],
    base: str,
    key: str,
    *,
    live: Any,
    wanted: Any,
) -> None:
    """Make the server's ``key`` policy under ``base`` equal to ``wanted`` (canonical)."""
    policy = POLICIES[key]
    if key == "backlogQuotas":
        live_types = {q["type"]: q for q in live or []}
        wanted_types = {q["type"]: q for q in wanted or []}
        for qtype in live_types.keys() - wanted_types.keys():
            delete(f"{base}/backlogQuota", backlogQuotaType=qtype)
        for qtype, q in wanted_types.items():
            if live_types.get(qtype) != q:
                post(f"{base}/backlogQuota", _quota_body(q), backlogQuotaType=qtype)
        return
    if wanted is None:
        delete(f"{base}/{policy.segment}")
    else:
        post(f"{base}/{policy.segment}", policy.to_body(wanted))


__all__ = ["POLICIES", "PolicySpec", "canonical_policies", "read_policies", "write_policy"]
