"""Replicated subscriptions (PIP-33), the decisions: consistent snapshots across clusters.

A snapshot pairs a position of this cluster's copy of a topic with a position of each other
cluster's copy such that everything the others hold up to their position is, here, at or
before the local one. It is taken with markers (``client.protocol.markers``):

1. this cluster stores a snapshot request (replicated to every remote);
2. each remote, when the request is stored there, answers with its last position then (a
   response replicated back to this cluster only): everything before the request here, and
   everything of its own up to that position, is in its copy at or before that position;
3. the response is stored here after everything the remote published before it (its
   replicator sends in order): the response's position here is the local side of the pair.
   With more than one remote, a second round makes sure what the remotes exchanged among
   themselves meanwhile is covered too (as Pulsar does).

A replicated subscription whose mark-delete position passes a snapshot's local position has
consumed everything the remotes hold up to their positions, so the same subscription moves
there in each remote (a subscription update marker). Nothing is ever acknowledged elsewhere
that was not acknowledged here: at most what was acknowledged after the last snapshot is
delivered again in the other cluster.

Owns: ``Snapshot``; ``SnapshotTaker`` (when a new snapshot starts: never while a remote is not
connected, and never when no message was stored since the last completed one, so an idle
topic stores no marker at all: Pulsar issue 6437; pending snapshots, their rounds, responses
and timeouts); ``SubscriptionSnapshots`` (the completed snapshots one subscription has not
passed yet, at most ``max_cached``: when full, every other one of the older half goes, so
the ones kept still cover the range; which one an advanced mark-delete position passed).
Pure: positions and times in, decisions out. Must not know: topics, markers' bytes, I/O.
"""

from __future__ import annotations

import bisect
import uuid
from dataclasses import dataclass, field

from magnetar.broker.ledger.position import Position

SNAPSHOT_FREQUENCY_MS = 1_000
"""Pulsar's ``replicatedSubscriptionsSnapshotFrequencyMillis`` default."""
SNAPSHOT_TIMEOUT_S = 30
"""Pulsar's ``replicatedSubscriptionsSnapshotTimeoutSeconds`` default."""
SNAPSHOTS_CACHED = 10
"""Pulsar's ``replicatedSubscriptionsSnapshotMaxCachedPerSubscription`` default."""
PENDING_MAX = 16
"""Snapshots being taken at once (older ones are dropped, as if timed out)."""


@dataclass(frozen=True, slots=True)
class Snapshot:
    snapshot_id: str
    local: Position
    remotes: tuple[tuple[str, Position], ...]
    """Each other cluster and its position, sorted by cluster."""

    def positions(self) -> dict[str, tuple[int, int]]:
        return {c: (p.ledger_id, p.entry_id) for c, p in self.remotes}


@dataclass(slots=True)
class _Pending:
    snapshot_id: str
    started_ms: int
    remotes: frozenset[str]
    last_message: Position
    """The last message stored when it started."""
    missing: set[str]
    responses: dict[str, Position] = field(default_factory=dict)
    rounds_left: int = 1


@dataclass(frozen=True, slots=True)
class AskAgain:
    """The first round is answered: store another request (the second round)."""

    snapshot_id: str


