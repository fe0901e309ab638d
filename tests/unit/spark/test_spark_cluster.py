"""``cluster.partitions_and_lasts``: where planning starts, and ``waitingForNonExistedTopic``
(a missing topic is looked for again until it exists) over a fake client; no Spark."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from magnetar.client import MessageId, TopicNotFound
from magnetar.spark import cluster
from magnetar.spark.options import TopicSelection


class FakeReader:
    async def get_last_message_id(self) -> MessageId:
        return MessageId(-1, 3, 7, -1)

    async def close(self) -> None:
        pass


class FakeClient:
    """A topic that exists only after ``missing_for`` reader attempts."""

    def __init__(self, missing_for: int) -> None:
        self.missing_for = missing_for
        self.attempts = 0

    async def get_topic_partitions(self, topic: str) -> list[str]:
        return [topic]

    async def create_reader(self, topic: str, start: Any) -> FakeReader:
        self.attempts += 1
        if self.attempts <= self.missing_for:
            raise TopicNotFound(f"Topic {topic} does not exist")
        return FakeReader()


def selection(topic: str) -> TopicSelection:
    return TopicSelection(topics=(topic,), pattern=None)


def test_a_missing_topic_is_named_with_the_option_to_wait() -> None:
    client = FakeClient(missing_for=1)
    with pytest.raises(cluster.TopicMissing) as refused:
        asyncio.run(cluster.partitions_and_lasts(client, selection("t/n/x"), wait=False))  # type: ignore[arg-type]
    assert "topic t/n/x does not exist" in str(refused.value)
    assert "waitingForNonExistedTopic=true" in str(refused.value)


def test_waiting_looks_again_until_the_topic_exists(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cluster, "WAIT_FOR_TOPIC_POLL_S", 0.0)
    client = FakeClient(missing_for=5)
    parts, lasts = asyncio.run(
        cluster.partitions_and_lasts(client, selection("t/n/x"), wait=True)  # type: ignore[arg-type]
    )
    assert client.attempts == 6
    assert parts == ["t/n/x"] and lasts["t/n/x"] == cluster.Position(3, 7, -1)
