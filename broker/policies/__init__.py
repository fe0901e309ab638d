"""Policies: the namespace/topic policy model with Pulsar's JSON shapes and schemas, the
policy manager applying them live, rate limits, backlog quotas and message TTL.

Owns: what a policy says and applying it to loaded topics.
Must not know: connections or HTTP.
"""

from magnetar.broker.policies.manager import (
    DispatchThrottle,
    PolicyHost,
    PolicyManager,
    ReadThrottled,
    applied_policies,
)
from magnetar.broker.policies.model import (
    BacklogQuota,
    BacklogQuotaType,
    PolicyError,
    Rate,
    RetentionPolicy,
    TopicPolicies,
    resolve_auto_topic_creation,
    resolve_policies,
)
from magnetar.broker.policies.rate_limit import RateLimiter, TokenBucket

__all__ = [
    "BacklogQuota",
    "BacklogQuotaType",
    "DispatchThrottle",
    "PolicyError",
    "PolicyHost",
    "PolicyManager",
    "Rate",
    "RateLimiter",
    "ReadThrottled",
    "RetentionPolicy",
    "TokenBucket",
    "TopicPolicies",
    "applied_policies",
    "resolve_auto_topic_creation",
    "resolve_policies",
]
