"""A connection's security: authenticating CONNECT, the refresh timer, AUTH_RESPONSE, and the
authorization checks of LOOKUP / PARTITIONED_METADATA / PRODUCER / SUBSCRIBE (in Pulsar's
order: a topic of a tenant that does not exist is ``TopicNotFound`` to a lookup, whatever the
role's grants).

Owns: the glue between ``ServerConnection`` and the ``authentication`` / ``authorization``
services, so the connection itself only asks "may this proceed?" at four places. A failed
authentication answers ERROR(request_id=-1, AuthenticationError, "Unable to authenticate")
and closes the connection before anything else is served (Pulsar's ``ServerCnx``); a refresh
that fails closes the connection. With security off (the default) every check is a no-op.
Must not know: topics, dispatch, storage.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any, Protocol

from magnetar.broker.errors import ServerError
from magnetar.broker.naming import InvalidTopicName, TopicName
from magnetar.broker.security.authentication import (
    REFRESH_AUTH_DATA,
    AuthenticationError,
    AuthenticationService,
    ConnectionAuth,
    RefreshAction,
)
from magnetar.broker.security.authorization import (
    NOT_AUTHORIZED_GET_TOPICS,
    NOT_AUTHORIZED_LOOKUP,
    NOT_AUTHORIZED_METADATA,
    NOT_AUTHORIZED_PRODUCE,
    NOT_AUTHORIZED_SUBSCRIBE,
    AuthorizationService,
    TenantNotFound,
)
from magnetar.client.protocol.proto import pulsar_api_pb2 as pb

log = logging.getLogger(__name__)
T = pb.BaseCommand
U64 = (1 << 64) - 1


class SecuredConnection(Protocol):
    """What the security of a connection uses of it (``ServerConnection`` is one)."""

    @property
    def transport(self) -> asyncio.Transport | None: ...

    @property
    def peer(self) -> str: ...

    @property
    def closed(self) -> bool: ...

    @property
    def protocol_version(self) -> int: ...

    def write_command(self, cmd: pb.BaseCommand) -> None: ...

    def error_response(self, request_id: int, code: ServerError, message: str) -> None: ...

    def close(self) -> None: ...


class ConnectionSecurity:
    def __init__(
        self, cnx: SecuredConnection, authn: AuthenticationService, authz: AuthorizationService
    ) -> None:
        self.cnx = cnx
        self.authn = authn
        self.authz = authz
        self.auth: ConnectionAuth | None = None
        self._timer: asyncio.TimerHandle | None = None

    @property
    def role(self) -> str | None:
        return None if self.auth is None else self.auth.role

    def _peer_cert(self) -> dict[str, Any] | None:
        transport = self.cnx.transport
        if transport is None:
            return None
        cert = transport.get_extra_info("peercert")
        return cert if isinstance(cert, dict) and cert else None

    # ------------------------------------------------------------------ authentication
    def on_connect(self, c: pb.CommandConnect) -> bool:
        """Authenticate a CONNECT; False after refusing it (ERROR sent, connection closing)."""
        authn = self.authn
        if not authn.enabled:
            return True
        method = c.auth_method_name if c.HasField("auth_method_name") else "none"
        try:
            who = authn.authenticate(method, bytes(c.auth_data), self._peer_cert())
        except AuthenticationError as exc:
            self._refuse(exc)
            return False
        supports_refresh = c.HasField("feature_flags") and c.feature_flags.supports_auth_refresh
        self.auth = ConnectionAuth(authn, who, supports_refresh)
        log.info("%s authenticated as role %r (%s)", self.cnx.peer, who.role, who.method)
        self._arm()
        return True

    def _refuse(self, exc: AuthenticationError) -> None:
        log.warning("authentication failed for %s: %s", self.cnx.peer, exc.reason)
        self.cnx.error_response(U64, ServerError.AuthenticationError, exc.message)
        self.cnx.close()

    def _arm(self) -> None:
        interval = self.authn.refresh_check_s
        if interval > 0 and not self.cnx.closed:
            self._timer = asyncio.get_running_loop().call_later(interval, self._refresh_check)

    def _refresh_check(self) -> None:
        self._timer = None
        if self.auth is None or self.cnx.closed:
            return
        action = self.auth.on_refresh_check()
        if action is RefreshAction.CLOSE:
            log.info(
                "closing %s: credentials of %r expired and were not refreshed",
                self.cnx.peer,
                self.auth.role,
            )
            self.cnx.close()
            return
        if action is RefreshAction.CHALLENGE:
            self.cnx.write_command(
                T(
                    type=T.AUTH_CHALLENGE,
                    authChallenge=pb.CommandAuthChallenge(
                        server_version="Magnetar",
                        protocol_version=self.cnx.protocol_version,
                        challenge=pb.AuthData(
                            auth_method_name=self.auth.who.method, auth_data=REFRESH_AUTH_DATA
                        ),
                    ),
                )
            )
        self._arm()

    def on_auth_response(self, cmd: pb.BaseCommand) -> None:
        resp = cmd.authResponse
        if self.auth is None:
            log.info("closing %s: AUTH_RESPONSE without authentication", self.cnx.peer)
            self.cnx.close()
            return
        data = resp.response if resp.HasField("response") else pb.AuthData()
        try:
            self.auth.on_auth_response(
                data.auth_method_name, bytes(data.auth_data), self._peer_cert()
            )
        except AuthenticationError as exc:
            self._refuse(exc)
            return
        log.info("%s refreshed the credentials of %r", self.cnx.peer, self.auth.role)

    def close(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    # ------------------------------------------------------------------ authorization
    @staticmethod
    def _name(topic: str) -> TopicName | None:
        try:
            return TopicName.parse(topic)
        except InvalidTopicName:
            return None  # the normal path answers the bad name

    async def denied_lookup(self, topic: str, metadata: bool = False) -> str | None:
        """Pulsar's message when this role may not look ``topic`` up (None: allowed). A
        tenant that does not exist raises ``ServiceError(TopicNotFound)``, as Pulsar's
        ``ServerCnx`` answers the 404 of its authorization check."""
        authz = self.authz
        tn = self._name(topic) if authz.enabled else None
        try:
            if tn is None or await authz.can_lookup(tn, self.role):
                return None
        except TenantNotFound:
            from magnetar.broker.service import ServiceError  # the service imports protocol

            assert tn is not None
            raise ServiceError(ServerError.TopicNotFound, _does_not_exist(tn)) from None
        return NOT_AUTHORIZED_METADATA if metadata else NOT_AUTHORIZED_LOOKUP

    async def denied_list_topics(self, tenant: str, namespace: str) -> str | None:
        authz = self.authz
        if not authz.enabled or await authz.can_list_topics(tenant, namespace, self.role):
            return None
        return NOT_AUTHORIZED_GET_TOPICS

    async def denied_produce(self, topic: str) -> str | None:
        authz = self.authz
        tn = self._name(topic) if authz.enabled else None
        try:
            if tn is None or await authz.can_produce(tn, self.role):
                return None
        except TenantNotFound:
            assert tn is not None
            return _does_not_exist(tn)
        return NOT_AUTHORIZED_PRODUCE

    async def denied_consume(self, topic: str, subscription: str) -> str | None:
        authz = self.authz
        tn = self._name(topic) if authz.enabled else None
        try:
            if tn is None or await authz.can_consume(tn, self.role, subscription):
                return None
        except TenantNotFound:
            assert tn is not None
            return _does_not_exist(tn)
        return NOT_AUTHORIZED_SUBSCRIBE


def _does_not_exist(tn: TopicName) -> str:
    return f"Tenant or namespace or topic does not exist: {tn.tenant}/{tn.namespace}"


__all__ = ["ConnectionSecurity"]
