"""Where a topic lives and what a namespace holds: LOOKUP, PARTITIONED_METADATA and
GET_TOPICS_OF_NAMESPACE (Pulsar's ``ServerCnx`` ``handleLookup``,
``handlePartitionMetadataRequest``, ``handleGetTopicsOfNamespace``).

Owns: asking the service (after the connection's permission checks) and answering: a
LOOKUP_RESPONSE Connect or Redirect, the partition count, the topic list. A refusal of the
service carries its own code; any other failure is logged and answered ServiceNotReady
(retriable), in the response's own ``Failed`` form (the C++ client does not match ERROR
against LOOKUP or PARTITIONED_METADATA); GET_TOPICS_OF_NAMESPACE refusals are ERRORs.
Must not know: topics' state, producers, consumers.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from magnetar.broker.errors import ServerError
from magnetar.broker.protocol.context import ConnectionContext, Handler
from magnetar.broker.service import ServiceError
from magnetar.client.protocol import commands, pb

log = logging.getLogger(__name__)

T = pb.BaseCommand
Failed = Callable[[int, ServerError, str], pb.BaseCommand]
_DOMAINS_OF_MODE: dict[int, tuple[str, ...]] = {
    pb.CommandGetTopicsOfNamespace.PERSISTENT: ("persistent",),
    pb.CommandGetTopicsOfNamespace.NON_PERSISTENT: ("non-persistent",),
}


def handlers(cnx: ConnectionContext) -> dict[int, Handler]:
    return {
        T.LOOKUP: lambda cmd: on_lookup(cnx, cmd),
        T.PARTITIONED_METADATA: lambda cmd: on_partitioned_metadata(cnx, cmd),
        T.GET_TOPICS_OF_NAMESPACE: lambda cmd: on_get_topics_of_namespace(cnx, cmd),
    }


def _failed(failed: Failed, request_id: int, exc: Exception, what: str) -> pb.BaseCommand:
    """The ``Failed`` answer of a LOOKUP / PARTITIONED_METADATA: a refusal carries its own
    ServerError code; anything else is logged and answered ServiceNotReady (retriable)."""
    if isinstance(exc, ServiceError):
        return failed(request_id, exc.code, exc.message)
    log.exception("%s failed", what)
    return failed(request_id, ServerError.ServiceNotReady, f"{what} failed: {exc}")


def on_lookup(cnx: ConnectionContext, cmd: pb.BaseCommand) -> None:
    req = cmd.lookupTopic
    listener = req.advertised_listener_name if req.HasField("advertised_listener_name") else ""
    cnx.tasks.spawn(_lookup(cnx, req.topic, req.request_id, req.authoritative, listener))


async def _lookup(
    cnx: ConnectionContext, topic: str, request_id: int, authoritative: bool, listener_name: str
) -> None:
    try:
        denied = await cnx.security.denied_lookup(topic)
        if denied is not None:
            raise ServiceError(ServerError.AuthorizationError, denied)
        got = await cnx.service.namespaces.lookup(topic, authoritative, listener_name)
        answer = commands.lookup_response(
            request_id,
            got.broker_url,
            broker_service_url_tls=got.broker_url_tls,
            redirect=got.redirect,
            authoritative=got.authoritative,
            proxy_through_service_url=False,
        )
    except Exception as exc:
        answer = _failed(commands.lookup_error, request_id, exc, f"lookup of {topic}")
    cnx.write_command(answer)


def on_partitioned_metadata(cnx: ConnectionContext, cmd: pb.BaseCommand) -> None:
    req = cmd.partitionMetadata
    cnx.tasks.spawn(_partitioned_metadata(cnx, req.topic, req.request_id))


async def _partitioned_metadata(cnx: ConnectionContext, topic: str, request_id: int) -> None:
    try:
        denied = await cnx.security.denied_lookup(topic, metadata=True)
        if denied is not None:
            raise ServiceError(ServerError.AuthorizationError, denied)
        n = await cnx.service.partitioned_metadata(topic)
        answer = commands.partitioned_metadata_response(request_id, n)
    except Exception as exc:
        answer = _failed(
            commands.partitioned_metadata_error,
            request_id,
            exc,
            f"partitioned metadata of {topic}",
        )
    cnx.write_command(answer)


def on_get_topics_of_namespace(cnx: ConnectionContext, cmd: pb.BaseCommand) -> None:
    req = cmd.getTopicsOfNamespace
    cnx.tasks.spawn(_topics_of_namespace(cnx, req.request_id, req.namespace, req.mode))


async def _topics_of_namespace(
    cnx: ConnectionContext, request_id: int, namespace: str, mode: int
) -> None:
    tenant, _, ns = namespace.partition("/")
    if not tenant or not ns or "/" in ns:
        cnx.error_response(
            request_id, ServerError.MetadataError, f"Invalid namespace {namespace!r}"
        )
        return
    denied = await cnx.security.denied_list_topics(tenant, ns)
    if denied is not None:
        cnx.error_response(request_id, ServerError.AuthorizationError, denied)
        return
    topics: list[str] = []
    domains = _DOMAINS_OF_MODE.get(int(mode), ("persistent", "non-persistent"))
    try:
        for domain in domains:
            topics += await cnx.service.list_topics(tenant, ns, domain)
    except Exception as exc:
        cnx.error_response(request_id, ServerError.MetadataError, str(exc))
        return
    cnx.write_command(
        commands.get_topics_of_namespace_response(request_id, topics, filtered=False, changed=True)
    )


__all__ = ["handlers"]
