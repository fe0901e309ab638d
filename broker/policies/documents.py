"""JSON schemas of the admin documents the broker stores, checked before anything is stored.

Owns: the schema of a namespace (or topic) Policies document with Pulsar's field names, of
TenantInfo, and of a namespace's bundles, plus ``check_policies`` / ``check_tenant_info`` that
raise ``PolicyError`` with the first violation (a JSON path and what is wrong). A stored
document that passed these can always be resolved into ``TopicPolicies``: a value of the
wrong type can never reach topic loading. Fields Magnetar does not know are kept as Pulsar's
Jackson mapper keeps them (ignored), but every known field is typed and bounded (64-bit
integers, Pulsar's ranges). Pure: no I/O. Must not know: HTTP, the metadata store.
"""

from __future__ import annotations

import itertools
from typing import Any

import jsonschema

from magnetar.broker.policies.model import (
    SCHEMA_COMPATIBILITY_STRATEGIES,
    InactiveTopicDeleteMode,
    PolicyError,
)

INT64_MIN = -(1 << 63)
INT64_MAX = (1 << 63) - 1
BUNDLES_CEILING_MAX = 1 << 32
"""Pulsar's own bound on ``numBundles`` (2^32); the broker's setting is far lower."""
JSON_DEPTH_MAX = 32
"""Nesting depth of any admin JSON body (Policies documents are at most 4 deep)."""


def _int(
    minimum: int = INT64_MIN, maximum: int = INT64_MAX, *, nullable: bool = False
) -> dict[str, Any]:
    kind: Any = ["integer", "null"] if nullable else "integer"
    return {"type": kind, "minimum": minimum, "maximum": maximum}


def _object(props: dict[str, Any]) -> dict[str, Any]:
    return {"type": ["object", "null"], "properties": props}


_COUNT = _int(0, nullable=True)
"""A top-level count: null means the broker default."""
_RATE = _object(
    {
        "publishThrottlingRateInMsg": _int(),
        "publishThrottlingRateInByte": _int(),
        "dispatchThrottlingRateInMsg": _int(),
        "dispatchThrottlingRateInByte": _int(),
        "ratePeriodInSecond": _int(nullable=True),
        "relativeToPublishRate": {"type": ["boolean", "null"]},
    }
)
_PER_CLUSTER_RATE = {"type": ["object", "null"], "additionalProperties": _RATE}
_QUOTA = _object(
    {
        "limit": _int(),
        "limitSize": _int(),
        "limitTime": _int(),
        "policy": {
            "enum": [
                "producer_request_hold",
                "producer_exception",
                "consumer_backlog_eviction",
                None,
            ]
        },
    }
)
_HEX32 = {"type": "string", "pattern": "^0x[0-9a-fA-F]{8}$"}


def bundles_schema(max_bundles: int) -> dict[str, Any]:
    return _object(
        {
            "numBundles": _int(1, max_bundles),
            "boundaries": {
                "type": ["array", "null"],
                "items": _HEX32,
                "maxItems": max_bundles + 1,
            },
        }
    )


def policies_schema(max_bundles: int) -> dict[str, Any]:
    return {
        "type": "object",
        "properties": {
            "bundles": bundles_schema(max_bundles),
            "message_ttl_in_seconds": _COUNT,
            "retention_policies": _object(
                {"retentionTimeInMinutes": _int(-1), "retentionSizeInMB": _int(-1)}
            ),
            "backlog_quota_map": _object({"destination_storage": _QUOTA, "message_age": _QUOTA}),
            "max_producers_per_topic": _COUNT,
            "max_consumers_per_topic": _COUNT,
            "max_unacked_messages_per_consumer": _COUNT,
            "max_unacked_messages_per_subscription": _COUNT,
            "deduplicationEnabled": {"type": ["boolean", "null"]},
            "compaction_threshold": _COUNT,
            "delayed_delivery_policies": _object(
                {
                    "active": {"type": ["boolean", "null"]},
                    "tickTime": _int(0),
                    "maxDeliveryDelayInMillis": _int(0),
                }
            ),
            "publishMaxMessageRate": _PER_CLUSTER_RATE,
            "topicDispatchRate": _PER_CLUSTER_RATE,
            "subscriptionDispatchRate": _PER_CLUSTER_RATE,
            # Pulsar's other per-cluster rate maps, and the REST name of topicDispatchRate
            # that a hand-written body may use: typed too, so a malformed rate is refused
            "clusterDispatchRate": _PER_CLUSTER_RATE,
            "dispatchRate": _PER_CLUSTER_RATE,
            "clusterSubscribeRate": {
                "type": ["object", "null"],
                "additionalProperties": _object(
                    {"subscribeThrottlingRatePerConsumer": _int(), "ratePeriodInSecond": _int()}
                ),
            },
            "inactive_topic_policies": _object(
                {
                    "inactiveTopicDeleteMode": {
                        "enum": [m.value for m in InactiveTopicDeleteMode] + [None]
                    },
                    "maxInactiveDurationSeconds": _int(0),
                    "deleteWhileInactive": {"type": ["boolean", "null"]},
                }
            ),
            "autoTopicCreationOverride": _object(
                {
                    "allowAutoTopicCreation": {"type": "boolean"},
                    "topicType": {"enum": ["non-partitioned", "partitioned", None]},
                    "defaultNumPartitions": _int(0, nullable=True),
                }
            ),
            "replication_clusters": {"type": ["array", "null"], "items": {"type": "string"}},
            "allowed_clusters": {"type": ["array", "null"], "items": {"type": "string"}},
            "replicatorDispatchRate": _PER_CLUSTER_RATE,
            "schema_compatibility_strategy": {"enum": [*SCHEMA_COMPATIBILITY_STRATEGIES, None]},
            "schema_validation_enforced": {"type": ["boolean", "null"]},
            "is_allow_auto_update_schema": {"type": ["boolean", "null"]},
        },
    }


