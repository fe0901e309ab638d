"""Marker entries (``client/protocol/_markers.py``): Pulsar's layout, round trips, and the
cheap ``entry_marker_type`` agreeing with the full parse."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from magnetar.client.protocol import (
    EntryView,
    RemoteProtocolError,
    encode_headers_and_payload,
    entry_marker_type,
    markers,
    parse_entry_metadata,
    pb,
)
from magnetar.client.protocol.proto import pulsar_markers_pb2 as mpb


def test_a_marker_entry_is_laid_out_as_pulsars() -> None:
    data = markers.snapshot_request("id-1", "east", publish_time_ms=1234)
    md = parse_entry_metadata(data)
    assert md.producer_name == "pulsar.marker" and md.sequence_id == 0
    assert md.publish_time == 1234 and md.marker_type == 10 and not md.replicate_to
    body = mpb.ReplicatedSubscriptionsSnapshotRequest.FromString(EntryView(data).payload)
    assert (body.snapshot_id, body.source_cluster) == ("id-1", "east")
    assert EntryView.parse(data).checksum_ok


def test_a_response_goes_to_the_asking_cluster_only() -> None:
    at = markers.ClusterPosition("west", 7, 3)
    data = markers.snapshot_response("id-1", "east", at, publish_time_ms=1)
    view = EntryView(data)
    assert list(view.metadata.replicate_to) == ["east"]
    assert markers.decode_marker(view) == markers.SnapshotResponse("id-1", at)


def test_round_trips() -> None:
    req = markers.snapshot_request("a", "east", publish_time_ms=1)
    assert markers.decode_marker(EntryView(req)) == markers.SnapshotRequest("a", "east")
    upd = markers.subscription_update("sub", {"west": (1, 2), "east": (3, 4)}, publish_time_ms=1)
    assert markers.decode_marker(EntryView(upd)) == markers.SubscriptionUpdate(
        "sub",
        (markers.ClusterPosition("east", 3, 4), markers.ClusterPosition("west", 1, 2)),
    )


def test_other_markers_and_messages_decode_to_none() -> None:
    snapshot = markers.encode_marker(
        markers.MarkerType.SNAPSHOT,
        mpb.ReplicatedSubscriptionsSnapshot(snapshot_id="s"),
        publish_time_ms=1,
    )
    assert markers.decode_marker(EntryView(snapshot)) is None
    message = encode_headers_and_payload(
        pb.MessageMetadata(producer_name="p", sequence_id=1, publish_time=1), b"x"
    )
    assert markers.decode_marker(EntryView(message)) is None
    assert entry_marker_type(message) == 0


def test_a_garbled_marker_is_a_protocol_error() -> None:
    md = pb.MessageMetadata(producer_name="m", sequence_id=0, publish_time=1, marker_type=13)
    data = encode_headers_and_payload(md, b"\xff\xff\xff")
    with pytest.raises(RemoteProtocolError):
        markers.decode_marker(EntryView(data))


@given(
    st.binary(max_size=40),
    st.one_of(st.none(), st.integers(0, 30)),
    st.dictionaries(st.text(max_size=5), st.binary(max_size=8).map(bytes.hex), max_size=3),
)
def test_the_tag_scan_agrees_with_the_parse(
    payload: bytes, marker_type: int | None, props: dict[str, str]
) -> None:
    md = pb.MessageMetadata(producer_name="p\xa0\x01", sequence_id=160, publish_time=1)
    for k, v in props.items():
        md.properties.add(key=k + "\xa0\x01", value=v)
    if marker_type is not None:
        md.marker_type = marker_type
    data = encode_headers_and_payload(md, payload)
    expected = marker_type or 0
    assert entry_marker_type(data) == expected
    assert EntryView(data).marker_type == expected
