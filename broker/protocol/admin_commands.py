"""Commands that inspect or register rather than move messages: CONSUMER_STATS, GET_SCHEMA
and GET_OR_CREATE_SCHEMA.

Owns: answering them after the connection's permission checks (GET_SCHEMA as a lookup,
GET_OR_CREATE_SCHEMA as a produce): a consumer's permits, unacked messages and backlog from
its session, the schema commands through the registry's protocol side (``schema.protocol``,
whose refusals travel in each command's own response: the C++ client does not match ERROR
against them). CONSUMER_STATS of an unknown consumer answers ConsumerNotFound in its response.
Must not know: frames' layout, storage.
"""

from __future__ import annotations

from collections.abc import Mapping

from magnetar.broker.errors import BrokerError, ServerError
from magnetar.broker.protocol.context import ConnectionContext, Handler
from magnetar.broker.protocol.sessions import ConsumerSession
from magnetar.broker.schema import protocol as schema_protocol
from magnetar.client.protocol import commands, pb

T = pb.BaseCommand


def handlers(
    cnx: ConnectionContext, consumers: Mapping[int, ConsumerSession]
) -> dict[int, Handler]:
    return {
        T.CONSUMER_STATS: lambda cmd: on_consumer_stats(cnx, consumers, cmd),
        T.GET_SCHEMA: lambda cmd: on_get_schema(cnx, cmd),
        T.GET_OR_CREATE_SCHEMA: lambda cmd: on_get_or_create_schema(cnx, cmd),
    }


def on_consumer_stats(
    cnx: ConnectionContext, consumers: Mapping[int, ConsumerSession], cmd: pb.BaseCommand
) -> None:
    req = cmd.consumerStats
    session = consumers.get(req.consumer_id)
    if session is None:
        cnx.write_command(
            commands.consumer_stats_error(
                req.request_id, ServerError.ConsumerNotFound, "Consumer not found"
            )
        )
        return
    consumer, sub = session.consumer, session.subscription
    cnx.write_command(
        commands.consumer_stats_response(
            req.request_id,
            consumerName=consumer.name,
            availablePermits=max(0, consumer.permits),
            unackedMessages=consumer.unacked,
            blockedConsumerOnUnackedMsgs=consumer.blocked,
            address=consumer.address,
            type=sub.sub_type.name.title() if sub.sub_type else "",
            msgBacklog=sub.backlog(),
        )
    )


def on_get_schema(cnx: ConnectionContext, cmd: pb.BaseCommand) -> None:
    req = cmd.getSchema

    async def answer() -> None:
        try:
            denied = await cnx.security.denied_lookup(req.topic)
        except BrokerError as exc:  # the topic's tenant does not exist: TopicNotFound
            cnx.write_command(commands.get_schema_error(req.request_id, exc.code, exc.message))
            return
        if denied is not None:
            cnx.write_command(schema_protocol.get_schema_denied(req, denied))
            return
        cnx.write_command(await schema_protocol.get_schema_response(cnx.service.schemas, req))

    cnx.tasks.spawn(answer())


def on_get_or_create_schema(cnx: ConnectionContext, cmd: pb.BaseCommand) -> None:
    req = cmd.getOrCreateSchema

    async def answer() -> None:
        denied = await cnx.security.denied_produce(req.topic)
        if denied is not None:
            cnx.write_command(schema_protocol.get_or_create_denied(req, denied))
            return
        resp = await schema_protocol.get_or_create_response(cnx.service.schemas, req)
        cnx.write_command(resp)

    cnx.tasks.spawn(answer())


__all__ = ["handlers"]
