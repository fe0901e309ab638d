"""The client's exception tree, mirroring the official client's ``pulsar.Result`` codes.

Owns: ``PulsarException`` and one subclass per result the application can see (named as in the
official Python client: ``Timeout``, ``ConsumerBusy``, ``TopicNotFound``...), each with a
``retriable`` flag (the C++ client's classification, reference §2.3), and ``for_code()`` which
translates a broker ``ServerError`` into the matching exception. Codec errors
(``RemoteProtocolError``) and OS errors are translated into ``ConnectError`` at the connection
boundary; nothing else escapes the client.

Must not know: sockets, asyncio, producers or consumers.
"""

from __future__ import annotations

from magnetar.client.protocol import ServerError


class PulsarException(Exception):
    """Base of every client error. ``retriable``: the operation may succeed if retried."""

    retriable: bool = False
    code: ServerError | None = None

    def __init__(self, message: str = "") -> None:
        super().__init__(message or type(self).__name__)
        self.message = message


class UnknownError(PulsarException):
    retriable = True


class Timeout(PulsarException):
    """The operation did not complete within the operation/send timeout."""


class ConnectError(PulsarException):
    """A connection could not be made or was lost while the operation waited on it."""

    retriable = True


class Disconnected(ConnectError):
    """The connection was closed while a request was pending."""


class NotConnected(PulsarException):
    retriable = True


class AlreadyClosed(PulsarException):
    """The client, producer or consumer was closed."""


class InvalidConfiguration(PulsarException):
    pass


class InvalidUrl(InvalidConfiguration):
    pass


class InvalidTopicName(PulsarException):
    pass


class LookupError_(PulsarException):
    retriable = True


class BrokerMetadataError(PulsarException):
    retriable = True


class BrokerPersistenceError(PulsarException):
    retriable = True


class ServiceUnitNotReady(PulsarException):
    retriable = True


class AuthenticationError(PulsarException):
    pass


class AuthorizationError(PulsarException):
    pass


class ConsumerBusy(PulsarException):
    pass


class ProducerBusy(PulsarException):
    pass


class ProducerFenced(PulsarException):
    pass


class ProducerBlockedQuotaExceededError(PulsarException):
    pass


class ProducerBlockedQuotaExceededException(PulsarException):
    pass


class ProducerQueueIsFull(PulsarException):
    """``send_async`` with ``block_if_queue_full=False`` found the pending queue full."""


class MessageTooBig(PulsarException):
    pass


class ChecksumError(PulsarException):
    pass


class UnsupportedVersionError(PulsarException):
    retriable = True


class TopicNotFound(PulsarException):
    pass


class SubscriptionNotFound(PulsarException):
    retriable = True


class ConsumerNotFound(PulsarException):
    retriable = True


class TooManyLookupRequestException(PulsarException):
    pass


class TopicTerminated(PulsarException):
    pass


class IncompatibleSchema(PulsarException):
    pass


class ConsumerAssignError(PulsarException):
    pass


class NotAllowedError(PulsarException):
    pass


class OperationNotSupported(PulsarException):
    pass


class CumulativeAcknowledgementNotAllowedError(PulsarException):
    pass


class TransactionError(PulsarException):
    retriable = True


_BY_CODE: dict[ServerError, type[PulsarException]] = {
    ServerError.UnknownError: UnknownError,
    ServerError.MetadataError: BrokerMetadataError,
    ServerError.PersistenceError: BrokerPersistenceError,
    ServerError.AuthenticationError: AuthenticationError,
    ServerError.AuthorizationError: AuthorizationError,
    ServerError.ConsumerBusy: ConsumerBusy,
    ServerError.ServiceNotReady: ServiceUnitNotReady,
    ServerError.ProducerBlockedQuotaExceededError: ProducerBlockedQuotaExceededError,
    ServerError.ProducerBlockedQuotaExceededException: ProducerBlockedQuotaExceededException,
    ServerError.ChecksumError: ChecksumError,
    ServerError.UnsupportedVersionError: UnsupportedVersionError,
    ServerError.TopicNotFound: TopicNotFound,
    ServerError.SubscriptionNotFound: SubscriptionNotFound,
    ServerError.ConsumerNotFound: ConsumerNotFound,
    ServerError.TooManyRequests: TooManyLookupRequestException,
    ServerError.TopicTerminatedError: TopicTerminated,
    ServerError.ProducerBusy: ProducerBusy,
    ServerError.InvalidTopicName: InvalidTopicName,
    ServerError.IncompatibleSchema: IncompatibleSchema,
    ServerError.ConsumerAssignError: ConsumerAssignError,
    ServerError.TransactionCoordinatorNotFound: TransactionError,
    ServerError.InvalidTxnStatus: TransactionError,
    ServerError.NotAllowedError: NotAllowedError,
    ServerError.TransactionConflict: TransactionError,
    ServerError.TransactionNotFound: TransactionError,
    ServerError.ProducerFenced: ProducerFenced,
}


def for_code(code: int, message: str = "") -> PulsarException:
    """The exception for a broker ``ServerError`` code (unknown codes give ``UnknownError``).

    ``retriable`` follows the code's own classification (``ServerError.retriable``).
    """
    try:
        server_error = ServerError(code)
    except ValueError:
        server_error = ServerError.UnknownError
    exc = _BY_CODE.get(server_error, UnknownError)(message)
    exc.code = server_error
    return exc


__all__ = [
    "AlreadyClosed",
    "AuthenticationError",
    "AuthorizationError",
    "BrokerMetadataError",
    "BrokerPersistenceError",
    "ChecksumError",
    "ConnectError",
    "ConsumerAssignError",
    "ConsumerBusy",
    "ConsumerNotFound",
    "CumulativeAcknowledgementNotAllowedError",
    "Disconnected",
    "IncompatibleSchema",
    "InvalidConfiguration",
    "InvalidTopicName",
    "InvalidUrl",
    "LookupError_",
    "MessageTooBig",
    "NotAllowedError",
    "NotConnected",
    "OperationNotSupported",
    "ProducerBlockedQuotaExceededError",
    "ProducerBlockedQuotaExceededException",
    "ProducerBusy",
    "ProducerFenced",
    "ProducerQueueIsFull",
    "PulsarException",
    "ServiceUnitNotReady",
    "SubscriptionNotFound",
    "Timeout",
    "TooManyLookupRequestException",
    "TopicNotFound",
    "TopicTerminated",
    "TransactionError",
    "UnknownError",
    "UnsupportedVersionError",
    "for_code",
]
