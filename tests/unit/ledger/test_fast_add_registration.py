"""Which bookies the broker reaches over the fast add transport: the ``fast_add_port`` a
bookie announces in its registration node (``bookie/main.py`` ``registration_extra``), read by
``placement.fast_add_address_of_registration``; anything absent or unusable means gRPC, so a
registration written by an older bookie keeps working."""

from __future__ import annotations

import pytest

from magnetar.bookie.main import BookieConfig, registration_extra
from magnetar.broker.ledger.placement import (
    fast_add_address_of_registration,
    parse_registration,
)


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
