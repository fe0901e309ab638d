"""Pulsar's ``advertisedListeners`` / ``internalListenerName``: parsing and Pulsar's refusals,
the listener map in ownership data, and the settings' Pulsar names (pure)."""

from __future__ import annotations

import re

import pytest

from magnetar.broker.config import BrokerConfig
from magnetar.broker.listeners import (
    AdvertisedListeners,
    Listener,
    ListenerNotFound,
    parse_advertised_listeners,
)
from magnetar.broker.namespace.ownership import OwnerInfo

TWO = "internal:pulsar://10.0.0.1:6650,internal:pulsar+ssl://10.0.0.1:6651,external:pulsar://ext.example.com:6650"


def test_parse_names_urls_and_the_internal_default() -> None:
    got = parse_advertised_listeners(TWO)
    assert got.listeners == (
        Listener("internal", "pulsar://10.0.0.1:6650", "pulsar+ssl://10.0.0.1:6651"),
        Listener("external", "pulsar://ext.example.com:6650", ""),
    )
    assert got.internal_name == "internal"  # the first one when not named
    assert parse_advertised_listeners(TWO, "external").internal == got.get("external")
    assert not parse_advertised_listeners("")


@pytest.mark.parametrize(
    ("value", "internal", "message"),
    [
        (TWO, "nope", "do not contain `internalListenerName` entry"),
        ("", "internal", "do not contain `internalListenerName` entry"),
        (":pulsar://h:6650", "", "do not contain listener name"),
        ("pulsar://h:6650", "", "the value //h:6650 in the `advertisedListeners` configure"),
        ("a:pulsar://h:1,a:pulsar://h:2", "", "redundant configure for listener `a`"),
        ("a:pulsar://h:1,a:pulsar+ssl://h:2,a:pulsar://h:3", "", "redundant configure"),
        ("a:pulsar://h:1,b:pulsar://h:1", "", "must not specify `h:1` to different listener"),
        ("a:http://h:1", "", "the value http://h:1 in the `advertisedListeners` configure"),
        ("a:pulsar://h", "", "is invalid"),
        ("a:pulsar://h:notaport", "", "is invalid"),
    ],
)
def test_refusals_as_pulsar(value: str, internal: str, message: str) -> None:
    with pytest.raises(ValueError, match=re.escape(message)):
        parse_advertised_listeners(value, internal)


def test_unknown_listener_message_is_pulsars() -> None:
    with pytest.raises(ListenerNotFound) as err:
        parse_advertised_listeners(TWO).require("other")
    assert str(err.value) == "the broker do not have other listener"


def test_owner_info_carries_the_listeners() -> None:
    listeners = parse_advertised_listeners(TWO)
    owner = OwnerInfo("pulsar://10.0.0.1:6650", "http://10.0.0.1:8080", listeners=listeners)
    back = OwnerInfo.from_bytes(owner.to_bytes())
    assert back.listeners.listeners == listeners.listeners
    plain = OwnerInfo("pulsar://a:1", "http://a:2")
    assert b"advertisedListeners" not in plain.to_bytes()
    assert not OwnerInfo.from_bytes(plain.to_bytes()).listeners
    assert AdvertisedListeners.from_json({"x": "junk", 3: {}}).listeners == ()


def test_pulsar_setting_names_reach_the_config(tmp_path) -> None:  # type: ignore[no-untyped-def]
    conf = tmp_path / "broker.conf"
    conf.write_text(f"advertisedListeners={TWO}\ninternalListenerName=external\n")
    config = BrokerConfig.load(conf)
    assert config.advertised_listeners == TWO
    assert config.internal_listener_name == "external"
    conf.write_text("advertisedListeners=a:pulsar://h:1\ninternalListenerName=b\n")
    with pytest.raises(ValueError, match="internalListenerName"):
        BrokerConfig.load(conf)
