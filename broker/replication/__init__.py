"""Geo-replication: a topic partition's messages re-published on other clusters, once.

Owns: the replicator (``replicator.Replicator``: a durable cursor ``pulsar.repl.<remote>``
read and a producer on the remote cluster, as a state machine in ``states``), what it does
with each entry (``republish``: loop prevention, ``replicate_to``, markers, TTL; stored
bytes sent unchanged), the exactly-once link (``positions``: each entry's source position
as its sequence id and in a message property, for the remote to recognise what it stored),
the names Pulsar gives (``names``), which remotes a topic goes to (``clusters``), the
``magnetar.client``-based remote (``remote``) and the stats (``stats``).
Sits between ``topics/`` and the service (ARCHITECTURE.md §7.1). Must not know: the wire
protocol's connections, HTTP.
"""

from magnetar.broker.replication.clusters import ReplicationPlan, replication_plan
from magnetar.broker.replication.contracts import (
    RemoteCluster,
    RemoteProducer,
    ReplicationError,
    ReplicationSource,
)
from magnetar.broker.replication.replicator import (
    REPLICATION_PRODUCER_QUEUE_SIZE,
    Replicator,
    ReplicatorSettings,
)
from magnetar.broker.replication.stats import InboundReplication, ReplicatorStatistics
from magnetar.broker.topics.replication_names import (
    REPLICATOR_PREFIX,
    ReplicationLink,
    cursor_name,
    is_replicator_producer,
    remote_of_cursor,
)
from magnetar.broker.topics.replication_positions import SOURCE_POSITION_PROPERTY, SourcePosition

__all__ = [
    "REPLICATION_PRODUCER_QUEUE_SIZE",
    "REPLICATOR_PREFIX",
    "SOURCE_POSITION_PROPERTY",
    "InboundReplication",
    "RemoteCluster",
    "RemoteProducer",
    "ReplicationError",
    "ReplicationLink",
    "ReplicationPlan",
    "ReplicationSource",
    "Replicator",
    "ReplicatorSettings",
    "ReplicatorStatistics",
    "SourcePosition",
    "cursor_name",
    "is_replicator_producer",
    "remote_of_cursor",
    "replication_plan",
]
