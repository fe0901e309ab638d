"""The pure parts of geo-replication: names, source positions as sequence ids, the
replicator's transition table over every (state, event) pair, which remotes a topic goes
to, and what happens to each stored entry (skipped, or re-published as stored)."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given
from hypothesis import strategies as st
from support.replication_fakes import batch_entry_bytes, entry_bytes

from magnetar.broker.ledger.position import Position
from magnetar.broker.replication.clusters import replication_plan
from magnetar.broker.replication.republish import (
    Inspected,
    Skip,
    SkipReason,
    inspect,
    rewrite,
)
from magnetar.broker.replication.states import (
    IGNORED,
    TRANSITIONS,
    Action,
    Event,
    InvalidTransition,
    State,
    next_transition,
)
from magnetar.broker.topics.replication_names import (
    ReplicationLink,
    cursor_name,
    is_replicator_producer,
    remote_of_cursor,
)
from magnetar.broker.topics.replication_positions import (
    ENTRY_ID_MAX,
    LEDGER_ID_MAX,
    SOURCE_POSITION_PROPERTY,
    SourcePosition,
)
from magnetar.client.protocol import EntryView, markers, parse_batch

LINK = ReplicationLink("east", "west")
AT = Position(12, 34)


# -- names ------------------------------------------------------------------------------------
def test_pulsars_names() -> None:
    assert LINK.producer_name == "pulsar.repl.east-->west"
    assert LINK.cursor_name == cursor_name("west") == "pulsar.repl.west"
    assert remote_of_cursor("pulsar.repl.west") == "west"
    assert remote_of_cursor("pulsar.dedup") is None and remote_of_cursor("pulsar.repl.") is None
    assert ReplicationLink.of_producer("pulsar.repl.east-->west") == LINK
    for name in ("app", "pulsar.repl.east", "pulsar.repl.-->west", "pulsar.repl.a-->a"):
        assert ReplicationLink.of_producer(name) is None
        assert not is_replicator_producer(name)
    with pytest.raises(ValueError):
        ReplicationLink("east", "east")
    with pytest.raises(ValueError):
        ReplicationLink("a-->b", "c")


# -- source positions -------------------------------------------------------------------------
@given(
    st.tuples(st.integers(0, LEDGER_ID_MAX), st.integers(0, ENTRY_ID_MAX)),
    st.tuples(st.integers(0, LEDGER_ID_MAX), st.integers(0, ENTRY_ID_MAX)),
)
def test_sequence_ids_sort_as_positions(a: tuple[int, int], b: tuple[int, int]) -> None:
    pa, pb_ = SourcePosition(*a), SourcePosition(*b)
    assert (pa < pb_) == (pa.sequence_id < pb_.sequence_id)
    assert SourcePosition.of_sequence_id(pa.sequence_id) == pa
    assert 0 <= pa.sequence_id < 1 << 63
    assert SourcePosition.parse(str(pa)) == pa


def test_positions_out_of_range_are_refused() -> None:
    for bad in ((LEDGER_ID_MAX + 1, 0), (0, ENTRY_ID_MAX + 1), (-1, 0), (0, -1)):
        with pytest.raises(ValueError):
            SourcePosition(*bad)
    for text in ("", "1", "a:b", "1:-2", "-1:2", f"{LEDGER_ID_MAX + 1}:0", "1:2:3", "٣:1"):
        assert SourcePosition.parse(text) is None


# -- the transition table ---------------------------------------------------------------------
@pytest.mark.parametrize(("state", "event"), list(itertools.product(State, Event)))
def test_every_state_and_event(state: State, event: Event) -> None:
    found = TRANSITIONS.get((state, event))
    if found is None:
        with pytest.raises(InvalidTransition):
            next_transition(state, event)
    elif found == IGNORED:
        assert next_transition(state, event) is None
    else:
        assert next_transition(state, event) == found


def test_the_lifecycle_paths() -> None:
    def go(state: State, event: Event) -> tuple[State, tuple[Action, ...]]:
        t = next_transition(state, event)
        assert t is not None
        return t.next, t.actions

    assert go(State.STOPPED, Event.START) == (State.STARTING, (Action.CONNECT,))
    assert go(State.STARTING, Event.CONNECTED) == (State.RUNNING, (Action.REWIND_AND_READ,))
    assert go(State.RUNNING, Event.FAILED) == (
        State.BACKING_OFF,
        (Action.CLOSE_PRODUCER, Action.SCHEDULE_RETRY),
    )
    assert go(State.BACKING_OFF, Event.RETRY_DUE) == (State.STARTING, (Action.CONNECT,))
    assert go(State.BACKING_OFF, Event.STOP) == (State.STOPPED, (Action.CANCEL_RETRY,))
    assert go(State.RUNNING, Event.STOP) == (State.STOPPING, (Action.CLOSE_PRODUCER,))
    assert go(State.STOPPING, Event.CLOSED) == (State.STOPPED, ())
    with pytest.raises(InvalidTransition):
        next_transition(State.STOPPING, Event.START)


# -- which remotes ----------------------------------------------------------------------------
def test_replication_plan() -> None:
    ns = {"replication_clusters": ["east", "west", "central"]}
    plan = replication_plan(ns, {}, "east")
    assert plan.served_locally and plan.remotes == {"west", "central"}
    topic = {"replication_clusters": ["east", "central"]}
    assert replication_plan(ns, topic, "east").remotes == {"central"}
    assert replication_plan({}, {}, "east").remotes == frozenset()
    away = replication_plan({"replication_clusters": ["west"]}, {}, "east")
    assert not away.served_locally and away.remotes == frozenset()


# -- each entry -------------------------------------------------------------------------------
def _inspected(data: bytes, **kw: int) -> Inspected:
    got = inspect(AT, data, "west", now_ms=10_000, **kw)
    assert isinstance(got, Inspected), got
    return got


@pytest.mark.parametrize(
    ("data", "reason"),
    [
        (b"\x00\x01garbage", SkipReason.MALFORMED),
        (entry_bytes(b"x", replicated_from="central"), SkipReason.REPLICATED),
        (entry_bytes(b"x", replicate_to=["central"]), SkipReason.NOT_FOR_REMOTE),
        (entry_bytes(b"x", replicate_to=["__local__"]), SkipReason.NOT_FOR_REMOTE),
        (entry_bytes(b"x", marker_type=12), SkipReason.MARKER),  # a completed snapshot
        (entry_bytes(b"x", marker_type=20), SkipReason.MARKER),  # transactions
        (entry_bytes(b"x", marker_type=99), SkipReason.MARKER),  # unknown
        (entry_bytes(b"x", marker_type=10, replicated_from="central"), SkipReason.REPLICATED),
        (entry_bytes(b"x", marker_type=11, replicate_to=["central"]), SkipReason.NOT_FOR_REMOTE),
    ],
)
def test_what_is_never_replicated(data: bytes, reason: SkipReason) -> None:
    assert inspect(AT, data, "west", now_ms=10_000) == Skip(AT, reason)


@pytest.mark.parametrize(
    "marker",
    [
        markers.snapshot_request("s1", "east", publish_time_ms=1),
        markers.snapshot_response(
            "s1", "west", markers.ClusterPosition("east", 3, 4), publish_time_ms=1
        ),
        markers.subscription_update("sub", {"west": (3, 4)}, publish_time_ms=1),
    ],
)
def test_replicated_subscription_markers_cross_the_link(marker: bytes) -> None:
    """Snapshot requests, responses (to the cluster named) and updates go to the other
    clusters, as stored, with the link's source position; a marker never expires."""
    got = inspect(AT, marker, "west", now_ms=10**12, message_ttl_s=1)
    assert isinstance(got, Inspected)
    out = EntryView(rewrite(got, LINK).headers_and_payload)
    assert out.marker_type == EntryView(marker).marker_type
    assert out.payload == EntryView(marker).payload
    assert out.metadata.replicated_from == "east"


