"""The producer's hot path of the SEND of one plain message, with per-producer caching.

Owns ``SimpleSendEncoder``: the codec's ``encode_simple_metadata`` (``MessageMetadata``
with ``producer_name``, ``sequence_id`` and ``publish_time`` only) and
``encode_simple_send_frame`` for one producer, with its name's bytes and the last publish
time's encoding cached (publish times repeat within a millisecond). Same bytes as the codec's
functions (a unit test checks it), which write exactly what protobuf writes.
Callers use it only for messages with no properties, keys, event time, delivery time,
replication list, compression or schema version; anything else goes through protobuf.
Must not know producers, connections or sockets; tags and framing are the codec's.
"""

from __future__ import annotations

from magnetar.client.protocol import (
    TAG_PRODUCER_NAME,
    TAG_PUBLISH_TIME,
    TAG_SEQUENCE_ID,
    encode_simple_send_frame,
)
from magnetar.client.protocol import encode_varint as _varint


class SimpleSendEncoder:
    """The codec's simple SEND encoders with per-producer constants and the last publish
    time cached. Bound to one producer id and name (rebuild it when the broker assigns
    another name)."""

    __slots__ = ("_md_prefix", "_producer_id", "_time", "_time_bytes")

    def __init__(self, producer_id: int, producer_name: bytes) -> None:
        self._producer_id = producer_id
        self._md_prefix = (
            TAG_PRODUCER_NAME + _varint(len(producer_name)) + producer_name + TAG_SEQUENCE_ID
        )
        self._time = 0
        self._time_bytes = TAG_PUBLISH_TIME + _varint(0)

    def metadata(self, sequence_id: int, publish_time: int) -> bytes:
        """``encode_simple_metadata(name, sequence_id, publish_time)``."""
        if publish_time != self._time:  # publish times repeat within a millisecond
            self._time = publish_time
            self._time_bytes = TAG_PUBLISH_TIME + _varint(publish_time)
        return self._md_prefix + _varint(sequence_id) + self._time_bytes

    def frame(self, sequence_id: int, metadata: bytes, payload: bytes) -> bytes:
        return encode_simple_send_frame(self._producer_id, sequence_id, metadata, payload)


__all__ = ["SimpleSendEncoder"]
