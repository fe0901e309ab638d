"""Command types of the Pulsar protocol and which side may send each one.

Owns: ``CommandType`` (mirror of ``BaseCommand.Type``; a test checks it stays equal to the
generated enum), the field name of each type's sub-message (its field number equals the type
value), and direction tables. ``CPP_CLIENT_HANDLED_TYPES`` is what the official C++ client
(pulsar-client 3.x) accepts from a broker: any other type makes it close the connection, so a
broker-role ``Connection`` refuses to send anything else by default.

Must not know: sockets, asyncio, brokers or clients.
"""

from __future__ import annotations

import enum

from .proto import pulsar_api_pb2 as pb


class CommandType(enum.IntEnum):
    """``BaseCommand.Type``: the value is also the field number of the sub-message."""

    CONNECT = 2
    CONNECTED = 3
    SUBSCRIBE = 4
    PRODUCER = 5
    SEND = 6
    SEND_RECEIPT = 7
    SEND_ERROR = 8
    MESSAGE = 9
    ACK = 10
    FLOW = 11
    UNSUBSCRIBE = 12
    SUCCESS = 13
    ERROR = 14
    CLOSE_PRODUCER = 15
    CLOSE_CONSUMER = 16
    PRODUCER_SUCCESS = 17
    PING = 18
    PONG = 19
    REDELIVER_UNACKNOWLEDGED_MESSAGES = 20
    PARTITIONED_METADATA = 21
    PARTITIONED_METADATA_RESPONSE = 22
    LOOKUP = 23
    LOOKUP_RESPONSE = 24
    CONSUMER_STATS = 25
    CONSUMER_STATS_RESPONSE = 26
    REACHED_END_OF_TOPIC = 27
    SEEK = 28
    GET_LAST_MESSAGE_ID = 29
    GET_LAST_MESSAGE_ID_RESPONSE = 30
    ACTIVE_CONSUMER_CHANGE = 31
    GET_TOPICS_OF_NAMESPACE = 32
    GET_TOPICS_OF_NAMESPACE_RESPONSE = 33
    GET_SCHEMA = 34
    GET_SCHEMA_RESPONSE = 35
    AUTH_CHALLENGE = 36
    AUTH_RESPONSE = 37
    ACK_RESPONSE = 38
    GET_OR_CREATE_SCHEMA = 39
    GET_OR_CREATE_SCHEMA_RESPONSE = 40
    NEW_TXN = 50
    NEW_TXN_RESPONSE = 51
    ADD_PARTITION_TO_TXN = 52
    ADD_PARTITION_TO_TXN_RESPONSE = 53
    ADD_SUBSCRIPTION_TO_TXN = 54
    ADD_SUBSCRIPTION_TO_TXN_RESPONSE = 55
    END_TXN = 56
    END_TXN_RESPONSE = 57
    END_TXN_ON_PARTITION = 58
    END_TXN_ON_PARTITION_RESPONSE = 59
    END_TXN_ON_SUBSCRIPTION = 60
    END_TXN_ON_SUBSCRIPTION_RESPONSE = 61
    TC_CLIENT_CONNECT_REQUEST = 62
    TC_CLIENT_CONNECT_RESPONSE = 63
    WATCH_TOPIC_LIST = 64
    WATCH_TOPIC_LIST_SUCCESS = 65
    WATCH_TOPIC_UPDATE = 66
    WATCH_TOPIC_LIST_CLOSE = 67
    TOPIC_MIGRATED = 68


#: ``BaseCommand`` field name holding the sub-message for each type (field number == type).
FIELD_NAME: dict[CommandType, str] = {
    CommandType(f.number): f.name for f in pb.BaseCommand.DESCRIPTOR.fields if f.number != 1
}

#: Commands that carry a payload section after the command (magic, checksum, metadata, payload).
PAYLOAD_TYPES = frozenset({CommandType.SEND, CommandType.MESSAGE})

#: Commands either side may send.
BOTH_DIRECTIONS = frozenset(
    {CommandType.CLOSE_PRODUCER, CommandType.CLOSE_CONSUMER, CommandType.PING, CommandType.PONG}
)

#: Commands a client sends to a broker (plus ``BOTH_DIRECTIONS``).
CLIENT_TO_BROKER = BOTH_DIRECTIONS | frozenset(
    {
        CommandType.CONNECT,
        CommandType.SUBSCRIBE,
        CommandType.PRODUCER,
        CommandType.SEND,
        CommandType.ACK,
        CommandType.FLOW,
        CommandType.UNSUBSCRIBE,
        CommandType.REDELIVER_UNACKNOWLEDGED_MESSAGES,
        CommandType.PARTITIONED_METADATA,
        CommandType.LOOKUP,
        CommandType.CONSUMER_STATS,
        CommandType.SEEK,
        CommandType.GET_LAST_MESSAGE_ID,
        CommandType.GET_TOPICS_OF_NAMESPACE,
        CommandType.GET_SCHEMA,
        CommandType.AUTH_RESPONSE,
        CommandType.GET_OR_CREATE_SCHEMA,
        CommandType.NEW_TXN,
        CommandType.ADD_PARTITION_TO_TXN,
        CommandType.ADD_SUBSCRIPTION_TO_TXN,
        CommandType.END_TXN,
        CommandType.END_TXN_ON_PARTITION,
        CommandType.END_TXN_ON_SUBSCRIPTION,
        CommandType.TC_CLIENT_CONNECT_REQUEST,
        CommandType.WATCH_TOPIC_LIST,
        CommandType.WATCH_TOPIC_LIST_CLOSE,
    }
)

#: Commands a broker sends to a client (plus ``BOTH_DIRECTIONS``).
BROKER_TO_CLIENT = BOTH_DIRECTIONS | frozenset(t for t in CommandType if t not in CLIENT_TO_BROKER)

#: What the official C++ client handles from a broker (reference §2.1); anything else, and it
#: drops the connection. MESSAGE and CONNECTED are handled on their own paths.
CPP_CLIENT_HANDLED_TYPES = frozenset(
    {
        CommandType.CONNECTED,
        CommandType.MESSAGE,
        CommandType.SEND_RECEIPT,
        CommandType.SEND_ERROR,
        CommandType.SUCCESS,
        CommandType.PARTITIONED_METADATA_RESPONSE,
        CommandType.CONSUMER_STATS_RESPONSE,
        CommandType.LOOKUP_RESPONSE,
        CommandType.PRODUCER_SUCCESS,
        CommandType.ERROR,
        CommandType.TOPIC_MIGRATED,
        CommandType.CLOSE_PRODUCER,
        CommandType.CLOSE_CONSUMER,
        CommandType.PING,
        CommandType.PONG,
        CommandType.AUTH_CHALLENGE,
        CommandType.ACTIVE_CONSUMER_CHANGE,
        CommandType.GET_LAST_MESSAGE_ID_RESPONSE,
        CommandType.GET_TOPICS_OF_NAMESPACE_RESPONSE,
        CommandType.GET_SCHEMA_RESPONSE,
        CommandType.ACK_RESPONSE,
    }
)
