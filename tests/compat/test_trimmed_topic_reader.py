"""``has_message_available`` on a topic whose ledgers were all trimmed says no (issue 12 §5).

A topic with no subscription keeps nothing once consumed-ledger retention (0 by default)
trims it; after a restart the old ledger is closed and trimmed. The broker used to report a
last message id inside the trimmed ledger, so ``while reader.has_message_available():
reader.read_next()`` waited for a message nobody could read, with both clients.
"""

from __future__ import annotations

import pathlib
import uuid
from collections.abc import Callable

import pulsar
from support.standalone import StandaloneFactory
from support.waiting import wait_until

from magnetar.client import MessageId
from magnetar.client import sync as magnetar_client


def _wait_for_log(read: Callable[[], str], needle: str, timeout_s: float) -> None:
    wait_until(lambda: needle in read(), timeout_s, f"{needle!r} in the log", interval_s=0.1)


def test_reader_on_a_trimmed_topic_after_restart_has_no_message_available(
    standalone_factory: StandaloneFactory, tmp_path: pathlib.Path
) -> None:
    conf = tmp_path / "broker.conf"
    conf.write_text("retention_check_interval_in_seconds=1\n")
    sa = standalone_factory.create(extra_args=["--config", str(conf)]).start()
    local = f"trimmed-{uuid.uuid4().hex[:8]}"
    topic = f"persistent://public/default/{local}"
    client = pulsar.Client(sa.service_url, operation_timeout_seconds=30)
    producer = client.create_producer(topic, batching_enabled=False)
    for i in range(5):
        producer.send(b"m%d" % i)
    client.close()
    assert sa.stop() == 0

    sa.start()
    client = pulsar.Client(sa.service_url, operation_timeout_seconds=30)
    producer = client.create_producer(topic)  # loads the topic; nothing is published
    _wait_for_log(
        lambda: sa.log_path.read_text(errors="replace"),
        f"public/default/persistent/{local}: trimmed ledgers",
        60,
    )
    reader = client.create_reader(topic, pulsar.MessageId.earliest)
    assert reader.has_message_available() is False
    reader.close()

    with magnetar_client.Client(sa.service_url) as mclient:
        mreader = mclient.create_reader(topic, MessageId.earliest)
        assert mreader.has_message_available() is False
        # and a message published now is available, and read
        producer.send(b"after")
        assert mreader.has_message_available() is True
        assert mreader.read_next(10_000).data() == b"after"
        assert mreader.has_message_available() is False
    reader = client.create_reader(topic, pulsar.MessageId.earliest)
    assert reader.has_message_available() is True
    assert reader.read_next(10_000).data() == b"after"
    assert reader.has_message_available() is False
    client.close()
