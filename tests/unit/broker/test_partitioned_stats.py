"""A partitioned topic's stats add up its partitions' counters, the offloaded bytes among them
(Pulsar's ``PartitionedTopicStats``); a partition never loaded is left out."""

from __future__ import annotations

from typing import Any

from magnetar.broker.admin.topic_ops import TopicOperations
from magnetar.broker.namespace.resources import ResourceNotFound
from magnetar.broker.naming import TopicName

TOPIC = "persistent://public/default/parts"


class _Ops:
    """The three things ``partitioned_stats`` asks of its ``TopicOperations``."""

    def __init__(self, per_partition: dict[int, dict[str, Any]]) -> None:
        self.per_partition = per_partition

    async def partitions(self, topic: str) -> int:
        return 3

    def parse(self, topic: str) -> TopicName:
        return TopicName.parse(topic)

    async def topic_stats(self, name: str) -> dict[str, Any]:
        index = int(name.rsplit("-", 1)[1])
        if index not in self.per_partition:
            raise ResourceNotFound("not loaded")
        return self.per_partition[index]


async def test_offloaded_and_stored_bytes_add_up_over_the_partitions() -> None:
    ops = _Ops(
        {
            0: {"storageSize": 100, "offloadedStorageSize": 60, "msgInCounter": 5},
            2: {"storageSize": 40, "offloadedStorageSize": 0, "msgInCounter": 2},
        }
    )
    totals = await TopicOperations.partitioned_stats(ops, TOPIC, per_partition=True)  # type: ignore[arg-type]
    assert totals["offloadedStorageSize"] == 60
    assert totals["storageSize"] == 140
    assert totals["msgInCounter"] == 7
    assert sorted(totals["partitions"]) == [f"{TOPIC}-partition-0", f"{TOPIC}-partition-2"]
