"""The fast add transport's framing (``bookie/add_frames.py``), sans-I/O: frames come out
whole and in order however the bytes are cut, and broken framing only ever raises
``FrameError`` (Hypothesis feeds it arbitrary bytes)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from magnetar.bookie.add_frames import (
    KIND_ADD_RESPONSE,
    KIND_ERROR,
    MAGIC,
    FrameError,
    FrameReader,
    encode_reply,
    encode_request,
)


def _feed(reader: FrameReader, data: bytes, step: int) -> list[tuple[int, bytes]]:
    out: list[tuple[int, bytes]] = []
    for i in range(0, len(data), step):
        out += reader.frames(data[i : i + step])
    return out


@pytest.mark.parametrize("step", [1, 3, 7, 1000])
def test_requests_split_anywhere_come_out_whole(step: int) -> None:
    msgs = [b"a", b"bc" * 50, b"\x00" * 7]
    data = MAGIC + b"".join(encode_request(m) for m in msgs)
    got = _feed(FrameReader(expect_magic=True, with_kind=False), data, step)
    assert got == [(0, m) for m in msgs]


@pytest.mark.parametrize("step", [1, 5, 1000])
def test_replies_carry_their_kind(step: int) -> None:
    data = encode_reply(KIND_ADD_RESPONSE, b"ok") + encode_reply(KIND_ERROR, b"bad")
    got = _feed(FrameReader(expect_magic=False, with_kind=True), data, step)
    assert got == [(KIND_ADD_RESPONSE, b"ok"), (KIND_ERROR, b"bad")]


def test_exact_bytes() -> None:
    assert encode_request(b"xy") == b"\x00\x00\x00\x02xy"
    assert encode_reply(KIND_ERROR, b"z") == b"\x00\x00\x00\x02\x02z"


@pytest.mark.parametrize(
    ("reader", "data", "reason"),
    [
        ({"expect_magic": True, "with_kind": False}, b"HTTP", "bad magic"),
        ({"expect_magic": True, "with_kind": False}, b"MGX", "bad magic"),
        ({"expect_magic": True, "with_kind": False}, MAGIC + b"\x00\x00\x00\x00", "empty"),
        ({"expect_magic": False, "with_kind": True}, b"\x00\x00\x00\x01\x09", "unknown frame kind"),
        (
            {"expect_magic": False, "with_kind": False, "max_frame_bytes": 10},
            b"\x00\x00\x00\x0b",
            "over",
        ),
    ],
)
def test_broken_framing_raises_and_stays_failed(reader: dict, data: bytes, reason: str) -> None:
    r = FrameReader(**reader)
    with pytest.raises(FrameError, match=reason):
        r.frames(data)
    with pytest.raises(FrameError):
        r.frames(b"")
    assert r.buffered_bytes == 0


@given(st.binary(max_size=200), st.booleans())
def test_garbage_only_raises_frame_error(data: bytes, magic: bool) -> None:
    r = FrameReader(expect_magic=magic, with_kind=not magic, max_frame_bytes=1000)
    try:
        frames = r.frames(data)
    except FrameError:
        return
    assert r.buffered_bytes <= len(data)
    for kind, _ in frames:
        assert kind in ((0,) if magic else (KIND_ADD_RESPONSE, KIND_ERROR))
