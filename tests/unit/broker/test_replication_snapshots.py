"""Replicated subscriptions' decisions (``replication/snapshots.py``), pure: when a snapshot
starts, rounds, responses and timeouts, and which snapshot a moving subscription passed."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from magnetar.broker.ledger.position import Position
from magnetar.broker.replication.snapshots import (
    PENDING_MAX,
    AskAgain,
    Snapshot,
    SnapshotTaker,
    SubscriptionSnapshots,
)

P = Position
ONE = frozenset({"west"})
TWO = frozenset({"west", "central"})


def test_no_snapshot_without_remotes_connection_or_new_messages() -> None:
    taker = SnapshotTaker()
    assert taker.start(0, frozenset(), P(1, 1), all_connected=True) is None
    assert taker.start(0, ONE, P(1, 1), all_connected=False) is None
    assert taker.start(0, ONE, None, all_connected=True) is None  # nothing stored yet
    sid = taker.start(0, ONE, P(1, 1), all_connected=True)
    assert sid is not None
    assert taker.start(1_000, ONE, P(1, 1), all_connected=True) is None  # same messages pending
    done = taker.response(sid, "west", P(7, 3), P(1, 5))
    assert done == Snapshot(sid, P(1, 5), (("west", P(7, 3)),))
    assert taker.covers(P(1, 1)) and not taker.covers(P(1, 2))
    # idle: no new message, no new snapshot (Pulsar issue 6437), however long it stays idle
    for now in range(2_000, 60_000, 1_000):
        assert taker.start(now, ONE, P(1, 1), all_connected=True) is None
    assert taker.start(60_000, ONE, P(1, 6), all_connected=True) is not None
    taker.check_invariants()


def test_two_remotes_take_two_rounds() -> None:
    taker = SnapshotTaker()
    sid = taker.start(0, TWO, P(1, 1), all_connected=True)
    assert sid is not None
    assert taker.response(sid, "west", P(7, 3), P(1, 2)) is None
    assert taker.response(sid, "central", P(9, 1), P(1, 3)) == AskAgain(sid)
    assert taker.response(sid, "central", P(9, 5), P(1, 4)) is None
    done = taker.response(sid, "west", P(7, 8), P(1, 6))
    assert isinstance(done, Snapshot)
    assert done.local == P(1, 6)  # the last response's position here
    assert done.positions() == {"central": (9, 1), "west": (7, 3)}  # the first answers kept


def test_unknown_late_and_foreign_responses_are_ignored() -> None:
    taker = SnapshotTaker(timeout_ms=5_000)
    sid = taker.start(0, ONE, P(1, 1), all_connected=True)
    assert sid is not None
    assert taker.response("someone-else", "west", P(1, 1), P(1, 2)) is None
    assert taker.response(sid, "central", P(1, 1), P(1, 2)) is None  # not asked
    assert taker.start(6_000, ONE, P(1, 2), all_connected=True) is not None  # first timed out
    assert taker.timed_out == 1
    assert taker.response(sid, "west", P(1, 1), P(1, 2)) is None  # too late
    assert taker.completed == 0


def test_pending_snapshots_are_bounded() -> None:
    taker = SnapshotTaker(timeout_ms=10**9)
    for i in range(PENDING_MAX + 5):
        assert taker.start(i, ONE, P(1, i), all_connected=True) is not None
    assert taker.pending == PENDING_MAX
    taker.check_invariants()


def _snap(entry: int) -> Snapshot:
    return Snapshot(f"s{entry}", P(1, entry), (("west", P(7, entry * 10)),))


def test_a_subscription_sends_the_newest_snapshot_it_passed() -> None:
    cache = SubscriptionSnapshots(max_cached=10)
    cache.add(_snap(5), mark_delete=P(1, 0))
    cache.add(_snap(9), mark_delete=P(1, 0))
    cache.add(_snap(3), mark_delete=P(1, 4))  # already passed: not kept
    assert len(cache) == 2
    assert cache.advanced(P(1, 4)) is None
    assert cache.advanced(P(1, 9)) == _snap(9)  # the newest passed; older ones forgotten
    assert len(cache) == 0 and cache.last_sent == _snap(9)
    assert cache.advanced(P(1, 20)) is None


def test_settings_are_checked() -> None:
    with pytest.raises(ValueError):
        SubscriptionSnapshots(max_cached=0)


@given(st.lists(st.integers(1, 10_000), min_size=1, max_size=200), st.integers(1, 12))
def test_the_cache_stays_bounded_sorted_and_keeps_the_newest(
    entries: list[int], max_cached: int
) -> None:
    cache = SubscriptionSnapshots(max_cached=max_cached)
    for e in sorted(set(entries)):
        cache.add(_snap(e), mark_delete=P(1, 0))
        cache.check_invariants()
    newest = max(entries)
    assert cache.advanced(P(1, newest)) == _snap(newest)
