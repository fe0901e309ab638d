"""The Pulsar binary protocol as a sans-I/O codec, shared by the broker and the client.

Decode: ``Connection(Role.BROKER).receive_data(b)`` then ``next_event()`` until ``NEED_DATA``;
events are ``Command`` (``.type``, ``.base``, ``.command``) or ``PayloadCommand`` (SEND/MESSAGE:
also ``.metadata``, ``.headers_and_payload``, ``.payload``), or ``ConnectionClosed``. The
broker's hot path, ``next_command()``, is the same loop without event objects: the
``BaseCommand``, a SEND's payload section left in ``headers_and_payload`` for
``checksum_matches`` and ``entry_metadata``.
Encode: ``Connection.send(commands.success(request_id))`` -> bytes; for dispatch and
receipts ``Connection.send_message`` / ``send_messages`` and ``send_receipt`` /
``send_receipts`` (stored entry bytes around a hand-encoded command, no protobuf objects).

No I/O here: never import asyncio, sockets or anything of the broker.
"""

from __future__ import annotations

from . import _commands as commands
from ._batch import (
    ChunkInfo,
    SingleMessage,
    batch_metadata,
    build_batch,
    chunk_info,
    encode_plain_batch,
    is_batch,
    parse_batch,
    scan_batch,
    serialize_single_message,
    split_batch,
)
from ._connection import (
    NEED_DATA,
    PROTOCOL_VERSION_MAX,
    Connection,
    ConnectionClosed,
    ConnectionState,
    ConnectionStatistics,
    Event,
    Role,
    Sentinel,
)
from ._errors import (
    BatchDeserializeError,
    BrokerError,
    ChecksumMismatchError,
    FrameTooLargeError,
    InvalidTopicNameError,
    LocalProtocolError,
    ProtocolError,
    RemoteProtocolError,
    ServerError,
)
from ._framing import (
    DEFAULT_MAX_FRAME_SIZE,
    DEFAULT_MAX_MESSAGE_SIZE,
    FRAME_PADDING,
    MAGIC_BROKER_ENTRY_METADATA,
    MAGIC_CRC32C,
    MAGIC_CRC32C_BYTES,
    Command,
    PayloadCommand,
    StoredEntry,
    checksum_matches,
    crc32c,
    decode_command,
    decode_event,
    decode_frame_body,
    encode_command,
    encode_headers_and_payload,
    encode_message_frame,
    encode_message_frames,
    encode_payload_command,
    encode_send_receipt_frame,
    encode_send_receipt_frames,
    encode_varint,
    entry_metadata,
    entry_num_messages,
    parse_entry,
    parse_entry_metadata,
    repair_strings,
    serialize_command,
)
from ._hashing import (
    KEY_SHARED_HASH_RANGE_SIZE,
    NONE_KEY,
    key_shared_slot,
    murmur3_32_hash,
    sticky_key,
)
from ._message_id import INT64_MAX, MessageId, to_int64, to_uint64
from ._topic import (
    DEFAULT_NAMESPACE,
    PARTITIONED_TOPIC_SUFFIX,
    PUBLIC_TENANT,
    TopicName,
    partition_index_of,
)
from ._types import (
    BROKER_TO_CLIENT,
    CLIENT_TO_BROKER,
    CPP_CLIENT_HANDLED_TYPES,
    FIELD_NAME,
    PAYLOAD_TYPES,
    CommandType,
)
from .proto import pulsar_api_pb2 as pb

__all__ = [
    "BROKER_TO_CLIENT",
    "CLIENT_TO_BROKER",
    "CPP_CLIENT_HANDLED_TYPES",
    "DEFAULT_MAX_FRAME_SIZE",
    "DEFAULT_MAX_MESSAGE_SIZE",
    "DEFAULT_NAMESPACE",
    "FIELD_NAME",
    "FRAME_PADDING",
    "INT64_MAX",
    "KEY_SHARED_HASH_RANGE_SIZE",
    "MAGIC_BROKER_ENTRY_METADATA",
    "MAGIC_CRC32C",
    "MAGIC_CRC32C_BYTES",
    "NEED_DATA",
    "NONE_KEY",
    "PARTITIONED_TOPIC_SUFFIX",
    "PAYLOAD_TYPES",
    "PROTOCOL_VERSION_MAX",
    "PUBLIC_TENANT",
    "BatchDeserializeError",
    "BrokerError",
    "ChecksumMismatchError",
    "ChunkInfo",
    "Command",
    "CommandType",
    "Connection",
    "ConnectionClosed",
    "ConnectionState",
    "ConnectionStatistics",
    "Event",
    "FrameTooLargeError",
    "InvalidTopicNameError",
    "LocalProtocolError",
    "MessageId",
    "PayloadCommand",
    "ProtocolError",
    "RemoteProtocolError",
    "Role",
    "Sentinel",
    "ServerError",
    "SingleMessage",
    "StoredEntry",
    "TopicName",
    "batch_metadata",
    "build_batch",
    "checksum_matches",
    "chunk_info",
    "commands",
    "crc32c",
    "decode_command",
    "decode_event",
    "decode_frame_body",
    "encode_command",
    "encode_headers_and_payload",
    "encode_message_frame",
    "encode_message_frames",
    "encode_payload_command",
    "encode_plain_batch",
    "encode_send_receipt_frame",
    "encode_send_receipt_frames",
    "encode_varint",
    "entry_metadata",
    "entry_num_messages",
    "is_batch",
    "key_shared_slot",
    "murmur3_32_hash",
    "parse_batch",
    "parse_entry",
    "parse_entry_metadata",
    "partition_index_of",
    "pb",
    "repair_strings",
    "scan_batch",
    "serialize_command",
    "serialize_single_message",
    "split_batch",
    "sticky_key",
    "to_int64",
    "to_uint64",
]
