"""Storing the recovery point of a topic's inbound replication links.

Owns: ``InboundSnapshots``: writes ``InboundLinks.snapshot`` at the topic's last reported
position into the managed ledger's property ``pulsar.repl.inbound`` through the topic's
``RecoverySnapshots`` writer (one write at a time, requests folded). ``soon()`` from the
publish path (a failure is logged: the next write covers it, and a load reads a little
more), ``now()`` where the caller must know it is stored (a new link's first producer is
ready only once it is: a failure refuses that producer, which tries again).
Invariant: a stored snapshot never claims more than the completions reported up to its
position (``reported`` is the position of the last one).
Must not know: the wire, how the topic publishes.
"""

from __future__ import annotations

from collections.abc import Callable

from magnetar.broker.ledger.position import Position
from magnetar.broker.storage.contract import TopicLedger
from magnetar.broker.topics.inbound_links import INBOUND_SNAPSHOTS, SNAPSHOT_PROPERTY, InboundLinks
from magnetar.broker.topics.recovery_snapshots import RecoverySnapshots
from magnetar.broker.topics.sequence_snapshots import SequenceSnapshot

NOTHING_YET = Position(-1, -1)
"""The position of a snapshot taken before anything was stored: a load reads everything."""


class InboundSnapshots(RecoverySnapshots[SequenceSnapshot]):
    def __init__(
        self, ledger: TopicLedger, links: InboundLinks, reported: Callable[[], Position | None]
    ) -> None:
        super().__init__(
            ledger,
            SNAPSHOT_PROPERTY,
            take=lambda: links.snapshot(reported() or NOTHING_YET),
            encode=INBOUND_SNAPSHOTS.encode,
            stored=links.snapshot_stored,
            what="replication links' snapshot",
        )


__all__ = ["NOTHING_YET", "InboundSnapshots"]
