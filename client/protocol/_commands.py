"""Builders of BaseCommand messages (pure), with the presence rules the C++ client needs.

Owns: ``make_command`` (any type from keyword fields) and named builders for the commands a
broker sends and the common ones a client sends. Every builder returns a complete
``BaseCommand`` ready for ``Connection.send``. Ids that may be -1 (request ids of
broker-initiated closes, message ids) are accepted signed and written as uint64.

Presence rules encoded here (reference §5): PARTITIONED_METADATA_RESPONSE and LOOKUP_RESPONSE
always carry ``response``; CONNECTED always carries ``protocol_version``; ERROR/SEND_ERROR always
carry ``message``; PRODUCER_SUCCESS carries ``last_sequence_id`` (-1 for a fresh producer);
PING/PONG carry their empty body.

Must not know: sockets, topics' state, brokers or clients.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from google.protobuf.message import Message

from ._errors import ServerError
from ._message_id import MessageId, to_uint64
from ._types import FIELD_NAME, CommandType
from .proto import pulsar_api_pb2 as pb

CommandLike = pb.BaseCommand

_SubType = pb.CommandSubscribe.SubType
_InitialPosition = pb.CommandSubscribe.InitialPosition


def make_command(
    ctype: CommandType, body: Message | None = None, /, **fields: Any
) -> pb.BaseCommand:
    """A BaseCommand of ``ctype`` whose body is ``body`` or built from ``fields``.

    ``make_command(CommandType.FLOW, consumer_id=1, messagePermits=1000)``.
    """
    base = pb.BaseCommand(type=_enum(ctype))
    sub: Message = getattr(base, FIELD_NAME[ctype])
    if body is not None:
        sub.CopyFrom(body)
    else:
        sub.CopyFrom(type(sub)(**fields))
    sub.SetInParent()
    return base


def _enum(value: int) -> Any:
    """An enum value for a generated-message field (the stubs want the enum's own type)."""
    return int(value)


def _kv(properties: Mapping[str, str] | None) -> list[pb.KeyValue]:
    return [pb.KeyValue(key=k, value=v) for k, v in (properties or {}).items()]


def _msg_id(message_id: MessageId | pb.MessageIdData) -> pb.MessageIdData:
    return message_id.to_proto() if isinstance(message_id, MessageId) else message_id


# ---------------------------------------------------------------------- both directions


def ping() -> pb.BaseCommand:
    return make_command(CommandType.PING)


def pong() -> pb.BaseCommand:
    return make_command(CommandType.PONG)


def close_producer(
    producer_id: int,
    request_id: int = -1,
    *,
    assigned_broker_service_url: str | None = None,
    assigned_broker_service_url_tls: str | None = None,
) -> pb.BaseCommand:
    """CLOSE_PRODUCER; broker-initiated ones use request_id -1 like Java."""
    cmd = pb.CommandCloseProducer(producer_id=producer_id, request_id=to_uint64(request_id))
    if assigned_broker_service_url is not None:
        cmd.assignedBrokerServiceUrl = assigned_broker_service_url
    if assigned_broker_service_url_tls is not None:
        cmd.assignedBrokerServiceUrlTls = assigned_broker_service_url_tls
    return make_command(CommandType.CLOSE_PRODUCER, cmd)


def close_consumer(
    consumer_id: int,
    request_id: int = -1,
    *,
    assigned_broker_service_url: str | None = None,
    assigned_broker_service_url_tls: str | None = None,
) -> pb.BaseCommand:
    """CLOSE_CONSUMER; broker-initiated ones use request_id -1 like Java."""
    cmd = pb.CommandCloseConsumer(consumer_id=consumer_id, request_id=to_uint64(request_id))
    if assigned_broker_service_url is not None:
        cmd.assignedBrokerServiceUrl = assigned_broker_service_url
    if assigned_broker_service_url_tls is not None:
        cmd.assignedBrokerServiceUrlTls = assigned_broker_service_url_tls
    return make_command(CommandType.CLOSE_CONSUMER, cmd)


# ---------------------------------------------------------------------- broker -> client


def connected(
    server_version: str,
    protocol_version: int,
    *,
    max_message_size: int | None = 5 * 1024 * 1024,
    supports_topic_watchers: bool | None = None,
) -> pb.BaseCommand:
    """CONNECTED; pass ``min(client's protocol_version, ours)`` as ``protocol_version``."""
    cmd = pb.CommandConnected(server_version=server_version, protocol_version=protocol_version)
    if max_message_size is not None:
        cmd.max_message_size = max_message_size
    if supports_topic_watchers is not None:
        cmd.feature_flags.supports_topic_watchers = supports_topic_watchers
    return make_command(CommandType.CONNECTED, cmd)


def success(request_id: int, *, schema: pb.Schema | None = None) -> pb.BaseCommand:
    cmd = pb.CommandSuccess(request_id=to_uint64(request_id))
    if schema is not None:
        cmd.schema.CopyFrom(schema)
    return make_command(CommandType.SUCCESS, cmd)


def error(request_id: int, error: ServerError | int, message: str = "") -> pb.BaseCommand:
    """ERROR for requests matched by the client's generic table (not LOOKUP/METADATA/SCHEMA)."""
    return make_command(
        CommandType.ERROR,
        pb.CommandError(request_id=to_uint64(request_id), error=_enum(error), message=message),
    )


def producer_success(
    request_id: int,
    producer_name: str,
    *,
    last_sequence_id: int = -1,
    schema_version: bytes | None = None,
    topic_epoch: int | None = None,
    producer_ready: bool | None = None,
) -> pb.BaseCommand:
    cmd = pb.CommandProducerSuccess(
        request_id=request_id, producer_name=producer_name, last_sequence_id=last_sequence_id
    )
    if schema_version is not None:
        cmd.schema_version = schema_version
    if topic_epoch is not None:
        cmd.topic_epoch = topic_epoch
    if producer_ready is not None:
        cmd.producer_ready = producer_ready
    return make_command(CommandType.PRODUCER_SUCCESS, cmd)


def send_receipt(
    producer_id: int,
    sequence_id: int,
    message_id: MessageId | pb.MessageIdData,
    *,
    highest_sequence_id: int | None = None,
) -> pb.BaseCommand:
    """SEND_RECEIPT echoing the SEND's sequence_id (first id of a batch)."""
    cmd = pb.CommandSendReceipt(producer_id=producer_id, sequence_id=sequence_id)
    if isinstance(message_id, MessageId):  # Java sends only ledgerId + entryId here
        message_id = message_id.to_proto(with_partition=False, with_batch_index=False)
    cmd.message_id.CopyFrom(message_id)
    if highest_sequence_id is not None:
        cmd.highest_sequence_id = highest_sequence_id
    return make_command(CommandType.SEND_RECEIPT, cmd)


def send_error(
    producer_id: int, sequence_id: int, error: ServerError | int, message: str = ""
) -> pb.BaseCommand:
    """SEND_ERROR; the C++ client drops the connection for anything but ChecksumError."""
    return make_command(
        CommandType.SEND_ERROR,
        pb.CommandSendError(
            producer_id=producer_id,
            sequence_id=sequence_id,
            error=_enum(error),
            message=message,
        ),
    )


def partitioned_metadata_response(request_id: int, partitions: int) -> pb.BaseCommand:
    """Success with ``partitions`` (0 = not partitioned); ``response`` is set explicitly."""
    return make_command(
        CommandType.PARTITIONED_METADATA_RESPONSE,
        pb.CommandPartitionedTopicMetadataResponse(
            request_id=request_id,
            partitions=partitions,
            response=pb.CommandPartitionedTopicMetadataResponse.Success,
        ),
    )


def partitioned_metadata_error(
    request_id: int, error: ServerError | int, message: str = ""
) -> pb.BaseCommand:
    return make_command(
        CommandType.PARTITIONED_METADATA_RESPONSE,
        pb.CommandPartitionedTopicMetadataResponse(
            request_id=request_id,
            response=pb.CommandPartitionedTopicMetadataResponse.Failed,
            error=_enum(error),
            message=message,
        ),
    )


def lookup_response(
    request_id: int,
    broker_service_url: str,
    *,
    broker_service_url_tls: str | None = None,
    redirect: bool = False,
    authoritative: bool = True,
    proxy_through_service_url: bool = False,
) -> pb.BaseCommand:
    """LOOKUP_RESPONSE Connect (or Redirect) to ``broker_service_url`` (``pulsar://host:port``)."""
    kind = pb.CommandLookupTopicResponse
    cmd = kind(
        request_id=request_id,
        brokerServiceUrl=broker_service_url,
        response=kind.Redirect if redirect else kind.Connect,
        authoritative=authoritative,
        proxy_through_service_url=proxy_through_service_url,
    )
    if broker_service_url_tls is not None:
        cmd.brokerServiceUrlTls = broker_service_url_tls
    return make_command(CommandType.LOOKUP_RESPONSE, cmd)


def lookup_error(request_id: int, error: ServerError | int, message: str = "") -> pb.BaseCommand:
    return make_command(
        CommandType.LOOKUP_RESPONSE,
        pb.CommandLookupTopicResponse(
            request_id=request_id,
            response=pb.CommandLookupTopicResponse.Failed,
            error=_enum(error),
            message=message,
        ),
    )


def active_consumer_change(consumer_id: int, is_active: bool) -> pb.BaseCommand:
    return make_command(
        CommandType.ACTIVE_CONSUMER_CHANGE,
        pb.CommandActiveConsumerChange(consumer_id=consumer_id, is_active=is_active),
    )


def get_last_message_id_response(
    request_id: int,
    last_message_id: MessageId | pb.MessageIdData,
    *,
    consumer_mark_delete_position: MessageId | pb.MessageIdData | None = None,
) -> pb.BaseCommand:
    cmd = pb.CommandGetLastMessageIdResponse(request_id=request_id)
    cmd.last_message_id.CopyFrom(_msg_id(last_message_id))
    if consumer_mark_delete_position is not None:
        cmd.consumer_mark_delete_position.CopyFrom(_msg_id(consumer_mark_delete_position))
    return make_command(CommandType.GET_LAST_MESSAGE_ID_RESPONSE, cmd)


def get_topics_of_namespace_response(
    request_id: int,
    topics: Iterable[str],
    *,
    filtered: bool | None = None,
    topics_hash: str | None = None,
    changed: bool | None = None,
) -> pb.BaseCommand:
    cmd = pb.CommandGetTopicsOfNamespaceResponse(request_id=request_id, topics=list(topics))
    if filtered is not None:
        cmd.filtered = filtered
    if topics_hash is not None:
        cmd.topics_hash = topics_hash
    if changed is not None:
        cmd.changed = changed
    return make_command(CommandType.GET_TOPICS_OF_NAMESPACE_RESPONSE, cmd)


def get_schema_response(
    request_id: int, schema: pb.Schema, schema_version: bytes | None = None
) -> pb.BaseCommand:
    cmd = pb.CommandGetSchemaResponse(request_id=request_id)
    cmd.schema.CopyFrom(schema)
    if schema_version is not None:
        cmd.schema_version = schema_version
    return make_command(CommandType.GET_SCHEMA_RESPONSE, cmd)


def get_schema_error(
    request_id: int, error: ServerError | int, message: str = ""
) -> pb.BaseCommand:
    return make_command(
        CommandType.GET_SCHEMA_RESPONSE,
        pb.CommandGetSchemaResponse(
            request_id=request_id,
            error_code=_enum(error),
            error_message=message,
        ),
    )


def get_or_create_schema_response(request_id: int, schema_version: bytes) -> pb.BaseCommand:
    return make_command(
        CommandType.GET_OR_CREATE_SCHEMA_RESPONSE,
        pb.CommandGetOrCreateSchemaResponse(request_id=request_id, schema_version=schema_version),
    )


def get_or_create_schema_error(
    request_id: int, error: ServerError | int, message: str = ""
) -> pb.BaseCommand:
    return make_command(
        CommandType.GET_OR_CREATE_SCHEMA_RESPONSE,
        pb.CommandGetOrCreateSchemaResponse(
            request_id=request_id,
            error_code=_enum(error),
            error_message=message,
        ),
    )


def reached_end_of_topic(consumer_id: int) -> pb.BaseCommand:
    """REACHED_END_OF_TOPIC (a terminated topic); not in ``CPP_CLIENT_HANDLED_TYPES``."""
    return make_command(
        CommandType.REACHED_END_OF_TOPIC, pb.CommandReachedEndOfTopic(consumer_id=consumer_id)
    )


def ack_response(
    consumer_id: int,
    request_id: int,
    *,
    error: ServerError | int | None = None,
    message: str | None = None,
) -> pb.BaseCommand:
    cmd = pb.CommandAckResponse(consumer_id=consumer_id, request_id=request_id)
    if error is not None:
        cmd.error = _enum(error)
    if message is not None:
        cmd.message = message
    return make_command(CommandType.ACK_RESPONSE, cmd)


def consumer_stats_response(request_id: int, **stats: Any) -> pb.BaseCommand:
    """CONSUMER_STATS_RESPONSE with stats fields by their proto names (msgRateOut=...)."""
    return make_command(
        CommandType.CONSUMER_STATS_RESPONSE,
        pb.CommandConsumerStatsResponse(request_id=request_id, **stats),
    )


def consumer_stats_error(
    request_id: int, error: ServerError | int, message: str = ""
) -> pb.BaseCommand:
    return make_command(
        CommandType.CONSUMER_STATS_RESPONSE,
        pb.CommandConsumerStatsResponse(
            request_id=request_id,
            error_code=_enum(error),
            error_message=message,
        ),
    )


def message(
    consumer_id: int,
    message_id: MessageId | pb.MessageIdData,
    *,
    redelivery_count: int = 0,
    ack_set: Iterable[int] = (),
) -> pb.BaseCommand:
    """CommandMessage as protobuf (for ``Connection.send_payload``; the broker's fast path is
    ``Connection.send_message``). ``redelivery_count`` is only written when > 0, like Java."""
    cmd = pb.CommandMessage(consumer_id=consumer_id, ack_set=list(ack_set))
    mid = _msg_id(message_id)
    cmd.message_id.CopyFrom(mid)
    if redelivery_count > 0:
        cmd.redelivery_count = redelivery_count
    return make_command(CommandType.MESSAGE, cmd)


# ---------------------------------------------------------------------- client -> broker


def connect(
    client_version: str,
    *,
    protocol_version: int = 20,
    auth_method_name: str = "none",
    auth_data: bytes | None = None,
    proxy_to_broker_url: str | None = None,
    supports_auth_refresh: bool = True,
    supports_broker_entry_metadata: bool = True,
) -> pb.BaseCommand:
    cmd = pb.CommandConnect(
        client_version=client_version,
        protocol_version=protocol_version,
        auth_method_name=auth_method_name,
    )
    if auth_data is not None:
        cmd.auth_data = auth_data
    if proxy_to_broker_url is not None:
        cmd.proxy_to_broker_url = proxy_to_broker_url
    cmd.feature_flags.supports_auth_refresh = supports_auth_refresh
    cmd.feature_flags.supports_broker_entry_metadata = supports_broker_entry_metadata
    return make_command(CommandType.CONNECT, cmd)


def partitioned_metadata(topic: str, request_id: int) -> pb.BaseCommand:
    return make_command(
        CommandType.PARTITIONED_METADATA,
        pb.CommandPartitionedTopicMetadata(topic=topic, request_id=request_id),
    )


def lookup(
    topic: str, request_id: int, *, authoritative: bool = False, advertised_listener_name: str = ""
) -> pb.BaseCommand:
    return make_command(
        CommandType.LOOKUP,
        pb.CommandLookupTopic(
            topic=topic,
            request_id=request_id,
            authoritative=authoritative,
            advertised_listener_name=advertised_listener_name,
        ),
    )


def producer(
    topic: str,
    producer_id: int,
    request_id: int,
    *,
    producer_name: str | None = None,
    epoch: int = 0,
    access_mode: int = pb.Shared,
    properties: Mapping[str, str] | None = None,
    schema: pb.Schema | None = None,
    initial_subscription_name: str | None = None,
) -> pb.BaseCommand:
    cmd = pb.CommandProducer(
        topic=topic,
        producer_id=producer_id,
        request_id=request_id,
        encrypted=False,
        metadata=_kv(properties),
        epoch=epoch,
        user_provided_producer_name=producer_name is not None,
        producer_access_mode=_enum(access_mode),
    )
    if producer_name is not None:
        cmd.producer_name = producer_name
    if schema is not None:
        cmd.schema.CopyFrom(schema)
    if initial_subscription_name is not None:
        cmd.initial_subscription_name = initial_subscription_name
    return make_command(CommandType.PRODUCER, cmd)


def send(
    producer_id: int,
    sequence_id: int,
    *,
    num_messages: int | None = None,
    is_chunk: bool = False,
) -> pb.BaseCommand:
    """CommandSend (pair it with metadata + payload in ``Connection.send_payload``)."""
    cmd = pb.CommandSend(producer_id=producer_id, sequence_id=sequence_id)
    if num_messages is not None:
        cmd.num_messages = num_messages
    if is_chunk:
        cmd.is_chunk = True
    return make_command(CommandType.SEND, cmd)


def subscribe(
    topic: str,
    subscription: str,
    consumer_id: int,
    request_id: int,
    *,
    sub_type: int = _SubType.Exclusive,
    consumer_name: str = "",
    priority_level: int = 0,
    durable: bool = True,
    initial_position: int = _InitialPosition.Latest,
    start_message_id: MessageId | None = None,
    read_compacted: bool = False,
    key_shared_meta: pb.KeySharedMeta | None = None,
    properties: Mapping[str, str] | None = None,
    schema: pb.Schema | None = None,
) -> pb.BaseCommand:
    cmd = pb.CommandSubscribe(
        topic=topic,
        subscription=subscription,
        subType=_enum(sub_type),
        consumer_id=consumer_id,
        request_id=request_id,
        consumer_name=consumer_name,
        priority_level=priority_level,
        durable=durable,
        metadata=_kv(properties),
        read_compacted=read_compacted,
        initialPosition=_enum(initial_position),
        replicate_subscription_state=False,
    )
    if start_message_id is not None:
        cmd.start_message_id.CopyFrom(start_message_id.to_proto(with_partition=False))
    if key_shared_meta is not None:
        cmd.keySharedMeta.CopyFrom(key_shared_meta)
    if schema is not None:
        cmd.schema.CopyFrom(schema)
    return make_command(CommandType.SUBSCRIBE, cmd)


def flow(consumer_id: int, message_permits: int) -> pb.BaseCommand:
    return make_command(
        CommandType.FLOW, pb.CommandFlow(consumer_id=consumer_id, messagePermits=message_permits)
    )


def ack(
    consumer_id: int,
    message_ids: Iterable[MessageId | tuple[int, int]],
    *,
    cumulative: bool = False,
    request_id: int | None = None,
) -> pb.BaseCommand:
    """ACK of entries (ledger, entry) as the C++ client sends them (no partition/batch index)."""
    cmd = pb.CommandAck(
        consumer_id=consumer_id,
        ack_type=pb.CommandAck.Cumulative if cumulative else pb.CommandAck.Individual,
    )
    for mid in message_ids:
        ledger, entry = mid.entry if isinstance(mid, MessageId) else mid
        cmd.message_id.add(ledgerId=to_uint64(ledger), entryId=to_uint64(entry))
    if request_id is not None:
        cmd.request_id = request_id
    return make_command(CommandType.ACK, cmd)


def redeliver_unacknowledged_messages(
    consumer_id: int, message_ids: Iterable[MessageId | tuple[int, int]] = ()
) -> pb.BaseCommand:
    """REDELIVER_UNACKNOWLEDGED_MESSAGES; no ids means everything unacked for the consumer."""
    cmd = pb.CommandRedeliverUnacknowledgedMessages(consumer_id=consumer_id)
    for mid in message_ids:
        ledger, entry = mid.entry if isinstance(mid, MessageId) else mid
        cmd.message_ids.add(ledgerId=to_uint64(ledger), entryId=to_uint64(entry))
    return make_command(CommandType.REDELIVER_UNACKNOWLEDGED_MESSAGES, cmd)


def unsubscribe(consumer_id: int, request_id: int) -> pb.BaseCommand:
    return make_command(
        CommandType.UNSUBSCRIBE,
        pb.CommandUnsubscribe(consumer_id=consumer_id, request_id=request_id),
    )


def seek(
    consumer_id: int,
    request_id: int,
    *,
    message_id: MessageId | None = None,
    publish_time_ms: int | None = None,
) -> pb.BaseCommand:
    if (message_id is None) == (publish_time_ms is None):
        raise ValueError("seek needs exactly one of message_id and publish_time_ms")
    cmd = pb.CommandSeek(consumer_id=consumer_id, request_id=request_id)
    if message_id is not None:
        cmd.message_id.CopyFrom(message_id.to_proto(with_partition=False, with_batch_index=False))
    elif publish_time_ms is not None:
        cmd.message_publish_time = publish_time_ms
    return make_command(CommandType.SEEK, cmd)


def get_last_message_id(consumer_id: int, request_id: int) -> pb.BaseCommand:
    return make_command(
        CommandType.GET_LAST_MESSAGE_ID,
        pb.CommandGetLastMessageId(consumer_id=consumer_id, request_id=request_id),
    )


def get_topics_of_namespace(
    request_id: int, namespace: str, *, mode: int = pb.CommandGetTopicsOfNamespace.PERSISTENT
) -> pb.BaseCommand:
    return make_command(
        CommandType.GET_TOPICS_OF_NAMESPACE,
        pb.CommandGetTopicsOfNamespace(
            request_id=request_id, namespace=namespace, mode=_enum(mode)
        ),
    )
