"""TLS for the bookie's gRPC service, both ends: PEM files -> gRPC credentials.

Owns: ``GrpcTls`` (certificate, key, trusted CA, whether the other side must present a
certificate) and building ``grpc.ServerCredentials`` for ``BookieServer`` and
``grpc.ChannelCredentials`` for ``BookieClient``, and ``RoleCheck``: BookKeeper's
``BookieAuthZFactory`` with ``authorizedRoles``, the interceptor admitting only clients whose
verified certificate's common name (CN, the client's role) is one of the authorized roles;
others get ``PERMISSION_DENIED`` (the client raises ``Unauthorized``). Unreadable files and
roles without client certificates raise ``ValueError`` at start, not at the first RPC.
Must not know: the bookie service, ledgers.
"""

from __future__ import annotations

import inspect
import logging
import pathlib
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import grpc

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class GrpcTls:
    certificate_file: str = ""  # server: required; client: only for client authentication
    key_file: str = ""
    trust_certs_file: str = ""  # server: CA of client certificates; client: CA of the bookie
    require_client_auth: bool = False
    authorized_roles: tuple[str, ...] = ()  # server: CNs admitted (empty: any trusted client)

    def _read(self, path: str, what: str) -> bytes:
        try:
            return pathlib.Path(path).read_bytes()
        except OSError as exc:
            raise ValueError(f"bookie TLS: cannot read the {what} {path}: {exc.strerror}") from None

    def server_credentials(self) -> grpc.ServerCredentials:
        if not self.certificate_file or not self.key_file:
            raise ValueError("bookie TLS needs a certificate and a key file")
        if self.require_client_auth and not self.trust_certs_file:
            raise ValueError("bookie TLS client authentication needs a trusted CA file")
        if self.authorized_roles and not self.require_client_auth:
            raise ValueError(
                "bookie authorized_roles needs tls_client_authentication=true (the role is "
                "the CN of the client's certificate)"
            )
        return grpc.ssl_server_credentials(
            [(self._read(self.key_file, "key"), self._read(self.certificate_file, "certificate"))],
            root_certificates=self._read(self.trust_certs_file, "CA file")
            if self.trust_certs_file
            else None,
            require_client_auth=self.require_client_auth,
        )

    def channel_credentials(self) -> grpc.ChannelCredentials:
        return grpc.ssl_channel_credentials(
            root_certificates=self._read(self.trust_certs_file, "CA file")
            if self.trust_certs_file
            else None,
            private_key=self._read(self.key_file, "key") if self.key_file else None,
            certificate_chain=self._read(self.certificate_file, "certificate")
            if self.certificate_file
            else None,
        )


def peer_role(context: grpc.aio.ServicerContext) -> str:
    """The CN of the caller's verified certificate ("" without one)."""
    names = list(context.auth_context().get("x509_common_name") or ())
    return names[0].decode(errors="replace") if names else ""


class RoleCheck(grpc.aio.ServerInterceptor):
    """Every RPC's caller must present a certificate whose CN is an authorized role."""

    def __init__(self, roles: tuple[str, ...]) -> None:
        self.roles = frozenset(roles)
        self.refused = 0

    def __repr__(self) -> str:
        return f"<RoleCheck roles={sorted(self.roles)} refused={self.refused}>"

    async def _admit(self, context: grpc.aio.ServicerContext) -> None:
        role = peer_role(context)
        if role in self.roles:
            return
        self.refused += 1
        if self.refused <= 10 or self.refused % 1000 == 0:  # bounded log under a retry storm
            log.warning(
                "refused a client with role %r from %s: not in authorized_roles (%d refused)",
                role,
                context.peer(),
                self.refused,
            )
        await context.abort(
            grpc.StatusCode.PERMISSION_DENIED,
            f"role {role!r} is not authorized on this bookie (authorized_roles)",
        )

    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Awaitable[grpc.RpcMethodHandler]],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler:
        handler = await continuation(handler_call_details)
        if handler is None:
            return handler
        kind, factory = _KINDS[(handler.request_streaming, handler.response_streaming)]
        behavior = getattr(handler, kind)
        admit = self._admit
        wrapped: Callable[..., Any]
        if inspect.isasyncgenfunction(behavior):

            async def gen(request: Any, context: grpc.aio.ServicerContext) -> AsyncIterator[Any]:
                await admit(context)
                async for item in behavior(request, context):
                    yield item

            wrapped = gen
        else:

            async def call(request: Any, context: grpc.aio.ServicerContext) -> Any:
                await admit(context)
                return await behavior(request, context)

            wrapped = call
        return factory(  # type: ignore[no-any-return]
            wrapped,
            request_deserializer=handler.request_deserializer,
            response_serializer=handler.response_serializer,
        )


_KINDS: dict[tuple[bool, bool], tuple[str, Callable[..., Any]]] = {
    (False, False): ("unary_unary", grpc.unary_unary_rpc_method_handler),
    (False, True): ("unary_stream", grpc.unary_stream_rpc_method_handler),
    (True, False): ("stream_unary", grpc.stream_unary_rpc_method_handler),
    (True, True): ("stream_stream", grpc.stream_stream_rpc_method_handler),
}


__all__ = ["GrpcTls", "RoleCheck", "peer_role"]
