"""Cluster, tenant, namespace and partitioned-topic metadata, stored as Pulsar stores it.

Owns: reading and writing ``/admin/clusters/<c>`` (``ClusterData``, see ``cluster_data``),
``/admin/policies/<tenant>[/<ns>]``
(TenantInfo and namespace Policies JSON, with Pulsar's field names),
``/admin/topic-policies/<tenant>/<ns>/<domain>/<topic>`` (topic-level policies: the same
fields as the namespace Policies JSON, overriding them for one topic; Pulsar keeps these in
the ``__change_events`` system topic, Magnetar in the metadata store, watched the same way
as namespace policies) and
``/admin/partitioned-topics/<tenant>/<ns>/<domain>/<topic>`` (``{"partitions": N}``), each
change a compare-and-set; and the checks Pulsar makes on which clusters a tenant may use
(``allowedClusters``), a namespace is replicated to (``replication_clusters``) or allowed on
(PIP-321's ``allowed_clusters``) and a topic overrides that with (topic-level
``replication_clusters``), including that a cluster still in use cannot be deleted or taken
from its tenant. Raises ``ResourceError`` subclasses carrying the HTTP status Pulsar answers
with. Must not know: HTTP, topics being served, the wire protocol.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote, unquote

from magnetar.broker.errors import (
    InvalidResource,
    PreconditionFailed,
    ResourceConflict,
    ResourceError,
    ResourceForbidden,
    ResourceNotFound,
)
from magnetar.broker.namespace.bundles import BundleRange, NamespaceBundles
from magnetar.broker.namespace.cluster_data import ClusterData, check_cluster_data
from magnetar.broker.policies.documents import check_policies, check_tenant_info
from magnetar.broker.policies.model import TOPIC_POLICIES, PolicyError
from magnetar.zk import paths
from magnetar.zk.errors import AlreadyExists, BadVersion, NotFound
from magnetar.zk.store import CREATE_ONLY, MetadataStore


@dataclass(slots=True)
class TenantInfo:
    admin_roles: list[str] = field(default_factory=list)
    allowed_clusters: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {"adminRoles": self.admin_roles, "allowedClusters": self.allowed_clusters}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> TenantInfo:
        """From Pulsar's TenantInfo JSON; ``InvalidResource`` (400) for a wrong shape."""
        try:
            check_tenant_info(data)
        except PolicyError as exc:
            raise InvalidResource(str(exc)) from None
        return cls(list(data.get("adminRoles") or []), list(data.get("allowedClusters") or []))


def topic_policies_path(tenant: str, namespace: str, domain: str, local: str) -> str:
    return f"{TOPIC_POLICIES}/{tenant}/{namespace}/{domain}/{quote(local, safe='')}"


def _name_ok(name: str) -> bool:
    return bool(name) and all(c.isalnum() or c in "-_=:." for c in name)


def _bundles_of(policies: dict[str, Any]) -> NamespaceBundles:
    bounds = (policies.get("bundles") or {}).get("boundaries")
    if not bounds:
        return NamespaceBundles.default(1)
    return NamespaceBundles(tuple(int(b, 16) if isinstance(b, str) else int(b) for b in bounds))


def _clusters(policies: dict[str, Any], key: str) -> set[str]:
    """The cluster names stored under ``key`` (a list; anything else: none)."""
    value = policies.get(key)
    return {c for c in value if isinstance(c, str)} if isinstance(value, list) else set()


def _allowed(policies: dict[str, Any]) -> set[str]:
    """The namespace's own ``allowed_clusters`` (PIP-321; empty: no restriction)."""
    return _clusters(policies, "allowed_clusters")


def _cluster_list(body: Any) -> list[str]:
    """A JSON list of cluster names, de-duplicated in order; 400 for any other shape."""
    if not isinstance(body, list) or not all(isinstance(c, str) for c in body):
        raise InvalidResource("The body must be a JSON list of cluster names")
    return list(dict.fromkeys(body))


def _dump(value: Any) -> bytes:
    return json.dumps(value, sort_keys=True).encode()


DEFAULT_MAX_BUNDLES = 128
"""Pulsar's ``loadBalancerNamespaceMaximumBundles`` default."""
PARTITIONS_CEILING = 65_536
"""Partitions of one partitioned topic when ``maxNumPartitionsPerPartitionedTopic`` is 0
(Pulsar: unlimited; here a ceiling, so one request can never ask for unbounded work)."""