TENANT_INFO_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "adminRoles": {"type": ["array", "null"], "items": {"type": "string"}},
        "allowedClusters": {"type": ["array", "null"], "items": {"type": "string"}},
    },
}

_validators: dict[int, jsonschema.protocols.Validator] = {}


def _validator(max_bundles: int) -> jsonschema.protocols.Validator:
    got = _validators.get(max_bundles)
    if got is None:
        got = _validators[max_bundles] = jsonschema.Draft202012Validator(
            policies_schema(max_bundles)
        )
    return got


_TENANT = jsonschema.Draft202012Validator(TENANT_INFO_SCHEMA)


def _raise_first(validator: jsonschema.protocols.Validator, doc: Any, what: str) -> None:
    error = jsonschema.exceptions.best_match(validator.iter_errors(doc))
    if error is not None:
        where = "".join(f"[{p!r}]" if isinstance(p, int) else f".{p}" for p in error.path)
        message = error.message
        if len(message) > 200:
            message = message[:200] + "..."
        raise PolicyError(f"Invalid {what}{where}: {message}")


def json_depth(doc: Any) -> int:
    """Nesting depth of a decoded JSON value (a scalar is 0), without recursion."""
    deepest = 0
    stack: list[tuple[Any, int]] = [(doc, 0)]
    while stack:
        value, depth = stack.pop()
        if isinstance(value, dict):
            children: Any = value.values()
        elif isinstance(value, list):
            children = value
        else:
            continue
        depth += 1
        deepest = max(deepest, depth)
        if depth > JSON_DEPTH_MAX:
            return depth
        stack.extend((c, depth) for c in children)
    return deepest


def check_policies(doc: Any, max_bundles: int) -> None:
    """Raise ``PolicyError`` unless ``doc`` is a Policies document the broker can serve."""
    if json_depth(doc) > JSON_DEPTH_MAX:
        raise PolicyError("Invalid Policies: nested too deeply")
    _raise_first(_validator(max_bundles), doc, "Policies")
    bundles = doc.get("bundles") if isinstance(doc, dict) else None
    if isinstance(bundles, dict) and bundles.get("boundaries"):
        check_boundaries(bundles["boundaries"])


def check_boundaries(boundaries: list[str]) -> None:
    """Pulsar's ``validateBundlesData``: strictly increasing, from 0x00000000 to 0xffffffff."""
    values = [int(b, 16) for b in boundaries]
    if len(values) < 2 or values[0] != 0 or values[-1] != 0xFFFFFFFF:
        raise PolicyError("Bundles do not cover the whole space from 0x00000000 to 0xffffffff")
    if any(b <= a for a, b in itertools.pairwise(values)):
        raise PolicyError("Bundle boundaries must be strictly increasing")


def check_tenant_info(doc: Any) -> None:
    if json_depth(doc) > JSON_DEPTH_MAX:
        raise PolicyError("Invalid TenantInfo: nested too deeply")
    _raise_first(_TENANT, doc, "TenantInfo")


__all__ = [
    "BUNDLES_CEILING_MAX",
    "INT64_MAX",
    "INT64_MIN",
    "JSON_DEPTH_MAX",
    "TENANT_INFO_SCHEMA",
    "check_boundaries",
    "check_policies",
    "check_tenant_info",
    "json_depth",
    "policies_schema",
]
