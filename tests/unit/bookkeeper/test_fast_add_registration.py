"""Which bookies the broker reaches over the fast add transport: the ``fast_add_port`` a
bookie announces in its registration node (``bookie/main.py`` ``registration_extra``), read by
``placement.fast_add_address_of_registration``; anything absent or unusable means gRPC, so a
registration written by an older bookie keeps working."""

from __future__ import annotations

import json

import pytest
from support.waiting import wait_for

from magnetar.bookie.client import BookieClient
from magnetar.bookie.main import BookieConfig, registration_extra
from magnetar.broker.bookkeeper.placement import (
    BookieRegistry,
    fast_add_address_of_registration,
    parse_registration,
)
from magnetar.clock import SystemClock
from magnetar.zk import paths
from magnetar.zk.memory import MemoryMetadataServer


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (
            b'{"address": "10.0.0.5:3181", "host": "10.0.0.5", "fast_add_port": 3182}',
            "10.0.0.5:3182",
        ),
        (b'{"address": "bk-1.example:3181", "fast_add_port": 4000}', "bk-1.example:4000"),
        (b'{"address": "10.0.0.5:3181", "host": "10.0.0.5"}', None),  # an older bookie
        (b'{"address": "10.0.0.5:3181", "fast_add_port": 0}', None),
        (b'{"address": "10.0.0.5:3181", "fast_add_port": 70000}', None),
        (b'{"address": "10.0.0.5:3181", "fast_add_port": "3182"}', None),
        (b'{"address": "10.0.0.5:3181", "fast_add_port": true}', None),
        (b"10.0.0.5:3181", None),  # plain-text registration
        (b"[1, 2]", None),
        (b"", None),
    ],
)
def test_fast_add_address_of_registration(value: bytes, expected: str | None) -> None:
    assert fast_add_address_of_registration(value) == expected


def test_the_grpc_address_is_unchanged_by_the_announcement() -> None:
    value = b'{"address": "10.0.0.5:3181", "host": "10.0.0.5", "fast_add_port": 3182}'
    assert parse_registration("b1", value) == "10.0.0.5:3181"


def test_a_bookie_announces_its_port_only_when_serving_it() -> None:
    class Served:
        port = 3999

    config = BookieConfig(bookie_rack="/r1")
    assert registration_extra(config, None) == {"rack": "/r1"}
    assert registration_extra(config, Served()) == {"rack": "/r1", "fast_add_port": 3999}  # type: ignore[arg-type]


class _Client:
    """A bookie client as the registry sees it, recording the announced fast add address."""

    def __init__(self, address: str) -> None:
        self.address = address
        self.add_addresses: list[str | None] = []

    def set_add_address(self, add_address: str | None) -> None:
        self.add_addresses.append(add_address)

    async def close(self) -> None:
        pass


def _registration(port: int | None) -> bytes:
    doc: dict[str, object] = {"address": "10.0.0.5:3181", "host": "10.0.0.5"}
    if port is not None:
        doc["fast_add_port"] = port
    return json.dumps(doc).encode()


async def test_a_bookie_that_restarts_on_another_fast_add_port_is_followed() -> None:
    """The registry reads a registration once, and again after it changed or went (the
    bookie restarted): the client made before is told the new address (or None: gRPC)."""
    server = MemoryMetadataServer()
    store = server.connect()
    clients: dict[str, _Client] = {}

    def factory(address: str) -> _Client:
        clients[address] = _Client(address)
        return clients[address]

    registry = BookieRegistry(store, factory, SystemClock())  # type: ignore[arg-type]
    path = paths.bookie_registration("b1")
    await store.put(path, _registration(3182))
    assert await registry.available() == ["b1"]
    assert registry.add_address("10.0.0.5:3181") == "10.0.0.5:3182"
    client = registry.client("b1")
    await registry.available()
    assert clients["10.0.0.5:3181"].add_addresses == [], "unchanged: nothing announced"

    await store.delete(path)  # the bookie restarts, on another fast add port
    await store.put(path, _registration(4000))

    async def followed(expected: list[str | None]) -> bool:
        await registry.available()
        return clients["10.0.0.5:3181"].add_addresses == expected

    await wait_for(lambda: followed(["10.0.0.5:4000"]), 10, "the new port followed")
    assert registry.add_address("10.0.0.5:3181") == "10.0.0.5:4000"
    await store.put(path, _registration(None))  # and then without one
    await wait_for(lambda: followed(["10.0.0.5:4000", None]), 10, "back to gRPC")
    assert registry.add_address("10.0.0.5:3181") is None
    assert registry.client("b1") is client
    await registry.close()
    await store.close()


def test_a_client_follows_announcements_only_with_fast_add_enabled_and_no_tls() -> None:
    follows = BookieClient("10.0.0.5:3181", add_address="10.0.0.5:3182")
    follows.set_add_address("10.0.0.5:4000")
    assert follows._add_address == "10.0.0.5:4000" and follows.add_transport == "tcp"
    disabled = BookieClient("10.0.0.5:3181", add_address="10.0.0.5:3182", fast_add=False)
    disabled.set_add_address("10.0.0.5:4000")
    assert disabled._add_address is None and disabled.add_transport == "grpc"
