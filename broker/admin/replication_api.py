"""Admin REST of geo-replication's metadata, with Pulsar's paths, JSON shapes and answers.

Owns the routes and their translation to ``Resources`` calls:
- clusters (Pulsar's ``ClusterData``): ``GET /admin/v2/clusters``, and ``GET`` / ``PUT``
  (create) / ``POST`` (update) / ``DELETE /admin/v2/clusters/{cluster}``; the
  ``authenticationPlugin`` a replicator would present is refused (412) unless it is one
  Magnetar's client speaks (token, basic, TLS);
- a namespace's replication clusters: ``GET`` / ``POST
  /admin/v2/namespaces/{tenant}/{namespace}/replication`` (a JSON list);
- PIP-321's namespace ``allowed_clusters``: ``GET`` / ``POST .../allowedClusters``;
- the topic-level override: ``GET`` (``?applied=true``: the namespace's when the topic has
  none) / ``POST`` / ``DELETE /admin/v2/persistent/{tenant}/{namespace}/{topic}/replication``.
Every check and its status (403 for a cluster the tenant may not use or that is unknown, 400
for one the namespace does not allow, 412 for an empty list or a cluster in use) is
``Resources``'s. Must not know: aiohttp's app set-up (``http_api`` registers these first),
how replicators run.
"""

from __future__ import annotations

import json
from typing import Any
from urllib.parse import unquote

from aiohttp import web

from magnetar.broker.admin.http_guard import BadRequest, read_json
from magnetar.broker.errors import InvalidResource, PreconditionFailed, ResourceNotFound
from magnetar.broker.namespace.resources import Resources
from magnetar.broker.security.broker_client import BASIC_PLUGINS, TLS_PLUGINS, TOKEN_PLUGINS

SUPPORTED_PLUGINS = TOKEN_PLUGINS | TLS_PLUGINS | BASIC_PLUGINS
GLOBAL_CLUSTER = "global"
"""Pulsar's pseudo-cluster of v1 global namespaces: never listed."""


def _json(data: Any, status: int = 200) -> web.Response:
    return web.Response(
        status=status, body=json.dumps(data).encode(), content_type="application/json"
    )


def _no_content() -> web.Response:
    return web.Response(status=204)


async def _body(request: web.Request) -> Any:
    try:
        return await read_json(request)
    except BadRequest as exc:
        raise InvalidResource(exc.reason) from None


def check_replicator_authentication(data: Any) -> None:
    """412 for an ``authenticationPlugin`` no replicator of Magnetar could use."""
    plugin = data.get("authenticationPlugin") if isinstance(data, dict) else None
    if isinstance(plugin, str) and plugin.strip() and plugin.strip() not in SUPPORTED_PLUGINS:
        raise PreconditionFailed(
            f"authenticationPlugin {plugin!r} is not supported: use token, basic or tls "
            "(or Pulsar's AuthenticationToken / AuthenticationBasic / AuthenticationTls)"
        )


def _topic_key(request: web.Request) -> tuple[str, str, str, str]:
    m = request.match_info
    if m["domain"] not in ("persistent", "non-persistent"):
        raise ResourceNotFound(f"Unknown topic domain {m['domain']}")
    local = unquote(m["topic"])
    if not local or "/" in local:
        raise PreconditionFailed(f"Invalid topic name {local!r}")
    return m["tenant"], m["namespace"], m["domain"], local


class ReplicationRoutes:
    """The routes above, over one cluster's ``Resources``."""

    def __init__(self, resources: Resources) -> None:
        self.resources = resources

    def add_routes(self, r: web.UrlDispatcher) -> None:
        r.add_get("/admin/v2/clusters", self.list_clusters)
        cluster = "/admin/v2/clusters/{cluster}"
        r.add_get(cluster, self.get_cluster)
        r.add_put(cluster, self.create_cluster)
        r.add_post(cluster, self.update_cluster)
        r.add_delete(cluster, self.delete_cluster)
        ns = "/admin/v2/namespaces/{tenant}/{namespace}"
        r.add_get(ns + "/replication", self.get_replication)
        r.add_post(ns + "/replication", self.set_replication)
        r.add_get(ns + "/allowedClusters", self.get_allowed_clusters)
        r.add_post(ns + "/allowedClusters", self.set_allowed_clusters)
        topic = "/admin/v2/{domain}/{tenant}/{namespace}/{topic}/replication"
        r.add_get(topic, self.get_topic_replication)
        r.add_post(topic, self.set_topic_replication)
        r.add_delete(topic, self.remove_topic_replication)

    # -- clusters ---------------------------------------------------------------------------
    async def list_clusters(self, request: web.Request) -> web.Response:
        names = await self.resources.list_clusters()
        return _json([c for c in names if c != GLOBAL_CLUSTER])

    async def get_cluster(self, request: web.Request) -> web.Response:
        return _json(await self.resources.get_cluster(request.match_info["cluster"]))

    async def create_cluster(self, request: web.Request) -> web.Response:
        body = await _body(request)
        check_replicator_authentication(body)
        await self.resources.create_cluster(request.match_info["cluster"], body)
        return _no_content()

    async def update_cluster(self, request: web.Request) -> web.Response:
        body = await _body(request)
        check_replicator_authentication(body)
        await self.resources.update_cluster(request.match_info["cluster"], body)
        return _no_content()

    async def delete_cluster(self, request: web.Request) -> web.Response:
        await self.resources.delete_cluster(request.match_info["cluster"])
        return _no_content()

    # -- namespaces -------------------------------------------------------------------------
    async def get_replication(self, request: web.Request) -> web.Response:
        m = request.match_info
        return _json(await self.resources.get_replication_clusters(m["tenant"], m["namespace"]))

    async def set_replication(self, request: web.Request) -> web.Response:
        m = request.match_info
        body = await _body(request)
        await self.resources.set_replication_clusters(m["tenant"], m["namespace"], body)
        return _no_content()

    async def get_allowed_clusters(self, request: web.Request) -> web.Response:
        m = request.match_info
        return _json(
            await self.resources.get_namespace_allowed_clusters(m["tenant"], m["namespace"])
        )

    async def set_allowed_clusters(self, request: web.Request) -> web.Response:
        m = request.match_info
        body = await _body(request)
        await self.resources.set_namespace_allowed_clusters(m["tenant"], m["namespace"], body)
        return _no_content()

    # -- topics -----------------------------------------------------------------------------
    async def get_topic_replication(self, request: web.Request) -> web.Response:
        applied = request.query.get("applied", "false").lower() == "true"
        clusters = await self.resources.get_topic_replication_clusters(
            *_topic_key(request), applied=applied
        )
        return _json(clusters)

    async def set_topic_replication(self, request: web.Request) -> web.Response:
        key = _topic_key(request)
        body = await _body(request)
        await self.resources.set_topic_replication_clusters(*key, body)
        return _no_content()

    async def remove_topic_replication(self, request: web.Request) -> web.Response:
        await self.resources.remove_topic_replication_clusters(*_topic_key(request))
        return _no_content()


__all__ = ["SUPPORTED_PLUGINS", "ReplicationRoutes", "check_replicator_authentication"]
