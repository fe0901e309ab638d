"""Helpers of the deploy tier: free port sets, draining a consumer (bounded waits are
``support.waiting.wait_until``)."""

from __future__ import annotations

import time
from typing import Any

from support.net import free_port


def free_ports(n: int) -> tuple[int, ...]:
    ports: list[int] = []
    while len(ports) < n:
        port = free_port()
        if port not in ports:
            ports.append(port)
    return tuple(ports)


def drain(consumer: Any, expected: list[bytes], timeout_s: float = 120) -> set[bytes]:
    """Receive until every ``expected`` payload came (acknowledging each); returns the
    missing ones."""
    import pulsar

    want: set[bytes] = set(expected)
    got: set[bytes] = set()
    deadline = time.monotonic() + timeout_s
    while not want <= got and time.monotonic() < deadline:
        try:
            msg = consumer.receive(timeout_millis=2000)
        except pulsar.Timeout:
            continue
        got.add(msg.data())
        consumer.acknowledge(msg)
    return want - got
