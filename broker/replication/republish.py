"""What a replicator does with one stored entry: skip it, or re-publish it as stored.

Owns: ``inspect`` (the decision, from the entry's ``MessageMetadata`` alone) and
``rewrite`` (the bytes to send). An entry is skipped, never sent, when:
- it is malformed (Pulsar deletes it from the replicator's cursor too);
- it carries ``replicated_from``: it came from another cluster (loop prevention: a message
  crosses each link once, whatever the topology);
- its ``replicate_to`` is set and does not name the remote (the official client's
  ``replication_clusters=[...]``; ``disable_replication=True`` sends ``["__local__"]``);
- it is a marker other than the three replicated subscriptions exchange between clusters
  (snapshot request, snapshot response, subscription update: those are sent, as Pulsar does,
  to the clusters their ``replicate_to`` names, or to all; a completed snapshot and
  transaction markers stay in their cluster);
- it expired under the topic's message TTL before it could be replicated (as Pulsar).
Otherwise it is re-published as stored: the payload bytes are sent untouched (a batch
entry stays one batch entry; compression, keys, ordering keys, properties, event times,
per-message metadata and chunking intact); the metadata keeps every field but gains
``replicated_from = <local cluster>`` and the source position property
(``positions.SOURCE_POSITION_PROPERTY``), loses transaction ids, and takes the remote's
version of the same schema when the caller mapped it.

Invariants: ``rewrite`` never changes the payload; its output parses back to the input's
metadata plus exactly those changes; checksummed as any SEND. Pure: no I/O.
Must not know: cursors, producers, the remote.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from magnetar.broker.ledger.position import Position
from magnetar.broker.topics.replication_names import ReplicationLink
from magnetar.broker.topics.replication_positions import SOURCE_POSITION_PROPERTY, SourcePosition
from magnetar.client.protocol import (
    RemoteProtocolError,
    encode_headers_and_payload,
    entry_metadata,
    markers,
    pb,
)

MarkerType = markers.MarkerType


class SkipReason(enum.Enum):
    MALFORMED = "malformed entry"
    REPLICATED = "replicated from another cluster"
    NOT_FOR_REMOTE = "replicate_to does not name the remote cluster"
    MARKER = "marker"
    EXPIRED = "expired (message TTL)"


@dataclass(frozen=True, slots=True)
class Skip:
    """The entry is done with, unsent: the cursor may move past it."""

    position: Position
    reason: SkipReason


@dataclass(slots=True)
class Inspected:
    """An entry to re-publish; ``schema_version`` is the local one (b"" if none)."""

    position: Position
    source: SourcePosition
    metadata: pb.MessageMetadata
    payload: bytes
    size: int
    """Bytes of the entry as stored (throughput and rate limits count these)."""

    @property
    def schema_version(self) -> bytes:
        return self.metadata.schema_version

    @property
    def num_messages(self) -> int:
        md = self.metadata
        return md.num_messages_in_batch if md.HasField("num_messages_in_batch") else 1

    @property
    def publish_time_ms(self) -> int:
        return self.metadata.publish_time


@dataclass(frozen=True, slots=True)
class Republished:
    """The SEND a replicator makes for one entry."""

    position: Position
    source: SourcePosition
    headers_and_payload: bytes
    num_messages: int
    is_chunk: bool
    size: int
    publish_time_ms: int

    @property
    def sequence_id(self) -> int:
        return self.source.sequence_id


def inspect(
    position: Position,
    data: bytes,
    remote: str,
    *,
    now_ms: int,
    message_ttl_s: int = 0,
) -> Inspected | Skip:
    """Decide about the entry ``data`` stored at ``position`` (see the module docstring).
    ``message_ttl_s`` <= 0: no expiry. A position outside what a source position can name is
    a ``ValueError`` (never silently skipped)."""
    try:
        md, payload_at = entry_metadata(data)
    except RemoteProtocolError:
        return Skip(position, SkipReason.MALFORMED)
    if md.HasField("replicated_from"):
        return Skip(position, SkipReason.REPLICATED)
    if len(md.replicate_to) and remote not in md.replicate_to:
        return Skip(position, SkipReason.NOT_FOR_REMOTE)
    if md.HasField("marker_type"):
        try:
            kind = MarkerType(md.marker_type)
        except ValueError:
            return Skip(position, SkipReason.MARKER)
        if not kind.replicated_subscription:
            return Skip(position, SkipReason.MARKER)
        source = SourcePosition(position.ledger_id, position.entry_id)
        return Inspected(position, source, md, data[payload_at:], len(data))
    if message_ttl_s > 0 and md.publish_time + message_ttl_s * 1000 <= now_ms:
        return Skip(position, SkipReason.EXPIRED)
    source = SourcePosition(position.ledger_id, position.entry_id)
    return Inspected(position, source, md, data[payload_at:], len(data))


def rewrite(
    entry: Inspected, link: ReplicationLink, remote_schema_version: bytes = b""
) -> Republished:
    """The bytes to send for ``entry`` over ``link`` (``remote_schema_version``: the remote
    cluster's version of the entry's schema, when it has one)."""
    md = pb.MessageMetadata()
    md.CopyFrom(entry.metadata)
    md.replicated_from = link.local
    md.properties.add(key=SOURCE_POSITION_PROPERTY, value=str(entry.source))
    md.ClearField("txnid_least_bits")
    md.ClearField("txnid_most_bits")
    if remote_schema_version:
        md.schema_version = remote_schema_version
    return Republished(
        entry.position,
        entry.source,
        encode_headers_and_payload(md, entry.payload),
        entry.num_messages,
        md.HasField("chunk_id"),
        entry.size,
        entry.publish_time_ms,
    )


__all__ = ["Inspected", "Republished", "Skip", "SkipReason", "inspect", "rewrite"]
