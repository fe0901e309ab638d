"""The compat tier's two usual fixtures: an in-process broker and an official
``pulsar.Client`` on it. A module that needs another broker (settings, a virtual clock)
defines its own ``broker``; ``client`` then connects to that one."""

from __future__ import annotations

from collections.abc import Iterator

import pulsar
import pytest
from support.broker import InProcessBroker


@pytest.fixture
def broker() -> Iterator[InProcessBroker]:
    b = InProcessBroker().start()
    try:
        yield b
    finally:
        b.stop()


@pytest.fixture
def client(broker: InProcessBroker) -> Iterator[pulsar.Client]:
    c = pulsar.Client(broker.service_url, operation_timeout_seconds=10, log_conf_file_path=None)
    try:
        yield c
    finally:
        c.close()
