"""An in-memory asyncio transport for driving ``ServerConnection`` without sockets, and
frame helpers for hand-built commands."""

from __future__ import annotations

import struct

from magnetar.client.protocol.proto import pulsar_api_pb2 as pb

T = pb.BaseCommand


class FakeTransport:
    def __init__(self) -> None:
        self.written = bytearray()
        self.closed = False
        self.paused = False

    def write(self, data: bytes) -> None:
        self.written += data

    def close(self) -> None:
        self.closed = True

    def is_closing(self) -> bool:
        return self.closed

    def get_extra_info(self, name: str) -> object:
        return ("127.0.0.1", 1) if name == "peername" else None

    def pause_reading(self) -> None:
        self.paused = True

    def resume_reading(self) -> None:
        self.paused = False


def frame(cmd: pb.BaseCommand) -> bytes:
    body = cmd.SerializeToString()
    return struct.pack(">II", 4 + len(body), len(body)) + body


CONNECT = frame(
    T(type=T.CONNECT, connect=pb.CommandConnect(client_version="t", protocol_version=20))
)
PING = frame(T(type=T.PING, ping=pb.CommandPing()))
PONG = frame(T(type=T.PONG, pong=pb.CommandPong()))
