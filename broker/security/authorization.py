"""Authorization: may this role do that? (Pulsar's ``PulsarAuthorizationProvider``.)

Owns: superusers (``superuser_roles``), tenant admins (the tenant's ``adminRoles``), the
permission grants kept in the namespace policies' ``auth_policies`` as Pulsar stores them::

    "auth_policies": {
        "namespace_auth": {"<role>": ["produce", "consume"]},
        "destination_auth": {"persistent://t/ns/topic": {"<role>": ["consume"]}},
        "subscription_auth_roles": {"<subscription>": ["<role>", ...]}
    }

and the decisions, in Pulsar's order (``PulsarAuthorizationProvider``): a superuser may do
everything; otherwise the tenant must exist (``TenantNotFound``, which HTTP answers 404 and
the binary protocol's lookups ``TopicNotFound``); a tenant admin may do everything in the
tenant; otherwise produce needs a grant on the namespace or the topic (or its partitioned
parent), consume the same (plus: a subscription with listed roles admits only those), lookup
either. HTTP admin requests are classified by ``operations.classify`` and decided the same
way (the decision table is in docs/security.md). With ``authorization_enabled`` off every
check allows.

Must not know: connections, HTTP, how roles were authenticated.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from magnetar.broker.namespace.resources import InvalidResource, ResourceNotFound, Resources
from magnetar.broker.naming import TopicName
from magnetar.broker.security.operations import HttpOperation, OpKind, classify

log = logging.getLogger(__name__)

ACTIONS = ("produce", "consume", "functions", "sources", "sinks", "packages")

# Pulsar's messages (ServerCnx / PulsarWebResource)
NOT_AUTHORIZED_PRODUCE = "Client is not authorized to Publish"
NOT_AUTHORIZED_SUBSCRIBE = "Client is not authorized to subscribe"
NOT_AUTHORIZED_LOOKUP = "Client is not authorized to Lookup"
NOT_AUTHORIZED_METADATA = "Client is not authorized to Get Partition Metadata"
NOT_AUTHORIZED_GET_TOPICS = "Client is not authorized to GetTopicsOfNamespace"
REQUIRES_SUPERUSER = "This operation requires super-user access"
NOT_TENANT_ADMIN = "Don't have permission to administrate resources on this tenant"
NOT_AUTHORIZED = "Unauthorized to validateTopicOperation"
TENANT_NOT_FOUND = "Tenant does not exist"


class TenantNotFound(ResourceNotFound):
    """The tenant of a checked operation does not exist (Pulsar's 404 from
    ``validateTenantAdminAccess``, which the binary protocol answers ``TopicNotFound``)."""


@dataclass(frozen=True, slots=True)
class HttpDenial:
    """An HTTP request refused: ``status`` (403, or 404 for a missing tenant) and ``reason``."""

    status: int
    reason: str


def _roles(text: str) -> frozenset[str]:
    return frozenset(r.strip() for r in text.split(",") if r.strip())


def validate_actions(actions: Any) -> list[str]:
    if not isinstance(actions, list) or not all(isinstance(a, str) for a in actions):
        raise InvalidResource('Expected a JSON list of actions, e.g. ["produce", "consume"]')
    bad = [a for a in actions if a not in ACTIONS]
    if bad:
        raise InvalidResource(f"Unknown auth actions {bad} (allowed: {', '.join(ACTIONS)})")
    return sorted(set(actions))


class AuthorizationService:
    def __init__(self, config: Any, resources: Resources) -> None:
        self.enabled = bool(config.authorization_enabled)
        self.superusers = _roles(config.superuser_roles)
        self.resources = resources
        self.denials = 0

    def __repr__(self) -> str:
        return f"<AuthorizationService enabled={self.enabled} superusers={sorted(self.superusers)}>"

    # ------------------------------------------------------------------ decisions
    def is_superuser(self, role: str | None) -> bool:
        return role is not None and role in self.superusers

    async def is_tenant_admin(self, tenant: str, role: str | None) -> bool:
        if role is None:
            return False
        if self.is_superuser(role):
            return True
        try:
            info = await self.resources.get_tenant(tenant)
        except ResourceNotFound:
            return False
        return role in info.admin_roles

    async def _auth_policies(self, tn: TopicName) -> dict[str, Any]:
        try:
            policies = await self.resources.get_policies(tn.tenant, tn.namespace)
        except ResourceNotFound:
            return {}
        auth = policies.get("auth_policies")
        return auth if isinstance(auth, dict) else {}

    async def _granted(self, tn: TopicName, role: str, action: str) -> bool:
        auth = await self._auth_policies(tn)
        ns_auth = auth.get("namespace_auth") or {}
        if action in (ns_auth.get(role) or ()):
            return True
        topic_auth = auth.get("destination_auth") or {}
        names = {tn.full}
        if tn.partition_index >= 0:
            names.add(tn.partitioned_base.full)
        return any(action in ((topic_auth.get(name) or {}).get(role) or ()) for name in names)

    async def _allowed(self, tn: TopicName, role: str | None, action: str) -> bool:
        """Superuser, tenant admin, or granted ``action``; ``TenantNotFound`` for a role that
        is no superuser when the tenant does not exist (Pulsar checks the tenant first)."""
        if not self.enabled:
            return True
        if self.is_superuser(role):
            return True
        if await self._tenant_admin_or_missing(tn.tenant, role):
            return True
        return role is not None and await self._granted(tn, role, action)

    async def can_produce(self, tn: TopicName, role: str | None) -> bool:
        ok = await self._allowed(tn, role, "produce")
        self._count(ok, "produce", tn, role)
        return ok

    async def can_consume(self, tn: TopicName, role: str | None, subscription: str = "") -> bool:
        if not self.enabled:
            return True
        ok = await self._allowed(tn, role, "consume")
        if (
            ok
            and subscription
            and role is not None
            and not await self.is_tenant_admin(tn.tenant, role)
        ):
            sub_roles = (await self._auth_policies(tn)).get("subscription_auth_roles") or {}
            allowed = sub_roles.get(subscription) or []
            if allowed and role not in allowed:
                ok = False
        self._count(ok, "consume", tn, role)
        return ok

    async def can_lookup(self, tn: TopicName, role: str | None) -> bool:
        """Produce or consume (``TenantNotFound`` as ``_allowed``)."""
        if not self.enabled:
            return True
        return await self._allowed(tn, role, "produce") or await self._allowed(tn, role, "consume")

    async def can_list_topics(self, tenant: str, namespace: str, role: str | None) -> bool:
        """GET_TOPICS_OF_NAMESPACE: a tenant admin, or a role granted produce or consume on
        the namespace (Pulsar's namespace operation GET_TOPICS)."""
        if not self.enabled:
            return True
        if role is None:
            return False
        if await self.is_tenant_admin(tenant, role):
            return True
        try:
            policies = await self.resources.get_policies(tenant, namespace)
        except ResourceNotFound:
            return False
        auth = policies.get("auth_policies") or {}
        actions = (auth.get("namespace_auth") or {}).get(role) or ()
        ok = "produce" in actions or "consume" in actions
        if not ok:
            self.denials += 1
            log.warning(
                "role %r is not authorized to list topics of %s/%s", role, tenant, namespace
            )
        return ok

    def _count(self, ok: bool, what: str, tn: TopicName, role: str | None) -> None:
        if not ok:
            self.denials += 1
            log.warning("role %r is not authorized to %s on %s", role, what, tn.full)

    async def http_denial(self, method: str, path: str, role: str | None) -> HttpDenial | None:
        """Why an admin/lookup HTTP request by ``role`` is refused (None: allowed), decided as
        Pulsar's admin resources and default provider decide (``operations.classify``): 403
        with Pulsar's message, or 404 ``Tenant does not exist`` when the request's tenant is
        missing and the role is no superuser (Pulsar's ``validateTenantAdminAccess``)."""
        if not self.enabled or self.is_superuser(role):
            return None
        op = classify(method, path)
        try:
            return await self._http_decision(op, role)
        except TenantNotFound:
            return HttpDenial(404, TENANT_NOT_FOUND)

    async def _http_decision(self, op: HttpOperation, role: str | None) -> HttpDenial | None:
        kind = op.kind
        if kind is OpKind.OPEN:
            return None
        if kind is OpKind.SUPERUSER:
            return HttpDenial(403, REQUIRES_SUPERUSER)
        if kind is OpKind.TENANT_ADMIN:
            if await self._tenant_admin_or_missing(op.tenant, role):
                return None
            return HttpDenial(403, NOT_TENANT_ADMIN)
        if kind is OpKind.NAMESPACE_READ:
            if await self.can_list_topics(op.tenant, op.namespace, role):
                return None
            return HttpDenial(403, NOT_AUTHORIZED_GET_TOPICS)
        try:
            tn = TopicName.parse(op.topic)
        except ValueError:
            return None  # the handler answers the bad name
        if kind is OpKind.LOOKUP:
            ok = await self.can_lookup(tn, role)
        else:
            ok = await self.can_consume(tn, role, op.subscription)
        if ok:
            return None
        what = "LOOKUP" if kind is OpKind.LOOKUP else "CONSUME"
        return HttpDenial(403, f"{NOT_AUTHORIZED} for operation [{what}] on topic [{tn.full}]")

    async def _tenant_admin_or_missing(self, tenant: str, role: str | None) -> bool:
        """Tenant admin; ``TenantNotFound`` when the tenant does not exist."""
        try:
            info = await self.resources.get_tenant(tenant)
        except ResourceNotFound:
            raise TenantNotFound(tenant) from None
        return role is not None and role in info.admin_roles

    # ------------------------------------------------------------------ grants
    async def namespace_permissions(self, tenant: str, namespace: str) -> dict[str, list[str]]:
        policies = await self.resources.get_policies(tenant, namespace)
        auth = policies.get("auth_policies") or {}
        return dict(auth.get("namespace_auth") or {})

    async def _update_auth(self, tenant: str, namespace: str, change: Any) -> None:
        policies = await self.resources.get_policies(tenant, namespace)
        auth = dict(policies.get("auth_policies") or {})
        change(auth)
        await self.resources.update_policies(tenant, namespace, {"auth_policies": auth})

    async def grant_namespace(
        self, tenant: str, namespace: str, role: str, actions: list[str]
    ) -> None:
        def change(auth: dict[str, Any]) -> None:
            ns_auth = dict(auth.get("namespace_auth") or {})
            ns_auth[role] = validate_actions(actions)
            auth["namespace_auth"] = ns_auth

        await self._update_auth(tenant, namespace, change)

    async def revoke_namespace(self, tenant: str, namespace: str, role: str) -> None:
        def change(auth: dict[str, Any]) -> None:
            ns_auth = dict(auth.get("namespace_auth") or {})
            ns_auth.pop(role, None)
            auth["namespace_auth"] = ns_auth

        await self._update_auth(tenant, namespace, change)

    async def topic_permissions(self, tn: TopicName) -> dict[str, list[str]]:
        auth = await self._auth_policies(tn)
        return dict((auth.get("destination_auth") or {}).get(tn.full) or {})

    async def grant_topic(self, tn: TopicName, role: str, actions: list[str]) -> None:
        def change(auth: dict[str, Any]) -> None:
            topic_auth = dict(auth.get("destination_auth") or {})
            grants = dict(topic_auth.get(tn.full) or {})
            grants[role] = validate_actions(actions)
            topic_auth[tn.full] = grants
            auth["destination_auth"] = topic_auth

        await self._update_auth(tn.tenant, tn.namespace, change)

    async def revoke_topic(self, tn: TopicName, role: str) -> None:
        def change(auth: dict[str, Any]) -> None:
            topic_auth = dict(auth.get("destination_auth") or {})
            grants = dict(topic_auth.get(tn.full) or {})
            grants.pop(role, None)
            if grants:
                topic_auth[tn.full] = grants
            else:
                topic_auth.pop(tn.full, None)
            auth["destination_auth"] = topic_auth

        await self._update_auth(tn.tenant, tn.namespace, change)

    async def subscription_permissions(self, tenant: str, namespace: str) -> dict[str, list[str]]:
        policies = await self.resources.get_policies(tenant, namespace)
        auth = policies.get("auth_policies") or {}
        return dict(auth.get("subscription_auth_roles") or {})

    async def grant_subscription(
        self, tenant: str, namespace: str, subscription: str, roles: list[str]
    ) -> None:
        if not isinstance(roles, list) or not all(isinstance(r, str) and r for r in roles):
            raise InvalidResource("Expected a JSON list of roles")

        def change(auth: dict[str, Any]) -> None:
            subs = dict(auth.get("subscription_auth_roles") or {})
            subs[subscription] = sorted(set(subs.get(subscription) or []) | set(roles))
            auth["subscription_auth_roles"] = subs

        await self._update_auth(tenant, namespace, change)

    async def revoke_subscription(
        self, tenant: str, namespace: str, subscription: str, role: str
    ) -> None:
        def change(auth: dict[str, Any]) -> None:
            subs = dict(auth.get("subscription_auth_roles") or {})
            left = [r for r in subs.get(subscription) or [] if r != role]
            if left:
                subs[subscription] = left
            else:
                subs.pop(subscription, None)
            auth["subscription_auth_roles"] = subs

        await self._update_auth(tenant, namespace, change)


__all__ = [
    "ACTIONS",
    "NOT_AUTHORIZED",
    "NOT_AUTHORIZED_GET_TOPICS",
    "NOT_AUTHORIZED_LOOKUP",
    "NOT_AUTHORIZED_METADATA",
    "NOT_AUTHORIZED_PRODUCE",
    "NOT_AUTHORIZED_SUBSCRIBE",
    "NOT_TENANT_ADMIN",
    "REQUIRES_SUPERUSER",
    "TENANT_NOT_FOUND",
    "AuthorizationService",
    "HttpDenial",
    "TenantNotFound",
    "validate_actions",
]
