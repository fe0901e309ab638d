"""Typed errors of the bookie, shared by the storage node, its gRPC service and ``BookieClient``.

Owns: the exception tree and the status codes carried on the wire (BookKeeper's codes, so
operators recognise them). grpc and rocksdict exceptions are translated into these where
they are caught and never escape. Must not know: transport details.
"""

from __future__ import annotations

import enum
from typing import ClassVar


class StatusCode(enum.IntEnum):
    OK = 0
    NO_LEDGER = 402
    NO_ENTRY = 403
    BAD_REQUEST = 404
    IO_ERROR = 501
    UNAUTHORIZED = 502  # master key mismatch
    FENCED = 504
    READ_ONLY = 505
    TOO_MANY_REQUESTS = 506
    ENTRY_TOO_LARGE = 507
    TIMEOUT = 508
    UNAVAILABLE = 509  # the bookie could not be reached (client side only)
    CORRUPT = 510  # checksum mismatch detected


class BookieError(Exception):
    """Base of bookie errors: ``code`` is the wire status; ``retriable`` if a retry may work."""

    code: ClassVar[StatusCode] = StatusCode.IO_ERROR
    retriable: ClassVar[bool] = False
    _registry: ClassVar[dict[StatusCode, type[BookieError]]] = {}

    def __init_subclass__(cls, **kwargs: object) -> None:
        super().__init_subclass__(**kwargs)
        BookieError._registry[cls.code] = cls

    @classmethod
    def for_code(cls, code: int, message: str = "") -> BookieError:
        try:
            klass = cls._registry[StatusCode(code)]
        except (KeyError, ValueError):
            klass = BookieIOError
        return klass(message or f"bookie error {code}")


class BookieIOError(BookieError):
    code = StatusCode.IO_ERROR


class NoLedger(BookieError):
    code = StatusCode.NO_LEDGER


class NoEntry(BookieError):
    code = StatusCode.NO_ENTRY


class BadRequest(BookieError):
    code = StatusCode.BAD_REQUEST


class Unauthorized(BookieError):
    """The master key does not match the one the ledger was created with, or the bookie
    refused the client's role (its certificate's CN is not in ``authorized_roles``)."""

    code = StatusCode.UNAUTHORIZED


class Fenced(BookieError):
    """The ledger is fenced: a new owner has taken it over; this writer must stop."""

    code = StatusCode.FENCED


class ReadOnly(BookieError):
    """The bookie is read-only (disk full or operator choice); writes go elsewhere."""

    code = StatusCode.READ_ONLY
    retriable = True


class TooManyRequests(BookieError):
    code = StatusCode.TOO_MANY_REQUESTS
    retriable = True


class EntryTooLarge(BookieError):
    code = StatusCode.ENTRY_TOO_LARGE


class BookieTimeout(BookieError):
    code = StatusCode.TIMEOUT
    retriable = True


class BookieUnavailable(BookieError):
    """The bookie could not be reached or the stream broke."""

    code = StatusCode.UNAVAILABLE
    retriable = True


class CorruptEntry(BookieError):
    """An entry failed its checksum."""

    code = StatusCode.CORRUPT


__all__ = [
    "BadRequest",
    "BookieError",
    "BookieIOError",
    "BookieTimeout",
    "BookieUnavailable",
    "CorruptEntry",
    "EntryTooLarge",
    "Fenced",
    "NoEntry",
    "NoLedger",
    "ReadOnly",
    "StatusCode",
    "TooManyRequests",
    "Unauthorized",
]
