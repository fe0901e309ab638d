"""``Client``: the entry point (``Client(service_url)``), asyncio-first.

Owns: the connection pool, the lookup service (binary for ``pulsar://``/``pulsar+ssl://``,
REST for ``http://``/``https://``), the client-wide id counters, and the producers, consumers
and readers it created (``close()`` closes them all, then the connections). Partitioned
metadata lookups are retried on retriable errors until the operation timeout.

Must not know: frames, batching, acknowledgement state.
"""

from __future__ import annotations

import asyncio
import random
import re
import secrets
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from magnetar.client._backoff import Backoff
from magnetar.client._config import (
    Authentication,
    BatchingType,
    CompressionType,
    ConsumerBatchReceivePolicy,
    ConsumerDeadLetterPolicy,
    ConsumerKeySharedPolicy,
    ConsumerType,
    InitialPosition,
    PartitionsRoutingMode,
    ProducerAccessMode,
    RedeliveryBackoff,
)
from magnetar.client._consumer import Consumer, ConsumerConfig, MessageListener
from magnetar.client._errors import (
    AlreadyClosed,
    InvalidConfiguration,
    InvalidTopicName,
    PulsarException,
    Timeout,
)
from magnetar.client._handler import ClientContext
from magnetar.client._lookup import (
    BinaryLookupService,
    HttpLookupService,
    LookupService,
    SchemaAnswer,
)
from magnetar.client._message import Message, MessageId
from magnetar.client._pool import ConnectionPool, TlsOptions, parse_service_url
from magnetar.client._producer import Producer, ProducerConfig
from magnetar.client._reader import Reader
from magnetar.client._routing import HashingScheme
from magnetar.client.protocol import InvalidTopicNameError, TopicName
from magnetar.client.schema import Schema
from magnetar.clock import Clock, SystemClock


@dataclass(frozen=True, slots=True)
class ClientStatistics:
    connections: int
    producers: int
    consumers: int


def _topic(name: str) -> TopicName:
    try:
        return TopicName.parse(name)
    except InvalidTopicNameError as exc:
        raise InvalidTopicName(str(exc)) from None


