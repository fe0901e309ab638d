"""The embedded metadata wire format (sans-I/O): frames, values, stats, errors."""

from __future__ import annotations

import struct

import pytest

from magnetar.zk import embedded_wire as wire
from magnetar.zk.errors import BadVersion, MetadataError, NotFound, SessionLost
from magnetar.zk.store import Stat


def test_frame_round_trip() -> None:
    message = {"id": 7, "op": "put", "path": "/a", "value": wire.encode_value(b"\x00\xff")}
    frame = wire.encode_frame(message)
    length = wire.decode_length(frame[: wire.HEADER_BYTES])
    assert length == len(frame) - wire.HEADER_BYTES
    decoded = wire.decode_body(frame[wire.HEADER_BYTES :])
    assert decoded == message
    assert wire.decode_value(decoded["value"]) == b"\x00\xff"


def test_oversized_and_garbage_frames_are_wire_errors() -> None:
    with pytest.raises(wire.WireError):
        wire.decode_length(struct.pack(">I", wire.FRAME_BYTES_MAX + 1))
    with pytest.raises(wire.WireError):
        wire.decode_body(b"\xff\xfe not json")
    with pytest.raises(wire.WireError):
        wire.decode_body(b"[1, 2]")


def test_stat_round_trip() -> None:
    stat = Stat(3, 1000, 2000, 42, 5)
    assert wire.decode_stat(wire.encode_stat(stat)) == stat


@pytest.mark.parametrize("exc", [NotFound("gone", path="/x"), BadVersion("v"), SessionLost("s")])
def test_errors_keep_type_message_and_path(exc: MetadataError) -> None:
    decoded = wire.decode_error(wire.encode_error(exc))
    assert type(decoded) is type(exc)
    assert str(decoded) == str(exc)
    assert decoded.path == exc.path
    assert decoded.retriable == exc.retriable


def test_unknown_error_type_decodes_to_base() -> None:
    decoded = wire.decode_error({"type": "Bogus", "message": "m", "path": None})
    assert type(decoded) is MetadataError
