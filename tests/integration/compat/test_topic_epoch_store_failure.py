"""An exclusive producer is ready only once the topic epoch is stored (as Pulsar's
``setTopicEpoch`` before the producer future completes): when storing it fails, the official
client's create fails with a clear error, the broker keeps serving, and the topic is free for
the next exclusive producer once storage works again. In-process broker over memory storage
whose ``set_property`` can be made to fail."""

from __future__ import annotations

import uuid
from typing import Any

import pulsar
import pytest
from support.broker import InProcessBroker

from magnetar.broker.admin.topic_ops import TopicOperations
from magnetar.broker.storage.memory import MemoryStorageFactory


class _FailingProperties:
    """Memory storage whose ledgers refuse ``set_property`` while ``failing`` is set."""

    def __init__(self) -> None:
        self.inner = MemoryStorageFactory()
        self.failing = True

    async def open(self, name: str, **kwargs: Any) -> Any:
        ledger = await self.inner.open(name, **kwargs)
        real = type(ledger).set_property

        async def set_property(key: str, value: str) -> None:
            if self.failing:
                raise OSError("metadata store unavailable (test)")
            await real(ledger, key, value)

        ledger.set_property = set_property  # type: ignore[method-assign]
        return ledger

    async def exists(self, name: str) -> bool:
        return await self.inner.exists(name)

    async def delete(self, name: str) -> None:
        await self.inner.delete(name)

    async def list(self, prefix: str) -> list[str]:
        return await self.inner.list(prefix)

    def memory_statistics(self):  # type: ignore[no-untyped-def]
        return self.inner.memory_statistics()

    def failure_statistics(self):  # type: ignore[no-untyped-def]
        return self.inner.failure_statistics()

    def offload_worker_statistics(self):  # type: ignore[no-untyped-def]
        return self.inner.offload_worker_statistics()


def test_a_failed_epoch_store_fails_the_create_not_the_broker() -> None:
    storage = _FailingProperties()
    b = InProcessBroker(storage=storage).start()
    c = pulsar.Client(b.service_url, operation_timeout_seconds=10, log_conf_file_path=None)
    try:
        topic = f"persistent://public/default/ep-{uuid.uuid4().hex[:8]}"
        with pytest.raises(pulsar.PulsarException):
            c.create_producer(topic, access_mode=pulsar.ProducerAccessMode.Exclusive)
        c.create_producer(topic).close()  # not held by the failed exclusive producer
        storage.failing = False
        producer = c.create_producer(topic, access_mode=pulsar.ProducerAccessMode.Exclusive)
        producer.send(b"ok")
        assert b.service is not None
        service = b.service
        # the failed attempts (the client retried) did not move it: the first stored is 0
        assert b.call(lambda: TopicOperations(service).topic_stats(topic))["topicEpoch"] == 0
    finally:
        c.close()
        b.stop()
