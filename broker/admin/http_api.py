"""The broker's HTTP side on 8080: Pulsar's admin REST paths, HTTP lookup, health, metrics.

Owns: routing and JSON shapes of ``/admin/v2/...`` (tenants, namespaces, policies,
partitioned and non-partitioned topics, subscriptions, stats), ``/lookup/v2/topic/...``,
``/admin/v2/brokers/health`` and ``/metrics``. Errors are answered as Pulsar does: a status
code and ``{"reason": "..."}``. Must not know: how topics are served; it talks to the admin
metadata through ``Resources`` and to the topic layer through two small protocols:
``TopicRegistry`` (``BrokerService``) and ``TopicAdmin`` (``TopicOperations``).
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from typing import TYPE_CHECKING, Any, Protocol
from urllib.parse import unquote

from aiohttp import web

from magnetar.broker.admin.http_guard import BadRequest, guard, quiet_bad_requests, read_json
from magnetar.broker.admin.ledgers_api import LedgerLayoutRoutes
from magnetar.broker.admin.metrics import BrokerMetrics
from magnetar.broker.admin.offload_api import OffloadRoutes
from magnetar.broker.admin.ops_api import OperationRoutes, json_unknown_routes
from magnetar.broker.admin.replication_api import ReplicationRoutes
from magnetar.broker.admin.schema_api import SchemaAdminRoutes
from magnetar.broker.admin.topic_ops import TopicOperations
from magnetar.broker.errors import OwnedElsewhere
from magnetar.broker.namespace.bundles import BundleRange
from magnetar.broker.namespace.resources import (
    InvalidResource,
    PreconditionFailed,
    ResourceConflict,
    ResourceError,
    ResourceNotFound,
    Resources,
    TenantInfo,
)
from magnetar.broker.policies.model import (
    NAMESPACE_POLICIES,
    PolicyError,
    remove_backlog_quota,
    set_backlog_quota,
)
from magnetar.settings_accepted import ADMIN_BODY_BYTES_MAX
from magnetar.zk.errors import MetadataError

if TYPE_CHECKING:
    from magnetar.broker.schema.topics import TopicSchemas
    from magnetar.broker.service import BrokerService

log = logging.getLogger(__name__)

DOMAINS = ("persistent", "non-persistent")
TOPIC_POLICIES_DISABLED = (
    "Topic level policies is disabled, to enable the topic level policy and retry."
)
METRICS_SLICE_S = 0.002
"""``/metrics`` holds the loop at most about this long at a time (plus one chunk)."""


async def slices_yielding(
    chunks: Iterable[str],
    slice_s: float = METRICS_SLICE_S,
    clock: Callable[[], float] = time.perf_counter,
) -> AsyncIterator[str]:
    """``chunks`` joined a slice at a time: a slice is what was produced in ``slice_s``;
    the loop gets a turn after each one, so a big text (``/metrics`` over thousands of
    topics) is built without stalling the clients served by the same loop."""
    parts: list[str] = []
    deadline = clock() + slice_s
    for chunk in chunks:
        parts.append(chunk)
        if clock() >= deadline:
            yield "".join(parts)
            parts = []
            await asyncio.sleep(0)
            deadline = clock() + slice_s
    if parts:
        yield "".join(parts)


async def join_yielding(
    chunks: Iterable[str],
    slice_s: float = METRICS_SLICE_S,
    clock: Callable[[], float] = time.perf_counter,
) -> str:
    """``chunks`` joined, letting the loop run between slices (``slices_yielding``)."""
    return "".join([s async for s in slices_yielding(chunks, slice_s, clock)])


class TopicRegistry(Protocol):
    """What the HTTP API needs of the topic registry (``BrokerService``): topic listing,
    creation, deletion and unloads."""

    async def list_topics(self, tenant: str, namespace: str, domain: str) -> list[str]:
        """Full names of the namespace's non-partitioned topics (partitions included)."""
        ...

    def loaded_non_persistent(
        self, tenant: str, namespace: str, bundle: str | None = None
    ) -> list[str]:
        """The namespace's non-persistent topics loaded on this broker (of ``bundle``)."""
        ...

    async def create_topic(self, topic: str) -> None: ...

    async def delete_topic(self, topic: str, *, force: bool) -> None: ...

    async def unload_topic(self, topic: str) -> None: ...

    async def delete_topic_schemas(self, topic: str) -> None:
        """Delete the schemas of ``topic`` (a whole partitioned topic's)."""
        ...


