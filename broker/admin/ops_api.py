"""The admin REST endpoints for topic, subscription, namespace and cluster operations.

Owns: the routes (Pulsar's paths and JSON shapes) for subscription create / skip /
skip_all / expireMessages / resetcursor / position (peek), examinemessage, lastMessageId,
internalStats, partitioned-stats, partition-aware stats / subscriptions / unload,
terminate (and terminate/partitions), truncate,
namespace and bundle unload and split, namespace permissions, namespace and topic
``properties`` (magctl's labels),
``/brokers/{cluster}``, ``/brokers/{cluster}/{broker}/ownedNamespaces``,
``/lookup/v2/topic/.../bundle``, ``/brokers/version``,
``/brokers/configuration[/runtime]``, ``/bookies/all``, ``/bookies/racks-info``,
``/broker-stats/topics``; and
``json_unknown_routes``, which answers a path or method nobody serves with Pulsar's JSON
error body instead of plain text. ``add_priority_routes`` must run before the generic
topic routes of ``http_api`` (it serves paths they would otherwise swallow, such as
``/admin/v2/namespaces/{t}/{ns}/unload``); ``add_routes`` after them. What the operations do
lives in ``topic_ops``. Must not know: how topics are served.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from typing import Any
from urllib.parse import unquote

from aiohttp import web

from magnetar import __version__
from magnetar.broker.admin.http_guard import read_json
from magnetar.broker.admin.topic_ops import PeekedMessage, TopicOperations, parse_position
from magnetar.broker.namespace.resources import PreconditionFailed, ResourceNotFound

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
DOMAINS = ("persistent", "non-persistent")


def _json(data: Any, status: int = 200) -> web.Response:
    return web.Response(
        status=status, body=json.dumps(data).encode(), content_type="application/json"
    )


def _no_content() -> web.Response:
    return web.Response(status=204)


@web.middleware
async def json_unknown_routes(request: web.Request, handler: Handler) -> web.StreamResponse:
    try:
        return await handler(request)
    except (web.HTTPNotFound, web.HTTPMethodNotAllowed) as exc:
        return _json(
            {"reason": f"Unknown route: {request.method} {request.path} ({exc.reason})"},
            status=exc.status,
        )


def _topic(request: web.Request) -> str:
    m = request.match_info
    if m["domain"] not in DOMAINS:
        raise ResourceNotFound(f"Unknown topic domain {m['domain']}")
    local = unquote(m["topic"])
    if not local or "/" in local:
        raise PreconditionFailed(f"Invalid topic name {local!r}")
    return f"{m['domain']}://{m['tenant']}/{m['namespace']}/{local}"


def _int_param(request: web.Request, name: str) -> int:
    raw = request.match_info.get(name) or request.query.get(name, "")
    try:
        return int(raw)
    except ValueError:
        raise PreconditionFailed(f"{name} must be an integer, got {raw!r}") from None


async def _body(request: web.Request) -> Any:
    """The JSON body (None when empty); 400 for a body that is not JSON (``http_guard``)."""
    return await read_json(request)


def _message(m: PeekedMessage) -> web.Response:
    return web.Response(body=m.payload, headers=m.headers, content_type="application/octet-stream")


class OperationRoutes:
    def __init__(self, ops: TopicOperations) -> None:
        self.ops = ops

    # -- registration ----------------------------------------------------------------------
    def add_priority_routes(self, r: web.UrlDispatcher) -> None:
        ns = "/admin/v2/namespaces/{tenant}/{namespace}"
        r.add_put(ns + "/unload", self.unload_namespace)
        r.add_get(ns + "/properties", self.get_namespace_properties)
        r.add_put(ns + "/properties", self.put_namespace_properties)
        r.add_delete(ns + "/properties", self.clear_namespace_properties)
        base = "/admin/v2/{domain}/{tenant}/{namespace}/{topic}"
        sub = base + "/subscription/{subscription}"
        r.add_put(sub, self.create_subscription)
        r.add_post(sub + "/skip_all", self.skip_all)
        r.add_post(sub + "/skip/{numMessages}", self.skip)
        r.add_post(sub + "/expireMessages/{expireTimeInSeconds}", self.expire)
        r.add_post(sub + "/resetcursor/{timestamp}", self.reset_cursor_time)
        r.add_post(sub + "/resetcursor", self.reset_cursor_position)
        r.add_get(sub + "/position/{messagePosition}", self.peek)
        r.add_get(base + "/examinemessage", self.examine)
        r.add_get(base + "/lastMessageId", self.last_message_id)
        r.add_get(base + "/properties", self.get_topic_properties)
        r.add_put(base + "/properties", self.put_topic_properties)
        r.add_delete(base + "/properties", self.remove_topic_property)
        r.add_get(base + "/internalStats", self.internal_stats)
        r.add_get(base + "/partitioned-stats", self.partitioned_stats)
        r.add_get(base + "/stats", self.stats)
        r.add_get(base + "/subscriptions", self.subscriptions)
        r.add_put(base + "/unload", self.unload_topic)
        r.add_post(base + "/terminate", self.terminate)
        r.add_post(base + "/terminate/partitions", self.terminate_partitions)
        r.add_delete(base + "/truncate", self.truncate)

    def add_routes(self, r: web.UrlDispatcher) -> None:
        r.add_get("/admin/v2/brokers/version", self.version)
        r.add_get("/admin/v2/brokers/configuration", self.dynamic_configuration)
        r.add_get("/admin/v2/brokers/configuration/runtime", self.runtime_configuration)
        r.add_get(
            "/lookup/v2/topic/{domain}/{tenant}/{namespace}/{topic}/bundle", self.topic_bundle
        )
        r.add_get("/admin/v2/bookies/all", self.bookies)
        r.add_get("/admin/v2/bookies/racks-info", self.racks_info)
        r.add_get("/admin/v2/broker-stats/topics", self.broker_stats_topics)

    # -- namespaces -------------------------------------------------------------------------
    async def unload_namespace(self, request: web.Request) -> web.Response:
        m = request.match_info
        await self.ops.unload_namespace(m["tenant"], m["namespace"])
        return _no_content()

    async def get_namespace_properties(self, request: web.Request) -> web.Response:
        m = request.match_info
        return _json(await self.ops.namespace_properties(m["tenant"], m["namespace"]))

    async def put_namespace_properties(self, request: web.Request) -> web.Response:
        m = request.match_info
        await self.ops.update_namespace_properties(
            m["tenant"], m["namespace"], await _body(request)
        )
        return _no_content()

    async def clear_namespace_properties(self, request: web.Request) -> web.Response:
        m = request.match_info
        await self.ops.update_namespace_properties(m["tenant"], m["namespace"], None, clear=True)
        return _no_content()

    # -- subscriptions ------------------------------------------------------------------------
    def _sub(self, request: web.Request) -> tuple[str, str]:
        return _topic(request), unquote(request.match_info["subscription"])

    async def create_subscription(self, request: web.Request) -> web.Response:
        topic, sub = self._sub(request)
        await self.ops.create_subscription(topic, sub, parse_position(await _body(request)))
        return _no_content()

    async def skip(self, request: web.Request) -> web.Response:
        topic, sub = self._sub(request)
        await self.ops.skip(topic, sub, _int_param(request, "numMessages"))
        return _no_content()

    async def skip_all(self, request: web.Request) -> web.Response:
        topic, sub = self._sub(request)
        await self.ops.clear_backlog(topic, sub)
        return _no_content()

    async def expire(self, request: web.Request) -> web.Response:
        topic, sub = self._sub(request)
        await self.ops.expire(topic, sub, _int_param(request, "expireTimeInSeconds"))
        return _no_content()

    async def reset_cursor_time(self, request: web.Request) -> web.Response:
        topic, sub = self._sub(request)
        await self.ops.reset_cursor(topic, sub, timestamp_ms=_int_param(request, "timestamp"))
        return _no_content()

    async def reset_cursor_position(self, request: web.Request) -> web.Response:
        topic, sub = self._sub(request)
        body = await _body(request)
        if body is None:
            raise PreconditionFailed("The body must be a MessageId")
        await self.ops.reset_cursor(topic, sub, position=parse_position(body))
        return _no_content()

    async def peek(self, request: web.Request) -> web.Response:
        topic, sub = self._sub(request)
        return _message(await self.ops.peek(topic, sub, _int_param(request, "messagePosition")))

    async def examine(self, request: web.Request) -> web.Response:
        initial = request.query.get("initialPosition", "latest")
        nth = int(request.query.get("messagePosition", "1") or 1)
        return _message(await self.ops.examine(_topic(request), initial, nth))

    # -- topics -------------------------------------------------------------------------------
    async def last_message_id(self, request: web.Request) -> web.Response:
        return _json(await self.ops.last_message_id(_topic(request)))

    async def get_topic_properties(self, request: web.Request) -> web.Response:
        return _json(await self.ops.topic_properties(_topic(request)))

    async def put_topic_properties(self, request: web.Request) -> web.Response:
        await self.ops.update_topic_properties(_topic(request), await _body(request))
        return _no_content()

    async def remove_topic_property(self, request: web.Request) -> web.Response:
        key = request.query.get("key")
        if not key:
            raise PreconditionFailed("Give the property to remove: ?key=...")
        await self.ops.update_topic_properties(_topic(request), None, remove=key)
        return _no_content()

    async def internal_stats(self, request: web.Request) -> web.Response:
        return _json(await self.ops.internal_stats(_topic(request)))

    async def partitioned_stats(self, request: web.Request) -> web.Response:
        per = request.query.get("perPartition", "true").lower() != "false"
        return _json(await self.ops.partitioned_stats(_topic(request), per_partition=per))

    async def stats(self, request: web.Request) -> web.Response:
        topic = _topic(request)
        if await self.ops.partitions(topic) > 0:
            return _json(await self.ops.partitioned_stats(topic, per_partition=False))
        return _json(await self.ops.topic_stats(topic))

    async def subscriptions(self, request: web.Request) -> web.Response:
        return _json(await self.ops.subscriptions(_topic(request)))

    async def unload_topic(self, request: web.Request) -> web.Response:
        await self.ops.unload(_topic(request))
        return _no_content()

    async def terminate(self, request: web.Request) -> web.Response:
        return _json(await self.ops.terminate(_topic(request)))

    async def terminate_partitions(self, request: web.Request) -> web.Response:
        return _json(await self.ops.terminate_partitions(_topic(request)))

    async def truncate(self, request: web.Request) -> web.Response:
        await self.ops.truncate(_topic(request))
        return _no_content()

    # -- cluster ------------------------------------------------------------------------------
    async def version(self, request: web.Request) -> web.Response:
        return web.Response(text=__version__)

    async def dynamic_configuration(self, request: web.Request) -> web.Response:
        return _json([])  # no setting can be changed at runtime

    async def runtime_configuration(self, request: web.Request) -> web.Response:
        return _json(self.ops.runtime_configuration())

    async def topic_bundle(self, request: web.Request) -> web.Response:
        return _json(await self.ops.topic_bundle(_topic(request)))

    async def bookies(self, request: web.Request) -> web.Response:
        return _json({"bookies": await self.ops.bookies()})

    async def racks_info(self, request: web.Request) -> web.Response:
        return _json({})  # no rack placement is configured: every bookie is in no rack

    async def broker_stats_topics(self, request: web.Request) -> web.Response:
        return _json(await self.ops.broker_stats_topics())


__all__ = ["OperationRoutes", "json_unknown_routes"]