class Resources:
    """Typed access to the admin metadata of one cluster.

    Every Policies document is checked against its schema (``policy_schema``) before it is
    stored; bundles and partition counts are bounded (``max_bundles``,
    ``max_partitions``)."""

    def __init__(
        self,
        store: MetadataStore,
        cluster: str,
        *,
        max_bundles: int = DEFAULT_MAX_BUNDLES,
        max_partitions: int = 0,
    ) -> None:
        self.store = store
        self.cluster = cluster
        self.max_bundles = max(1, max_bundles)
        self.max_partitions = max_partitions if max_partitions > 0 else PARTITIONS_CEILING

    def _check_policies(self, doc: dict[str, Any]) -> None:
        try:
            check_policies(doc, self.max_bundles)
        except PolicyError as exc:
            raise InvalidResource(str(exc)) from None

    def _check_partitions(self, partitions: int) -> None:
        if partitions < 1:
            raise PreconditionFailed("Number of partitions should be more than 0")
        if partitions > self.max_partitions:
            raise PreconditionFailed(
                f"Number of partitions should be less than or equal to {self.max_partitions}"
            )

    # -- clusters ---------------------------------------------------------------------------
    async def ensure_cluster(self, service_url: str, http_url: str) -> None:
        data = {"serviceUrl": http_url, "brokerServiceUrl": service_url}
        try:
            await self.store.put(
                paths.cluster(self.cluster), _dump(data), expected_version=CREATE_ONLY
            )
        except AlreadyExists:
            pass

    async def list_clusters(self) -> list[str]:
        return await self.store.children(paths.CLUSTERS)

    async def get_cluster(self, cluster: str) -> dict[str, Any]:
        """The stored ``ClusterData`` document; 404 when the cluster is unknown."""
        got = await self.store.get(paths.cluster(cluster))
        if got is None:
            raise ResourceNotFound("Cluster does not exist")
        data = json.loads(got.value or b"{}")
        return data if isinstance(data, dict) else {}

    async def cluster_data(self, cluster: str) -> ClusterData:
        """The typed registration of ``cluster`` (how a replicator reaches it)."""
        return ClusterData.from_json(cluster, await self.get_cluster(cluster))

    async def create_cluster(self, cluster: str, data: Any) -> None:
        """Pulsar's ``PUT /admin/v2/clusters/{cluster}``: 409 when it exists."""
        if not _name_ok(cluster):
            raise PreconditionFailed("Cluster name is not valid")
        doc = check_cluster_data(data)
        try:
            await self.store.put(paths.cluster(cluster), _dump(doc), expected_version=CREATE_ONLY)
        except AlreadyExists:
            raise ResourceConflict("Cluster already exists") from None

    async def update_cluster(self, cluster: str, data: Any) -> None:
        """Pulsar's ``POST /admin/v2/clusters/{cluster}``: replaces the cluster data; 404 when
        the cluster does not exist."""
        doc = check_cluster_data(data)
        got = await self.store.exists(paths.cluster(cluster))
        if got is None:
            raise ResourceNotFound("Cluster does not exist")
        await self.store.put(paths.cluster(cluster), _dump(doc), expected_version=got.version)

    async def delete_cluster(self, cluster: str) -> None:
        """Pulsar's ``DELETE /admin/v2/clusters/{cluster}``: 404 when it does not exist; 412
        ("Cluster not empty") while it is in use. Stricter than Pulsar, which only looks for
        v1 namespaces: the cluster this broker serves, a cluster a tenant is allowed on and a
        cluster a namespace or topic replicates to are in use too (deleting them would leave
        the broker, the tenant or a replicator pointing at nothing)."""
        if await self.store.exists(paths.cluster(cluster)) is None:
            raise ResourceNotFound("Cluster does not exist")
        if cluster == self.cluster:
            raise PreconditionFailed(f"Cluster {cluster} is the one this broker serves")
        for tenant in await self.list_tenants():
            try:
                info = await self.get_tenant(tenant)
            except ResourceNotFound:  # deleted meanwhile
                continue
            if cluster in info.allowed_clusters:
                raise PreconditionFailed(f"Cluster not empty: tenant {tenant} is allowed on it")
        user = await self._namespace_using(cluster)
        if user is not None:
            raise PreconditionFailed(f"Cluster not empty: namespace {user} replicates to it")
        try:
            await self.store.delete(paths.cluster(cluster))
        except NotFound:
            raise ResourceNotFound("Cluster does not exist") from None

    async def _check_clusters_exist(self, clusters: list[str], *, forbidden: bool) -> None:
        """Each of ``clusters`` is registered: else Pulsar's 403 ``Invalid cluster id: X``
        (``forbidden``: namespace and topic settings) or 412 ``Clusters do not exist``
        (tenants)."""
        known = {self.cluster, *await self.list_clusters()}  # this broker's: registered at start
        for cluster in clusters:
            if cluster not in known:
                if forbidden:
                    raise ResourceForbidden(f"Invalid cluster id: {cluster}")
                raise PreconditionFailed("Clusters do not exist")

    async def _check_peer_conflicts(self, clusters: list[str]) -> None:
        """Pulsar's ``validatePeerClusterConflict``: two peers of one another (the same data
        through two clusters) cannot both be in one replication set."""
        chosen = set(clusters)
        for cluster in clusters:
            try:
                peers = (await self.cluster_data(cluster)).peer_cluster_names
            except ResourceNotFound:
                continue
            clash = sorted(chosen.intersection(peers))
            if clash:
                raise PreconditionFailed(
                    f"[{cluster}] peer cluster: {clash} is already part of replicated cluster"
                )

    # -- tenants ----------------------------------------------------------------------------
    async def list_tenants(self) -> list[str]:
        return await self.store.children(paths.POLICIES)

    async def get_tenant(self, tenant: str) -> TenantInfo:
        got = await self.store.get(paths.tenant_policies(tenant))
        if got is None:
            raise ResourceNotFound("Tenant does not exist")
        return TenantInfo.from_json(json.loads(got.value or b"{}"))

    async def _check_tenant_clusters(self, info: TenantInfo) -> None:
        """Pulsar's ``validateClusters``: no blank name, each one registered (412)."""
        if not info.allowed_clusters or any(not c.strip() for c in info.allowed_clusters):
            raise PreconditionFailed("Clusters can not be empty")
        await self._check_clusters_exist(info.allowed_clusters, forbidden=False)

    async def create_tenant(self, tenant: str, info: TenantInfo) -> None:
        if not _name_ok(tenant):
            raise PreconditionFailed(f"Tenant name is not valid: {tenant}")
        if not info.allowed_clusters:  # as the REST API and magctl default it
            info = TenantInfo(info.admin_roles, [self.cluster])
        await self._check_tenant_clusters(info)
        try:
            await self.store.put(
                paths.tenant_policies(tenant), _dump(info.to_json()), expected_version=CREATE_ONLY
            )
        except AlreadyExists:
            raise ResourceConflict("Tenant already exists") from None

    async def update_tenant(self, tenant: str, info: TenantInfo) -> None:
        """Pulsar's ``POST /admin/v2/tenants/{t}``; a cluster still used by one of the
        tenant's namespaces (replicated to, or allowed) cannot be taken away (412)."""
        await self._check_tenant_clusters(info)
        got = await self.store.get(paths.tenant_policies(tenant))
        if got is None:
            raise ResourceNotFound("Tenant does not exist")
        old = TenantInfo.from_json(json.loads(got.value or b"{}"))
        removed = set(old.allowed_clusters) - set(info.allowed_clusters)
        for ns in await self.store.children(paths.tenant_policies(tenant)) if removed else []:
            try:
                policies = await self.get_policies(tenant, ns)
            except ResourceNotFound:
                continue
            used = removed & (_clusters(policies, "replication_clusters") | _allowed(policies))
            if used:
                raise PreconditionFailed(
                    f"Active namespaces: {tenant}/{ns} uses cluster {sorted(used)[0]}"
                )
        await self.store.put(
            paths.tenant_policies(tenant), _dump(info.to_json()), expected_version=got.stat.version
        )

    async def add_tenant_cluster(self, tenant: str, cluster: str) -> bool:
        """Allow ``tenant`` on ``cluster`` too (what ``zookeeper-init`` does for ``public``
        when a second cluster joins a shared configuration store); True if it changed."""
        path = paths.tenant_policies(tenant)
        for _ in range(16):
            got = await self.store.get(path)
            if got is None:
                raise ResourceNotFound("Tenant does not exist")
            info = TenantInfo.from_json(json.loads(got.value or b"{}"))
            if cluster in info.allowed_clusters:
                return False
            info.allowed_clusters.append(cluster)
            try:
                await self.store.put(path, _dump(info.to_json()), expected_version=got.stat.version)
                return True
            except BadVersion:
                continue
        raise ResourceConflict("Concurrent modification of the tenant")

    async def delete_tenant(self, tenant: str) -> None:
        path = paths.tenant_policies(tenant)
        if await self.store.exists(path) is None:
            raise ResourceNotFound("Tenant does not exist")
        if await self.store.children(path):
            raise ResourceConflict("The tenant still has active namespaces")
        try:
            await self.store.delete(path)
        except NotFound:
            raise ResourceNotFound("Tenant does not exist") from None

    async def _check_cluster_for_tenant(self, tenant: str, cluster: str) -> None:
        """Pulsar's ``validateClusterForTenant``: 403 unless the tenant is allowed there."""
        if cluster not in (await self.get_tenant(tenant)).allowed_clusters:
            raise ResourceForbidden(
                f"Cluster [{cluster}] is not in the list of allowed clusters list for tenant "
                f"[{tenant}]"
            )

    async def _namespace_using(self, cluster: str) -> str | None:
        """A namespace (``t/ns``) or topic replicated to, or allowed on, ``cluster``."""
        for tenant in await self.list_tenants():
            for ns in await self.store.children(paths.tenant_policies(tenant)):
                try:
                    policies = await self.get_policies(tenant, ns)
                except ResourceNotFound:
                    continue
                if cluster in _clusters(policies, "replication_clusters") | _allowed(policies):
                    return f"{tenant}/{ns}"
        return await self._topic_using(cluster)

    async def _topic_using(self, cluster: str) -> str | None:
        for tenant in await self.store.children(TOPIC_POLICIES):
            for ns in await self.store.children(f"{TOPIC_POLICIES}/{tenant}"):
                base = f"{TOPIC_POLICIES}/{tenant}/{ns}"
                for domain in await self.store.children(base):
                    for local in await self.store.children(f"{base}/{domain}"):
                        got = await self.store.get(f"{base}/{domain}/{local}")
                        doc = json.loads(got.value or b"{}") if got is not None else {}
                        if cluster in _clusters(doc, "replication_clusters"):
                            return f"{domain}://{tenant}/{ns}/{unquote(local)}"
        return None

    # -- namespaces -------------------------------------------------------------------------
    async def list_namespaces(self, tenant: str) -> list[str]:
        if await self.store.exists(paths.tenant_policies(tenant)) is None:
            raise ResourceNotFound("Tenant does not exist")
        return [f"{tenant}/{ns}" for ns in await self.store.children(paths.tenant_policies(tenant))]

    async def namespace_exists(self, tenant: str, namespace: str) -> bool:
        return await self.store.exists(paths.namespace_policies(tenant, namespace)) is not None

    async def get_policies(self, tenant: str, namespace: str) -> dict[str, Any]:
        got = await self.store.get(paths.namespace_policies(tenant, namespace))
        if got is None:
            raise ResourceNotFound("Namespace does not exist")
        return dict(json.loads(got.value or b"{}"))

    async def create_namespace(
        self,
        tenant: str,
        namespace: str,
        policies: dict[str, Any] | None = None,
        *,
        default_bundles: int = 4,
    ) -> None:
        if not _name_ok(namespace):
            raise PreconditionFailed(f"Namespace name is not valid: {tenant}/{namespace}")
        if await self.store.exists(paths.tenant_policies(tenant)) is None:
            raise ResourceNotFound("Tenant does not exist")
        data = dict(policies or {})
        bundles = data.get("bundles") or {}
        num_bundles = bundles.get("numBundles") if isinstance(bundles, dict) else None
        if isinstance(num_bundles, int) and not 0 < num_bundles <= self.max_bundles:
            raise InvalidResource(  # Pulsar's message, with this broker's bound
                "Invalid number of bundles. Number of bundles has to be in the range of"
                f" (0, {self.max_bundles}]."
            )
        self._check_policies(data)
        # Pulsar: a v2 namespace is created replicated to the local cluster unless told
        # otherwise, and only to clusters its tenant is allowed on (403)
        replication = list(dict.fromkeys(data.get("replication_clusters") or [self.cluster]))
        allowed = list(dict.fromkeys(data.get("allowed_clusters") or []))
        await self._check_clusters_exist([*replication, *allowed], forbidden=True)
        for cluster in dict.fromkeys([*replication, *allowed]):
            await self._check_cluster_for_tenant(tenant, cluster)
        if allowed and not set(replication) <= set(allowed):
            raise InvalidResource(
                f"Cluster [{sorted(set(replication) - set(allowed))[0]}] is not in the list of "
                f"allowed clusters list for namespace [{tenant}/{namespace}]"
            )
        data["replication_clusters"] = replication
        if allowed:
            data["allowed_clusters"] = allowed
        if not bundles.get("boundaries"):
            num = int(bundles.get("numBundles") or default_bundles)
            bounds = NamespaceBundles.default(num).boundaries
            data["bundles"] = {
                "boundaries": [f"0x{b:08x}" for b in bounds],
                "numBundles": len(bounds) - 1,
            }
        try:
            await self.store.put(
                paths.namespace_policies(tenant, namespace),
                _dump(data),
                expected_version=CREATE_ONLY,
            )
        except AlreadyExists:
            raise ResourceConflict("Namespace already exists") from None

    async def update_policies(
        self, tenant: str, namespace: str, changes: dict[str, Any]
    ) -> dict[str, Any]:
        """Merge ``changes`` into the namespace policies by compare-and-set, retrying races."""
        path = paths.namespace_policies(tenant, namespace)
        for _ in range(16):
            got = await self.store.get(path)
            if got is None:
                raise ResourceNotFound("Namespace does not exist")
            data = dict(json.loads(got.value or b"{}"))
            for key, value in changes.items():
                if value is None:
                    data.pop(key, None)
                else:
                    data[key] = value
            self._check_policies(data)
            try:
                await self.store.put(path, _dump(data), expected_version=got.stat.version)
                return data
            except BadVersion:
                continue
        raise ResourceConflict("Concurrent modification of the namespace policies")

    # -- topic-level policies -------------------------------------------------------------
    async def get_topic_policies(
        self, tenant: str, namespace: str, domain: str, local: str
    ) -> dict[str, Any]:
        """The topic's own policies ({} if none)."""
        got = await self.store.get(topic_policies_path(tenant, namespace, domain, local))
        if got is None:
            return {}
        return dict(json.loads(got.value or b"{}"))

    async def update_topic_policies(
        self, tenant: str, namespace: str, domain: str, local: str, changes: dict[str, Any]
    ) -> dict[str, Any]:
        """Merge ``changes`` into the topic policies by compare-and-set (None deletes a key)."""
        if not await self.namespace_exists(tenant, namespace):
            raise ResourceNotFound("Namespace does not exist")
        path = topic_policies_path(tenant, namespace, domain, local)
        for _ in range(16):
            got = await self.store.get(path)
            data = {} if got is None else dict(json.loads(got.value or b"{}"))
            for key, value in changes.items():
                if value is None:
                    data.pop(key, None)
                else:
                    data[key] = value
            self._check_policies(data)
            try:
                await self.store.put(
                    path,
                    _dump(data),
                    expected_version=CREATE_ONLY if got is None else got.stat.version,
                )
                return data
            except (BadVersion, AlreadyExists):
                continue
        raise ResourceConflict("Concurrent modification of the topic policies")

    # -- replication clusters (geo-replication) --------------------------------------------
    async def _check_replication_set(
        self, tenant: str, namespace: str, clusters: list[str], policies: dict[str, Any]
    ) -> None:
        """Pulsar's checks of a replication set, in its order: not empty (412), no
        ``global`` (412), each registered (403 ``Invalid cluster id``), no two peers (412),
        each allowed by the namespace's ``allowed_clusters`` when it has some (400) and by
        the tenant (403)."""
        if not clusters:
            raise PreconditionFailed("ClusterIds should not be null or empty")
        if "global" in clusters:
            raise PreconditionFailed("Cannot specify global in the list of replication clusters")
        await self._check_clusters_exist(clusters, forbidden=True)
        await self._check_peer_conflicts(clusters)
        allowed = _allowed(policies)
        for cluster in clusters:
            if allowed and cluster not in allowed:
                raise InvalidResource(
                    f"Cluster [{cluster}] is not in the list of allowed clusters list for "
                    f"namespace [{tenant}/{namespace}]"
                )
            await self._check_cluster_for_tenant(tenant, cluster)

    async def get_replication_clusters(self, tenant: str, namespace: str) -> list[str]:
        """The namespace's replication clusters (a namespace made before they were recorded
        is replicated to the local cluster only, as Pulsar creates every v2 namespace)."""
        policies = await self.get_policies(tenant, namespace)
        return sorted(_clusters(policies, "replication_clusters")) or [self.cluster]

    async def set_replication_clusters(self, tenant: str, namespace: str, body: Any) -> list[str]:
        """Pulsar's ``POST /admin/v2/namespaces/{t}/{ns}/replication`` (a JSON list)."""
        clusters = _cluster_list(body)
        policies = await self.get_policies(tenant, namespace)
        await self._check_replication_set(tenant, namespace, clusters, policies)
        await self.update_policies(tenant, namespace, {"replication_clusters": sorted(clusters)})
        return sorted(clusters)

    async def get_namespace_allowed_clusters(self, tenant: str, namespace: str) -> list[str]:
        """PIP-321's ``allowed_clusters`` of the namespace (empty: no restriction beyond the
        tenant's)."""
        return sorted(_allowed(await self.get_policies(tenant, namespace)))

    async def set_namespace_allowed_clusters(
        self, tenant: str, namespace: str, body: Any
    ) -> list[str]:
        """PIP-321's ``POST .../allowedClusters``: each cluster allowed by the tenant (403)
        and registered (403), every replication cluster among them (400), no two peers."""
        clusters = _cluster_list(body)
        for cluster in clusters:
            await self._check_cluster_for_tenant(tenant, cluster)
        policies = await self.get_policies(tenant, namespace)
        replication = _clusters(policies, "replication_clusters")
        if clusters and not replication <= set(clusters):
            raise InvalidResource(
                f"Allowed clusters do not contain the replication cluster {sorted(replication)}."
                " Please remove the replication cluster if the cluster is not allowed for this"
                " namespace"
            )
        await self._check_clusters_exist(clusters, forbidden=True)
        await self._check_peer_conflicts(clusters)
        await self.update_policies(
            tenant, namespace, {"allowed_clusters": sorted(clusters) or None}
        )
        return sorted(clusters)

    async def get_topic_replication_clusters(
        self, tenant: str, namespace: str, domain: str, local: str, *, applied: bool
    ) -> list[str] | None:
        """The topic's own replication clusters; with ``applied``, the namespace's when the
        topic has none (Pulsar's ``?applied=true``); None when neither applies."""
        own = _clusters(
            await self.get_topic_policies(tenant, namespace, domain, local), "replication_clusters"
        )
        if own:
            return sorted(own)
        if applied:
            return await self.get_replication_clusters(tenant, namespace)
        return None

    async def set_topic_replication_clusters(
        self, tenant: str, namespace: str, domain: str, local: str, body: Any
    ) -> list[str]:
        """Pulsar's ``POST /admin/v2/persistent/{t}/{ns}/{topic}/replication``: the same
        checks as the namespace's, then a topic-level override."""
        if domain != "persistent":
            raise PreconditionFailed("Replication is only supported on persistent topics")
        clusters = _cluster_list(body)
        policies = await self.get_policies(tenant, namespace)
        await self._check_replication_set(tenant, namespace, clusters, policies)
        await self.update_topic_policies(
            tenant, namespace, domain, local, {"replication_clusters": sorted(clusters)}
        )
        return sorted(clusters)

    async def remove_topic_replication_clusters(
        self, tenant: str, namespace: str, domain: str, local: str
    ) -> None:
        await self.update_topic_policies(
            tenant, namespace, domain, local, {"replication_clusters": None}
        )

    async def bundles(self, tenant: str, namespace: str) -> NamespaceBundles:
        return _bundles_of(await self.get_policies(tenant, namespace))

    async def split_bundle(
        self, tenant: str, namespace: str, bundle: BundleRange, points: list[int]
    ) -> NamespaceBundles:
        """Add ``points`` (strictly inside ``bundle``) to the namespace's boundaries by
        compare-and-set on the policies, re-reading on a race; ``ResourceConflict`` when
        ``bundle`` is no longer one of the namespace's bundles (split meanwhile)."""
        path = paths.namespace_policies(tenant, namespace)
        for _ in range(16):
            got = await self.store.get(path)
            if got is None:
                raise ResourceNotFound("Namespace does not exist")
            data = dict(json.loads(got.value or b"{}"))
            bounds = (data.get("bundles") or {}).get("boundaries")
            current = (
                NamespaceBundles(
                    tuple(int(b, 16) if isinstance(b, str) else int(b) for b in bounds)
                )
                if bounds
                else NamespaceBundles.default(1)
            )
            if bundle not in current.ranges:
                raise ResourceConflict(f"Bundle {bundle} is not a bundle of {tenant}/{namespace}")
            inside = sorted({p for p in points if bundle.lower < p < bundle.upper})
            if not inside:
                raise ResourceConflict(f"No split point inside bundle {bundle}")
            split = NamespaceBundles(tuple(sorted({*current.boundaries, *inside})))
            data["bundles"] = {
                "boundaries": [f"0x{b:08x}" for b in split.boundaries],
                "numBundles": len(split.boundaries) - 1,
            }
            try:
                await self.store.put(path, _dump(data), expected_version=got.stat.version)
                return split
            except BadVersion:
                continue
        raise ResourceConflict("Concurrent modification of the namespace policies")

    async def delete_namespace(self, tenant: str, namespace: str) -> None:
        path = paths.namespace_policies(tenant, namespace)
        if await self.store.exists(path) is None:
            raise ResourceNotFound("Namespace does not exist")
        for domain in ("persistent", "non-persistent"):
            if await self.store.children(paths.partitioned_topics_of(tenant, namespace, domain)):
                raise ResourceConflict("Cannot delete non empty namespace")
        await self.store.delete_recursive(path)

    # -- partitioned topics -----------------------------------------------------------------
    async def get_partitions(self, tenant: str, namespace: str, domain: str, local: str) -> int:
        """The partition count of a partitioned topic, or 0 if it is not partitioned."""
        got = await self.store.get(paths.partitioned_topic(tenant, namespace, domain, local))
        if got is None:
            return 0
        return int(json.loads(got.value or b"{}").get("partitions", 0))

    async def create_partitioned(
        self, tenant: str, namespace: str, domain: str, local: str, partitions: int
    ) -> None:
        self._check_partitions(partitions)
        if not await self.namespace_exists(tenant, namespace):
            raise ResourceNotFound("Namespace does not exist")
        try:
            await self.store.put(
                paths.partitioned_topic(tenant, namespace, domain, local),
                _dump({"partitions": partitions}),
                expected_version=CREATE_ONLY,
            )
        except AlreadyExists:
            raise ResourceConflict("This topic already exists") from None

    async def update_partitions(
        self, tenant: str, namespace: str, domain: str, local: str, partitions: int
    ) -> None:
        path = paths.partitioned_topic(tenant, namespace, domain, local)
        got = await self.store.get(path)
        if got is None:
            raise ResourceNotFound("Partitioned topic does not exist")
        current = int(json.loads(got.value).get("partitions", 0))
        self._check_partitions(partitions)
        if partitions <= current:
            raise PreconditionFailed(
                f"Expect partitions {partitions} to grow and be greater than current {current}"
            )
        await self.store.put(
            path, _dump({"partitions": partitions}), expected_version=got.stat.version
        )

    async def delete_partitioned(
        self, tenant: str, namespace: str, domain: str, local: str
    ) -> None:
        try:
            await self.store.delete(paths.partitioned_topic(tenant, namespace, domain, local))
        except NotFound:
            raise ResourceNotFound("Partitioned topic does not exist") from None

    async def list_partitioned(self, tenant: str, namespace: str, domain: str) -> list[str]:
        names = await self.store.children(paths.partitioned_topics_of(tenant, namespace, domain))
        return [f"{domain}://{tenant}/{namespace}/{n}" for n in names]


__all__ = [
    "DEFAULT_MAX_BUNDLES",
    "PARTITIONS_CEILING",
    "ClusterData",
    "InvalidResource",
    "PreconditionFailed",
    "ResourceConflict",
    "ResourceError",
    "ResourceForbidden",
    "ResourceNotFound",
    "Resources",
    "TenantInfo",
    "check_cluster_data",
    "topic_policies_path",
]
