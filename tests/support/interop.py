"""Module-scoped fixtures for tests that run the official client and ours side by side.

``interop_broker``: one in-process broker per test module; ``official``: a ``pulsar.Client``
on it; ``ours``: a ``magnetar.client.sync.Client`` on it.
"""

from __future__ import annotations

from collections.abc import Iterator

import pulsar
import pytest

from magnetar.client.sync import Client
from support.broker import InProcessBroker


@pytest.fixture(scope="module")
def interop_broker() -> Iterator[InProcessBroker]:
    b = InProcessBroker().start()
    try:
        yield b
    finally:
        b.stop()


@pytest.fixture(scope="module")
def official(interop_broker: InProcessBroker) -> Iterator[pulsar.Client]:
    c = pulsar.Client(
        interop_broker.service_url, operation_timeout_seconds=60, log_conf_file_path=None
    )
    try:
        yield c
    finally:
        c.close()


@pytest.fixture(scope="module")
def ours(interop_broker: InProcessBroker) -> Iterator[Client]:
    c = Client(interop_broker.service_url, operation_timeout_seconds=60)
    try:
        yield c
    finally:
        c.close()
