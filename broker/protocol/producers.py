"""A connection's producers: PRODUCER and CLOSE_PRODUCER (Pulsar's ``ServerCnx``
``handleProducer`` / ``handleCloseProducer``), and the closes the broker starts.

Owns: the ``ProducerSession`` of each producer id, and making one in the order Pulsar checks:
permission, topic (loaded here when this broker owns it), terminated topic, access mode,
topic epoch, schema, admission (access mode, producer cap, backlog quota), then what an
admitted producer waits for: its topic epoch stored (exclusive modes: as Pulsar's, ready once
it is durable) and its initial subscription. A WaitForExclusive producer is answered
``producer_ready=False`` at once and PRODUCER_SUCCESS when admitted (``producer_admitted``).
Invariants: every PRODUCER is answered, PRODUCER_SUCCESS or ERROR, unless the connection
closed meanwhile; a producer that is not served (refused, failed, cancelled) is taken off its
topic again; a failure nobody foresaw is answered UnknownError (and logged with its
traceback); a topic epoch the wire's uint64 cannot carry is never stored (a client's above
INT64_MAX is refused: Pulsar's epoch is a Java long, so the next one always fits); the
commands of one producer id run in arrival order.
Knows: the topics' producer API (``Producer``, admission, the topic epoch), schemas, policies.
Must not know: frames, the transport, the SEND path (``publish``), storage.
"""

from __future__ import annotations

import itertools
import logging
import time
from typing import TYPE_CHECKING

from magnetar.broker.errors import BrokerError, CodedError, ServerError
from magnetar.broker.protocol.context import ConnectionContext, Handler
from magnetar.broker.protocol.sessions import ProducerSession
from magnetar.broker.protocol.tasks import CommandChains
from magnetar.broker.protocol.topic_loading import load_topic
from magnetar.broker.schema import protocol as schema_protocol
from magnetar.broker.topics.producer import AccessMode, Admission, Producer
from magnetar.broker.validation import check_subscription_name
from magnetar.client.protocol import INT64_MAX, commands, pb

if TYPE_CHECKING:
    from magnetar.broker.topics.contract import Topic

log = logging.getLogger(__name__)

T = pb.BaseCommand
UINT64_MAX = (1 << 64) - 1
TOPIC_EPOCH_MAX = INT64_MAX
"""The largest topic epoch a PRODUCER may carry: Pulsar's epoch is a Java long."""
_names = itertools.count()


class _EpochNotStored(CodedError):
    """The topic epoch an exclusive admission moved is not durable: the admission is undone."""


