"""Marker entries (Pulsar's ``Markers``): entries brokers write into a topic for each other.

A marker is a stored entry whose ``MessageMetadata`` carries ``marker_type`` (field 20); its
payload is a message of ``proto/pulsar_markers.proto`` chosen by that type. Brokers never
deliver one to a consumer. Layout, as Pulsar writes them::

    MessageMetadata{producer_name="pulsar.marker", sequence_id=0, publish_time, marker_type,
                    replicate_to=[...] (only when the marker is for some clusters)}
    payload = the marker's message

Owns: ``MarkerType``, ``encode_marker`` (the entry bytes, checksummed as every stored entry)
and the replicated-subscription markers (PIP-33): ``snapshot_request`` (to every cluster),
``snapshot_response`` (to the asking cluster only), ``subscription_update`` (to every
cluster), ``decode_marker`` (the typed payload of a marker entry, ``ClusterPosition`` pairs
for its positions). Unknown marker types decode to None; a marker whose payload does not
parse is a ``RemoteProtocolError``.
Must not know: topics, subscriptions, I/O.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from google.protobuf.message import DecodeError, Message

from ._entry import EntryView
from ._errors import RemoteProtocolError
from ._framing import encode_headers_and_payload
from .proto import pulsar_api_pb2 as pb
from .proto import pulsar_markers_pb2 as mpb

MARKER_PRODUCER_NAME = "pulsar.marker"


class MarkerType(enum.IntEnum):
    UNKNOWN = 0
    SNAPSHOT_REQUEST = 10
    SNAPSHOT_RESPONSE = 11
    SNAPSHOT = 12
    SUBSCRIPTION_UPDATE = 13
    TXN_COMMITTED = 20
    TXN_ABORTED = 21

    @property
    def replicated_subscription(self) -> bool:
        """One of the markers replicated subscriptions exchange between clusters."""
        return self in _EXCHANGED


_EXCHANGED = frozenset(
    {MarkerType.SNAPSHOT_REQUEST, MarkerType.SNAPSHOT_RESPONSE, MarkerType.SUBSCRIPTION_UPDATE}
)


@dataclass(frozen=True, slots=True)
class ClusterPosition:
    """A position in one cluster's copy of the topic."""

    cluster: str
    ledger_id: int
    entry_id: int


@dataclass(frozen=True, slots=True)
class SnapshotRequest:
    snapshot_id: str
    source_cluster: str


@dataclass(frozen=True, slots=True)
class SnapshotResponse:
    snapshot_id: str
    position: ClusterPosition
    """The answering cluster and its last position when it read the request."""


@dataclass(frozen=True, slots=True)
class SubscriptionUpdate:
    subscription: str
    positions: tuple[ClusterPosition, ...]


Marker = SnapshotRequest | SnapshotResponse | SubscriptionUpdate


def encode_marker(
    marker_type: MarkerType,
    payload: Message,
    *,
    publish_time_ms: int,
    replicate_to: Sequence[str] = (),
) -> bytes:
    """A marker entry as a broker stores it (``replicate_to`` empty: for every cluster)."""
    md = pb.MessageMetadata(
        producer_name=MARKER_PRODUCER_NAME,
        sequence_id=0,
        publish_time=publish_time_ms,
        marker_type=int(marker_type),
    )
    md.replicate_to.extend(replicate_to)
    return encode_headers_and_payload(md, payload.SerializeToString())


def _position(p: ClusterPosition) -> mpb.ClusterMessageId:
    return mpb.ClusterMessageId(
        cluster=p.cluster,
        message_id=mpb.MarkersMessageIdData(ledger_id=p.ledger_id, entry_id=p.entry_id),
    )


def _from_wire(p: mpb.ClusterMessageId) -> ClusterPosition:
    return ClusterPosition(p.cluster, p.message_id.ledger_id, p.message_id.entry_id)


def snapshot_request(snapshot_id: str, source_cluster: str, *, publish_time_ms: int) -> bytes:
    body = mpb.ReplicatedSubscriptionsSnapshotRequest(
        snapshot_id=snapshot_id, source_cluster=source_cluster
    )
    return encode_marker(MarkerType.SNAPSHOT_REQUEST, body, publish_time_ms=publish_time_ms)


def snapshot_response(
    snapshot_id: str, to_cluster: str, position: ClusterPosition, *, publish_time_ms: int
) -> bytes:
    body = mpb.ReplicatedSubscriptionsSnapshotResponse(
        snapshot_id=snapshot_id, cluster=_position(position)
    )
    return encode_marker(
        MarkerType.SNAPSHOT_RESPONSE,
        body,
        publish_time_ms=publish_time_ms,
        replicate_to=(to_cluster,),
    )


def subscription_update(
    subscription: str, positions: Mapping[str, tuple[int, int]], *, publish_time_ms: int
) -> bytes:
    body = mpb.ReplicatedSubscriptionsUpdate(subscription_name=subscription)
    for cluster, (ledger_id, entry_id) in sorted(positions.items()):
        body.clusters.append(_position(ClusterPosition(cluster, ledger_id, entry_id)))
    return encode_marker(MarkerType.SUBSCRIPTION_UPDATE, body, publish_time_ms=publish_time_ms)


def decode_marker(view: EntryView) -> Marker | None:
    """The replicated-subscription marker ``view`` holds (None: not one of those)."""
    kind = view.marker_type
    try:
        if kind == MarkerType.SNAPSHOT_REQUEST:
            req = mpb.ReplicatedSubscriptionsSnapshotRequest.FromString(view.payload)
            return SnapshotRequest(req.snapshot_id, req.source_cluster)
        if kind == MarkerType.SNAPSHOT_RESPONSE:
            resp = mpb.ReplicatedSubscriptionsSnapshotResponse.FromString(view.payload)
            if not resp.HasField("cluster"):
                raise RemoteProtocolError("snapshot response without a cluster position")
            return SnapshotResponse(resp.snapshot_id, _from_wire(resp.cluster))
        if kind == MarkerType.SUBSCRIPTION_UPDATE:
            upd = mpb.ReplicatedSubscriptionsUpdate.FromString(view.payload)
            return SubscriptionUpdate(
                upd.subscription_name, tuple(_from_wire(c) for c in upd.clusters)
            )
    except DecodeError as exc:
        raise RemoteProtocolError(f"malformed marker of type {kind}: {exc}") from None
    return None


__all__ = [
    "MARKER_PRODUCER_NAME",
    "ClusterPosition",
    "Marker",
    "MarkerType",
    "SnapshotRequest",
    "SnapshotResponse",
    "SubscriptionUpdate",
    "decode_marker",
    "encode_marker",
    "snapshot_request",
    "snapshot_response",
    "subscription_update",
]
