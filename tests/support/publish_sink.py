"""A ``PublishSink`` for tests that publish into a ``PersistentTopic`` directly.

Owns: ``PublishOutcomes``: every outcome in order, a position, None (a duplicate) or the error.
"""

from __future__ import annotations

from magnetar.broker.ledger.position import Position
from magnetar.broker.topics.publish import PendingSend


class PublishOutcomes:
    def __init__(self) -> None:
        self.got: list[Position | Exception | None] = []

    def on_published(self, items: list[PendingSend], positions: list[Position | None]) -> None:
        self.got.extend(positions)

    def on_publish_failed(self, items: list[PendingSend], exc: Exception) -> None:
        self.got.extend(exc for _ in items)


__all__ = ["PublishOutcomes"]
