"""A raw Pulsar-protocol socket client for broker tests: send hand-built frames (or garbage),
read commands back, and tell whether the broker closed the connection."""

from __future__ import annotations

import socket
import struct

from magnetar.client.protocol.proto import pulsar_api_pb2 as pb

T = pb.BaseCommand


class RawClient:
    def __init__(self, port: int) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=5)
        self.buf = b""
        self.last_payload = b""
        """What followed the command in the last frame read (a MESSAGE's entry bytes)."""

    def send_raw(self, data: bytes) -> None:
        self.sock.sendall(data)

    def send(self, cmd: pb.BaseCommand, tail: bytes = b"") -> None:
        body = cmd.SerializeToString()
        self.send_raw(struct.pack(">II", 4 + len(body) + len(tail), len(body)) + body + tail)

    def recv(self) -> pb.BaseCommand:
        while True:
            if len(self.buf) >= 4:
                (total,) = struct.unpack_from(">I", self.buf)
                if len(self.buf) >= 4 + total:
                    frame, self.buf = self.buf[4 : 4 + total], self.buf[4 + total :]
                    (size,) = struct.unpack_from(">I", frame)
                    cmd = T()
                    cmd.ParseFromString(frame[4 : 4 + size])
                    self.last_payload = frame[4 + size :]
                    return cmd
            chunk = self.sock.recv(65536)
            if not chunk:
                raise ConnectionError("closed by broker")
            self.buf += chunk

    def is_closed(self) -> bool:
        try:
            while True:
                if not self.sock.recv(65536):
                    return True
        except (ConnectionResetError, BrokenPipeError):
            return True
        except TimeoutError:
            return False

    def connect(self) -> pb.BaseCommand:
        self.send(
            T(
                type=T.CONNECT,
                connect=pb.CommandConnect(
                    client_version="raw", protocol_version=20, auth_method_name="none"
                ),
            )
        )
        got = self.recv()
        assert got.type == T.CONNECTED
        return got

    def ping_pong(self) -> None:
        self.send(T(type=T.PING, ping=pb.CommandPing()))
        assert self.recv().type == T.PONG

    def close(self) -> None:
        self.sock.close()
