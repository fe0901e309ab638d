"""Admin REST input checks, made before a handler runs: every bad input gets Pulsar's 4xx and
a JSON reason, never a 500 with Python exception text, and no traceback in the log.

Owns:
- ``guard``, an aiohttp middleware: the names a route carries (tenant, namespace, topic,
  subscription) are checked as Pulsar checks them, answering 412 Precondition Failed with
  Pulsar's reason (``NamedEntity``: ``[-=:.\\w]+`` for tenants and namespaces; a topic name
  must parse; a ``{domain}`` segment that is no topic domain means no route matched, 404
  ``Unknown route: METHOD PATH`` as for any path we lack); a subscription name must be one that
  ``validation.check_subscription_name`` takes).
- ``read_json``: a request body as JSON, or 400 for bytes that are not UTF-8, not JSON,
  nested deeper than ``JSON_DEPTH_MAX`` or holding integers beyond Python's digit limit.
- ``quiet_bad_requests``: aiohttp logs a request it cannot even parse (an oversized request
  line or header) as an ERROR with a traceback; such a request is the client's mistake,
  answered 400 by aiohttp, and is logged here as one INFO line.
Must not know: resources, topics, the handlers' logic.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Awaitable, Callable
from typing import Any

from aiohttp import web
from aiohttp.http_exceptions import HttpProcessingError

from magnetar.broker.naming import InvalidTopicName, TopicName
from magnetar.broker.policies.documents import JSON_DEPTH_MAX, json_depth
from magnetar.broker.validation import InvalidSubscriptionName, check_subscription_name

NAME = re.compile(r"[-=:.\w]+", re.ASCII)
"""Pulsar's ``NamedEntity`` rule for tenant, namespace and cluster names."""
NAME_MAX = 1024
DOMAINS = ("persistent", "non-persistent")

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


class BadRequest(Exception):
    """An input refused before the handler runs: ``status`` and Pulsar's ``reason``."""

    def __init__(self, status: int, reason: str) -> None:
        super().__init__(reason)
        self.status = status
        self.reason = reason


def _reply(status: int, reason: str) -> web.Response:
    return web.Response(
        status=status,
        body=json.dumps({"reason": reason}).encode(),
        content_type="application/json",
    )


def _shown(name: str) -> str:
    return repr(name[:100] + ("..." if len(name) > 100 else ""))


def check_route_names(match: dict[str, str], route: str = "") -> None:
    """Raise ``BadRequest`` (412) for a name in a route Pulsar would refuse; 404 when the
    ``{domain}`` segment is no topic domain (``route``: "METHOD PATH", for the message)."""
    tenant = match.get("tenant")
    if tenant is not None and not (len(tenant) <= NAME_MAX and NAME.fullmatch(tenant)):
        raise BadRequest(412, f"Tenant name is not valid: {_shown(tenant)}")
    namespace = match.get("namespace")
    if namespace is not None and not (len(namespace) <= NAME_MAX and NAME.fullmatch(namespace)):
        raise BadRequest(412, f"Namespace name is not valid: {tenant}/{_shown(namespace)}")
    domain = match.get("domain")
    if domain is not None and domain not in DOMAINS:
        raise BadRequest(404, f"Unknown route: {route or _shown(domain)}")
    topic = match.get("topic")
    if topic is not None and domain is not None:
        from urllib.parse import unquote

        local = unquote(topic)
        try:
            if not local or "/" in local:
                raise InvalidTopicName(local)
            TopicName.parse(f"{domain}://{tenant}/{namespace}/{local}")
        except InvalidTopicName:
            raise BadRequest(412, f"Topic name is not valid: {_shown(local)}") from None
    subscription = match.get("subscription")
    if subscription is not None:
        from urllib.parse import unquote

        try:
            check_subscription_name(unquote(subscription))
        except InvalidSubscriptionName as exc:
            raise BadRequest(412, str(exc)) from None


@web.middleware
async def guard(request: web.Request, handler: Handler) -> web.StreamResponse:
    try:
        check_route_names(dict(request.match_info), f"{request.method} {request.path}")
        return await handler(request)
    except BadRequest as exc:
        return _reply(exc.status, exc.reason)


async def read_json(request: web.Request, default: Any = None) -> Any:
    """The request body as JSON (``default`` when empty); ``BadRequest`` (400) otherwise."""
    raw = await request.read()
    if not raw.strip():
        return default
    if bracket_depth(raw) > JSON_DEPTH_MAX:  # before parsing: never a RecursionError
        raise BadRequest(400, "Invalid JSON body: nested too deeply")
    try:
        doc = json.loads(raw.decode("utf-8"))
    except UnicodeDecodeError:
        raise BadRequest(400, "Invalid JSON body: not UTF-8") from None
    except ValueError as exc:  # JSONDecodeError, or an integer beyond the digit limit
        raise BadRequest(400, f"Invalid JSON body: {str(exc)[:200]}") from None
    if json_depth(doc) > JSON_DEPTH_MAX:
        raise BadRequest(400, "Invalid JSON body: nested too deeply")
    return doc


_JSON_STRINGS = re.compile(rb'"(?:[^"\\]|\\.)*"', re.DOTALL)
_NOT_BRACKETS = bytes(sorted(set(range(256)) - set(b"[]{}")))


def bracket_depth(raw: bytes) -> int:
    """The deepest bracket nesting of JSON text (brackets inside strings not counted), found
    without parsing: deeply nested input must be refused before ``json.loads`` recurses
    (a RecursionError inside CPython 3.11's C code can corrupt its recursion accounting)."""
    brackets = _JSON_STRINGS.sub(b"", raw).translate(None, delete=_NOT_BRACKETS)
    depth = deepest = 0
    for b in brackets:
        if b in b"[{":
            depth += 1
            deepest = max(deepest, depth)
        else:
            depth -= 1
    return deepest


class _BadRequestsQuiet(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        exc = record.exc_info[1] if record.exc_info else None
        if isinstance(exc, HttpProcessingError):
            record.levelno, record.levelname = logging.INFO, "INFO"
            record.msg = "bad HTTP request refused (400): %s"
            record.args = (str(exc.message)[:200],)
            record.exc_info = None
            record.exc_text = None
        return True


_QUIET = _BadRequestsQuiet()


def quiet_bad_requests() -> None:
    """Install the filter on aiohttp's server logger (idempotent)."""
    logger = logging.getLogger("aiohttp.server")
    if _QUIET not in logger.filters:
        logger.addFilter(_QUIET)


__all__ = [
    "NAME",
    "BadRequest",
    "bracket_depth",
    "check_route_names",
    "guard",
    "quiet_bad_requests",
    "read_json",
]
