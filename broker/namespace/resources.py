"""Cluster, tenant, namespace and partitioned-topic metadata, stored as Pulsar stores it.

Owns: reading and writing ``/admin/clusters/<c>``, ``/admin/policies/<tenant>[/<ns>]``
(TenantInfo and namespace Policies JSON, with Pulsar's field names),
``/admin/topic-policies/<tenant>/<ns>/<domain>/<topic>`` (topic-level policies: the same
fields as the namespace Policies JSON, overriding them for one topic; Pulsar keeps these in
the ``__change_events`` system topic, Magnetar in the metadata store, watched the same way
as namespace policies) and
``/admin/partitioned-topics/<tenant>/<ns>/<domain>/<topic>`` (``{"partitions": N}``), each
change a compare-and-set. Raises ``ResourceError`` subclasses carrying the HTTP status Pulsar
answers with. Must not know: HTTP, topics being served, the wire protocol.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from magnetar.broker.errors import (
    InvalidResource,
    PreconditionFailed,
    ResourceConflict,
    ResourceError,
    ResourceNotFound,
)
from magnetar.broker.namespace.bundles import BundleRange, NamespaceBundles
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
    from urllib.parse import quote

    return f"{TOPIC_POLICIES}/{tenant}/{namespace}/{domain}/{quote(local, safe='')}"


_CLUSTER_URLS: dict[str, tuple[tuple[str, ...], str]] = {
    "serviceUrl": (("http",), "Illegal service url, example: http://pulsar.example.com:8080"),
    "serviceUrlTls": (
        ("https",),
        "Illegal service tls url, example: https://pulsar.example.com:8443",
    ),
    "brokerServiceUrl": (
        ("pulsar",),
        "Illegal broker service url, example: pulsar://pulsar.example.com:6650",
    ),
    "brokerServiceUrlTls": (
        ("pulsar+ssl",),
        "Illegal broker service tls url, example: pulsar+ssl://pulsar.example.com:6651",
    ),
}
"""Pulsar's ``ClusterDataImpl.checkPropertiesIfPresent``: each URL field, when present, must
have its scheme (``pulsar://b1:6650,b2:6650`` lists several hosts, as Pulsar's)."""

CLUSTER_DATA_BYTES_MAX = 64 * 1024


def check_cluster_data(data: Any) -> dict[str, Any]:
    """A ``ClusterData`` body: a JSON object whose URL fields have Pulsar's schemes; other
    fields (authentication, proxy, peer clusters, TLS settings) are kept as given."""
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise InvalidResource("Cluster data must be a JSON object")
    if len(json.dumps(data)) > CLUSTER_DATA_BYTES_MAX:
        raise InvalidResource(f"Cluster data is larger than {CLUSTER_DATA_BYTES_MAX} bytes")
    for key, (schemes, message) in _CLUSTER_URLS.items():
        value = data.get(key)
        if value is None or value == "":
            continue
        if not isinstance(value, str):
            raise InvalidResource(message)
        scheme, sep, rest = value.strip().partition("://")
        if not sep or scheme not in schemes or not rest.split("/")[0]:
            raise InvalidResource(message)
    return data


def _name_ok(name: str) -> bool:
    return bool(name) and all(c.isalnum() or c in "-_=:." for c in name)


def _bundles_of(policies: dict[str, Any]) -> NamespaceBundles:
    bounds = (policies.get("bundles") or {}).get("boundaries")
    if not bounds:
        return NamespaceBundles.default(1)
    return NamespaceBundles(tuple(int(b, 16) if isinstance(b, str) else int(b) for b in bounds))


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
        while it is in use. Stricter than Pulsar, which only looks for v1 namespaces: the
        cluster this broker serves and a cluster a tenant is allowed on are in use too
        (deleting them would leave the broker or the tenant pointing at nothing)."""
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
        try:
            await self.store.delete(paths.cluster(cluster))
        except NotFound:
            raise ResourceNotFound("Cluster does not exist") from None

    # -- tenants ----------------------------------------------------------------------------
    async def list_tenants(self) -> list[str]:
        return await self.store.children(paths.POLICIES)

    async def get_tenant(self, tenant: str) -> TenantInfo:
        got = await self.store.get(paths.tenant_policies(tenant))
        if got is None:
            raise ResourceNotFound("Tenant does not exist")
        return TenantInfo.from_json(json.loads(got.value or b"{}"))

    async def create_tenant(self, tenant: str, info: TenantInfo) -> None:
        if not _name_ok(tenant):
            raise PreconditionFailed(f"Tenant name is not valid: {tenant}")
        try:
            await self.store.put(
                paths.tenant_policies(tenant), _dump(info.to_json()), expected_version=CREATE_ONLY
            )
        except AlreadyExists:
            raise ResourceConflict("Tenant already exists") from None

    async def update_tenant(self, tenant: str, info: TenantInfo) -> None:
        got = await self.store.exists(paths.tenant_policies(tenant))
        if got is None:
            raise ResourceNotFound("Tenant does not exist")
        await self.store.put(
            paths.tenant_policies(tenant), _dump(info.to_json()), expected_version=got.version
        )

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
    "InvalidResource",
    "PreconditionFailed",
    "ResourceConflict",
    "ResourceError",
    "ResourceNotFound",
    "Resources",
    "TenantInfo",
    "topic_policies_path",
]