def test_ttl_expired_entries_are_skipped() -> None:
    data = entry_bytes(b"x", publish_time_ms=1_000)
    assert inspect(AT, data, "west", now_ms=11_000, message_ttl_s=10) == Skip(
        AT, SkipReason.EXPIRED
    )
    assert isinstance(inspect(AT, data, "west", now_ms=10_999, message_ttl_s=10), Inspected)
    assert isinstance(inspect(AT, data, "west", now_ms=10**9, message_ttl_s=0), Inspected)


def test_an_entry_is_republished_as_stored() -> None:
    data = entry_bytes(
        b"payload",
        publish_time_ms=5_000,
        properties={"k": "v"},
        partition_key="key-1",
        ordering_key=b"ord",
        event_time=4_000,
        schema_version=b"\x00" * 7 + b"\x02",
        replicate_to=["west", "central"],
        txnid_least_bits=5,
        txnid_most_bits=6,
    )
    out = rewrite(_inspected(data), LINK)
    stored = EntryView.parse(out.headers_and_payload)  # checksum verified
    assert stored.payload == b"payload"
    md = stored.metadata
    original = EntryView.parse(data).metadata
    assert md.replicated_from == "east"
    assert [(p.key, p.value) for p in md.properties] == [
        ("k", "v"),
        (SOURCE_POSITION_PROPERTY, "12:34"),
    ]
    assert not md.HasField("txnid_least_bits") and not md.HasField("txnid_most_bits")
    for name in (
        "producer_name",
        "sequence_id",
        "publish_time",
        "partition_key",
        "ordering_key",
        "event_time",
        "schema_version",
        "replicate_to",
    ):
        assert getattr(md, name) == getattr(original, name), name
    assert out.sequence_id == SourcePosition(12, 34).sequence_id
    assert (out.num_messages, out.is_chunk, out.size) == (1, False, len(data))
    again = rewrite(_inspected(data), LINK, b"\x00" * 7 + b"\x09")
    version = EntryView.parse(again.headers_and_payload).metadata.schema_version
    assert version == b"\x00" * 7 + b"\x09"


def test_a_batch_stays_one_batch_entry() -> None:
    data = batch_entry_bytes([b"a", b"bb", b"ccc"])
    out = rewrite(_inspected(data), LINK)
    assert out.num_messages == 3
    stored = EntryView.parse(out.headers_and_payload)
    assert stored.metadata.num_messages_in_batch == 3
    assert [m.payload for m in parse_batch(stored.payload, 3)] == [
        b"a",
        b"bb",
        b"ccc",
    ]
    assert stored.payload == EntryView.parse(data).payload  # the very bytes


def test_a_chunk_is_sent_as_a_chunk() -> None:
    md = entry_bytes(b"part", uuid="u-1", chunk_id=0, num_chunks_from_msg=2, total_chunk_msg_size=8)
    assert rewrite(_inspected(md), LINK).is_chunk


def test_a_replicated_entry_is_not_replicated_again() -> None:
    once = rewrite(_inspected(entry_bytes(b"x")), LINK)
    assert inspect(Position(1, 1), once.headers_and_payload, "east", now_ms=1) == Skip(
        Position(1, 1), SkipReason.REPLICATED
    )
