"""A connection's consumers: SUBSCRIBE and the commands that name a consumer (FLOW,
REDELIVER_UNACKNOWLEDGED_MESSAGES, CLOSE_CONSUMER, UNSUBSCRIBE, SEEK, GET_LAST_MESSAGE_ID;
ACK in ``acks``), and what dispatch sends them (the ``ConsumerSink`` of their consumers).

Owns: the ``ConsumerSession`` of each consumer id; the order of each consumer's commands (a
chain per id; FLOW joins one only while one is pending, e.g. a SUBSCRIBE still loading its
topic, so FLOWs never wait for cursor I/O); the dispatch pause while the connection's writes
are paused; the unload's close with an ack barrier; the frames dispatch makes: MESSAGE (the
codec's fast path), ACTIVE_CONSUMER_CHANGE, REACHED_END_OF_TOPIC (never to the C++ client
core, which takes it for an invalid message), CLOSE_CONSUMER.
Knows: topics' subscription API and the dispatcher's ``Consumer``.
Must not know: frames' layout, the transport, storage.
"""

from __future__ import annotations

import logging

from magnetar.broker.dispatch.consumer import Consumer, OutMessage
from magnetar.broker.errors import BrokerError, ServerError
from magnetar.broker.protocol import subscribe
from magnetar.broker.protocol.acks import Acks
from magnetar.broker.protocol.context import ConnectionContext, Handler
from magnetar.broker.protocol.message_ids import message_id_data, position_of, start_of
from magnetar.broker.protocol.sessions import ConsumerSession
from magnetar.broker.protocol.tasks import CommandChains, Step
from magnetar.broker.topics.subscription import SubscriptionError
from magnetar.client.protocol import commands, pb

log = logging.getLogger(__name__)

T = pb.BaseCommand