class Client:
    """A Pulsar client. Create it anywhere; use it from one event loop.

    ``async with Client("pulsar://localhost:6650") as client: ...``
    """

    def __init__(
        self,
        service_url: str,
        authentication: Authentication | None = None,
        operation_timeout_seconds: float = 30,
        *,
        connection_timeout_ms: int = 10_000,
        keep_alive_interval_seconds: float = 30,
        use_tls: bool = False,
        tls_trust_certs_file_path: str | None = None,
        tls_allow_insecure_connection: bool = False,
        tls_validate_hostname: bool = False,
        tls_certificate_file_path: str | None = None,
        tls_private_key_file_path: str | None = None,
        listener_name: str | None = None,
        max_lookup_redirects: int = 20,
        partitions_update_interval_seconds: float = 60,
        max_backoff_interval_ms: int = 60_000,
        clock: Clock | None = None,
        rng: random.Random | None = None,
    ) -> None:
        """``max_backoff_interval_ms``: the longest wait between two reconnection attempts of
        a producer or consumer (the Java client's ``maxBackoffInterval``; 100 ms doubling up
        to it)."""
        if max_backoff_interval_ms < 100:
            raise InvalidConfiguration("max_backoff_interval_ms must be >= 100")
        self.service_url = service_url
        self._address = parse_service_url(service_url)
        if use_tls and self._address.scheme == "pulsar":
            self._address = parse_service_url(service_url.replace("pulsar://", "pulsar+ssl://", 1))
        self._clock: Clock = clock or SystemClock()
        self._operation_timeout_ms = int(operation_timeout_seconds * 1000)
        self._partitions_update_s = partitions_update_interval_seconds
        tls = TlsOptions(
            tls_trust_certs_file_path,
            tls_allow_insecure_connection,
            tls_validate_hostname,
            tls_certificate_file_path,
            tls_private_key_file_path,
        )
        self._pool = ConnectionPool(
            clock=self._clock,
            auth=authentication,
            tls=tls,
            connection_timeout_ms=connection_timeout_ms,
            operation_timeout_ms=self._operation_timeout_ms,
            keep_alive_interval_s=keep_alive_interval_seconds,
        )
        self._rng = rng or random.Random()
        lookup: LookupService
        ctx_holder: list[ClientContext] = []
        if self._address.is_http:
            auth_header = None
            if authentication is not None and authentication.auth_method_name == "token":

                def auth_header() -> str | None:
                    data = authentication.auth_data()
                    return f"Bearer {data.decode()}" if data else None

            lookup = HttpLookupService(
                self._address,
                timeout_ms=self._operation_timeout_ms,
                ssl_context=tls.context() if self._address.use_tls else None,
                auth_header=auth_header,
            )
        else:
            lookup = BinaryLookupService(
                self._address,
                self._pool,
                lambda: ctx_holder[0].next_request_id(),  # noqa: PLW0108 - late binding
                listener_name=listener_name or "",
                max_redirects=max_lookup_redirects,
            )
        self._ctx = ClientContext(
            self._pool,
            lookup,
            self._clock,
            self._operation_timeout_ms,
            self._rng,
            max_backoff_ms=max_backoff_interval_ms,
        )
        ctx_holder.append(self._ctx)
        self._producers: set[Producer] = set()
        self._consumers: set[Consumer] = set()
        self._closed = False

    def __repr__(self) -> str:
        return f"<Client {self.service_url} connections={len(self._pool)}>"

    async def __aenter__(self) -> Client:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    def _check_open(self) -> None:
        if self._closed:
            raise AlreadyClosed("client closed")

    @property
    def clock(self) -> Clock:
        return self._clock

    # ------------------------------------------------------------------ lookups

    async def _retrying(self, op: Callable[[], Awaitable[Any]]) -> Any:
        deadline = self._clock.monotonic_ms() + self._operation_timeout_ms
        backoff = Backoff(100, 60_000, self._rng)
        while True:
            try:
                return await op()
            except PulsarException as exc:
                if not exc.retriable:
                    raise
                delay = backoff.next_ms()
                if self._clock.monotonic_ms() + delay >= deadline:
                    raise Timeout(str(exc)) from exc
                await self._clock.sleep(delay / 1000)

    async def _partitions(self, topic: TopicName) -> int:
        if topic.is_partition:
            return 0
        n: int = await self._retrying(lambda: self._ctx.lookup.partitioned_metadata(topic))
        return n

    async def get_topic_partitions(self, topic: str) -> list[str]:
        """Names of the partitions of ``topic`` (the topic itself if not partitioned)."""
        self._check_open()
        t = _topic(topic)
        n = await self._partitions(t)
        if n == 0:
            return [t.full_name]
        return [t.partition(i).full_name for i in range(n)]

    async def get_schema_info(self, topic: str, version: int | None = None) -> SchemaAnswer | None:
        """The topic's schema ``version`` (None: the latest) as the broker stores it
        (``.version``, ``.schema``: a ``pb.Schema``), or None when there is none."""
        self._check_open()
        return await self._ctx.lookup.get_schema(_topic(topic), version)

    async def get_topics_matching(self, pattern: str) -> list[str]:
        """Topics of the pattern's namespace whose name (partitioned-topic names, not their
        partitions) matches ``pattern`` (``persistent://tenant/ns/regex``), as a pattern
        consumer would subscribe to them now."""
        self._check_open()
        return await self._topics_matching(pattern)

    async def _topics_matching(self, pattern: str) -> list[str]:
        regex = re.compile(pattern)
        probe = pattern.split("://", 1)[-1]
        parts = probe.split("/")
        if "://" not in pattern or len(parts) < 3:
            raise InvalidTopicName("a topic pattern must be 'persistent://tenant/ns/regex'")
        domain = pattern.split("://", 1)[0]
        mode = {"persistent": 0, "non-persistent": 1}.get(domain, 0)
        names = await self._retrying(
            lambda: self._ctx.lookup.topics_of_namespace(f"{parts[0]}/{parts[1]}", mode)
        )
        out: list[str] = []
        for name in names:
            base = TopicName.parse(name).partitioned_topic_name
            if regex.fullmatch(base) and base not in out:
                out.append(base)
        return out

    # ------------------------------------------------------------------ producers

    async def create_producer(  # noqa: PLR0917 - the official client's positional order
        self,
        topic: str,
        producer_name: str | None = None,
        initial_sequence_id: int | None = None,
        send_timeout_millis: int = 30_000,
        compression_type: CompressionType = CompressionType.NONE,
        max_pending_messages: int = 1000,
        max_pending_messages_across_partitions: int = 50_000,
        block_if_queue_full: bool = False,
        batching_enabled: bool = False,
        batching_max_messages: int = 1000,
        batching_max_allowed_size_in_bytes: int = 128 * 1024,
        batching_max_publish_delay_ms: int = 10,
        chunking_enabled: bool = False,
        message_routing_mode: PartitionsRoutingMode = PartitionsRoutingMode.RoundRobinDistribution,
        properties: dict[str, str] | None = None,
        batching_type: BatchingType = BatchingType.Default,
        access_mode: ProducerAccessMode = ProducerAccessMode.Shared,
        message_router: Callable[[Message, int], int] | None = None,
        *,
        chunk_max_message_size: int | None = None,
        initial_subscription_name: str | None = None,
        hashing_scheme: HashingScheme = HashingScheme.BoostHash,
        schema: Schema | None = None,
    ) -> Producer:
        self._check_open()
        t = _topic(topic)
        config = ProducerConfig(
            producer_name=producer_name,
            initial_sequence_id=initial_sequence_id,
            send_timeout_ms=send_timeout_millis,
            compression_type=CompressionType(compression_type),
            max_pending_messages=max_pending_messages,
            max_pending_messages_across_partitions=max_pending_messages_across_partitions,
            block_if_queue_full=block_if_queue_full,
            batching_enabled=batching_enabled,
            batching_max_messages=batching_max_messages,
            batching_max_allowed_size_in_bytes=batching_max_allowed_size_in_bytes,
            batching_max_publish_delay_ms=batching_max_publish_delay_ms,
            batching_type=batching_type,
            chunking_enabled=chunking_enabled,
            chunk_max_message_size=chunk_max_message_size,
            message_routing_mode=(
                PartitionsRoutingMode.CustomPartition
                if message_router is not None
                else message_routing_mode
            ),
            message_router=message_router,
            properties=dict(properties or {}),
            access_mode=access_mode,
            initial_subscription_name=initial_subscription_name,
            hashing_scheme=HashingScheme(hashing_scheme),
            schema=schema,
        )
        partitions = await self._partitions(t)
        producer = Producer(
            self._ctx,
            t,
            config,
            partitions,
            self._producers.discard,
            resolve_partitions=self._partitions,
            partitions_update_interval_s=self._partitions_update_s,
        )
        await producer._start()
        self._producers.add(producer)
        return producer

    # ------------------------------------------------------------------ consumers

    async def subscribe(  # noqa: PLR0917 - the official client's positional order
        self,
        topic: str | list[str] | re.Pattern[str],
        subscription_name: str,
        consumer_type: ConsumerType = ConsumerType.Exclusive,
        message_listener: MessageListener | None = None,
        receiver_queue_size: int = 1000,
        max_total_receiver_queue_size_across_partitions: int = 50_000,
        consumer_name: str | None = None,
        unacked_messages_timeout_ms: int | None = None,
        negative_ack_redelivery_delay_ms: int = 60_000,
        is_read_compacted: bool = False,
        properties: dict[str, str] | None = None,
        pattern_auto_discovery_period: int = 60,
        initial_position: InitialPosition = InitialPosition.Latest,
        max_pending_chunked_message: int = 10,
        start_message_id_inclusive: bool = False,
        key_shared_policy: ConsumerKeySharedPolicy | None = None,
        batch_index_ack_enabled: bool = False,
        dead_letter_policy: ConsumerDeadLetterPolicy | None = None,
        *,
        priority_level: int = 0,
        ack_group_time_ms: int = 100,
        negative_ack_redelivery_backoff: RedeliveryBackoff | None = None,
        retry_enable: bool = False,
        subscription_properties: dict[str, str] | None = None,
        ack_receipt_enabled: bool = False,
        batch_receive_policy: ConsumerBatchReceivePolicy | None = None,
        schema: Schema | None = None,
    ) -> Consumer:
        self._check_open()
        config = ConsumerConfig(
            subscription_name=subscription_name,
            consumer_type=ConsumerType(consumer_type),
            receiver_queue_size=receiver_queue_size,
            max_total_receiver_queue_size_across_partitions=(
                max_total_receiver_queue_size_across_partitions
            ),
            consumer_name=consumer_name,
            unacked_messages_timeout_ms=unacked_messages_timeout_ms,
            negative_ack_redelivery_delay_ms=negative_ack_redelivery_delay_ms,
            negative_ack_redelivery_backoff=negative_ack_redelivery_backoff,
            ack_group_time_ms=ack_group_time_ms,
            is_read_compacted=is_read_compacted,
            properties=dict(properties or {}),
            subscription_properties=dict(subscription_properties or {}),
            pattern_auto_discovery_period=pattern_auto_discovery_period,
            initial_position=InitialPosition(initial_position),
            priority_level=priority_level,
            max_pending_chunked_message=max_pending_chunked_message,
            start_message_id_inclusive=start_message_id_inclusive,
            key_shared_policy=key_shared_policy,
            batch_index_ack_enabled=batch_index_ack_enabled,
            dead_letter_policy=dead_letter_policy,
            retry_enable=retry_enable,
            ack_receipt_enabled=ack_receipt_enabled,
            batch_receive_policy=batch_receive_policy or ConsumerBatchReceivePolicy(),
            schema=schema,
        )
        pattern: re.Pattern[str] | None = None
        if isinstance(topic, re.Pattern):
            pattern = topic
            label = topic.pattern
            names = await self._topics_matching(topic.pattern)
        elif isinstance(topic, list | tuple):
            label = ",".join(topic)
            names = list(topic)
        else:
            label = _topic(topic).full_name
            names = [topic]
        topics = [_topic(n) for n in names]
        consumer = Consumer(
            self._ctx,
            config,
            topic_label=label,
            resolve_partitions=self._partitions,
            list_topics=self._topics_matching,
            pattern=pattern,
            producer_factory=self.create_producer,
            on_close=self._consumers.discard,
            listener=message_listener,
            partitions_update_interval_s=self._partitions_update_s,
        )
        if retry_enable:
            retry_topic = consumer._retry_topic() if topics else None
            consumer._topics = list(topics)
            retry_topic = consumer._retry_topic()
            consumer._topics = []
            if retry_topic not in [t.full_name for t in topics]:
                topics.append(_topic(retry_topic))
        await consumer._start(topics)
        self._consumers.add(consumer)
        return consumer

    async def create_reader(  # noqa: PLR0917 - the official client's positional order
        self,
        topic: str,
        start_message_id: MessageId,
        reader_listener: MessageListener | None = None,
        receiver_queue_size: int = 1000,
        reader_name: str | None = None,
        subscription_role_prefix: str | None = None,
        is_read_compacted: bool = False,
        start_message_id_inclusive: bool = False,
        *,
        schema: Schema | None = None,
    ) -> Reader:
        self._check_open()
        t = _topic(topic)
        prefix = subscription_role_prefix or "reader"
        config = ConsumerConfig(
            subscription_name=f"{prefix}-{secrets.token_hex(5)}",
            consumer_type=ConsumerType.Exclusive,
            receiver_queue_size=receiver_queue_size,
            consumer_name=reader_name,
            is_read_compacted=is_read_compacted,
            start_message_id_inclusive=start_message_id_inclusive,
            durable=False,
            schema=schema,
            start_message_id=start_message_id,
            initial_position=(
                InitialPosition.Earliest
                if start_message_id == MessageId.earliest
                else InitialPosition.Latest
            ),
        )
        consumer = Consumer(
            self._ctx,
            config,
            topic_label=t.full_name,
            resolve_partitions=self._partitions,
            list_topics=None,
            pattern=None,
            producer_factory=self.create_producer,
            on_close=self._consumers.discard,
            listener=reader_listener,
        )
        await consumer._start([t])
        self._consumers.add(consumer)
        if start_message_id == MessageId.latest and start_message_id_inclusive:
            # As the C++ client: "latest, inclusive" means the last message already there.
            last = await consumer.get_last_message_id()
            if last.entry_id() >= 0:
                await consumer.seek(last)
        return Reader(consumer, start_message_id, start_message_id_inclusive)

    # ------------------------------------------------------------------ shutdown

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        await asyncio.gather(
            *(p.close() for p in list(self._producers)),
            *(c.close() for c in list(self._consumers)),
            return_exceptions=True,
        )
        await self._pool.close()

    def statistics(self) -> ClientStatistics:
        return ClientStatistics(len(self._pool), len(self._producers), len(self._consumers))


__all__ = ["Client"]
