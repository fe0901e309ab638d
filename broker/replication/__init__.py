"""Geo-replication: a topic partition's messages re-published on other clusters, once.

Owns: the replicator (``replicator.Replicator``: a durable cursor ``pulsar.repl.<remote>``
read and a producer on the remote cluster, as a state machine in ``states``), what it does
with each entry (``republish``: loop prevention, ``replicate_to``, markers, TTL; stored
bytes sent unchanged), the topic it reads (``source``), which remotes a topic goes to
(``clusters``), a loaded topic's replicators following its plan (``topic_replication``),
replicated subscriptions (``snapshots``: the decisions; ``subscriptions``: the markers),
the ``magnetar.client``-based remote (``remote``), the broker's part: remote clusters'
clients and every loaded topic's replication (``geo``), and the stats (``stats``). The
names Pulsar gives and the source positions of the exactly-once link are below, in
``topics/`` (``replication_names``, ``replication_positions``; the receiving side is
``topics/inbound_links``): a topic uses them too.
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
