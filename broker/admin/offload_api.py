"""The admin REST endpoints of tiered storage, with Pulsar's paths and JSON names.

Owns the routes::

    # a namespace's offload policies (Pulsar's Namespaces resource)
    GET|PUT  /admin/v2/namespaces/{t}/{ns}/offloadThreshold            long (-1: not set)
    GET|PUT  /admin/v2/namespaces/{t}/{ns}/offloadThresholdInSeconds   long (-1: not set)
             (and DELETE: back to not set, which Pulsar has no route for)
    GET|PUT|DELETE /admin/v2/namespaces/{t}/{ns}/offloadDeletionLagMs  long | null
    GET|POST /admin/v2/namespaces/{t}/{ns}/offloadPolicies             OffloadPolicies | null
    DELETE   /admin/v2/namespaces/{t}/{ns}/removeOffloadPolicies
    # a topic's own (topic-level policies; 405 when they are disabled), ?applied=true: merged
    GET|POST|DELETE /admin/v2/{domain}/{t}/{ns}/{topic}/offloadPolicies
    # offloading a topic now (PersistentTopics' triggerOffload / offloadStatus)
    PUT  /admin/v2/persistent/{t}/{ns}/{topic}/offload    body: a MessageId (none: every
         sealed ledger); every ledger before its ledger is offloaded, in the background
    GET  /admin/v2/persistent/{t}/{ns}/{topic}/offload    OffloadProcessStatus

As Pulsar: setting the threshold or the deletion lag of a namespace also sets it in the
namespace's ``offloadPolicies`` when it has some; policies are checked before they are
stored (a driver Magnetar has, its bucket, sizes in range) and refused with the field's name.
Deliberately better than Pulsar: an offload that cannot start (no driver, a position the
topic does not have, one already running) is refused at once (400, 412, 409) instead of
answering 204 and failing in the status.
Must not know: how managed ledgers offload (``ManagedLedgerAdapter`` carries it out).
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote

from aiohttp import web

from magnetar.broker.admin.http_guard import BadRequest, read_json
from magnetar.broker.admin.topic_ops import parse_position
from magnetar.broker.ledger.offloading import (
    InvalidOffloadPosition,
    OffloadInProgress,
    OffloadNotConfigured,
)
from magnetar.broker.ledger.position import EARLIEST, LATEST
from magnetar.broker.namespace.resources import (
    InvalidResource,
    PreconditionFailed,
    ResourceConflict,
    ResourceError,
    ResourceNotFound,
)
from magnetar.broker.offload import InvalidOffloadPolicies, OffloadPolicies
from magnetar.broker.offload.policies import (
    NAMESPACE_DELETION_LAG_KEY,
    NAMESPACE_KEY,
    NAMESPACE_THRESHOLD_KEY,
    NAMESPACE_THRESHOLD_SECONDS_KEY,
    TOPIC_KEY,
)
from magnetar.broker.policies.offload import merged_offload
from magnetar.broker.storage.managed_adapter import ManagedLedgerAdapter
from magnetar.broker.topics.persistent import PersistentTopic

if TYPE_CHECKING:
    from magnetar.broker.service import BrokerService

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
DOMAINS = ("persistent", "non-persistent")
TOPIC_POLICIES_DISABLED = (
    "Topic level policies is disabled, to enable the topic level policy and retry."
)
_IN_POLICIES = {
    NAMESPACE_THRESHOLD_KEY: "managedLedgerOffloadThresholdInBytes",
    NAMESPACE_THRESHOLD_SECONDS_KEY: "managedLedgerOffloadThresholdInSeconds",
    NAMESPACE_DELETION_LAG_KEY: "managedLedgerOffloadDeletionLagInMillis",
}
"""A namespace's older offload field -> its name inside ``offloadPolicies``."""


def _json(data: Any, status: int = 200) -> web.Response:
    return web.Response(
        status=status, body=json.dumps(data).encode(), content_type="application/json"
    )


def _no_content() -> web.Response:
    return web.Response(status=204)


async def _body(request: web.Request) -> Any:
    try:
        return await read_json(request, None)
    except BadRequest as exc:
        raise InvalidResource(exc.reason) from None


def _long(body: Any, what: str) -> int:
    if isinstance(body, bool) or not isinstance(body, int):
        raise InvalidResource(f"{what} must be an integer")
    return body


