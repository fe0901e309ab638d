"""Network helpers for tests: free loopback ports.

Ports are picked below the kernel's ephemeral range (``ip_local_port_range``), so an outgoing
connection of any process can never be handed the port between our check and the server's
bind (it happened: a bookie of a standalone exited on "address in use"). A port handed out
once in this process is not handed out again.
"""

from __future__ import annotations

import pathlib
import random
import socket

_handed_out: set[int] = set()


def _ephemeral_low() -> int:
    try:
        text = pathlib.Path("/proc/sys/net/ipv4/ip_local_port_range").read_text()
        return int(text.split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


_LOW = 10_000
_HIGH = max(_LOW + 1_000, _ephemeral_low()) - 1


def _bindable(host: str, port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind((host, port))
        except OSError:
            return False
    return True


def free_port(host: str = "127.0.0.1") -> int:
    """A port nobody listens on right now, outside the ephemeral range (the caller binds
    it soon)."""
    for _ in range(1_000):
        port = random.randint(_LOW, _HIGH)
        if port not in _handed_out and _bindable(host, port):
            _handed_out.add(port)
            return port
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])
