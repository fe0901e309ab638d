"""``magnetar zookeeper-init``: write a cluster's metadata once, before brokers start.

Owns: the idempotent initialisation Pulsar's ``initialize-cluster-metadata`` does: the
cluster node (its service URLs), the ``public`` tenant and the ``public/default``
namespace. Running it again changes nothing. A second cluster initialised on the same
configuration store (``--configuration-metadata-store``) is added, as Pulsar adds it, to
the ``public`` tenant's allowed clusters and to ``public/default``'s replication clusters.
Brokers create the same nodes on first start when they are missing, so the step is an
operator's explicit one (a Kubernetes Job, the compose ``init`` service), not a
requirement; with a shared configuration store it is required for every cluster but the
first, as in Pulsar.
Must not know: how the metadata store was started.
"""

from __future__ import annotations

import logging

from magnetar.broker.namespace.resources import ResourceConflict, Resources, TenantInfo
from magnetar.zk.store import MetadataStore

log = logging.getLogger(__name__)


async def initialize_cluster_metadata(
    store: MetadataStore,
    cluster: str,
    *,
    web_service_url: str,
    broker_service_url: str,
    default_bundles: int = 4,
) -> list[str]:
    """Create what is missing; returns what was created (empty when all existed)."""
    resources = Resources(store, cluster)
    created: list[str] = []
    if cluster not in await resources.list_clusters():
        await resources.ensure_cluster(broker_service_url, web_service_url)
        created.append(f"cluster {cluster}")
    try:
        await resources.create_tenant("public", TenantInfo([], [cluster]))
        created.append("tenant public")
    except ResourceConflict:  # made by another cluster of a shared configuration store
        if await resources.add_tenant_cluster("public", cluster):
            created.append(f"tenant public allowed on {cluster}")
    try:
        await resources.create_namespace("public", "default", default_bundles=default_bundles)
        created.append("namespace public/default")
    except ResourceConflict:
        replication = await resources.get_replication_clusters("public", "default")
        if cluster not in replication:
            await resources.set_replication_clusters("public", "default", [*replication, cluster])
            created.append(f"public/default replicated to {cluster}")
    log.info("cluster metadata initialised cluster=%s created=%s", cluster, created or "nothing")
    return created


__all__ = ["initialize_cluster_metadata"]
