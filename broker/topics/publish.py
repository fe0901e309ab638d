"""A SEND on its way into a topic, and where its outcome goes.

Owns: ``PendingSend`` (one SEND waiting for its outcome: the producer, the entry bytes, the
message count, the sequence ids as the SEND carried them, what deduplication decided, the
replication link it came over and whether it is a marker, or the error it was refused with),
``PublishSink`` (where a topic reports outcomes: once per run of consecutive SENDs of one sink
in a completed append, in arrival order, so a connection writes a run's receipts as one
buffer) and ``runs_by_sink`` (a completed batch cut into those runs).
Invariant: every SEND handed to a topic gets exactly one outcome, in arrival order per topic.
Must not know: sockets, frames, storage, how a topic appends.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

from magnetar.broker.ledger.position import Position

if TYPE_CHECKING:
    from magnetar.broker.topics.producer import Producer


class PendingSend:
    """One SEND waiting for its outcome (positional init: one is made per SEND)."""

    __slots__ = (
        "data",
        "dedup_name",
        "duplicate",
        "error",
        "highest",
        "highest_sequence_id",
        "link",
        "marker",
        "num_messages",
        "producer",
        "sequence_id",
        "sink",
    )

    def __init__(  # noqa: PLR0917 - hot path, positional on purpose
        self,
        producer: Producer,
        data: bytes,
        num_messages: int,
        sink: PublishSink,
        sequence_id: int,
        highest_sequence_id: int,
    ) -> None:
        self.producer = producer
        self.data = data
        self.num_messages = num_messages
        self.sink = sink
        self.sequence_id = sequence_id
        self.highest_sequence_id = highest_sequence_id  # as the SEND carried it
        self.duplicate = False
        self.dedup_name: str | None = None
        self.highest = -1  # the highest sequence id deduplication records
        self.error: Exception | None = None  # refused before storage (reported in order)
        self.link: str | None = None  # another cluster's replicator: its link's name
        self.marker = 0  # the entry's marker type (0: a message)

    def __repr__(self) -> str:
        return f"<PendingSend {self.producer.name!r} seq={self.sequence_id}>"


class PublishSink(Protocol):
    """Where a topic reports its SENDs' outcomes: once per run of consecutive SENDs of one
    sink in a completed append, in arrival order (a duplicate's position is None)."""

    def on_published(self, items: list[PendingSend], positions: list[Position | None]) -> None: ...

    def on_publish_failed(self, items: list[PendingSend], exc: Exception) -> None: ...


def runs_by_sink(
    batch: list[PendingSend], positions: list[Position | None] | None
) -> list[tuple[PublishSink, list[PendingSend], list[Position | None] | None]]:
    """``batch`` (and its positions) cut into runs of consecutive SENDs of one sink."""
    first = batch[0].sink
    if all(p.sink is first for p in batch):
        return [(first, batch, positions)]
    runs: list[tuple[PublishSink, list[PendingSend], list[Position | None] | None]] = []
    start = 0
    for i in range(1, len(batch) + 1):
        if i == len(batch) or batch[i].sink is not batch[start].sink:
            poss = positions[start:i] if positions is not None else None
            runs.append((batch[start].sink, batch[start:i], poss))
            start = i
    return runs


__all__ = ["PendingSend", "PublishSink", "runs_by_sink"]
