"""The client's hand-encoded SEND frame equals the protobuf encoding byte for byte."""

from __future__ import annotations

import pytest

from magnetar.client._wire import SimpleSendEncoder
from magnetar.client.protocol import (
    commands,
    encode_headers_and_payload,
    encode_payload_command,
    encode_simple_metadata,
    encode_simple_send_frame,
    pb,
)


@pytest.mark.parametrize(
    ("producer_id", "sequence_id", "name", "publish_time", "payload"),
    [
        (0, 0, "", 0, b""),
        (1, 5, "standalone-0-1", 1_700_000_000_123, b"x" * 100),
        (300, 2**40, "prod\u00e9", 2**63 - 1, b"\x00" * 70_000),
        (2**63, 127, "a" * 200, 128, b"abc"),
    ],
)
def test_simple_send_frame_matches_protobuf(
    producer_id: int, sequence_id: int, name: str, publish_time: int, payload: bytes
) -> None:
    md = pb.MessageMetadata(producer_name=name, sequence_id=sequence_id, publish_time=publish_time)
    expected_md = md.SerializeToString()
    got_md = encode_simple_metadata(name.encode(), sequence_id, publish_time)
    assert got_md == expected_md
    expected = encode_payload_command(
        commands.send(producer_id, sequence_id), encode_headers_and_payload(md, payload)
    )
    assert encode_simple_send_frame(producer_id, sequence_id, got_md, payload) == expected


def test_simple_send_encoder_matches_protobuf_across_times_and_sequences() -> None:
    encoder = SimpleSendEncoder(7, b"p-1")
    for seq, publish_time in [
        (0, 5),
        (1, 5),
        (127, 5),
        (128, 6),
        (16_383, 6),
        (16_384, 2**21),
        (2**21 - 1, 2**21),
        (2**21, 1_700_000_000_000),
        (2**50, 0),
    ]:
        md = pb.MessageMetadata(producer_name="p-1", sequence_id=seq, publish_time=publish_time)
        got_md = encoder.metadata(seq, publish_time)
        assert got_md == md.SerializeToString()
        expected = encode_payload_command(
            commands.send(7, seq), encode_headers_and_payload(md, b"payload")
        )
        assert encoder.frame(seq, got_md, b"payload") == expected
