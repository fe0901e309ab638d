"""Which remote clusters a topic is replicated to, from its policies, as Pulsar decides it.

Owns: ``replication_plan``: the topic's own ``replication_clusters`` (topic-level policy)
when it has some, else its namespace's, else the local cluster alone (a namespace created
before replication clusters were recorded); the remote clusters are those others, and only
while the local cluster is among them: a namespace not replicated to the local cluster is
not served here at all (Pulsar redirects its lookups to a cluster that serves it, and
deletes a local topic whose namespace dropped the local cluster). Pure.
Must not know: how policies are stored, replicators.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


def _clusters(policies: dict[str, Any]) -> frozenset[str]:
    value = policies.get("replication_clusters")
    if isinstance(value, list):
        return frozenset(c for c in value if isinstance(c, str) and c)
    return frozenset()


@dataclass(frozen=True, slots=True)
class ReplicationPlan:
    clusters: frozenset[str]
    """Every cluster the topic lives in (the local one included when it does)."""
    local: str

    @property
    def served_locally(self) -> bool:
        return self.local in self.clusters

    @property
    def remotes(self) -> frozenset[str]:
        """The clusters this cluster's replicators send the topic to."""
        return self.clusters - {self.local} if self.served_locally else frozenset()


def replication_plan(
    namespace_policies: dict[str, Any], topic_policies: dict[str, Any], local: str
) -> ReplicationPlan:
    clusters = _clusters(topic_policies) or _clusters(namespace_policies) or frozenset({local})
    return ReplicationPlan(clusters, local)


__all__ = ["ReplicationPlan", "replication_plan"]