class Lookups(Protocol):
    """What the HTTP API needs of namespace ownership (``namespace.lookup.NamespaceService``):
    lookups and bundle unloads."""

    async def lookup_urls(
        self, topic: str, authoritative: bool = False, listener_name: str = ""
    ) -> tuple[str, ...]:
        """(binary service URL, HTTP URL[, TLS binary URL, HTTPS URL]) of the broker owning
        ``topic``, assigning it if needed."""
        ...

    async def unload_namespace_bundle(self, tenant: str, namespace: str, name: str) -> str | None:
        """Unload a bundle owned here (None), or the owner's HTTP URL (None if unowned)."""
        ...


class TopicAdmin(Protocol):
    """What the HTTP API needs of topic administration (``admin.topic_ops.TopicOperations``):
    subscriptions, stats and compaction."""

    async def list_subscriptions(self, topic: str) -> list[str]: ...

    async def delete_subscription(self, topic: str, subscription: str, *, force: bool) -> None: ...

    async def topic_stats(self, topic: str) -> dict[str, Any]: ...

    async def trigger_compaction(self, topic: str) -> None:
        """Start compacting ``topic``; ``ResourceConflict`` while one runs."""
        ...

    async def compaction_status(self, topic: str) -> dict[str, Any]:
        """Pulsar's LongRunningProcessStatus: ``{"status": ..., "lastError": ...}``."""
        ...


Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def _json(data: Any, status: int = 200) -> web.Response:
    return web.Response(
        status=status, body=json.dumps(data).encode(), content_type="application/json"
    )


def _no_content() -> web.Response:
    return web.Response(status=204)


def _error(status: int, reason: str) -> web.Response:
    return _json({"reason": reason}, status=status)


@web.middleware
async def _errors(request: web.Request, handler: Handler) -> web.StreamResponse:
    try:
        return await handler(request)
    except OwnedElsewhere as exc:
        if exc.topic == _requested_topic(request):  # Pulsar's ownership validation: 307
            location = exc.location(str(request.rel_url), secure=request.secure)
            raise web.HTTPTemporaryRedirect(location) from None
        # a partition of the partitioned topic asked for, owned elsewhere: the request as a
        # whole has no one owner to go to (partitioned stats ask the partitions' owners)
        return _error(503, f"{exc.reason} (topic {exc.topic}, owned by {exc.http_url})")
    except ResourceError as exc:
        return _error(exc.http_status, exc.reason)
    except web.HTTPException:
        raise
    except Exception as exc:  # a bug must not take the HTTP server down; it is logged
        if isinstance(exc, MetadataError) and exc.retriable:
            # the metadata store is unreachable for now (ZooKeeper connection lost): the
            # caller may retry; not a bug, so no traceback
            log.warning("admin request %s %s: %s", request.method, request.path, exc)
            return _error(503, f"Metadata store unavailable, retry: {exc}")
        log.exception("admin request %s %s failed", request.method, request.path)
        return _error(500, f"{type(exc).__name__}: {exc}")


async def _body_json(request: web.Request, default: Any = None) -> Any:
    try:
        return await read_json(request, default)
    except BadRequest as exc:
        raise InvalidResource(exc.reason) from None


def _requested_topic(request: web.Request) -> str | None:
    """The topic a request names in its path (``{domain}/{tenant}/{namespace}/{topic}``),
    None for a request that names none."""
    m = request.match_info
    try:
        return f"{m['domain']}://{m['tenant']}/{m['namespace']}/{unquote(m['topic'])}"
    except KeyError:
        return None


