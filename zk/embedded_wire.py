"""Wire format between the embedded metadata server and remote ``embedded://`` clients.

Owns: framing and the encoding of requests, replies and pushed events. Sans-I/O: encode to
bytes, decode from a buffer. Must not know: sockets, sessions, the tree.

Layout (one frame)::

    +----------------------+---------------------------------+
    | length: u32 big-end. | JSON object, UTF-8, length bytes |
    +----------------------+---------------------------------+

    client -> server   {"id": n, "op": "connect", "session_id": 0|s, "password": hex,
                        "timeout_ms": t}
                       {"id": n, "op": "get"|"exists"|"children", "path": p}
                       {"id": n, "op": "put", "path": p, "value": b64, "expected_version": v|null,
                        "ephemeral": bool, "sequential": bool}
                       {"id": n, "op": "delete", "path": p, "expected_version": v|null}
                       {"id": n, "op": "ping"} | {"id": n, "op": "close"}
    server -> client   {"id": n, "result": ...}
                       {"id": n, "error": {"type": "NotFound", "message": m, "path": p|null}}
                       {"event": "notification", "type": "modified", "path": p}
                       {"event": "session_lost"}

Values are base64 in JSON. Stats are ``[version, created_ms, modified_ms, owner, children]``.
Frames are at most ``FRAME_BYTES_MAX``; a larger length is a protocol error.
"""

from __future__ import annotations

import base64
import json
import struct
from typing import Any

from magnetar.zk import errors
from magnetar.zk.store import Stat

FRAME_BYTES_MAX = 16 * 1024 * 1024
_HEADER = struct.Struct(">I")
HEADER_BYTES = _HEADER.size


class WireError(Exception):
    """The peer broke the framing or sent something undecodable."""


def encode_frame(message: dict[str, Any]) -> bytes:
    body = json.dumps(message, separators=(",", ":")).encode()
    if len(body) > FRAME_BYTES_MAX:
        raise errors.MetadataError(f"frame of {len(body)} bytes exceeds {FRAME_BYTES_MAX}")
    return _HEADER.pack(len(body)) + body


def decode_length(header: bytes) -> int:
    (length,) = _HEADER.unpack(header)
    if length > FRAME_BYTES_MAX:
        raise WireError(f"frame length {length} exceeds {FRAME_BYTES_MAX}")
    return int(length)


def decode_body(body: bytes) -> dict[str, Any]:
    try:
        message = json.loads(body)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise WireError(f"undecodable frame: {exc}") from exc
    if not isinstance(message, dict):
        raise WireError("frame is not a JSON object")
    return message


def encode_value(value: bytes) -> str:
    return base64.b64encode(value).decode("ascii")


def decode_value(text: str) -> bytes:
    return base64.b64decode(text)


def encode_stat(stat: Stat) -> list[int]:
    return [
        stat.version,
        stat.created_ms,
        stat.modified_ms,
        stat.ephemeral_owner,
        stat.num_children,
    ]


def decode_stat(fields: list[int]) -> Stat:
    version, created_ms, modified_ms, owner, num_children = fields
    return Stat(version, created_ms, modified_ms, owner, num_children)


_ERROR_TYPES: dict[str, type[errors.MetadataError]] = {
    cls.__name__: cls
    for cls in (
        errors.NotFound,
        errors.BadVersion,
        errors.AlreadyExists,
        errors.NotEmpty,
        errors.InvalidPath,
        errors.ConnectionLoss,
        errors.SessionLost,
        errors.StoreClosed,
        errors.OperationTimeout,
        errors.MetadataError,
    )
}


def encode_error(exc: errors.MetadataError) -> dict[str, Any]:
    name = type(exc).__name__ if type(exc).__name__ in _ERROR_TYPES else "MetadataError"
    message = str(exc)
    if exc.path and message.endswith(f" [{exc.path}]"):
        message = message[: -len(f" [{exc.path}]")]
    return {"type": name, "message": message, "path": exc.path}


def decode_error(fields: dict[str, Any]) -> errors.MetadataError:
    cls = _ERROR_TYPES.get(str(fields.get("type")), errors.MetadataError)
    return cls(str(fields.get("message", "")), path=fields.get("path"))


__all__ = [
    "FRAME_BYTES_MAX",
    "HEADER_BYTES",
    "WireError",
    "decode_body",
    "decode_error",
    "decode_length",
    "decode_stat",
    "decode_value",
    "encode_error",
    "encode_frame",
    "encode_stat",
    "encode_value",
]
