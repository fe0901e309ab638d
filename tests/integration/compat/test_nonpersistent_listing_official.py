"""Loaded non-persistent topics are listed as Pulsar lists them: GET_TOPICS_OF_NAMESPACE in
mode ALL / NON_PERSISTENT (what a regex consumer asks), the REST listings
``/admin/v2/non-persistent/{tenant}/{namespace}`` and ``namespaces/.../topics?mode=``; and
the official client's regex consumer subscribes to the non-persistent match in AllTopics and
NonPersistentOnly modes, not in PersistentOnly."""

from __future__ import annotations

import re
import uuid

import pulsar
from support.admin import http
from support.standalone import StandaloneProcess

RegexMode = pulsar.RegexSubscriptionMode


def _names() -> tuple[str, str, str]:
    prefix = f"np{uuid.uuid4().hex[:6]}"
    return (
        prefix,
        f"non-persistent://public/default/{prefix}-np",
        f"persistent://public/default/{prefix}-p",
    )


def test_rest_listings_include_loaded_non_persistent_topics(
    server: StandaloneProcess, client: pulsar.Client
) -> None:
    _, np_topic, p_topic = _names()
    client.create_producer(np_topic)
    client.create_producer(p_topic)
    status, listed = http(server.web_url, "GET", "/admin/v2/non-persistent/public/default")
    assert status == 200 and np_topic in listed and p_topic not in listed
    status, listed = http(server.web_url, "GET", "/admin/v2/persistent/public/default")
    assert status == 200 and p_topic in listed and np_topic not in listed
    by_mode = {}
    for mode in ("PERSISTENT", "NON_PERSISTENT", "ALL"):
        status, by_mode[mode] = http(
            server.web_url, "GET", f"/admin/v2/namespaces/public/default/topics?mode={mode}"
        )
        assert status == 200
    assert np_topic not in by_mode["PERSISTENT"] and p_topic in by_mode["PERSISTENT"]
    assert np_topic in by_mode["NON_PERSISTENT"] and p_topic not in by_mode["NON_PERSISTENT"]
    assert {np_topic, p_topic} <= set(by_mode["ALL"])
    status, _ = http(server.web_url, "GET", "/admin/v2/non-persistent/public/nowhere")
    assert status == 404


def _received(consumer: pulsar.Consumer, producers: dict[str, pulsar.Producer]) -> set[str]:
    """Which topics' messages reach ``consumer`` (one message sent on each)."""
    for topic, producer in producers.items():
        producer.send(topic.encode())
    got = set()
    try:
        while True:
            got.add(consumer.receive(3000).topic_name())
    except pulsar.Timeout:
        return got


def test_regex_consumer_subscribes_to_the_non_persistent_match(client: pulsar.Client) -> None:
    prefix, np_topic, p_topic = _names()
    producers = {t: client.create_producer(t) for t in (np_topic, p_topic)}
    expected = {
        RegexMode.AllTopics: {np_topic, p_topic},
        RegexMode.NonPersistentOnly: {np_topic},
        RegexMode.PersistentOnly: {p_topic},
    }
    for mode, topics in expected.items():
        consumer = client.subscribe(
            re.compile(f"persistent://public/default/{prefix}-.*"),
            f"rx-{mode.name}",
            regex_subscription_mode=mode,
        )
        try:
            assert _received(consumer, producers) == topics, mode
        finally:
            consumer.close()
