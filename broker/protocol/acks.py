"""ACK on a connection, and the ack barrier of an unload.

Owns: ``Acks``: turning ACKs into the subscription's individual (with batch-index ack sets)
and cumulative acknowledgements, ACK_RESPONSE for those that carry a request id, the ACKs in
flight per consumer (a confirmed close or unsubscribe waits for them: its acknowledgements
are then durable), and the barrier: ``barrier`` writes CLOSE_CONSUMER then a PING, and keeps
taking the consumer's ACKs until the PONG to that PING: TCP keeps order and a client answers
PINGs in order, so the PONG proves every ACK the client wrote before it read CLOSE_CONSUMER
has arrived (and each was handed to the cursor before the topic closes it).
Ordering: an ACK's state change happens before its first await (the cursor persists in the
background), so an ACK joins its consumer's chain only while a command of it is pending (a
SUBSCRIBE still loading its topic): later commands still see it applied, and FLOWs never
wait behind a durable cursor write.
Knows: the subscription's ack API, and that a closing topic's cursor refuses acks with a
``LedgerError`` (answered ServiceNotReady: the next owner redelivers, at least once).
Must not know: frames' layout, the transport.
"""

from __future__ import annotations

import asyncio
import logging

from magnetar.broker.errors import ServerError
from magnetar.broker.ledger.errors import LedgerError
from magnetar.broker.ledger.position import Position
from magnetar.broker.protocol.context import ConnectionContext
from magnetar.broker.protocol.message_ids import position_of
from magnetar.broker.protocol.sessions import ConsumerSession
from magnetar.broker.protocol.tasks import CommandChains
from magnetar.client.protocol import commands, pb

log = logging.getLogger(__name__)

_I64 = 1 << 63


class Acks:
    """The ACKs of one connection's consumers."""

    def __init__(
        self, cnx: ConnectionContext, sessions: dict[int, ConsumerSession], chains: CommandChains
    ) -> None:
        self.cnx = cnx
        self._sessions = sessions
        """The connection's consumers (``ConsumerCommands`` owns them)."""
        self._chains = chains
        self._inflight: dict[int, set[asyncio.Task[None]]] = {}
        self.closing: dict[int, ConsumerSession] = {}
        """Consumers told CLOSE_CONSUMER whose ACKs are taken until their barrier."""

    def __repr__(self) -> str:
        return f"<Acks {self.cnx.peer} in flight={sum(map(len, self._inflight.values()))}>"

    def on_ack(self, cmd: pb.BaseCommand) -> None:
        req = cmd.ack
        cid = req.consumer_id

        async def ack() -> None:
            session = self._sessions.get(cid) or self.closing.get(cid)
            if session is None:
                if req.HasField("request_id"):
                    self._respond(
                        cid, req.request_id, ServerError.ConsumerNotFound, "Consumer not found"
                    )
                return
            consumer, sub = session.consumer, session.subscription
            try:
                if req.ack_type == pb.CommandAck.Cumulative:
                    if req.message_id:
                        await sub.ack_cumulative(consumer, position_of(req.message_id[0]))
                else:
                    whole: list[Position] = []
                    partial: list[tuple[Position, list[int]]] = []
                    add = whole.append
                    for m in req.message_id:
                        ledger, entry = m.ledgerId, m.entryId
                        if ledger >= _I64 or entry >= _I64:  # the client's negative ids
                            pos = position_of(m)
                        else:
                            pos = Position(ledger, entry)
                        if m.ack_set:
                            partial.append((pos, list(m.ack_set)))
                        else:
                            add(pos)
                    await sub.ack_positions(consumer, whole, partial)
            except LedgerError as exc:
                # the topic is closing (an unload): its cursor takes no more acks; the
                # consumer hears CLOSE_CONSUMER and the next owner redelivers (at least once)
                log.info("ack on %s dropped: %s", self.cnx.peer, exc)
                if req.HasField("request_id"):
                    self._respond(cid, req.request_id, ServerError.ServiceNotReady, str(exc))
                return
            if req.HasField("request_id"):
                self._respond(cid, req.request_id, None, None)

        chains = self._chains
        if chains.pending(cid):
            chains.run(cid, ack)
        else:
            task = self.cnx.tasks.spawn(ack())
            inflight = self._inflight.setdefault(cid, set())
            inflight.add(task)
            task.add_done_callback(inflight.discard)

    def _respond(self, cid: int, rid: int, code: ServerError | None, message: str | None) -> None:
        if code is None:
            self.cnx.write_command(commands.ack_response(cid, rid))
        else:
            self.cnx.write_command(
                commands.ack_response(cid, rid, error=code, message=message or "")
            )

    async def settled(self, cid: int) -> None:
        """Wait for this consumer's ACKs in flight: a confirmed close or unsubscribe means
        its acknowledgements are durable."""
        inflight = self._inflight.get(cid)
        if inflight:
            await asyncio.wait(list(inflight))
        if not inflight:
            self._inflight.pop(cid, None)

    async def barrier(self, session: ConsumerSession, timeout_s: float) -> None:
        """CLOSE_CONSUMER was written for ``session``: take its consumer's ACKs until the
        client proves it read it (the PONG to a PING written now; at most ``timeout_s``), and
        until those ACKs reached the cursor."""
        cnx = self.cnx
        cid = session.consumer.consumer_id
        self.closing[cid] = session
        fut = cnx.ping_barrier()

        def give_up() -> None:  # a client that does not answer: its later ACKs are dropped
            if not fut.done():
                log.info(
                    "%s: no PONG after CLOSE_CONSUMER %d within %.1f s", cnx.peer, cid, timeout_s
                )
                fut.set_result(None)

        bound = cnx.clock.call_later(timeout_s, give_up)
        try:
            await fut
            await self.settled(cid)
            chain = self._chains.last(cid)
            if chain is not None:
                await asyncio.wait([chain])
        finally:
            bound.cancel()
            if self.closing.get(cid) is session:
                del self.closing[cid]

    def forget_closing(self) -> None:
        """The connection is gone: no ACK can come any more."""
        self.closing.clear()


__all__ = ["Acks"]