class ConsumerCommands:
    """The consumers of one connection; ``Consumer.sink`` of each."""

    def __init__(self, cnx: ConnectionContext) -> None:
        self.cnx = cnx
        self.sessions: dict[int, ConsumerSession] = {}
        self._chains = CommandChains(cnx.tasks)
        self.acks = Acks(cnx, self.sessions, self._chains)

    def __repr__(self) -> str:
        return f"<ConsumerCommands {self.cnx.peer} consumers={sorted(self.sessions)}>"

    def __len__(self) -> int:
        return len(self.sessions)

    def get(self, consumer_id: int) -> ConsumerSession | None:
        return self.sessions.get(consumer_id)

    def handlers(self) -> dict[int, Handler]:
        return {
            T.SUBSCRIBE: self.on_subscribe,
            T.FLOW: self.on_flow,
            T.ACK: self.acks.on_ack,
            T.REDELIVER_UNACKNOWLEDGED_MESSAGES: self.on_redeliver,
            T.CLOSE_CONSUMER: self.on_close_consumer,
            T.UNSUBSCRIBE: self.on_unsubscribe,
            T.SEEK: self.on_seek,
            T.GET_LAST_MESSAGE_ID: self.on_get_last_message_id,
        }

    def _or_error(self, cid: int, rid: int) -> ConsumerSession | None:
        """The consumer a request names, or None after answering ConsumerNotFound."""
        session = self.sessions.get(cid)
        if session is None:
            self.cnx.error_response(rid, ServerError.ConsumerNotFound, "Consumer not found")
        return session

    def _guarded(self, request_id: int, step: Step) -> Step:
        """``step`` whose refusals and failures are answered with ERROR for ``request_id``."""

        async def run() -> None:
            try:
                await step()
            except SubscriptionError as exc:
                self.cnx.error_response(request_id, exc.code, exc.message)
            except Exception as exc:
                log.exception("request %d failed on %s", request_id, self.cnx.peer)
                self.cnx.error_response(
                    request_id, ServerError.UnknownError, str(exc) or type(exc).__name__
                )

        return run

    # ------------------------------------------------------------------ SUBSCRIBE
    def on_subscribe(self, cmd: pb.BaseCommand) -> None:
        req = cmd.subscribe
        self._chains.run(req.consumer_id, lambda: self._subscribe(req))

    async def _subscribe(self, req: pb.CommandSubscribe) -> None:
        """SUBSCRIBE: admit it, make the consumer, attach it; every refusal is a
        ``BrokerError`` answered with its code."""
        cnx = self.cnx
        cid, rid = req.consumer_id, req.request_id
        if cid in self.sessions:
            cnx.success(rid)
            return
        try:
            topic = await subscribe.subscription_target(cnx, req)
            if topic is None:  # the connection closed
                return
            consumer = subscribe.new_consumer(cnx, req, topic, self)
            sub = await subscribe.attach(cnx, req, topic, consumer)
        except BrokerError as exc:
            self._refuse(cid, rid, exc.code, exc.message)
            return
        if cnx.closed:
            topic.remove_consumer(sub, consumer)
            return
        if topic.closed:
            # the topic began closing (an unload) while the subscription was made: its close
            # told the consumers it had then, not this one, which would wait on a topic that
            # is gone; the client retries and finds the next owner
            topic.remove_consumer(sub, consumer)
            self._refuse(
                cid, rid, ServerError.ServiceNotReady, f"Topic {req.topic} is being unloaded"
            )
            return
        self.sessions[cid] = ConsumerSession(consumer, sub, topic)
        log.info(
            "[%s][%s] created %s consumer %r (id %d) for %s",
            topic.name,
            sub.name,
            consumer.sub_type.name,
            consumer.name,
            cid,
            cnx.peer,
        )
        cnx.service.policies.after_subscribe(topic, sub)  # dispatch rate on a new dispatcher
        cnx.success(rid)

    def _refuse(self, cid: int, rid: int, code: ServerError, message: str) -> None:
        """Answer a SUBSCRIBE with ERROR. A ServiceNotReady (the bundle is being unloaded or
        split, storage is not ready: "try again, maybe elsewhere") is followed, for the C++
        client core, by CLOSE_CONSUMER: that core keeps the connection it subscribed on after
        a retryable refusal of its first SUBSCRIBE, takes its own retry for "already
        connected" and waits out the operation timeout (pulsar-client 3.x); CLOSE_CONSUMER
        drops that connection from the consumer, whose retry then looks the topic up again."""
        self.cnx.error_response(rid, code, message)
        if code == ServerError.ServiceNotReady and self.cnx.cpp_core_client:
            self.cnx.write_command(commands.close_consumer(cid))

    # ------------------------------------------------------------------ a consumer's commands
    def on_flow(self, cmd: pb.BaseCommand) -> None:
        req = cmd.flow
        cid = req.consumer_id
        if self._chains.pending(cid):

            async def later() -> None:
                session = self.sessions.get(cid)
                if session is not None:
                    session.subscription.flow(session.consumer, req.messagePermits)

            self._chains.run(cid, later)
            return
        session = self.sessions.get(cid)
        if session is not None:
            session.subscription.flow(session.consumer, req.messagePermits)

    def on_redeliver(self, cmd: pb.BaseCommand) -> None:
        req = cmd.redeliverUnacknowledgedMessages
        cid = req.consumer_id

        async def redeliver() -> None:
            session = self.sessions.get(cid)
            if session is None:
                return
            positions = [position_of(m) for m in req.message_ids] or None
            session.subscription.redeliver(session.consumer, positions)

        self._chains.run(cid, redeliver)

    def on_close_consumer(self, cmd: pb.BaseCommand) -> None:
        req = cmd.close_consumer
        cid = req.consumer_id

        async def close() -> None:
            await self.acks.settled(cid)
            session = self.sessions.get(cid)
            if session is not None:
                await session.subscription.settle_acks()
            self._drop(cid)
            self.cnx.success(req.request_id)

        self._chains.run(cid, close)

    def _drop(self, cid: int) -> None:
        session = self.sessions.pop(cid, None)
        if session is not None:
            consumer, sub, topic = session.consumer, session.subscription, session.topic
            log.info(
                "[%s][%s] closed consumer %r (id %d)", topic.name, sub.name, consumer.name, cid
            )
            topic.remove_consumer(sub, consumer)

    def drop_all(self) -> None:
        """The connection is gone: every consumer leaves its subscription."""
        for cid in list(self.sessions):
            self._drop(cid)
        self.acks.forget_closing()

    def on_unsubscribe(self, cmd: pb.BaseCommand) -> None:
        req = cmd.unsubscribe
        cid, rid = req.consumer_id, req.request_id

        async def unsubscribe() -> None:
            session = self._or_error(cid, rid)
            if session is None:
                return
            await self.acks.settled(cid)
            try:
                await session.topic.unsubscribe(session.subscription, session.consumer)
            except SubscriptionError as exc:
                self.cnx.error_response(rid, exc.code, exc.message)
                return
            except Exception as exc:
                log.exception("unsubscribe failed")
                self.cnx.error_response(rid, ServerError.UnknownError, f"unsubscribe failed: {exc}")
                return
            self.sessions.pop(cid, None)
            self.cnx.success(rid)

        self._chains.run(cid, unsubscribe)

    def on_seek(self, cmd: pb.BaseCommand) -> None:
        req = cmd.seek

        async def seek() -> None:
            session = self._or_error(req.consumer_id, req.request_id)
            if session is None:
                return
            sub = session.subscription
            if req.HasField("message_publish_time"):
                pos = await session.topic.find_position_by_time(req.message_publish_time)
            elif req.HasField("message_id"):
                pos = start_of(req.message_id)
            else:
                self.cnx.error_response(
                    req.request_id, ServerError.MetadataError, "Seek needs a message id or a time"
                )
                return
            for consumer in sub.consumers:
                if consumer.sink is not None:
                    consumer.sink.send_close_consumer(consumer)
            await sub.reset_cursor(pos)
            self.cnx.success(req.request_id)

        self._chains.run(req.consumer_id, self._guarded(req.request_id, seek))

    def on_get_last_message_id(self, cmd: pb.BaseCommand) -> None:
        req = cmd.getLastMessageId

        async def last() -> None:
            session = self._or_error(req.consumer_id, req.request_id)
            if session is None:
                return
            topic = session.topic
            lm = await topic.resolve_last_message_id(session.subscription)
            mark_delete = lm.mark_delete
            self.cnx.write_command(
                commands.get_last_message_id_response(
                    req.request_id,
                    message_id_data(
                        lm.ledger_id,
                        lm.entry_id,
                        partition=topic.name.partition_index,
                        batch_index=lm.batch_index,
                    ),
                    consumer_mark_delete_position=None
                    if mark_delete is None
                    else message_id_data(mark_delete.ledger_id, mark_delete.entry_id),
                )
            )

        self._chains.run(req.consumer_id, self._guarded(req.request_id, last))

    # ------------------------------------------------------------------ dispatch pauses
    def pause_dispatch(self) -> None:
        """The connection's writes are paused: dispatch picks other consumers."""
        for session in self.sessions.values():
            session.consumer.paused = True

    def resume_dispatch(self) -> None:
        for session in list(self.sessions.values()):
            session.consumer.paused = False
            session.subscription.flow(session.consumer, 0)  # reschedules its dispatcher

    # ------------------------------------------------------------------ ConsumerSink
    def send_messages(self, consumer: Consumer, messages: list[OutMessage]) -> None:
        cnx = self.cnx
        if cnx.closed:
            return
        cnx.write_frames(
            cnx.codec.send_messages(consumer.consumer_id, consumer.partition_index, messages)
        )

    def send_active_consumer_change(self, consumer: Consumer, is_active: bool) -> None:
        if self.cnx.protocol_version < 12:
            return
        self.cnx.write_command(commands.active_consumer_change(consumer.consumer_id, is_active))

    def send_reached_end_of_topic(self, consumer: Consumer) -> None:
        if self.cnx.cpp_core_client:
            # The C++ client core (3.x) takes REACHED_END_OF_TOPIC for an invalid message
            # and closes the connection: every resubscription would hear it again, a
            # reconnect loop. Those consumers simply receive nothing more.
            return
        self.cnx.write_command(commands.reached_end_of_topic(consumer.consumer_id))

    def send_close_consumer(self, consumer: Consumer) -> None:
        session = self.sessions.get(consumer.consumer_id)
        if session is not None and session.consumer is consumer:
            del self.sessions[consumer.consumer_id]
        self.cnx.write_command(commands.close_consumer(consumer.consumer_id))

    async def close_consumer_with_ack_barrier(self, consumer: Consumer, timeout_s: float) -> None:
        """Unload: CLOSE_CONSUMER, then take the consumer's ACKs until the client proves it
        read it (the PONG to a PING written after it; at most ``timeout_s``), and until those
        ACKs reached the cursor (see ``acks``). The caller closes the cursor after this."""
        cnx = self.cnx
        cid = consumer.consumer_id
        session = self.sessions.get(cid)
        self.send_close_consumer(consumer)
        if (
            session is None
            or session.consumer is not consumer
            or cnx.closed
            or cnx.protocol_version < 1
        ):
            return
        await self.acks.barrier(session, timeout_s)


__all__ = ["ConsumerCommands"]
