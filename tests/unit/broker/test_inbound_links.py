"""The receiving side of the exactly-once link (``topics/inbound_links.py``), pure: verdicts,
broken links, the recovery point and what a load recovers from stored entries."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st
from support.replication_fakes import entry_bytes

from magnetar.broker.ledger.position import Position
from magnetar.broker.topics.inbound_links import (
    INBOUND_SNAPSHOTS,
    LINKS_MAX,
    SNAPSHOT_EVERY_ENTRIES,
    InboundLinks,
    Verdict,
    link_of_producer,
)
from magnetar.broker.topics.replication_positions import SOURCE_POSITION_PROPERTY
from magnetar.client.protocol import parse_entry_metadata

LINK = "pulsar.repl.east-->west"


def test_only_replicator_producers_are_links() -> None:
    assert link_of_producer(LINK) == LINK
    for name in ("app", "pulsar.repl.east", "pulsar.repl.east-->east", "pulsar.marker"):
        assert link_of_producer(name) is None


def test_verdicts_as_the_remote_side_rule_states() -> None:
    links = InboundLinks("west")
    assert links.admit(LINK, 10) is Verdict.STORE
    assert links.admit(LINK, 10) is Verdict.UNKNOWN  # the first copy is being stored
    assert links.admit(LINK, 12) is Verdict.STORE
    links.stored(LINK, 10)
    assert links.admit(LINK, 10) is Verdict.DUPLICATE
    assert links.admit(LINK, 11) is Verdict.UNKNOWN  # below what is in flight
    links.stored(LINK, 12)
    assert links.admit(LINK, 11) is Verdict.DUPLICATE  # never sent: the sender is in order
    assert links.last_sequence_id(LINK) == 12
    assert links.last_sequence_id("pulsar.repl.central-->west") == -1
    links.check_invariants()


def test_a_failed_send_breaks_the_link_until_its_producer_returns() -> None:
    links = InboundLinks("west")
    assert links.admit(LINK, 1) is Verdict.STORE
    links.stored(LINK, 1)
    assert links.admit(LINK, 2) is Verdict.STORE
    links.failed(LINK)  # 2 not stored
    assert links.is_broken(LINK)
    assert links.admit(LINK, 3) is Verdict.BROKEN  # nothing after 2 is stored before 2
    links.producer_admitted(LINK)
    assert links.admit(LINK, 2) is Verdict.STORE  # sent again, stored once
    links.check_invariants()


def test_too_many_links_are_refused() -> None:
    links = InboundLinks("west")
    for i in range(LINKS_MAX):
        links.admit(f"pulsar.repl.c{i}-->west", 1)
    with pytest.raises(ValueError, match="replication links"):
        links.admit("pulsar.repl.one-more-->west", 1)


def test_snapshots_round_trip_and_are_due_by_entries() -> None:
    links = InboundLinks("west")
    assert not links.count_stored(10_000)  # no link yet: nothing to recover, ever
    links.admit(LINK, 7)
    links.stored(LINK, 7)
    assert not links.count_stored(SNAPSHOT_EVERY_ENTRIES - 1)
    assert links.count_stored(1)
    snap = links.snapshot(Position(3, 9))
    assert snap.ids == {LINK: 7}
    assert not links.count_stored(1)  # counting starts again
    back = INBOUND_SNAPSHOTS.decode(INBOUND_SNAPSHOTS.encode(snap))
    assert back == snap
    again = InboundLinks("west")
    again.restore(back)
    assert again.admit(LINK, 7) is Verdict.DUPLICATE
    assert again.snapshotted == {LINK}


@pytest.mark.parametrize("raw", [None, "", "{", '{"position": "x"}', '{"links": {}}', "[]"])
def test_an_unreadable_snapshot_is_ignored(raw: str | None) -> None:
    assert INBOUND_SNAPSHOTS.decode(raw) is None


def test_recovery_reads_the_source_position_of_replicated_entries() -> None:
    links = InboundLinks("west")
    for data in (
        entry_bytes(b"x", replicated_from="east", properties={SOURCE_POSITION_PROPERTY: "5:2"}),
        entry_bytes(b"x", replicated_from="east", properties={SOURCE_POSITION_PROPERTY: "4:9"}),
        entry_bytes(b"local"),  # not replicated
        entry_bytes(b"x", replicated_from="east", properties={SOURCE_POSITION_PROPERTY: "bad"}),
        entry_bytes(b"x", replicated_from="west", properties={SOURCE_POSITION_PROPERTY: "9:9"}),
    ):
        links.recover(parse_entry_metadata(data))
    assert links.last_sequence_id(LINK) == 5 << 32 | 2
    assert links.admit(LINK, 5 << 32 | 2) is Verdict.DUPLICATE
    assert links.admit(LINK, 5 << 32 | 3) is Verdict.STORE
    assert links.last_sequence_id("pulsar.repl.west-->west") == -1  # our own: never a link


@given(st.lists(st.integers(0, 50), max_size=60))
def test_what_is_stored_is_a_strictly_growing_prefix_of_what_was_sent(resends: list[int]) -> None:
    """Whatever the sender resends (from any earlier point, as a replicator does after a
    failure), each sequence id is stored once and in order."""
    links = InboundLinks("west")
    stored: list[int] = []
    sent_up_to = 0
    for back in resends:
        start = max(1, sent_up_to - back)
        for seq in range(start, sent_up_to + 3):
            if links.admit(LINK, seq) is Verdict.STORE:
                links.stored(LINK, seq)
                stored.append(seq)
        sent_up_to += 2
    assert stored == list(range(1, len(stored) + 1))