def checked_policies(body: Any) -> OffloadPolicies:
    """An ``OffloadPolicies`` body that can work: Pulsar's names, a driver, what it needs."""
    if not isinstance(body, dict):
        raise InvalidResource("OffloadPolicies must be a JSON object")
    try:
        policies = OffloadPolicies.from_json(body)
        if policies.resolve() is None:
            raise InvalidOffloadPolicies("managedLedgerOffloadDriver must be set")
    except InvalidOffloadPolicies as exc:
        raise InvalidResource(f"Invalid offload policies: {exc}") from None
    return policies


class OffloadRoutes:
    """The tiered-storage routes of a broker's admin API (see the module docstring)."""

    def __init__(self, service: BrokerService, *, topic_level_policies: bool = True) -> None:
        self.service = service
        self.resources = service.resources
        self.topic_level_policies = topic_level_policies

    def add_routes(self, r: web.UrlDispatcher) -> None:
        ns = "/admin/v2/namespaces/{tenant}/{namespace}/"
        for name, key in (
            ("offloadThreshold", NAMESPACE_THRESHOLD_KEY),
            ("offloadThresholdInSeconds", NAMESPACE_THRESHOLD_SECONDS_KEY),
            ("offloadDeletionLagMs", NAMESPACE_DELETION_LAG_KEY),
        ):
            r.add_get(ns + name, self._get_older(key))
            r.add_put(ns + name, self._set_older(key, name))
            r.add_post(ns + name, self._set_older(key, name))
            r.add_delete(ns + name, self._clear_older(key))
        r.add_get(ns + "offloadPolicies", self.get_namespace_policies)
        r.add_post(ns + "offloadPolicies", self.set_namespace_policies)
        r.add_put(ns + "offloadPolicies", self.set_namespace_policies)
        r.add_delete(ns + "removeOffloadPolicies", self.remove_namespace_policies)
        r.add_delete(ns + "offloadPolicies", self.remove_namespace_policies)
        topic = "/admin/v2/{domain}/{tenant}/{namespace}/{topic}/"
        r.add_get(topic + "offloadPolicies", self._topic_level(self.get_topic_policies))
        r.add_post(topic + "offloadPolicies", self._topic_level(self.set_topic_policies))
        r.add_put(topic + "offloadPolicies", self._topic_level(self.set_topic_policies))
        r.add_delete(topic + "offloadPolicies", self._topic_level(self.remove_topic_policies))
        r.add_put(topic + "offload", self.trigger_offload)
        r.add_get(topic + "offload", self.offload_status)

    # -- namespace ----------------------------------------------------------------------------
    @staticmethod
    def _ns(request: web.Request) -> tuple[str, str]:
        return request.match_info["tenant"], request.match_info["namespace"]

    def _get_older(self, key: str) -> Handler:
        async def handle(request: web.Request) -> web.Response:
            policies = await self.resources.get_policies(*self._ns(request))
            default = None if key == NAMESPACE_DELETION_LAG_KEY else -1
            return _json(policies.get(key, default))

        return handle

    def _set_older(self, key: str, name: str) -> Handler:
        async def handle(request: web.Request) -> web.Response:
            value = _long(await _body(request), name)
            if key == NAMESPACE_DELETION_LAG_KEY and value < 0:
                raise InvalidResource(f"{name} must be 0 or more")
            ns = self._ns(request)
            policies = await self.resources.get_policies(*ns)
            await self.resources.update_policies(*ns, self._older_changes(policies, key, value))
            return _no_content()

        return handle

    def _clear_older(self, key: str) -> Handler:
        async def handle(request: web.Request) -> web.Response:
            ns = self._ns(request)
            policies = await self.resources.get_policies(*ns)
            await self.resources.update_policies(*ns, self._older_changes(policies, key, None))
            return _no_content()

        return handle

    @staticmethod
    def _older_changes(policies: dict[str, Any], key: str, value: int | None) -> dict[str, Any]:
        """The older field, and its twin inside ``offloadPolicies`` when the namespace has
        them (Pulsar keeps both in step)."""
        changes: dict[str, Any] = {key: value}
        current = policies.get(NAMESPACE_KEY)
        if isinstance(current, dict):
            updated = dict(current)
            if value is None:
                updated.pop(_IN_POLICIES[key], None)
            else:
                updated[_IN_POLICIES[key]] = value
            changes[NAMESPACE_KEY] = updated
        return changes

    async def get_namespace_policies(self, request: web.Request) -> web.Response:
        policies = await self.resources.get_policies(*self._ns(request))
        return _json(policies.get(NAMESPACE_KEY))

    async def set_namespace_policies(self, request: web.Request) -> web.Response:
        checked = checked_policies(await _body(request))
        ns = self._ns(request)
        current = await self.resources.get_policies(*ns)
        doc = checked.to_json()
        for key, name in _IN_POLICIES.items():  # as Pulsar: the older fields fill the gaps
            older = current.get(key)
            unset = -1 if key != NAMESPACE_DELETION_LAG_KEY else None
            if name not in doc and isinstance(older, int) and older != unset:
                doc[name] = older
        await self.resources.update_policies(*ns, {NAMESPACE_KEY: doc})
        return _no_content()

    async def remove_namespace_policies(self, request: web.Request) -> web.Response:
        await self.resources.update_policies(*self._ns(request), {NAMESPACE_KEY: None})
        return _no_content()

    # -- topic-level policies -------------------------------------------------------------------
    def _topic_level(self, handler: Handler) -> Handler:
        if self.topic_level_policies:
            return handler

        async def disabled(request: web.Request) -> web.Response:
            return _json({"reason": TOPIC_POLICIES_DISABLED}, status=405)

        return disabled

    @staticmethod
    def _topic_key(request: web.Request) -> tuple[str, str, str, str]:
        m = request.match_info
        if m["domain"] not in DOMAINS:
            raise ResourceNotFound(f"Unknown topic domain {m['domain']}")
        local = unquote(m["topic"])
        if not local or "/" in local:
            raise PreconditionFailed(f"Invalid topic name {local!r}")
        return m["tenant"], m["namespace"], m["domain"], local

    async def get_topic_policies(self, request: web.Request) -> web.Response:
        key = self._topic_key(request)
        own = await self.resources.get_topic_policies(*key)
        if request.query.get("applied", "false").lower() == "true":
            ns = await self.resources.get_policies(key[0], key[1])
            return _json(merged_offload(self.service.config, {**ns, **own}).to_json())
        return _json(own.get(TOPIC_KEY))

    async def set_topic_policies(self, request: web.Request) -> web.Response:
        checked = checked_policies(await _body(request))
        await self.resources.update_topic_policies(
            *self._topic_key(request), {TOPIC_KEY: checked.to_json()}
        )
        return _no_content()

    async def remove_topic_policies(self, request: web.Request) -> web.Response:
        await self.resources.update_topic_policies(*self._topic_key(request), {TOPIC_KEY: None})
        return _no_content()

    # -- offloading a topic ---------------------------------------------------------------------
    async def _ledger(self, request: web.Request) -> ManagedLedgerAdapter:
        tenant, namespace, domain, local = self._topic_key(request)
        if domain != "persistent":
            err = ResourceError("Offload is not supported on non-persistent topics")
            err.http_status = 405
            raise err
        if await self.resources.get_partitions(tenant, namespace, domain, local):
            raise PreconditionFailed(
                "Offload a partitioned topic partition by partition (<topic>-partition-<n>)"
            )
        topic = await self.service.existing_topic(f"{domain}://{tenant}/{namespace}/{local}")
        ledger = topic.ledger if isinstance(topic, PersistentTopic) else None
        if not isinstance(ledger, ManagedLedgerAdapter):
            raise PreconditionFailed("The topic's storage keeps no ledgers to offload")
        return ledger

    async def trigger_offload(self, request: web.Request) -> web.Response:
        ledger = await self._ledger(request)
        body = await _body(request)
        position = parse_position(body) if body is not None else LATEST
        if position == EARLIEST:
            raise InvalidResource("Offloading before the earliest message offloads nothing")
        try:
            if position == LATEST:  # every sealed ledger: up to the current ledger's start
                ledger.trigger_offload(None)
            else:
                ledger.trigger_offload(position)
        except OffloadInProgress as exc:
            raise ResourceConflict(f"Offload already running: {exc}") from None
        except OffloadNotConfigured as exc:
            raise PreconditionFailed(str(exc)) from None
        except InvalidOffloadPosition as exc:
            raise InvalidResource(str(exc)) from None
        return _no_content()

    async def offload_status(self, request: web.Request) -> web.Response:
        ledger = await self._ledger(request)
        return _json(ledger.offload_status().to_json())


__all__ = ["OffloadRoutes", "checked_policies"]
