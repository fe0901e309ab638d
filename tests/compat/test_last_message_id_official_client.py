"""``GET_LAST_MESSAGE_ID`` as Pulsar answers it, seen by the official client: the last entry's
batch index is its batch's last member (``num_messages_in_batch - 1``) whenever the entry is a
batch, a batch of one included (index 0), and -1 for a message stored alone (Pulsar's
``ServerCnx.getLargestBatchIndexWhenPossible``: ``hasNumMessagesInBatch() ? n - 1 : -1``).
"""

from __future__ import annotations

import uuid

import pulsar
from support.broker import InProcessBroker

from magnetar.broker.admin.topic_ops import TopicOperations


def _topic() -> str:
    return f"persistent://public/default/last-{uuid.uuid4().hex[:8]}"


def _last(client: pulsar.Client, topic: str) -> pulsar.MessageId:
    consumer = client.subscribe(topic, "probe")
    try:
        return consumer.get_last_message_id()
    finally:
        consumer.close()


def test_a_batch_of_one_is_named_with_batch_index_zero(
    client: pulsar.Client, broker: InProcessBroker
) -> None:
    topic = _topic()
    producer = client.create_producer(topic, batching_enabled=True, batching_max_messages=10)
    producer.send_async(b"alone in its batch", None)
    producer.flush()
    last = _last(client, topic)
    reader = client.create_reader(topic, pulsar.MessageId.earliest)
    got = reader.read_next(5000)
    assert (last.ledger_id(), last.entry_id()) == (
        got.message_id().ledger_id(),
        got.message_id().entry_id(),
    )
    assert got.message_id().batch_index() == 0  # the client reads it as a batch member
    assert last.batch_index() == 0
    assert not reader.has_message_available()
    service = broker.service
    assert service is not None
    rest = broker.call(lambda: TopicOperations(service).last_message_id(topic))
    assert rest["batchIndex"] == 0  # the admin REST API's lastMessageId too

    producer.send_async(b"one", None)
    producer.send_async(b"two", None)
    producer.send_async(b"three", None)
    producer.flush()
    assert _last(client, topic).batch_index() == 2


def test_a_message_stored_alone_has_no_batch_index(client: pulsar.Client) -> None:
    topic = _topic()
    producer = client.create_producer(topic, batching_enabled=False)
    sent = producer.send(b"alone")
    last = _last(client, topic)
    assert (last.ledger_id(), last.entry_id(), last.batch_index()) == (
        sent.ledger_id(),
        sent.entry_id(),
        -1,
    )
