"""What a broker logs at the default level while a client lives (issue 12 §5).

An operator follows a client's life in the log: one INFO line per connection opened and
closed, producer created and closed, consumer created and closed, subscription opened.
Normal operations (an admin unload, a graceful shutdown) log nothing at WARNING or above,
and nothing per subscription about the delayed-delivery index at INFO.
"""

from __future__ import annotations

import datetime
import re
import urllib.request
import uuid

import pulsar
from support.standalone import StandaloneFactory


def test_default_log_follows_a_client_and_is_quiet_on_unload(
    standalone_factory: StandaloneFactory,
) -> None:
    sa = standalone_factory.create().start()
    local = f"logs-{uuid.uuid4().hex[:8]}"
    topic = f"persistent://public/default/{local}"
    client = pulsar.Client(sa.service_url, operation_timeout_seconds=30)
    consumer = client.subscribe(topic, "audit", consumer_type=pulsar.ConsumerType.Shared)
    producer = client.create_producer(topic, producer_name="p-logs")
    producer.send(b"one")
    producer.send(b"later", deliver_after=datetime.timedelta(milliseconds=200))
    for _ in range(2):
        consumer.acknowledge(consumer.receive(10_000))
    request = urllib.request.Request(
        f"{sa.web_url}/admin/v2/persistent/public/default/{local}/unload", method="PUT"
    )
    with urllib.request.urlopen(request, timeout=30):
        pass
    producer.send(b"two")  # the client reconnects to the reloaded topic
    consumer.acknowledge(consumer.receive(10_000))
    producer.close()
    consumer.close()
    client.close()
    assert sa.stop() == 0
    log = sa.log_path.read_text(errors="replace")

    def info(pattern: str) -> list[str]:
        return [
            line for line in log.splitlines() if "level=INFO" in line and re.search(pattern, line)
        ]

    problems = [
        f"no INFO line matching {pattern!r}"
        for pattern in (
            r"new connection from 127\.0\.0\.1:\d+",
            r"closed connection from 127\.0\.0\.1:\d+",
            rf"\[{re.escape(topic)}\] created producer 'p-logs'",
            rf"\[{re.escape(topic)}\] closed producer 'p-logs'",
            rf"\[{re.escape(topic)}\]\[audit\] created SHARED consumer",
            rf"\[{re.escape(topic)}\]\[audit\] closed consumer",
            rf"\[{re.escape(topic)}\]\[audit\] subscription opened",
        )
        if not info(pattern)
    ]
    problems += [line for line in log.splitlines() if re.search(r"level=(WARNING|ERROR)", line)]
    problems += info("__delayed_index.*recovered")
    if "Traceback" in log:
        problems.append("a traceback")
    assert not problems, "\n".join(problems)
