"""Public enums and policy records of the client, named as in the official Python client.

Owns: ``ConsumerType``, ``InitialPosition``, ``CompressionType``, ``PartitionsRoutingMode``,
``BatchingType``, ``ProducerAccessMode``, ``KeySharedMode``, ``ConsumerKeySharedPolicy``,
``ConsumerDeadLetterPolicy``, ``RedeliveryBackoff``/``MultiplierRedeliveryBackoff``,
``AuthenticationToken``. Values of wire enums equal their protobuf numbers.

Must not know: connections, producers, consumers.
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from dataclasses import dataclass


class ConsumerType(enum.IntEnum):
    Exclusive = 0
    Shared = 1
    Failover = 2
    KeyShared = 3
    Key_Shared = 3


class InitialPosition(enum.IntEnum):
    Latest = 0
    Earliest = 1


class CompressionType(enum.IntEnum):
    NONE = 0
    LZ4 = 1
    ZLib = 2
    ZSTD = 3
    SNAPPY = 4
    ZLIB = 2


class PartitionsRoutingMode(enum.IntEnum):
    UseSinglePartition = 0
    RoundRobinDistribution = 1
    CustomPartition = 2


class BatchingType(enum.IntEnum):
    Default = 0
    KeyBased = 1


class ProducerAccessMode(enum.IntEnum):
    Shared = 0
    Exclusive = 1
    WaitForExclusive = 2
    ExclusiveWithFencing = 3


class KeySharedMode(enum.IntEnum):
    AutoSplit = 0
    Sticky = 1


@dataclass(frozen=True, slots=True)
class ConsumerKeySharedPolicy:
    key_shared_mode: KeySharedMode = KeySharedMode.AutoSplit
    allow_out_of_order_delivery: bool = False
    sticky_ranges: tuple[tuple[int, int], ...] = ()


@dataclass(frozen=True, slots=True)
class ConsumerDeadLetterPolicy:
    """Dead-letter (and retry-letter) policy; topics default to ``<topic>-<sub>-DLQ``/``-RETRY``."""

    max_redeliver_count: int
    dead_letter_topic: str | None = None
    initial_subscription_name: str | None = None
    retry_letter_topic: str | None = None

    def __post_init__(self) -> None:
        if self.max_redeliver_count <= 0:
            raise ValueError("max_redeliver_count must be > 0")


@dataclass(frozen=True, slots=True)
class ConsumerBatchReceivePolicy:
    """Limits of ``Consumer.batch_receive``: returns when ``max_num_message`` messages or
    ``max_num_bytes`` bytes are there, or after ``timeout_ms`` (-1 = no limit of that kind)."""

    max_num_message: int = -1
    max_num_bytes: int = 10 * 1024 * 1024
    timeout_ms: int = 100

    def __post_init__(self) -> None:
        if self.max_num_message <= 0 and self.max_num_bytes <= 0 and self.timeout_ms <= 0:
            raise ValueError("a batch receive policy needs at least one limit")


class RedeliveryBackoff:
    """Delay before a message nacked (or timed out) for the n-th time is redelivered."""

    def next_delay_ms(self, redelivery_count: int) -> int:
        raise NotImplementedError


@dataclass(frozen=True, slots=True)
class MultiplierRedeliveryBackoff(RedeliveryBackoff):
    """``min_delay_ms * multiplier ** redelivery_count``, capped at ``max_delay_ms`` (as Java)."""

    min_delay_ms: int = 1000
    max_delay_ms: int = 60_000
    multiplier: float = 2.0

    def next_delay_ms(self, redelivery_count: int) -> int:
        if redelivery_count <= 0:
            return self.min_delay_ms
        delay = self.min_delay_ms * self.multiplier ** min(redelivery_count, 62)
        return int(min(delay, self.max_delay_ms))


class Authentication:
    """Base of authentication providers: ``auth_method_name`` and the bytes for CONNECT."""

    auth_method_name = "none"

    def auth_data(self) -> bytes | None:
        return None


class AuthenticationToken(Authentication):
    """Token authentication (JWT): the token string, or a callable returning a fresh one."""

    auth_method_name = "token"

    def __init__(self, token: str | Callable[[], str]) -> None:
        if not callable(token) and not isinstance(token, str):
            raise TypeError("token must be a string or a callable returning one")
        self._token = token

    def auth_data(self) -> bytes:
        token = self._token() if callable(self._token) else self._token
        return token.encode("utf-8")


class AuthenticationBasic(Authentication):
    """Basic authentication: a user and password, checked by a broker with the ``basic``
    provider (the official client's ``AuthenticationBasic(username, password)``)."""

    auth_method_name = "basic"

    def __init__(self, username: str, password: str) -> None:
        if not isinstance(username, str) or not isinstance(password, str):
            raise TypeError("username and password must be strings")
        if not username or ":" in username:
            raise ValueError("username must be non-empty and must not contain ':'")
        self._data = f"{username}:{password}".encode()

    def auth_data(self) -> bytes:
        return self._data


__all__ = [
    "Authentication",
    "AuthenticationBasic",
    "AuthenticationToken",
    "BatchingType",
    "CompressionType",
    "ConsumerBatchReceivePolicy",
    "ConsumerDeadLetterPolicy",
    "ConsumerKeySharedPolicy",
    "ConsumerType",
    "InitialPosition",
    "KeySharedMode",
    "MultiplierRedeliveryBackoff",
    "PartitionsRoutingMode",
    "ProducerAccessMode",
    "RedeliveryBackoff",
]
