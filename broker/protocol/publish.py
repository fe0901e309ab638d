"""SEND, the broker's hot path: check a message, publish it, answer with its receipt.

Owns: ``Publisher``: a SEND's checks before anything is stored (its producer; its checksum,
with the codec's ``checksum_matches``; its metadata and message count, ``check_entry``; the
policies' refusals: backlog quota, maximum delivery delay), handing it to its topic (through
the policies, which may hold it: backlog-quota hold, publish throttling) and the answers:
SEND_RECEIPT (a duplicate's carries the id -1:-1), SEND_ERROR. Persistent topics report a
run of this connection's SENDs at once (``PublishSink``: ``on_published`` /
``on_publish_failed``), whose receipts are encoded in one go by the codec.
Back-pressure: reading pauses while ``max_pending_publish_requests_per_connection`` SENDs
await their answer, and resumes at half.
Invariant: every SEND of a producer this connection has is answered once, in order.
Knows: the managed ledger's ``ManagedLedgerTerminated`` (a write refused because the topic
was terminated: TopicTerminatedError).
Must not know: frames (the connection decodes them), producer lifecycles (``producers``).
"""

from __future__ import annotations

import functools
import logging
from typing import TYPE_CHECKING, Any

from magnetar.broker.errors import ServerError
from magnetar.broker.ledger.errors import ManagedLedgerTerminated
from magnetar.broker.protocol.context import ConnectionContext
from magnetar.broker.protocol.sessions import ProducerSession
from magnetar.broker.validation import InvalidEntry, check_entry
from magnetar.client.protocol import (
    RemoteProtocolError,
    checksum_matches,
    commands,
    parse_entry_metadata,
    pb,
)

if TYPE_CHECKING:
    from magnetar.broker.ledger.position import Position

log = logging.getLogger(__name__)

U64 = (1 << 64) - 1
_FAIL_ONE_CODES = frozenset({ServerError.NotAllowedError})
"""SEND_ERROR codes that refuse one message (the producer stays usable)."""


class Publisher:
    """The SENDs of one connection; the ``PublishSink`` its persistent topics report to."""

    def __init__(
        self,
        cnx: ConnectionContext,
        sessions: dict[int, ProducerSession],
        closed_by_broker: set[int],
    ) -> None:
        self.cnx = cnx
        self._sessions = sessions
        """The connection's producers (``ProducerCommands`` owns them)."""
        self._closed_by_broker = closed_by_broker
        config = cnx.service.config
        self._max_message_size = config.max_message_size
        self.max_pending_sends = max(1, config.max_pending_publish_requests_per_connection)
        self.pending_sends = 0

    def __repr__(self) -> str:
        return f"<Publisher {self.cnx.peer} pending={self.pending_sends}>"

    def on_send(self, send: pb.CommandSend, tail: bytes) -> None:
        """A SEND and its headers and payload (``tail``, as the client framed them)."""
        pid = send.producer_id
        session = self._sessions.get(pid)
        seq = send.sequence_id
        if session is None:
            if pid in self._closed_by_broker:
                return  # in flight when we closed it; the client resends after reconnecting
            raise RemoteProtocolError(f"SEND for unknown producer {pid}")
        if not checksum_matches(tail):
            self.send_error(pid, seq, ServerError.ChecksumError, "Checksum failed on the broker")
            return
        try:  # metadata and message count checked before anything is stored
            num = check_entry(tail, send.num_messages, self._max_message_size)
        except InvalidEntry as exc:
            self.send_error(pid, seq, exc.code, exc.message)
            return
        topic = session.topic
        policies = self.cnx.service.policies
        refused = policies.admit_send(topic, tail)  # backlog quota, max delay
        if refused is not None:
            self.send_error(pid, seq, *refused)
            return
        check_dedup = True
        if send.is_chunk and topic.dedup.enabled:
            try:
                md = parse_entry_metadata(tail)
                check_dedup = md.chunk_id == md.num_chunks_from_msg - 1
            except Exception:
                raise RemoteProtocolError("bad chunk metadata") from None
        producer = session.producer
        producer.msg_in += num
        producer.bytes_in += len(tail)
        self.pending_sends += 1
        if self.pending_sends >= self.max_pending_sends:
            self.cnx.pause_reads("pending-sends")
        highest = send.highest_sequence_id
        held = policies.hold_queue(topic, self.cnx, num, len(tail))
        if held is None:  # the hot path: no callable made
            topic.publish_message(self, producer, seq, highest, num, tail, check_dedup)
        else:  # held by the backlog quota or publish throttling, in order
            held.append(
                functools.partial(
                    topic.publish_message, self, producer, seq, highest, num, tail, check_dedup
                )
            )

    # PublishSink: one call per run of this connection's SENDs to one topic
    def on_published(self, items: list[Any], positions: list[Position | None]) -> None:
        self._sends_done(len(items))
        if self.cnx.closed:
            return
        receipts = []
        for p, pos in zip(items, positions, strict=True):
            if pos is None:  # duplicate: acknowledged, not stored
                receipts.append(
                    (p.producer.producer_id, p.sequence_id, p.highest_sequence_id, U64, U64)
                )
            else:
                receipts.append(
                    (
                        p.producer.producer_id,
                        p.sequence_id,
                        p.highest_sequence_id,
                        pos.ledger_id,
                        pos.entry_id,
                    )
                )
        self.cnx.write(self.cnx.codec.send_receipts(receipts))

    def on_publish_failed(self, items: list[Any], exc: Exception) -> None:
        self._sends_done(len(items))
        code = (
            ServerError.TopicTerminatedError
            if isinstance(exc, ManagedLedgerTerminated)
            else ServerError.PersistenceError
        )
        for p in items:
            self.send_error(p.producer.producer_id, p.sequence_id, code, f"write failed: {exc}")

    def _sends_done(self, n: int) -> None:
        self.pending_sends -= n
        if self.pending_sends <= self.max_pending_sends // 2:
            self.cnx.resume_reads("pending-sends")

    def send_error(self, pid: int, seq: int, code: ServerError, message: str) -> None:
        if code in _FAIL_ONE_CODES and self.cnx.cpp_core_client:
            # The C++ client core (C++, Python, Node.js) fails one message only on
            # ChecksumError and answers any other SEND_ERROR by reconnecting and resending,
            # forever. It logs the message text, so the reason stays visible.
            code, message = ServerError.ChecksumError, f"{code.name}: {message}"
        self.cnx.write_command(commands.send_error(pid, seq, code, message))


__all__ = ["Publisher"]
