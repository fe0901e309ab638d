"""Which kind of operation an admin or lookup HTTP request is, as Pulsar's admin resources
classify it (``PersistentTopicsBase``, ``NamespacesBase``, ``TenantsBase``, ``ClustersBase``
with ``PulsarWebResource``'s ``validateTopicOperation`` / ``validateNamespaceOperation`` /
``validateNamespacePolicyOperation`` / ``validateSuperUserAccess``).

Owns: ``classify(method, path) -> HttpOperation``, pure. The kinds and what Pulsar's default
provider (``PulsarAuthorizationProvider``) then asks of a role that is not a superuser:

- ``OPEN``: nothing (listing and reading clusters);
- ``SUPERUSER``: a superuser only (tenants, clusters, brokers, bookies);
- ``TENANT_ADMIN``: an admin role of the tenant (every namespace policy read and write,
  creating, deleting, unloading, compacting, terminating topics and partitioned topics,
  permissions, properties writes, schema writes);
- ``NAMESPACE_READ``: a ``produce`` or ``consume`` grant on the namespace, or tenant admin
  (listing its topics: Pulsar's ``GET_TOPICS`` / ``GET_BUNDLE``);
- ``LOOKUP``: ``produce`` or ``consume`` on the topic, or tenant admin (lookup, partitioned
  metadata, stats, internal stats, properties read: ``LOOKUP`` / ``GET_STATS`` /
  ``GET_METADATA``);
- ``CONSUME``: ``consume`` on the topic (and, naming a subscription, being one of its roles
  when the namespace lists some), or tenant admin (subscriptions, create / delete a
  subscription, skip, expire, reset cursor, peek, last message id, examine message).

Must not know: roles, grants, the metadata store.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from urllib.parse import unquote


class OpKind(enum.Enum):
    OPEN = "open"
    SUPERUSER = "superuser"
    TENANT_ADMIN = "tenant-admin"
    NAMESPACE_READ = "namespace-read"
    LOOKUP = "lookup"
    CONSUME = "consume"


@dataclass(frozen=True, slots=True)
class HttpOperation:
    kind: OpKind
    tenant: str = ""
    namespace: str = ""
    topic: str = ""
    """``domain://tenant/namespace/local`` for topic operations (unparsed)."""
    subscription: str = ""


DOMAINS = ("persistent", "non-persistent")
_LOOKUP_GETS = frozenset(
    {"partitions", "stats", "partitioned-stats", "internalStats", "properties"}
)
_CONSUME_GETS = frozenset({"subscriptions", "lastMessageId", "examinemessage"})
_SUBSCRIPTION_OPS = frozenset({"skip_all", "skip", "expireMessages", "resetcursor", "position"})


def _topic_op(method: str, domain: str, parts: list[str]) -> HttpOperation:
    """``parts``: tenant, namespace, local topic name, then what follows it."""
    tenant, namespace, local, rest = parts[0], parts[1], unquote(parts[2]), parts[3:]
    topic = f"{domain}://{tenant}/{namespace}/{local}"

    def op(kind: OpKind, subscription: str = "") -> HttpOperation:
        return HttpOperation(kind, tenant, namespace, topic, subscription)

    if method == "GET" and len(rest) == 1 and rest[0] in _LOOKUP_GETS:
        return op(OpKind.LOOKUP)
    if method == "GET" and len(rest) == 1 and rest[0] in _CONSUME_GETS:
        return op(OpKind.CONSUME)
    if len(rest) >= 2 and rest[0] == "subscription":
        subscription = unquote(rest[1])
        if len(rest) == 2 and method in ("PUT", "DELETE"):
            return op(OpKind.CONSUME, subscription)  # create / unsubscribe
        if len(rest) >= 3 and rest[2] in _SUBSCRIPTION_OPS:
            return op(OpKind.CONSUME, subscription)
    return op(OpKind.TENANT_ADMIN)


def classify(method: str, path: str) -> HttpOperation:
    """The operation of an HTTP request (``path`` without the query)."""
    parts = [p for p in path.split("/") if p]
    method = method.upper()
    if parts[:3] == ["lookup", "v2", "topic"] and len(parts) >= 7 and parts[3] in DOMAINS:
        return _topic_op("GET", parts[3], [*parts[4:7], "partitions"])  # a lookup
    if parts[:2] != ["admin", "v2"] or len(parts) < 3:
        return HttpOperation(OpKind.SUPERUSER)
    area, rest = parts[2], parts[3:]
    if area == "clusters":
        return HttpOperation(OpKind.OPEN if method == "GET" else OpKind.SUPERUSER)
    if area == "tenants":
        if len(rest) == 1 and method == "GET":
            return HttpOperation(OpKind.TENANT_ADMIN, rest[0])
        return HttpOperation(OpKind.SUPERUSER)
    if area == "namespaces" and rest:
        tenant = rest[0]
        if len(rest) == 3 and rest[2] == "topics" and method == "GET":
            return HttpOperation(OpKind.NAMESPACE_READ, tenant, rest[1])
        return HttpOperation(OpKind.TENANT_ADMIN, tenant, rest[1] if len(rest) > 1 else "")
    if area in DOMAINS and len(rest) >= 2:
        tenant, namespace = rest[0], rest[1]
        if len(rest) == 2 or (len(rest) == 3 and rest[2] == "partitioned"):
            if method == "GET":  # the namespace's topics
                return HttpOperation(OpKind.NAMESPACE_READ, tenant, namespace)
            return HttpOperation(OpKind.TENANT_ADMIN, tenant, namespace)
        if len(rest) == 3 and rest[2].startswith("0x") and method == "GET":  # a bundle's topics
            return HttpOperation(OpKind.NAMESPACE_READ, tenant, namespace)
        return _topic_op(method, area, rest)
    if area == "schemas" and len(rest) >= 3:
        if method == "GET":  # reading a topic's schemas: what may look the topic up
            return _topic_op("GET", "persistent", [*rest[:3], "partitions"])
        return HttpOperation(OpKind.TENANT_ADMIN, rest[0], rest[1])
    return HttpOperation(OpKind.SUPERUSER)


__all__ = ["DOMAINS", "HttpOperation", "OpKind", "classify"]
