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

The package is imported lazily (PEP 562): ``import magnetar.client`` loads nothing heavy, and
each public name imports its module on first use, so tools built on the package (``magctl``)
start fast. ``import *`` and ``from magnetar.client import Client`` behave as before.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from magnetar.client._client import Client
    from magnetar.client._config import (
        Authentication,
        AuthenticationBasic,
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
    from magnetar.client._message_batch import MessageBatch
    from magnetar.client._producer import Producer, SentMessageIds
    from magnetar.client._reader import Reader
    from magnetar.client._routing import HashingScheme, hash_key
    from magnetar.clock import Clock, SystemClock

_LAZY: dict[str, str] = {
    "Client": "magnetar.client._client",
    "Clock": "magnetar.clock",
    "SystemClock": "magnetar.clock",
    "Authentication": "magnetar.client._config",
    "AuthenticationBasic": "magnetar.client._config",
    "AuthenticationToken": "magnetar.client._config",
    "BatchingType": "magnetar.client._config",
    "CompressionType": "magnetar.client._config",
    "ConsumerBatchReceivePolicy": "magnetar.client._config",
    "ConsumerDeadLetterPolicy": "magnetar.client._config",
    "ConsumerKeySharedPolicy": "magnetar.client._config",
    "ConsumerType": "magnetar.client._config",
    "InitialPosition": "magnetar.client._config",
    "KeySharedMode": "magnetar.client._config",
    "MultiplierRedeliveryBackoff": "magnetar.client._config",
    "PartitionsRoutingMode": "magnetar.client._config",
    "ProducerAccessMode": "magnetar.client._config",
    "RedeliveryBackoff": "magnetar.client._config",
    "Consumer": "magnetar.client._consumer",
    "AlreadyClosed": "magnetar.client._errors",
    "AuthenticationError": "magnetar.client._errors",
    "AuthorizationError": "magnetar.client._errors",
    "BrokerMetadataError": "magnetar.client._errors",
    "BrokerPersistenceError": "magnetar.client._errors",
    "ChecksumError": "magnetar.client._errors",
    "ConnectError": "magnetar.client._errors",
    "ConsumerAssignError": "magnetar.client._errors",
    "ConsumerBusy": "magnetar.client._errors",
    "ConsumerNotFound": "magnetar.client._errors",
    "CumulativeAcknowledgementNotAllowedError": "magnetar.client._errors",
    "Disconnected": "magnetar.client._errors",
    "IncompatibleSchema": "magnetar.client._errors",
    "InvalidConfiguration": "magnetar.client._errors",
    "InvalidTopicName": "magnetar.client._errors",
    "InvalidUrl": "magnetar.client._errors",
    "MessageTooBig": "magnetar.client._errors",
    "NotAllowedError": "magnetar.client._errors",
    "NotConnected": "magnetar.client._errors",
    "OperationNotSupported": "magnetar.client._errors",
    "ProducerBlockedQuotaExceededError": "magnetar.client._errors",
    "ProducerBlockedQuotaExceededException": "magnetar.client._errors",
    "ProducerBusy": "magnetar.client._errors",
    "ProducerFenced": "magnetar.client._errors",
    "ProducerQueueIsFull": "magnetar.client._errors",
    "PulsarException": "magnetar.client._errors",
    "ServiceUnitNotReady": "magnetar.client._errors",
    "SubscriptionNotFound": "magnetar.client._errors",
    "Timeout": "magnetar.client._errors",
    "TooManyLookupRequestException": "magnetar.client._errors",
    "TopicNotFound": "magnetar.client._errors",
    "TopicTerminated": "magnetar.client._errors",
    "UnknownError": "magnetar.client._errors",
    "UnsupportedVersionError": "magnetar.client._errors",
    "for_code": "magnetar.client._errors",
    "Message": "magnetar.client._message",
    "MessageId": "magnetar.client._message",
    "MessageBatch": "magnetar.client._message_batch",
    "SentMessageIds": "magnetar.client._producer",
    "Producer": "magnetar.client._producer",
    "Reader": "magnetar.client._reader",
    "HashingScheme": "magnetar.client._routing",
    "hash_key": "magnetar.client._routing",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *_LAZY])


__all__ = [
    "AlreadyClosed",
    "Authentication",
    "AuthenticationBasic",
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
    "MessageBatch",
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
    "SentMessageIds",
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
