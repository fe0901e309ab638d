"""``magnetar.client``: an asyncio-first Pulsar client (names follow the official Python client).

    from magnetar.client import Client, ConsumerType

    async with Client("pulsar://localhost:6650") as client:
        producer = await client.create_producer("my-topic")
        await producer.send(b"hello")
        consumer = await client.subscribe("my-topic", "sub", consumer_type=ConsumerType.Shared)
        msg = await consumer.receive(timeout_millis=5000)
        await consumer.acknowledge(msg)

A blocking facade with the same names lives in ``magnetar.client.sync``. The wire codec is
``magnetar.client.protocol``. See ``docs/client.md``.
"""

from __future__ import annotations

from magnetar.client._client import Client
from magnetar.client._clock import Clock, SystemClock
from magnetar.client._config import (
    Authentication,
    AuthenticationToken,
    BatchingType,
    CompressionType,
    ConsumerBatchReceivePolicy,
    ConsumerDeadLetterPolicy,
    ConsumerKeySharedPolicy,
    ConsumerType,
    InitialPosition,
    KeySharedMode,
    MultiplierRedeliveryBackoff,
    PartitionsRoutingMode,
    ProducerAccessMode,
    RedeliveryBackoff,
)
from magnetar.client._consumer import Consumer
from magnetar.client._errors import (
    AlreadyClosed,
    AuthenticationError,
    AuthorizationError,
    BrokerMetadataError,
    BrokerPersistenceError,
    ChecksumError,
    ConnectError,
    ConsumerAssignError,
    ConsumerBusy,
    ConsumerNotFound,
    CumulativeAcknowledgementNotAllowedError,
    Disconnected,
    IncompatibleSchema,
    InvalidConfiguration,
    InvalidTopicName,
    InvalidUrl,
    MessageTooBig,
    NotAllowedError,
    NotConnected,
    OperationNotSupported,
    ProducerBlockedQuotaExceededError,
    ProducerBlockedQuotaExceededException,
    ProducerBusy,
    ProducerFenced,
    ProducerQueueIsFull,
    PulsarException,
    ServiceUnitNotReady,
    SubscriptionNotFound,
    Timeout,
    TooManyLookupRequestException,
    TopicNotFound,
    TopicTerminated,
    UnknownError,
    UnsupportedVersionError,
    for_code,
)
from magnetar.client._message import Message, MessageId
from magnetar.client._producer import Producer
from magnetar.client._reader import Reader
from magnetar.client._routing import HashingScheme, hash_key

__all__ = [
    "AlreadyClosed",
    "Authentication",
    "AuthenticationError",
    "AuthenticationToken",
    "AuthorizationError",
    "BatchingType",
    "BrokerMetadataError",
    "BrokerPersistenceError",
    "ChecksumError",
    "Client",
    "Clock",
    "CompressionType",
    "ConnectError",
    "Consumer",
    "ConsumerAssignError",
    "ConsumerBatchReceivePolicy",
    "ConsumerBusy",
    "ConsumerDeadLetterPolicy",
    "ConsumerKeySharedPolicy",
    "ConsumerNotFound",
    "ConsumerType",
    "CumulativeAcknowledgementNotAllowedError",
    "Disconnected",
    "HashingScheme",
    "IncompatibleSchema",
    "InitialPosition",
    "InvalidConfiguration",
    "InvalidTopicName",
    "InvalidUrl",
    "KeySharedMode",
    "Message",
    "MessageId",
    "MessageTooBig",
    "MultiplierRedeliveryBackoff",
    "NotAllowedError",
    "NotConnected",
    "OperationNotSupported",
    "PartitionsRoutingMode",
    "Producer",
    "ProducerAccessMode",
    "ProducerBlockedQuotaExceededError",
    "ProducerBlockedQuotaExceededException",
    "ProducerBusy",
    "ProducerFenced",
    "ProducerQueueIsFull",
    "PulsarException",
    "Reader",
    "RedeliveryBackoff",
    "ServiceUnitNotReady",
    "SubscriptionNotFound",
    "SystemClock",
    "Timeout",
    "TooManyLookupRequestException",
    "TopicNotFound",
    "TopicTerminated",
    "UnknownError",
    "UnsupportedVersionError",
    "for_code",
    "hash_key",
]