class ProducerCommands:
    """The producers of one connection; ``Producer.cnx`` of each (``send_close_producer``,
    ``producer_admitted``)."""

    def __init__(self, cnx: ConnectionContext) -> None:
        self.cnx = cnx
        self.sessions: dict[int, ProducerSession] = {}
        self.closed_by_broker: set[int] = set()
        """Producer ids the broker closed (unload): SENDs still in flight are dropped."""
        self._chains = CommandChains(cnx.tasks)

    def __repr__(self) -> str:
        return f"<ProducerCommands {self.cnx.peer} producers={sorted(self.sessions)}>"

    def __len__(self) -> int:
        return len(self.sessions)

    def get(self, producer_id: int) -> ProducerSession | None:
        return self.sessions.get(producer_id)

    def handlers(self) -> dict[int, Handler]:
        return {T.PRODUCER: self.on_producer, T.CLOSE_PRODUCER: self.on_close_producer}

    # ------------------------------------------------------------------ PRODUCER
    def on_producer(self, cmd: pb.BaseCommand) -> None:
        req = cmd.producer
        self._chains.run(req.producer_id, lambda: self._create(req))

    async def _create(self, req: pb.CommandProducer) -> None:
        pid, rid = req.producer_id, req.request_id
        self.closed_by_broker.discard(pid)
        existing = self.sessions.get(pid)
        try:
            if existing is not None:  # the client asked again: same answer
                self.cnx.write_command(self._ready(existing, rid))
                return
            await self._create_new(req)
        except BrokerError as exc:
            self.cnx.error_response(rid, exc.code, exc.message)
        except Exception as exc:
            log.exception("producer %d for %s on %s failed", pid, req.topic, self.cnx.peer)
            self.cnx.error_response(
                rid, ServerError.UnknownError, f"cannot create the producer: {exc}"
            )

    async def _create_new(self, req: pb.CommandProducer) -> None:
        """Create the producer ``req`` asks for and answer it; raises ``BrokerError`` for a
        refusal (nothing left on the topic). Returns without an answer only when the
        connection closed."""
        topic = await self._target(req)
        if topic is None:
            return
        producer = self._new_producer(req)
        schema_version = await schema_protocol.producer_version(
            self.cnx.service.schemas, topic.name, req
        )
        if self.cnx.closed:
            return
        if topic.closed:  # unloaded while the schema was checked: the client retries
            raise CodedError(ServerError.ServiceNotReady, f"Topic {req.topic} is being unloaded")
        self.cnx.service.policies.check_producer(topic)  # max producers, backlog quota
        admission = topic.add_producer(producer)
        for evicted in topic.producers.take_fenced():
            if evicted.cnx is not None:
                evicted.cnx.send_close_producer(evicted)
        try:
            await self._prepare(topic, producer, admission, req)
            session = ProducerSession(producer, topic, req.request_id, schema_version)
            if admission is Admission.QUEUED:
                answer = commands.producer_success(
                    req.request_id, producer.name, last_sequence_id=-1, producer_ready=False
                )
            else:
                answer = self._ready(session, req.request_id)
            frame = self.cnx.codec.send(answer)
        except _EpochNotStored:
            self._withdraw(topic, producer)
            topic.epoch_not_stored()
            raise
        except BaseException:  # refused, failed or cancelled: never a producer left behind
            self._withdraw(topic, producer)
            raise
        if self.cnx.closed:
            self._withdraw(topic, producer)
            return
        self.sessions[producer.producer_id] = session
        log.info(
            "[%s] created producer %r (id %d) for %s",
            topic.name,
            producer.name,
            producer.producer_id,
            self.cnx.peer,
        )
        self.cnx.write(frame)

    async def _target(self, req: pb.CommandProducer) -> Topic | None:
        """The topic ``req`` may produce to (permission, loaded, not terminated); None when the
        connection closed meanwhile."""
        denied = await self.cnx.security.denied_produce(req.topic)
        if denied is not None:
            raise CodedError(ServerError.AuthorizationError, denied)
        topic = await load_topic(self.cnx.service, req.topic, "producer")
        if self.cnx.closed:
            return None
        if topic.terminated:
            raise CodedError(
                ServerError.TopicTerminatedError, f"Topic {req.topic} was already terminated"
            )
        return topic

    def _new_producer(self, req: pb.CommandProducer) -> Producer:
        """The ``Producer`` ``req`` describes (name, access mode, the epoch it carries)."""
        if req.HasField("producer_name") and req.producer_name:
            name = req.producer_name
        else:
            config = self.cnx.service.config
            name = f"{config.cluster_name}-{self.cnx.service.namespaces.port}-{next(_names)}"
        try:
            mode = AccessMode(req.producer_access_mode)
        except ValueError:
            raise CodedError(ServerError.NotAllowedError, "Unknown producer access mode") from None
        epoch = req.topic_epoch if req.HasField("topic_epoch") else None
        if epoch is not None and epoch > TOPIC_EPOCH_MAX:
            raise CodedError(
                ServerError.NotAllowedError,
                f"Invalid topic epoch {epoch}: the largest is {TOPIC_EPOCH_MAX}",
            )
        return Producer(
            req.producer_id,
            name,
            mode,
            cnx=self,
            user_provided_name=req.user_provided_producer_name,
            topic_epoch=epoch,
            address=self.cnx.peer,
            connected_since_ms=int(time.time() * 1000),
        )

    async def _prepare(
        self,
        topic: Topic,
        producer: Producer,
        admission: Admission,
        req: pb.CommandProducer,
    ) -> None:
        """What an admitted producer waits for before it is ready: the topic epoch stored
        (exclusive modes), the initial subscription made. Raises ``BrokerError``."""
        if admission is Admission.ADMITTED and producer.access_mode is not AccessMode.SHARED:
            await store_topic_epoch(topic)
        await topic.prepare_producer(producer)
        name = req.initial_subscription_name if req.HasField("initial_subscription_name") else ""
        if name:
            check_subscription_name(name)
            try:
                await topic.create_subscription(name, earliest=True)
            except Exception as exc:
                raise CodedError(
                    ServerError.ServiceNotReady, f"cannot create subscription: {exc}"
                ) from None

    def _ready(self, session: ProducerSession, request_id: int) -> pb.BaseCommand:
        """PRODUCER_SUCCESS of a producer ready to publish."""
        producer, topic = session.producer, session.topic
        epoch = topic.producers.topic_epoch
        if producer.access_mode is AccessMode.SHARED:
            epoch = None
        return commands.producer_success(
            request_id,
            producer.name,
            last_sequence_id=topic.last_sequence_id(producer.name),
            schema_version=session.schema_version,
            topic_epoch=epoch,
            producer_ready=True,
        )

    def producer_admitted(self, producer: Producer) -> None:
        """A WaitForExclusive producer got the topic: ready once its epoch is stored."""
        pid = producer.producer_id
        session = self.sessions.get(pid)
        if session is None or session.producer is not producer:
            return

        async def ready() -> None:
            try:
                await store_topic_epoch(session.topic)
                if self.sessions.get(pid) is session:
                    self.cnx.write_command(self._ready(session, session.request_id))
            except BrokerError as exc:
                self._not_admitted(session, exc)
            except Exception as exc:
                log.exception("producer %d on %s failed", pid, self.cnx.peer)
                failure = f"cannot create the producer: {exc}"
                self._not_admitted(session, CodedError(ServerError.UnknownError, failure))

        self.cnx.tasks.spawn(ready())

    def _not_admitted(self, session: ProducerSession, exc: BrokerError) -> None:
        """An admitted WaitForExclusive producer cannot be served: unless it is gone already,
        it leaves its topic and its PRODUCER is answered with ``exc``."""
        pid = session.producer.producer_id
        if self.sessions.get(pid) is not session:
            return
        self._drop(pid)
        if isinstance(exc, _EpochNotStored):
            session.topic.epoch_not_stored()
        self.cnx.error_response(session.request_id, exc.code, exc.message)

    def _withdraw(self, topic: Topic, producer: Producer) -> None:
        """Take a producer that will not be served off its topic (waiting producers it made
        room for are told)."""
        notify_admitted(topic.remove_producer(producer))

    # ------------------------------------------------------------------ closes
    def on_close_producer(self, cmd: pb.BaseCommand) -> None:
        req = cmd.close_producer

        async def close() -> None:
            self._drop(req.producer_id)
            self.cnx.success(req.request_id)

        self._chains.run(req.producer_id, close)

    def _drop(self, pid: int) -> None:
        session = self.sessions.pop(pid, None)
        if session is not None:
            producer, topic = session.producer, session.topic
            log.info("[%s] closed producer %r (id %d)", topic.name, producer.name, pid)
            self._withdraw(topic, producer)

    def drop_all(self) -> None:
        """The connection is gone: every producer leaves its topic."""
        for pid in list(self.sessions):
            self._drop(pid)

    def send_close_producer(self, producer: Producer) -> None:
        """Broker-initiated close (unload): the client looks up again and reconnects."""
        pid = producer.producer_id
        session = self.sessions.get(pid)
        if session is not None and session.producer is producer:
            del self.sessions[pid]
            self.closed_by_broker.add(pid)
            self.cnx.write_command(commands.close_producer(pid))


async def store_topic_epoch(topic: Topic) -> None:
    """Make the topic epoch an exclusive admission moved durable; raises ``_EpochNotStored``:
    NotAllowedError when the epoch is beyond the wire's uint64 (never stored: only a topic
    whose stored epoch came from before epochs were bounded gets there), ServiceNotReady when
    storing fails."""
    epoch = topic.producers.topic_epoch
    if epoch is not None and epoch > UINT64_MAX:
        raise _EpochNotStored(
            ServerError.NotAllowedError,
            f"Topic epoch {epoch} is beyond what the protocol carries ({UINT64_MAX})",
        )
    try:
        await topic.persist_topic_epoch()
    except Exception as exc:
        log.warning("[%s] storing the topic epoch failed: %s", topic.name, exc)
        raise _EpochNotStored(
            ServerError.ServiceNotReady, f"cannot store the topic epoch: {exc}"
        ) from None


def notify_admitted(admitted: list[Producer]) -> None:
    """Tell the connections of waiting producers a removal admitted."""
    for p in admitted:
        if p.cnx is not None:
            p.cnx.producer_admitted(p)


__all__ = ["TOPIC_EPOCH_MAX", "ProducerCommands"]