class SnapshotTaker:
    """One topic's snapshots being taken (see the module docstring)."""

    def __init__(self, timeout_ms: int = SNAPSHOT_TIMEOUT_S * 1000) -> None:
        self.timeout_ms = timeout_ms
        self._pending: dict[str, _Pending] = {}
        self._covered: Position | None = None
        """The last message stored when the last completed snapshot started."""
        self.completed = 0
        self.timed_out = 0

    def __repr__(self) -> str:
        return f"<SnapshotTaker pending={len(self._pending)} completed={self.completed}>"

    @property
    def pending(self) -> int:
        return len(self._pending)

    def covers(self, last_message: Position | None) -> bool:
        """A completed snapshot started after ``last_message`` was stored: nothing newer to
        snapshot (an idle topic stays without new markers)."""
        return last_message is None or (self._covered is not None and last_message <= self._covered)

    def start(
        self,
        now_ms: int,
        remotes: frozenset[str],
        last_message: Position | None,
        *,
        all_connected: bool,
    ) -> str | None:
        """A snapshot to start now (its id: store a request), or None: no remote, one not
        connected, no message stored since the last completed snapshot started, or one
        started for the same messages is still pending."""
        self._expire(now_ms)
        if not remotes or not all_connected or last_message is None:
            return None
        if self._covered is not None and last_message <= self._covered:
            return None
        if any(p.last_message == last_message for p in self._pending.values()):
            return None
        snapshot_id = str(uuid.uuid4())
        self._pending[snapshot_id] = _Pending(
            snapshot_id,
            now_ms,
            remotes,
            last_message,
            set(remotes),
            rounds_left=2 if len(remotes) > 1 else 1,
        )
        while len(self._pending) > PENDING_MAX:
            oldest = min(self._pending.values(), key=lambda p: p.started_ms)
            del self._pending[oldest.snapshot_id]
        return snapshot_id

    def response(
        self, snapshot_id: str, cluster: str, remote: Position, local: Position
    ) -> Snapshot | AskAgain | None:
        """A remote's response was stored here at ``local``: the completed snapshot, a
        second round to ask for, or None (more responses due, or not a snapshot of ours)."""
        pending = self._pending.get(snapshot_id)
        if pending is None or cluster not in pending.remotes:
            return None
        pending.responses.setdefault(cluster, remote)
        pending.missing.discard(cluster)
        if pending.missing:
            return None
        pending.rounds_left -= 1
        if pending.rounds_left > 0:
            pending.missing = set(pending.remotes)
            return AskAgain(snapshot_id)
        del self._pending[snapshot_id]
        if self._covered is None or pending.last_message > self._covered:
            self._covered = pending.last_message
        self.completed += 1
        return Snapshot(snapshot_id, local, tuple(sorted(pending.responses.items())))

    def _expire(self, now_ms: int) -> None:
        for p in [p for p in self._pending.values() if now_ms - p.started_ms > self.timeout_ms]:
            del self._pending[p.snapshot_id]
            self.timed_out += 1

    def check_invariants(self) -> None:
        assert len(self._pending) <= PENDING_MAX
        for p in self._pending.values():
            assert p.missing <= p.remotes and p.rounds_left >= 1, p


class SubscriptionSnapshots:
    """The completed snapshots one replicated subscription has not passed yet."""

    def __init__(self, max_cached: int = SNAPSHOTS_CACHED) -> None:
        if max_cached < 1:
            raise ValueError("max_cached must be >= 1")
        self.max_cached = max_cached
        self._snapshots: list[Snapshot] = []  # by local position
        self.last_sent: Snapshot | None = None

    def __repr__(self) -> str:
        return f"<SubscriptionSnapshots {len(self._snapshots)}>"

    def __len__(self) -> int:
        return len(self._snapshots)

    def add(self, snapshot: Snapshot, mark_delete: Position) -> None:
        """A snapshot completed; kept only while the subscription has not passed it."""
        if snapshot.local <= mark_delete:
            return
        keys = [s.local for s in self._snapshots]
        i = bisect.bisect_left(keys, snapshot.local)
        if i < len(keys) and keys[i] == snapshot.local:
            return
        self._snapshots.insert(i, snapshot)
        if len(self._snapshots) > self.max_cached:
            older = self._snapshots[: len(self._snapshots) // 2]
            newer = self._snapshots[len(self._snapshots) // 2 :]
            self._snapshots = older[1::2] + newer

    def advanced(self, mark_delete: Position) -> Snapshot | None:
        """The mark-delete position moved: the newest snapshot it passed (to send), if any;
        the ones passed are forgotten."""
        keys = [s.local for s in self._snapshots]
        i = bisect.bisect_right(keys, mark_delete)
        if i == 0:
            return None
        passed = self._snapshots[i - 1]
        del self._snapshots[:i]
        self.last_sent = passed
        return passed

    def check_invariants(self) -> None:
        keys = [s.local for s in self._snapshots]
        assert keys == sorted(keys) and len(set(keys)) == len(keys), keys
        assert len(keys) <= self.max_cached


__all__ = [
    "PENDING_MAX",
    "SNAPSHOTS_CACHED",
    "SNAPSHOT_FREQUENCY_MS",
    "SNAPSHOT_TIMEOUT_S",
    "AskAgain",
    "Snapshot",
    "SnapshotTaker",
    "SubscriptionSnapshots",
]
