"""Namespaces: the cluster/tenant/namespace resources as Pulsar stores them, bundles (hash
ranges of a namespace) and bundle ownership.

Owns: the metadata of namespaces, who serves which bundle, and lookup (``NamespaceService``).
Must not know: topics, connections or HTTP.
"""

from magnetar.broker.namespace.bundles import BundleRange, NamespaceBundles, topic_hash
from magnetar.broker.namespace.lookup import (
    BundlePlacement,
    LookupResult,
    NamespaceService,
    ServiceError,
)
from magnetar.broker.namespace.ownership import NamespaceBundle, OwnerInfo, OwnershipCache
from magnetar.broker.namespace.resources import (
    PreconditionFailed,
    ResourceConflict,
    ResourceError,
    ResourceNotFound,
    Resources,
    TenantInfo,
)

__all__ = [
    "BundlePlacement",
    "BundleRange",
    "LookupResult",
    "NamespaceBundle",
    "NamespaceBundles",
    "NamespaceService",
    "OwnerInfo",
    "OwnershipCache",
    "PreconditionFailed",
    "ResourceConflict",
    "ResourceError",
    "ResourceNotFound",
    "Resources",
    "ServiceError",
    "TenantInfo",
    "topic_hash",
]
