"""Exceptions of the protocol codec and the broker's ``ServerError`` codes.

Owns: the codec's exception tree (h11 style) and the table of ``ServerError`` wire codes with
how the official C++ client treats each one (retriable or fatal).

- ``LocalProtocolError``: *we* tried to do something the protocol forbids (send a command in
  the wrong direction, a command with missing required fields, before the handshake...). It is
  a bug in our code; the connection state is unchanged and the bytes were not produced.
- ``RemoteProtocolError``: the *peer* sent bytes that break the protocol (bad framing, bad
  protobuf, oversize frame, ...). Fatal for the connection, except ``ChecksumMismatchError``,
  which is per frame: framing is intact, the frame was consumed, decoding may continue (the
  broker answers SEND_ERROR(ChecksumError), a client acks with validation_error).
- ``ServerError`` (IntEnum) mirrors the proto enum; ``BrokerError`` is an exception carrying a
  code + message, ``retriable`` taken from the C++ client's classification.

Must not know: sockets, asyncio, brokers or clients.
"""

from __future__ import annotations

import enum
from typing import Any


class ProtocolError(Exception):
    """Base of every codec error."""


class LocalProtocolError(ProtocolError):
    """We broke the protocol (a bug on our side); nothing was sent."""


class RemoteProtocolError(ProtocolError):
    """The peer broke the protocol; the connection should be closed (unless ``recoverable``)."""

    recoverable: bool = False


class FrameTooLargeError(RemoteProtocolError):
    """A frame announced more bytes than the configured maximum frame size."""

    def __init__(self, frame_size: int, max_frame_size: int) -> None:
        super().__init__(f"frame of {frame_size} bytes exceeds the maximum of {max_frame_size}")
        self.frame_size = frame_size
        self.max_frame_size = max_frame_size


class ChecksumMismatchError(RemoteProtocolError):
    """CRC32C of a payload frame did not match; only this frame is lost.

    ``event`` carries the decoded command (e.g. ``CommandSend`` with producer_id/sequence_id);
    its ``metadata`` is ``None`` because corrupt bytes are not parsed. The connection stays usable.
    """

    recoverable = True

    def __init__(self, expected: int, actual: int, event: Any) -> None:
        # event: the ``PayloadCommand`` whose checksum failed (typed Any: _framing imports us)
        super().__init__(f"checksum mismatch: frame says {expected:#010x}, computed {actual:#010x}")
        self.expected = expected
        self.actual = actual
        self.event = event


class BatchDeserializeError(RemoteProtocolError):
    """A batched payload does not match its declared layout."""


class InvalidTopicNameError(ValueError):
    """A topic name Pulsar would refuse; the message is Pulsar's wording."""


class ServerError(enum.IntEnum):
    """Wire codes of ``ServerError`` (same values as the generated proto enum)."""

    UnknownError = 0
    MetadataError = 1
    PersistenceError = 2
    AuthenticationError = 3
    AuthorizationError = 4
    ConsumerBusy = 5
    ServiceNotReady = 6
    ProducerBlockedQuotaExceededError = 7
    ProducerBlockedQuotaExceededException = 8
    ChecksumError = 9
    UnsupportedVersionError = 10
    TopicNotFound = 11
    SubscriptionNotFound = 12
    ConsumerNotFound = 13
    TooManyRequests = 14
    TopicTerminatedError = 15
    ProducerBusy = 16
    InvalidTopicName = 17
    IncompatibleSchema = 18
    ConsumerAssignError = 19
    TransactionCoordinatorNotFound = 20
    InvalidTxnStatus = 21
    NotAllowedError = 22
    TransactionConflict = 23
    TransactionNotFound = 24
    ProducerFenced = 25

    @property
    def retriable(self) -> bool:
        """Whether the official C++ client retries an operation that failed with this code."""
        return self in _RETRIABLE


# reference/pulsar-protocol.md §2.3 (C++ ResultUtils.h isResultRetryable).
_RETRIABLE = frozenset(
    {
        ServerError.UnknownError,
        ServerError.MetadataError,
        ServerError.PersistenceError,
        ServerError.ServiceNotReady,
        ServerError.UnsupportedVersionError,
        ServerError.SubscriptionNotFound,
        ServerError.ConsumerNotFound,
        ServerError.InvalidTopicName,
        ServerError.TransactionCoordinatorNotFound,
        ServerError.InvalidTxnStatus,
        ServerError.TransactionConflict,
        ServerError.TransactionNotFound,
    }
)


class BrokerError(Exception):
    """An error with a ``ServerError`` wire code (from a broker reply, or to send as one)."""

    def __init__(self, code: ServerError | int, message: str = "") -> None:
        try:
            self.code: ServerError = ServerError(code)
        except ValueError:
            self.code = ServerError.UnknownError
        self.message = message
        super().__init__(f"{self.code.name}: {message}" if message else self.code.name)

    @property
    def retriable(self) -> bool:
        return self.code.retriable

    @classmethod
    def for_code(cls, code: ServerError | int, message: str = "") -> BrokerError:
        return cls(code, message)
