"""Framing of the bookie's fast add transport (a plain TCP connection beside gRPC).

Owns: the byte layout below, ``encode_*`` and the incremental ``FrameReader`` (feed bytes,
take whole frames out). Sans-I/O: no asyncio, no sockets, no gRPC.
Must not know: what a batch means (``wire.py`` parses the ``AddBatch`` inside a frame, the
service answers it), connections, storage.

The connection carries exactly the messages of the gRPC ``Add`` stream, so both transports
reach the same service code with the same bytes::

    client -> bookie   once:       b"MGA1"                      (MAGIC: refuses a stray peer)
                       per batch:  u32 length, AddBatch message (raw bytes, as gRPC carries)
    bookie -> client   per frame:  u32 length, u8 kind, body
                       kind 1: AddResponse message (the acks, as on the gRPC stream)
                       kind 2: StatusResponse message: an error that ends the connection
                               (the bookie closes it after this frame)

Lengths are big-endian and exclude the length field itself; a frame over ``max_frame_bytes``
(either way) is a protocol error, as is a wrong magic. No TLS: see ``fast_add.py``.

Invariant: ``FrameReader.frames`` returns whole frames in arrival order, or raises
``FrameError`` and stays failed; it never buffers more than one frame's bytes plus one read.
"""

from __future__ import annotations

import struct

MAGIC = b"MGA1"
LENGTH = struct.Struct(">I")
KIND_ADD_RESPONSE = 1
KIND_ERROR = 2
FRAME_BYTES_MAX = 32 * 1024 * 1024 + 64
"""One maximal ``AddBatch`` (the gRPC message limit) plus its header."""

_pack_len = LENGTH.pack
_unpack_len = LENGTH.unpack_from


class FrameError(ValueError):
    """The peer broke the framing (wrong magic, oversized or empty frame, unknown kind)."""


def encode_request(message: bytes) -> bytes:
    """One client frame: the length, then the raw ``AddBatch`` message."""
    return _pack_len(len(message)) + message


def encode_reply(kind: int, body: bytes) -> bytes:
    """One bookie frame: the length, the kind, the message."""
    return _pack_len(len(body) + 1) + bytes((kind,)) + body


class FrameReader:
    """Splits a byte stream into frames. ``expect_magic``: the stream starts with ``MAGIC``
    (the bookie's side); ``with_kind``: frames carry a kind byte (the client's side)."""

    __slots__ = ("_buf", "_failed", "_magic_pending", "_with_kind", "max_frame_bytes")

    def __init__(
        self,
        *,
        expect_magic: bool,
        with_kind: bool,
        max_frame_bytes: int = FRAME_BYTES_MAX,
    ) -> None:
        self._buf = bytearray()
        self._magic_pending = expect_magic
        self._with_kind = with_kind
        self._failed: FrameError | None = None
        self.max_frame_bytes = max_frame_bytes

    @property
    def buffered_bytes(self) -> int:
        return len(self._buf)

    def _fail(self, message: str) -> FrameError:
        self._failed = FrameError(message)
        self._buf.clear()
        return self._failed

    def frames(self, data: bytes) -> list[tuple[int, bytes]]:
        """Feed ``data``; return the whole frames now complete as (kind, body); kind is 0 on
        the bookie's side (requests have none). Raises ``FrameError`` on broken framing."""
        if self._failed is not None:
            raise self._failed
        buf = self._buf
        if not buf and not self._magic_pending:
            # the common case: one or more whole frames in one read, nothing buffered
            return self._split(data)
        buf += data
        if self._magic_pending:
            if len(buf) < len(MAGIC):
                if MAGIC.startswith(bytes(buf)):
                    return []
                raise self._fail("not a fast add connection (bad magic)")
            if buf[: len(MAGIC)] != MAGIC:
                raise self._fail("not a fast add connection (bad magic)")
            del buf[: len(MAGIC)]
            self._magic_pending = False
        data = bytes(buf)
        buf.clear()
        return self._split(data)

    def _split(self, data: bytes) -> list[tuple[int, bytes]]:
        out: list[tuple[int, bytes]] = []
        pos = 0
        n = len(data)
        limit = self.max_frame_bytes
        with_kind = self._with_kind
        while n - pos >= 4:
            (length,) = _unpack_len(data, pos)
            if length > limit:
                raise self._fail(f"frame of {length} bytes over the limit of {limit}")
            if length == 0:
                raise self._fail("empty frame")
            end = pos + 4 + length
            if end > n:
                break
            if with_kind:
                kind = data[pos + 4]
                if kind not in (KIND_ADD_RESPONSE, KIND_ERROR):
                    raise self._fail(f"unknown frame kind {kind}")
                out.append((kind, data[pos + 5 : end]))
            else:
                out.append((0, data[pos + 4 : end]))
            pos = end
        if pos < n:
            self._buf += data[pos:] if pos else data
        return out


__all__ = [
    "FRAME_BYTES_MAX",
    "KIND_ADD_RESPONSE",
    "KIND_ERROR",
    "MAGIC",
    "FrameError",
    "FrameReader",
    "encode_reply",
    "encode_request",
]
