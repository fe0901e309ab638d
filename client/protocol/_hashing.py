"""Hashes Pulsar computes on keys and names (pure functions).

Owns: Murmur3 32-bit as Pulsar's ``Murmur3_32Hash`` (seed 0, result masked with 0x7FFFFFFF so
it is a non-negative Java int), the Key_Shared sticky key of a message and its slot in the
65,536-slot hash space (reference §3.9).

Must not know: consumers, dispatchers.
"""

from __future__ import annotations

import base64
import binascii

import mmh3

from ._errors import RemoteProtocolError
from .proto import pulsar_api_pb2 as pb

#: Size of the Key_Shared hash space (slots are 0..65535).
KEY_SHARED_HASH_RANGE_SIZE = 65536
#: Key used by Key_Shared for messages with neither ordering key nor partition key.
NONE_KEY = b"NONE_KEY"


def murmur3_32_hash(key: bytes | str) -> int:
    """Pulsar's ``Murmur3_32Hash.makeHash``: Murmur3 x86 32-bit, seed 0, & 0x7FFFFFFF."""
    if isinstance(key, str):
        key = key.encode("utf-8")
    return int(mmh3.hash(key, 0, signed=False)) & 0x7FFFFFFF


def sticky_key(metadata: pb.MessageMetadata | pb.SingleMessageMetadata) -> bytes:
    """Key_Shared key: ordering key, else partition key (base64-decoded if flagged), else NONE."""
    if metadata.HasField("ordering_key"):
        return metadata.ordering_key
    if metadata.HasField("partition_key"):
        key = metadata.partition_key
        if not isinstance(key, str):  # protobuf hands back bytes for a non-UTF-8 string field
            raise RemoteProtocolError("partition_key is not valid UTF-8")
        if metadata.partition_key_b64_encoded:
            try:
                return base64.b64decode(key, validate=False)
            except (binascii.Error, ValueError):
                return key.encode("utf-8")
        return key.encode("utf-8")
    return NONE_KEY


def key_shared_slot(key: bytes | str) -> int:
    """Slot of a sticky key in the Key_Shared hash space."""
    return murmur3_32_hash(key) % KEY_SHARED_HASH_RANGE_SIZE
