"""The names geo-replication gives to what it creates, as Pulsar names them.

Here, below ``replication/``, because both sides use them: the replicator names its cursor
and producer with them; a topic hides replicator cursors from its subscriptions and
recognises the SENDs of another cluster's replicator (``inbound_links``).

Owns: the replicator prefix (Pulsar's ``replicatorPrefix``, ``pulsar.repl``), the durable
cursor of a replicator (``pulsar.repl.<remote cluster>``) and the name of its producer on
the remote cluster (``pulsar.repl.<local cluster>--><remote cluster>``), and recognising
either. A broker that receives a SEND from a producer so named knows it comes from the
replicator of the cluster named before ``-->`` (the remote side's exactly-once check is
keyed by it). Pure. Must not know: topics, producers.
"""

from __future__ import annotations

from dataclasses import dataclass

REPLICATOR_PREFIX = "pulsar.repl"
"""Pulsar's ``replicatorPrefix``: reserved, no client subscription may start with it."""
PRODUCER_NAME_DELIMITER = "-->"
"""Pulsar's ``REPL_PRODUCER_NAME_DELIMITER``."""


def cursor_name(remote_cluster: str) -> str:
    """The durable cursor that keeps a topic's backlog for ``remote_cluster``."""
    return f"{REPLICATOR_PREFIX}.{remote_cluster}"


def remote_of_cursor(name: str) -> str | None:
    """The remote cluster a replicator cursor is for (None: not a replicator cursor)."""
    prefix = REPLICATOR_PREFIX + "."
    if name.startswith(prefix) and len(name) > len(prefix):
        return name[len(prefix) :]
    return None


@dataclass(frozen=True, slots=True)
class ReplicationLink:
    """One direction of replication between two clusters."""

    local: str
    remote: str

    def __post_init__(self) -> None:
        if not self.local or not self.remote or self.local == self.remote:
            raise ValueError(
                f"a replication link joins two clusters: {self.local!r}, {self.remote!r}"
            )
        if PRODUCER_NAME_DELIMITER in self.local or PRODUCER_NAME_DELIMITER in self.remote:
            raise ValueError(f"a cluster name cannot contain {PRODUCER_NAME_DELIMITER!r}")

    @property
    def producer_name(self) -> str:
        """The producer this link's replicators use on the remote cluster."""
        return f"{REPLICATOR_PREFIX}.{self.local}{PRODUCER_NAME_DELIMITER}{self.remote}"

    @property
    def cursor_name(self) -> str:
        return cursor_name(self.remote)

    @classmethod
    def of_producer(cls, producer_name: str) -> ReplicationLink | None:
        """The link whose replicators publish as ``producer_name`` (None: not one)."""
        prefix = REPLICATOR_PREFIX + "."
        if not producer_name.startswith(prefix):
            return None
        local, sep, remote = producer_name[len(prefix) :].partition(PRODUCER_NAME_DELIMITER)
        if not sep or not local or not remote or local == remote:
            return None
        return cls(local, remote)


def is_replicator_producer(producer_name: str) -> bool:
    """Pulsar's ``Producer.isRemote``: a SEND from another cluster's replicator."""
    return ReplicationLink.of_producer(producer_name) is not None


__all__ = [
    "PRODUCER_NAME_DELIMITER",
    "REPLICATOR_PREFIX",
    "ReplicationLink",
    "cursor_name",
    "is_replicator_producer",
    "remote_of_cursor",
]