def _topic_name(request: web.Request) -> str:
    m = request.match_info
    domain = m["domain"]
    if domain not in DOMAINS:
        raise ResourceNotFound(f"Unknown topic domain {domain}")
    local = unquote(m["topic"])
    if not local or "/" in local:
        raise PreconditionFailed(f"Invalid topic name {local!r}")
    return f"{domain}://{m['tenant']}/{m['namespace']}/{local}"


class AdminApi:
    """Builds the aiohttp application."""

    def __init__(
        self,
        resources: Resources,
        topics: TopicRegistry,
        *,
        lookups: Lookups,
        admin: TopicAdmin,
        default_bundles: int = 4,
        metrics: Callable[[], Iterable[str]],
        extra_metrics: Callable[[], str] | None = None,
        metrics_slice_s: float = METRICS_SLICE_S,
        extra_routes: Callable[[web.UrlDispatcher], None] | None = None,
        operations: TopicOperations | None = None,
        topic_level_policies: bool = True,
        schemas: TopicSchemas | None = None,
    ) -> None:
        self.resources = resources
        self.topics = topics
        self.lookups = lookups
        self.admin = admin
        self.default_bundles = default_bundles
        self.metrics_source = metrics
        """The exposition text in pieces (``BrokerMetrics.chunks``)."""
        self.extra_metrics = extra_metrics
        self.metrics_slice_s = metrics_slice_s
        self.extra_routes = extra_routes
        self.operations = operations
        """Subscription, topic, namespace and cluster operations (``admin_ops_api``)."""
        self.topic_level_policies = topic_level_policies
        """Pulsar's ``topicLevelPoliciesEnabled``: off, the topic-policy routes answer 405."""
        self.schemas = schemas
        """The schema registry's REST routes (``/admin/v2/schemas/...``) when given."""

    @classmethod
    def of_service(
        cls,
        service: BrokerService,
        *,
        extra_routes: Callable[[web.UrlDispatcher], None] | None = None,
    ) -> AdminApi:
        """The admin API of a running broker service: its registry, its topic operations
        (subscriptions, stats, compaction and the rest) and its metrics."""
        operations = TopicOperations(service)
        return cls(
            service.resources,
            service,
            lookups=service.namespaces,
            admin=operations,
            operations=operations,
            default_bundles=service.config.default_number_of_namespace_bundles,
            metrics=BrokerMetrics(service).chunks,
            extra_routes=extra_routes,
            topic_level_policies=service.config.topic_level_policies_enabled,
            schemas=service.schemas,
        )

    def app(self) -> web.Application:
        quiet_bad_requests()
        app = web.Application(
            middlewares=[json_unknown_routes, _errors, guard],
            client_max_size=ADMIN_BODY_BYTES_MAX,
        )
        r = app.router
        if self.extra_routes is not None:  # first: more specific than the topic routes
            self.extra_routes(r)
        ReplicationRoutes(self.resources).add_routes(r)  # clusters, replication clusters
        if self.schemas is not None:  # /admin/v2/schemas/...: before /admin/v2/{domain}/...
            SchemaAdminRoutes(self.schemas).add_routes(r)
        ops = OperationRoutes(self.operations) if self.operations is not None else None
        if ops is not None:
            ops.add_priority_routes(r)  # before the generic topic routes that would match
            LedgerLayoutRoutes(ops.ops).add_routes(r)
        if self.operations is not None:  # tiered storage: namespace and topic offload routes
            OffloadRoutes(
                self.operations.service, topic_level_policies=self.topic_level_policies
            ).add_routes(r)
        r.add_get("/admin/v2/brokers/health", self.health)
        r.add_get("/metrics", self.metrics)
        r.add_get("/metrics/", self.metrics)
        # tenants
        r.add_get("/admin/v2/tenants", self.list_tenants)
        r.add_get("/admin/v2/tenants/{tenant}", self.get_tenant)
        r.add_put("/admin/v2/tenants/{tenant}", self.create_tenant)
        r.add_post("/admin/v2/tenants/{tenant}", self.update_tenant)
        r.add_delete("/admin/v2/tenants/{tenant}", self.delete_tenant)
        # namespaces
        r.add_get("/admin/v2/namespaces/{tenant}", self.list_namespaces)
        r.add_get("/admin/v2/namespaces/{tenant}/{namespace}", self.get_namespace)
        r.add_put("/admin/v2/namespaces/{tenant}/{namespace}", self.create_namespace)
        r.add_delete("/admin/v2/namespaces/{tenant}/{namespace}", self.delete_namespace)
        r.add_get("/admin/v2/namespaces/{tenant}/{namespace}/topics", self.namespace_topics)
        r.add_get("/admin/v2/namespaces/{tenant}/{namespace}/bundles", self.namespace_bundles)
        # namespace policies (Pulsar's paths and JSON shapes; see policies.py)
        ns_base = "/admin/v2/namespaces/{tenant}/{namespace}/"
        for name in NAMESPACE_POLICIES:
            r.add_get(ns_base + name, self._policy_handler(name, "get"))
            r.add_post(ns_base + name, self._policy_handler(name, "set"))
            r.add_put(ns_base + name, self._policy_handler(name, "set"))
            r.add_delete(ns_base + name, self._policy_handler(name, "clear"))
        r.add_put(ns_base + "{bundle}/unload", self.unload_namespace_bundle)
        r.add_get(ns_base + "backlogQuotaMap", self.get_backlog_quota_map)
        r.add_post(ns_base + "backlogQuota", self.set_backlog_quota)
        r.add_delete(ns_base + "backlogQuota", self.remove_backlog_quota)
        # topics
        base = "/admin/v2/{domain}/{tenant}/{namespace}"
        r.add_get(
            "/admin/v2/non-persistent/{tenant}/{namespace}/{bundle:0x[0-9a-fA-F]{8}_0x[0-9a-fA-F]{8}}",
            self.list_non_persistent_in_bundle,
        )
        r.add_get(base, self.list_topics)
        r.add_get(base + "/partitioned", self.list_partitioned)
        r.add_get(base + "/{topic}/partitions", self.get_partitions)
        r.add_put(base + "/{topic}/partitions", self.create_partitioned)
        r.add_post(base + "/{topic}/partitions", self.update_partitions)
        r.add_delete(base + "/{topic}/partitions", self.delete_partitioned)
        r.add_put(base + "/{topic}", self.create_topic)
        r.add_delete(base + "/{topic}", self.delete_topic)
        r.add_get(base + "/{topic}/subscriptions", self.list_subscriptions)
        r.add_delete(base + "/{topic}/subscription/{subscription}", self.delete_subscription)
        r.add_get(base + "/{topic}/stats", self.topic_stats)
        r.add_put(base + "/{topic}/unload", self.unload_topic)
        r.add_put(base + "/{topic}/compaction", self.trigger_compaction)
        r.add_get(base + "/{topic}/compaction", self.compaction_status)
        # topic-level policies: the namespace paths under the topic, overriding them
        for name, policy in NAMESPACE_POLICIES.items():
            if not policy.topic_level:
                continue
            for add, op in ((r.add_get, "get"), (r.add_post, "set"), (r.add_put, "set")):
                add(base + "/{topic}/" + name, self._topic_policy_route(name, op))
            r.add_delete(base + "/{topic}/" + name, self._topic_policy_route(name, "clear"))
        r.add_get(
            base + "/{topic}/backlogQuotaMap", self._topic_level(self.get_topic_backlog_quota_map)
        )
        r.add_post(base + "/{topic}/backlogQuota", self._topic_level(self.set_topic_backlog_quota))
        r.add_delete(
            base + "/{topic}/backlogQuota", self._topic_level(self.remove_topic_backlog_quota)
        )
        # lookup
        r.add_get("/lookup/v2/topic/{domain}/{tenant}/{namespace}/{topic}", self.lookup)
        if ops is not None:
            ops.add_routes(r)
        return app

    # -- broker -----------------------------------------------------------------------------
    async def health(self, request: web.Request) -> web.Response:
        # 503 while the metadata session is disconnected: the load-manager leader then
        # treats this broker as unresponsive and moves its bundles (docs/cluster.md)
        if not self.resources.store.connected:
            return web.Response(status=503, text="metadata session not connected")
        return web.Response(text="ok")

    async def metrics(self, request: web.Request) -> web.StreamResponse:
        """Streamed a slice at a time (``slices_yielding``): neither building the text nor
        joining it holds the loop. An error in the first slice is an ordinary 500; a later
        one aborts the response (the status was sent)."""
        slices = slices_yielding(self.metrics_source(), self.metrics_slice_s)
        first = await anext(slices, "")
        response = web.StreamResponse()
        response.content_type = "text/plain"
        response.charset = "utf-8"
        await response.prepare(request)
        try:
            await response.write(first.encode())
            async for piece in slices:
                await response.write(piece.encode())
            if self.extra_metrics is not None:
                await response.write(self.extra_metrics().encode())
            await response.write_eof()
        except ConnectionResetError:  # the scraper went away mid-stream: nothing to answer
            log.debug("metrics scrape from %s closed early", request.remote)
        return response

    # -- tenants ----------------------------------------------------------------------------
    async def list_tenants(self, request: web.Request) -> web.Response:
        return _json(await self.resources.list_tenants())

    async def get_tenant(self, request: web.Request) -> web.Response:
        info = await self.resources.get_tenant(request.match_info["tenant"])
        return _json(info.to_json())

    async def create_tenant(self, request: web.Request) -> web.Response:
        body = await _body_json(request, {}) or {}
        if not isinstance(body, dict):
            raise InvalidResource("TenantInfo must be a JSON object")
        info = TenantInfo.from_json(body)
        if not info.allowed_clusters:
            info.allowed_clusters = [self.resources.cluster]
        await self.resources.create_tenant(request.match_info["tenant"], info)
        return _no_content()

    async def update_tenant(self, request: web.Request) -> web.Response:
        body = await _body_json(request, {}) or {}
        if not isinstance(body, dict):
            raise InvalidResource("TenantInfo must be a JSON object")
        await self.resources.update_tenant(request.match_info["tenant"], TenantInfo.from_json(body))
        return _no_content()

    async def delete_tenant(self, request: web.Request) -> web.Response:
        await self.resources.delete_tenant(request.match_info["tenant"])
        return _no_content()

    # -- namespaces -------------------------------------------------------------------------
    async def list_namespaces(self, request: web.Request) -> web.Response:
        return _json(await self.resources.list_namespaces(request.match_info["tenant"]))

    async def get_namespace(self, request: web.Request) -> web.Response:
        m = request.match_info
        return _json(await self.resources.get_policies(m["tenant"], m["namespace"]))

    async def create_namespace(self, request: web.Request) -> web.Response:
        m = request.match_info
        body = await _body_json(request, {}) or {}
        if not isinstance(body, dict):
            raise InvalidResource("Policies must be a JSON object")
        await self.resources.create_namespace(
            m["tenant"], m["namespace"], body, default_bundles=self.default_bundles
        )
        return _no_content()

    async def delete_namespace(self, request: web.Request) -> web.Response:
        m = request.match_info
        for domain in DOMAINS:
            if await self.topics.list_topics(m["tenant"], m["namespace"], domain):
                raise ResourceConflict("Cannot delete non empty namespace")
        await self.resources.delete_namespace(m["tenant"], m["namespace"])
        return _no_content()

    async def namespace_topics(self, request: web.Request) -> web.Response:
        m = request.match_info
        if not await self.resources.namespace_exists(m["tenant"], m["namespace"]):
            raise ResourceNotFound("Namespace does not exist")
        mode = request.query.get("mode", "PERSISTENT").upper()
        domains = {"PERSISTENT": ["persistent"], "NON_PERSISTENT": ["non-persistent"]}.get(
            mode, list(DOMAINS)
        )
        topics: list[str] = []
        for domain in domains:
            topics += await self.topics.list_topics(m["tenant"], m["namespace"], domain)
        return _json(sorted(topics))

    async def unload_namespace_bundle(self, request: web.Request) -> web.Response:
        m = request.match_info
        owner = await self.lookups.unload_namespace_bundle(m["tenant"], m["namespace"], m["bundle"])
        if owner is not None:
            raise web.HTTPTemporaryRedirect(owner.rstrip("/") + request.path_qs)
        return _no_content()

    async def namespace_bundles(self, request: web.Request) -> web.Response:
        m = request.match_info
        policies = await self.resources.get_policies(m["tenant"], m["namespace"])
        return _json(policies.get("bundles") or {})

    def _policy_handler(self, name: str, op: str) -> Handler:
        return self._route_handler(
            name,
            op,
            lambda r: (r.match_info["tenant"], r.match_info["namespace"]),
            self.resources.get_policies,
            self.resources.update_policies,
        )

    def _route_handler(
        self,
        name: str,
        op: str,
        key_of: Callable[[web.Request], tuple[str, ...]],
        load: Callable[..., Awaitable[dict[str, Any]]],
        save: Callable[..., Awaitable[Any]],
    ) -> Handler:
        """GET / POST / DELETE of one policy (``NAMESPACE_POLICIES[name]``) on the policies
        that ``key_of(request)`` names: a namespace's or a topic's."""
        route = NAMESPACE_POLICIES[name]

        async def handle(request: web.Request) -> web.Response:
            key = key_of(request)
            policies = await load(*key)
            cluster = self.resources.cluster
            if op == "get":
                return _json(route.show(policies, cluster))
            if op == "set":
                body = await _body_json(request)
                try:
                    changes = route.store(body, policies, cluster)
                except PolicyError as exc:
                    raise InvalidResource(str(exc)) from None
            else:
                changes = route.clear(policies, cluster)
            await save(*key, changes)
            return _no_content()

        return handle

    async def get_backlog_quota_map(self, request: web.Request) -> web.Response:
        m = request.match_info
        policies = await self.resources.get_policies(m["tenant"], m["namespace"])
        return _json(policies.get("backlog_quota_map") or {})

    async def set_backlog_quota(self, request: web.Request) -> web.Response:
        m = request.match_info
        policies = await self.resources.get_policies(m["tenant"], m["namespace"])
        body = await _body_json(request)
        try:
            changes = set_backlog_quota(policies, body, request.query.get("backlogQuotaType"))
        except PolicyError as exc:
            raise InvalidResource(str(exc)) from None
        await self.resources.update_policies(m["tenant"], m["namespace"], changes)
        return _no_content()

    async def remove_backlog_quota(self, request: web.Request) -> web.Response:
        m = request.match_info
        policies = await self.resources.get_policies(m["tenant"], m["namespace"])
        try:
            changes = remove_backlog_quota(policies, request.query.get("backlogQuotaType"))
        except PolicyError as exc:
            raise InvalidResource(str(exc)) from None
        await self.resources.update_policies(m["tenant"], m["namespace"], changes)
        return _no_content()

    # -- topic-level policies -----------------------------------------------------------------
    @staticmethod
    def _topic_key(request: web.Request) -> tuple[str, str, str, str]:
        topic = _topic_name(request)
        m = request.match_info
        return m["tenant"], m["namespace"], m["domain"], topic.rsplit("/", 1)[1]

    def _topic_level(self, handler: Handler) -> Handler:
        """``handler``, or Pulsar's 405 when topic-level policies are disabled."""
        if self.topic_level_policies:
            return handler

        async def disabled(request: web.Request) -> web.Response:
            return _json({"reason": TOPIC_POLICIES_DISABLED}, status=405)

        return disabled

    def _topic_policy_route(self, name: str, op: str) -> Handler:
        return self._topic_level(self._topic_policy_handler(name, op))

    def _topic_policy_handler(self, name: str, op: str) -> Handler:
        return self._route_handler(
            name,
            op,
            self._topic_key,
            self.resources.get_topic_policies,
            self.resources.update_topic_policies,
        )

    async def get_topic_backlog_quota_map(self, request: web.Request) -> web.Response:
        policies = await self.resources.get_topic_policies(*self._topic_key(request))
        return _json(policies.get("backlog_quota_map") or {})

    async def set_topic_backlog_quota(self, request: web.Request) -> web.Response:
        key = self._topic_key(request)
        policies = await self.resources.get_topic_policies(*key)
        body = await _body_json(request)
        try:
            changes = set_backlog_quota(policies, body, request.query.get("backlogQuotaType"))
        except PolicyError as exc:
            raise InvalidResource(str(exc)) from None
        await self.resources.update_topic_policies(*key, changes)
        return _no_content()

    async def remove_topic_backlog_quota(self, request: web.Request) -> web.Response:
        key = self._topic_key(request)
        policies = await self.resources.get_topic_policies(*key)
        try:
            changes = remove_backlog_quota(policies, request.query.get("backlogQuotaType"))
        except PolicyError as exc:
            raise InvalidResource(str(exc)) from None
        await self.resources.update_topic_policies(*key, changes)
        return _no_content()

    # -- topics -----------------------------------------------------------------------------
    async def list_topics(self, request: web.Request) -> web.Response:
        m = request.match_info
        if m["domain"] not in DOMAINS:
            raise ResourceNotFound(f"Unknown topic domain {m['domain']}")
        if not await self.resources.namespace_exists(m["tenant"], m["namespace"]):
            raise ResourceNotFound("Namespace does not exist")
        return _json(
            sorted(await self.topics.list_topics(m["tenant"], m["namespace"], m["domain"]))
        )

    async def list_non_persistent_in_bundle(self, request: web.Request) -> web.Response:
        """Pulsar's ``GET /admin/v2/non-persistent/{tenant}/{ns}/{bundle}``: the
        non-persistent topics of that bundle loaded on this broker."""
        m = request.match_info
        if not await self.resources.namespace_exists(m["tenant"], m["namespace"]):
            raise ResourceNotFound("Namespace does not exist")
        try:
            BundleRange.parse(m["bundle"])
        except ValueError as exc:
            raise PreconditionFailed(str(exc)) from None
        return _json(self.topics.loaded_non_persistent(m["tenant"], m["namespace"], m["bundle"]))

    async def list_partitioned(self, request: web.Request) -> web.Response:
        m = request.match_info
        if not await self.resources.namespace_exists(m["tenant"], m["namespace"]):
            raise ResourceNotFound("Namespace does not exist")
        names = await self.resources.list_partitioned(m["tenant"], m["namespace"], m["domain"])
        return _json(sorted(names))

    async def get_partitions(self, request: web.Request) -> web.Response:
        topic = _topic_name(request)
        m = request.match_info
        n = await self.resources.get_partitions(
            m["tenant"], m["namespace"], m["domain"], topic.rsplit("/", 1)[1]
        )
        return _json({"partitions": n, "properties": {}, "deleted": False})

    async def create_partitioned(self, request: web.Request) -> web.Response:
        topic = _topic_name(request)
        m = request.match_info
        n = await _body_json(request)
        if not isinstance(n, int) or isinstance(n, bool):
            raise InvalidResource("The body must be the number of partitions (an integer)")
        local = topic.rsplit("/", 1)[1]
        existing = await self.topics.list_topics(m["tenant"], m["namespace"], m["domain"])
        if topic in existing:
            raise ResourceConflict("This topic already exists")
        await self.resources.create_partitioned(m["tenant"], m["namespace"], m["domain"], local, n)
        return _no_content()

    async def update_partitions(self, request: web.Request) -> web.Response:
        topic = _topic_name(request)
        m = request.match_info
        n = await _body_json(request)
        if not isinstance(n, int) or isinstance(n, bool):
            raise InvalidResource("The body must be the number of partitions (an integer)")
        await self.resources.update_partitions(
            m["tenant"], m["namespace"], m["domain"], topic.rsplit("/", 1)[1], n
        )
        return _no_content()

    async def delete_partitioned(self, request: web.Request) -> web.Response:
        topic = _topic_name(request)
        m = request.match_info
        local = topic.rsplit("/", 1)[1]
        n = await self.resources.get_partitions(m["tenant"], m["namespace"], m["domain"], local)
        if n == 0:
            raise ResourceNotFound("Partitioned topic does not exist")
        force = request.query.get("force", "false") == "true"
        # the partitions that exist, listed once: work bounded by the topics, not by ``n``
        prefix = f"{topic}-partition-"
        existing = await self.topics.list_topics(m["tenant"], m["namespace"], m["domain"])
        for partition in existing:
            index = partition[len(prefix) :] if partition.startswith(prefix) else ""
            if index.isdigit() and int(index) < n:
                await self.topics.delete_topic(partition, force=force)
        await self.resources.delete_partitioned(m["tenant"], m["namespace"], m["domain"], local)
        await self.topics.delete_topic_schemas(topic)
        return _no_content()

    async def create_topic(self, request: web.Request) -> web.Response:
        topic = _topic_name(request)
        m = request.match_info
        if not await self.resources.namespace_exists(m["tenant"], m["namespace"]):
            raise ResourceNotFound("Namespace does not exist")
        local = topic.rsplit("/", 1)[1]
        if await self.resources.get_partitions(m["tenant"], m["namespace"], m["domain"], local):
            raise ResourceConflict("This topic already exists")
        if topic in await self.topics.list_topics(m["tenant"], m["namespace"], m["domain"]):
            raise ResourceConflict("This topic already exists")
        await self.topics.create_topic(topic)
        return _no_content()

    async def delete_topic(self, request: web.Request) -> web.Response:
        topic = _topic_name(request)
        await self.topics.delete_topic(topic, force=request.query.get("force", "false") == "true")
        return _no_content()

    async def list_subscriptions(self, request: web.Request) -> web.Response:
        topic = _topic_name(request)
        return _json(sorted(await self.admin.list_subscriptions(topic)))

    async def delete_subscription(self, request: web.Request) -> web.Response:
        topic = _topic_name(request)
        force = request.query.get("force", "false") == "true"
        await self.admin.delete_subscription(
            topic, unquote(request.match_info["subscription"]), force=force
        )
        return _no_content()

    async def topic_stats(self, request: web.Request) -> web.Response:
        return _json(await self.admin.topic_stats(_topic_name(request)))

    async def unload_topic(self, request: web.Request) -> web.Response:
        await self.topics.unload_topic(_topic_name(request))
        return _no_content()

    async def trigger_compaction(self, request: web.Request) -> web.Response:
        await self.admin.trigger_compaction(_topic_name(request))
        return _no_content()

    async def compaction_status(self, request: web.Request) -> web.Response:
        return _json(await self.admin.compaction_status(_topic_name(request)))

    async def lookup(self, request: web.Request) -> web.Response:
        topic = _topic_name(request)
        # ?authoritative=true (Pulsar's): this broker takes an unowned bundle itself
        authoritative = request.query.get("authoritative", "false").lower() == "true"
        # Pulsar's advertised listener: ?listenerName= or the X-Pulsar-ListenerName header
        listener = (
            request.query.get("listenerName") or request.headers.get("X-Pulsar-ListenerName") or ""
        )
        urls = await self.lookups.lookup_urls(topic, authoritative, listener.strip())
        broker_url, http_url = urls[0], urls[1]
        broker_tls, http_tls = (urls[2], urls[3]) if len(urls) >= 4 else ("", "")
        return _json(
            {
                "brokerUrl": broker_url,
                "brokerUrlTls": broker_tls,
                "brokerUrlSsl": broker_tls,
                "httpUrl": http_url,
                "httpUrlTls": http_tls,
                "nativeUrl": broker_url,
            }
        )


__all__ = [
    "METRICS_SLICE_S",
    "AdminApi",
    "TopicAdmin",
    "TopicRegistry",
    "join_yielding",
    "slices_yielding",
]
