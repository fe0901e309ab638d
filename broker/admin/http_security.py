"""The HTTP side of security: authenticating admin/lookup requests, authorizing them, and
Pulsar's permission endpoints.

Owns: an aiohttp middleware (``Authorization: Bearer <token>`` or the client certificate ->
role; 401 ``Authentication required`` when that fails; 403 with Pulsar's message when the role
may not do it, or 404 when the tenant does not exist, decided by
``AuthorizationService.http_denial``) and the routes::

    GET    /admin/v2/namespaces/{t}/{ns}/permissions                 role -> actions
    POST   /admin/v2/namespaces/{t}/{ns}/permissions/{role}          body ["produce", ...]
    DELETE /admin/v2/namespaces/{t}/{ns}/permissions/{role}
    GET    /admin/v2/namespaces/{t}/{ns}/permissions/subscription    subscription -> roles
    POST   /admin/v2/namespaces/{t}/{ns}/permissions/subscription/{sub}   body ["role", ...]
    DELETE /admin/v2/namespaces/{t}/{ns}/permissions/{sub}/{role}
    GET    /admin/v2/{domain}/{t}/{ns}/{topic}/permissions
    POST   /admin/v2/{domain}/{t}/{ns}/{topic}/permissions/{role}
    DELETE /admin/v2/{domain}/{t}/{ns}/{topic}/permissions/{role}

``/metrics`` stays open (Pulsar's ``authenticateMetricsEndpoint=false``). With authentication
off the middleware passes everything through. Must not know: topics, the binary protocol.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from typing import Any
from urllib.parse import unquote

from aiohttp import web

from magnetar.broker.namespace.resources import InvalidResource
from magnetar.broker.naming import InvalidTopicName, TopicName
from magnetar.broker.security.authentication import AuthenticationError, AuthenticationService
from magnetar.broker.security.authorization import AuthorizationService

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
OPEN_PATHS = frozenset({"/metrics", "/metrics/"})


def _reason(status: int, reason: str) -> web.Response:
    return web.Response(
        status=status,
        body=json.dumps({"reason": reason}).encode(),
        content_type="application/json",
    )


def security_middleware(authn: AuthenticationService, authz: AuthorizationService) -> Any:
    @web.middleware
    async def middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
        if not authn.enabled and not authz.enabled:
            return await handler(request)
        if request.path in OPEN_PATHS:
            return await handler(request)
        role: str | None = None
        if authn.enabled:
            peer = request.transport.get_extra_info("peercert") if request.transport else None
            try:
                role = authn.authenticate_http(request.headers.get("Authorization"), peer).role
            except AuthenticationError:
                return _reason(401, "Authentication required")
        denial = await authz.http_denial(request.method, request.path, role)
        if denial is not None:
            return _reason(denial.status, denial.reason)
        return await handler(request)

    return middleware


async def _json_body(request: web.Request) -> Any:
    raw = await request.read()
    try:
        return json.loads(raw) if raw.strip() else None
    except json.JSONDecodeError as exc:
        raise InvalidResource(f"Invalid JSON body: {exc}") from None


def _topic(request: web.Request) -> TopicName:
    m = request.match_info
    try:
        return TopicName.parse(
            f"{m['domain']}://{m['tenant']}/{m['namespace']}/{unquote(m['topic'])}"
        )
    except InvalidTopicName as exc:
        raise InvalidResource(str(exc)) from None


def add_permission_routes(app: web.Application, authz: AuthorizationService) -> None:
    """Pulsar's namespace, subscription and topic permission endpoints."""
    ns = "/admin/v2/namespaces/{tenant}/{namespace}/permissions"

    async def ns_get(request: web.Request) -> web.Response:
        m = request.match_info
        return web.json_response(await authz.namespace_permissions(m["tenant"], m["namespace"]))

    async def ns_grant(request: web.Request) -> web.Response:
        m = request.match_info
        actions = await _json_body(request)
        await authz.grant_namespace(m["tenant"], m["namespace"], m["role"], actions)
        return web.Response(status=204)

    async def ns_revoke(request: web.Request) -> web.Response:
        m = request.match_info
        await authz.revoke_namespace(m["tenant"], m["namespace"], m["role"])
        return web.Response(status=204)

    async def sub_get(request: web.Request) -> web.Response:
        m = request.match_info
        return web.json_response(await authz.subscription_permissions(m["tenant"], m["namespace"]))

    async def sub_grant(request: web.Request) -> web.Response:
        m = request.match_info
        roles = await _json_body(request)
        await authz.grant_subscription(m["tenant"], m["namespace"], m["subscription"], roles)
        return web.Response(status=204)

    async def sub_revoke(request: web.Request) -> web.Response:
        m = request.match_info
        await authz.revoke_subscription(m["tenant"], m["namespace"], m["subscription"], m["role"])
        return web.Response(status=204)

    async def topic_get(request: web.Request) -> web.Response:
        return web.json_response(await authz.topic_permissions(_topic(request)))

    async def topic_grant(request: web.Request) -> web.Response:
        actions = await _json_body(request)
        await authz.grant_topic(_topic(request), request.match_info["role"], actions)
        return web.Response(status=204)

    async def topic_revoke(request: web.Request) -> web.Response:
        await authz.revoke_topic(_topic(request), request.match_info["role"])
        return web.Response(status=204)

    r = app.router
    r.add_get(ns, ns_get)
    r.add_get(ns + "/subscription", sub_get)
    r.add_post(ns + "/subscription/{subscription}", sub_grant)
    r.add_delete(ns + "/{subscription}/{role}", sub_revoke)
    r.add_post(ns + "/{role}", ns_grant)
    r.add_delete(ns + "/{role}", ns_revoke)
    topic = "/admin/v2/{domain:persistent|non-persistent}/{tenant}/{namespace}/{topic}/permissions"
    r.add_get(topic, topic_get)
    r.add_post(topic + "/{role}", topic_grant)
    r.add_delete(topic + "/{role}", topic_revoke)


__all__ = ["OPEN_PATHS", "add_permission_routes", "security_middleware"]
