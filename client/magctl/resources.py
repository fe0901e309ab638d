"""magctl's nouns: resource types with plural, singular and short names, and topic names.

Owns: ``RESOURCES`` (the table ``magctl api-resources`` prints), ``resolve`` (``topics``,
``topic``, ``tp`` and ``TOPIC`` all name one type; anything else is a usage error), and
``TopicName`` (``persistent://t/ns/x``, ``t/ns/x`` and a short ``x`` resolved in the current
namespace, ``persistent`` by default), ``targets`` (a verb's ``TYPE``, ``TYPE NAME...`` or
``TYPE/NAME`` arguments). Records are NamedTuples, not dataclasses: importing
``dataclasses`` costs several ms at start-up, and ``magctl --help`` loads this module.
Must not know: HTTP, output.
"""

from __future__ import annotations

from typing import NamedTuple
from urllib.parse import quote

from magnetar.client.magctl.errors import UsageError

API_VERSION = "magnetar.io/v1alpha1"
DOMAINS = ("persistent", "non-persistent")
DEFAULT_NAMESPACE = "public/default"


class ResourceType(NamedTuple):
    plural: str
    singular: str
    short: str
    kind: str
    scope: str
    """global, cluster, tenant (namespaces), namespace (topics, bundles) or topic."""
    writable: bool
    description: str

    @property
    def names(self) -> tuple[str, ...]:
        return (self.plural, self.singular, self.short)


RESOURCES: tuple[ResourceType, ...] = (
    ResourceType(
        "clusters",
        "cluster",
        "cl",
        "Cluster",
        "global",
        True,
        "Pulsar clusters (service and admin URLs, how replicators reach them)",
    ),
    ResourceType(
        "tenants",
        "tenant",
        "tn",
        "Tenant",
        "global",
        True,
        "tenants: admin roles and allowed clusters",
    ),
    ResourceType(
        "namespaces",
        "namespace",
        "ns",
        "Namespace",
        "tenant",
        True,
        "namespaces (tenant/ns): bundles and policies",
    ),
    ResourceType(
        "topics",
        "topic",
        "tp",
        "Topic",
        "namespace",
        True,
        "topics, partitioned or not, persistent or not",
    ),
    ResourceType(
        "partitions",
        "partition",
        "pt",
        "Partition",
        "topic",
        False,
        "the -partition-N topics of a partitioned topic (read-only)",
    ),
    ResourceType(
        "subscriptions",
        "subscription",
        "sub",
        "Subscription",
        "topic",
        True,
        "subscriptions (cursors) of a topic",
    ),
    ResourceType(
        "bundles",
        "bundle",
        "bdl",
        "Bundle",
        "namespace",
        False,
        "hash ranges of a namespace and their owner broker",
    ),
    ResourceType(
        "brokers", "broker", "br", "Broker", "cluster", False, "the cluster's active brokers"
    ),
    ResourceType("bookies", "bookie", "bk", "Bookie", "cluster", False, "the cluster's bookies"),
    ResourceType(
        "ledgers",
        "ledger",
        "lg",
        "Ledger",
        "topic",
        False,
        "the ledgers of a topic's managed ledger (read-only)",
    ),
)

_BY_NAME: dict[str, ResourceType] = {}
for _r in RESOURCES:
    for _n in (*_r.names, _r.kind.lower(), _r.short + "s"):
        _BY_NAME[_n] = _r
_BY_KIND = {r.kind: r for r in RESOURCES}


def resolve(name: str) -> ResourceType:
    """The resource type ``name`` (plural, singular or short, any case) names."""
    found = _BY_NAME.get(name.lower())
    if found is None:
        raise UsageError(f'the server doesn\'t have a resource type "{name}"')
    return found


def lookup(name: str) -> ResourceType | None:
    return _BY_NAME.get(name.lower())


def targets(resource: str, names: list[str]) -> tuple[ResourceType, list[str]]:
    """kubectl's forms: ``TYPE``, ``TYPE NAME...`` and ``TYPE/NAME``."""
    head, sep, rest = resource.partition("/")
    if sep and lookup(head) is not None and "://" not in resource:
        if names:
            raise UsageError(
                "there is no need to specify a resource type as a separate "
                "argument when passing arguments in resource/name form"
            )
        return resolve(head), [rest]
    return resolve(resource), list(names)


def split_namespace(ns: str) -> tuple[str, str]:
    parts = ns.strip("/").split("/")
    if len(parts) != 2 or not all(parts):
        raise UsageError(f'invalid namespace "{ns}": expected tenant/namespace')
    return parts[0], parts[1]


class TopicName(NamedTuple):
    domain: str
    tenant: str
    namespace: str
    local: str

    @classmethod
    def parse(cls, name: str, default_namespace: str = DEFAULT_NAMESPACE) -> TopicName:
        """``persistent://t/ns/x``, ``t/ns/x`` or ``x`` (in ``default_namespace``)."""
        domain = "persistent"
        rest = name
        if "://" in name:
            domain, rest = name.split("://", 1)
            if domain not in DOMAINS:
                raise UsageError(f'invalid topic name "{name}": unknown domain "{domain}"')
        parts = rest.split("/")
        if len(parts) == 1 and "://" not in name:
            tenant, namespace = split_namespace(default_namespace)
            local = parts[0]
        elif len(parts) == 3:
            tenant, namespace, local = parts
        else:
            raise UsageError(
                f'invalid topic name "{name}": expected persistent://tenant/namespace/topic, '
                "tenant/namespace/topic or a short name with -n tenant/namespace"
            )
        if not (tenant and namespace and local):
            raise UsageError(f'invalid topic name "{name}"')
        return cls(domain, tenant, namespace, local)

    @property
    def full(self) -> str:
        return f"{self.domain}://{self.tenant}/{self.namespace}/{self.local}"

    @property
    def ns(self) -> str:
        return f"{self.tenant}/{self.namespace}"

    @property
    def path(self) -> str:
        """The admin REST path segment: ``persistent/t/ns/x`` (the local name quoted)."""
        return f"{self.domain}/{self.tenant}/{self.namespace}/{quote(self.local, safe='')}"

    @property
    def persistent(self) -> bool:
        return self.domain == "persistent"

    def partition(self, index: int) -> TopicName:
        local = f"{self.local}-partition-{index}"
        return TopicName(self.domain, self.tenant, self.namespace, local)

    @property
    def partition_index(self) -> int:
        head, sep, tail = self.local.rpartition("-partition-")
        return int(tail) if sep and head and tail.isdigit() else -1


__all__ = [
    "API_VERSION",
    "DEFAULT_NAMESPACE",
    "DOMAINS",
    "RESOURCES",
    "ResourceType",
    "TopicName",
    "lookup",
    "resolve",
    "split_namespace",
    "targets",
]
