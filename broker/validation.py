"""What a client sends is checked here before the broker acts on it or stores it.

Owns: the rules that keep one hostile request from poisoning stored data or costing work out
of proportion to its size:
- ``check_entry``: a SEND's headers-and-payload must carry a ``MessageMetadata`` with its
  required fields (producer name, sequence id, publish time), and the number of messages it
  declares (the SEND's ``num_messages`` and the metadata's ``num_messages_in_batch``) must be
  at least 1 and at most what its bytes can hold: every message of a batch takes at least
  ``MIN_BATCHED_MESSAGE_BYTES`` (a 4-byte size and a ``SingleMessageMetadata`` with its
  required ``payload_size``), counted on the uncompressed size (itself capped at the maximum
  message size, as Pulsar's consumers refuse anything bigger). The entry's message count,
  which the broker remembers and batch acks are bounded by, is then the real one.
- ``check_subscription_name``: the names Pulsar refuses (blank, reserved, control
  characters, too long).
(Invalid UTF-8 in a command's string fields is repaired by the codec's ``decode_command``
before anything here sees a name.)
Invariant: an entry that passes ``check_entry`` is one dispatch can parse.
Pure: no I/O. Must not know: topics, subscriptions, the connection.
"""

from __future__ import annotations

from magnetar.broker.errors import BrokerError, ServerError
from magnetar.client.protocol import RemoteProtocolError, entry_metadata
from magnetar.client.protocol.proto import pulsar_api_pb2 as pb

MIN_BATCHED_MESSAGE_BYTES = 6
"""A batched message's least size: 4-byte metadata size + ``payload_size`` (tag, varint)."""


class InvalidEntry(BrokerError, ValueError):
    """A SEND refused before storing, answered with ``code``: by default ChecksumError,
    Pulsar's code for a corrupt message; the official clients fail that one message (any other
    SEND_ERROR makes the C++ core reconnect and resend forever)."""

    code = ServerError.ChecksumError


def check_entry(tail: bytes, send_num_messages: int, max_message_size: int) -> int:
    """Check a SEND's headers-and-payload (checksum already verified) and return the number
    of messages it holds (1 unless it is a batch); raises ``InvalidEntry`` with Pulsar's
    error code when it must not be stored."""
    try:
        md, payload_at = entry_metadata(tail)
    except RemoteProtocolError as exc:
        raise InvalidEntry(f"Invalid message metadata: {exc}") from None
    n = md.num_messages_in_batch if md.HasField("num_messages_in_batch") else 1
    if md.compression != pb.NONE:  # the bound counts the uncompressed size
        bound = max(1, min(md.uncompressed_size, max_message_size) // MIN_BATCHED_MESSAGE_BYTES)
    else:
        bound = max(1, (len(tail) - payload_at) // MIN_BATCHED_MESSAGE_BYTES)
    if not 1 <= n <= bound:
        raise InvalidEntry(
            f"Invalid num_messages_in_batch {n}: the entry holds at most {bound} messages"
        )
    if not 1 <= send_num_messages <= bound:
        raise InvalidEntry(
            f"Invalid num_messages {send_num_messages}: the entry holds at most {bound} messages"
        )
    if md.HasField("num_chunks_from_msg") and not (
        md.num_chunks_from_msg >= 1 and 0 <= md.chunk_id < md.num_chunks_from_msg
    ):
        raise InvalidEntry(f"Invalid chunk {md.chunk_id} of {md.num_chunks_from_msg} chunks")
    return n


SUBSCRIPTION_NAME_MAX = 1024
RESERVED_SUBSCRIPTION_PREFIXES = ("pulsar.repl.", "pulsar.dedup")
"""Pulsar's replicator cursors and deduplication cursor: never a client's subscription."""


class InvalidSubscriptionName(BrokerError, ValueError):
    """A subscription name Pulsar refuses, answered with ``code``."""

    code = ServerError.InvalidTopicName


def check_subscription_name(name: str) -> None:
    """Raise ``InvalidSubscriptionName`` for a name Pulsar refuses: blank ("Empty
    subscription name"), reserved (``pulsar.repl.*``, ``pulsar.dedup``), or one that holds
    a NUL or other control character, or is longer than ``SUBSCRIPTION_NAME_MAX``. Any other
    name is stored safely: names are encoded in metadata paths."""
    if not name or not name.strip():
        raise InvalidSubscriptionName("Empty subscription name")
    if len(name) > SUBSCRIPTION_NAME_MAX or any(c < " " or c == "\x7f" for c in name):
        raise InvalidSubscriptionName(f"Invalid subscription name {name[:100]!r}")
    if name.startswith(RESERVED_SUBSCRIPTION_PREFIXES):
        raise InvalidSubscriptionName(
            f"Subscription with reserved subscription name attempted: {name}"
        )


__all__ = [
    "MIN_BATCHED_MESSAGE_BYTES",
    "RESERVED_SUBSCRIPTION_PREFIXES",
    "SUBSCRIPTION_NAME_MAX",
    "InvalidEntry",
    "InvalidSubscriptionName",
    "check_entry",
    "check_subscription_name",
]
