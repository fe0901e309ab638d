"""Key_Shared selector: STICKY validation, AUTO_SPLIT ring (spread, stability, ranges)."""

from __future__ import annotations

import pytest

from magnetar.broker.dispatch.key_shared import (
    KEY_SHARED_SLOTS,
    ConsumerAssignError,
    HashRange,
    KeySharedMode,
    KeySharedPolicy,
    KeySharedPolicyMismatch,
    KeySharedScheduler,
    KeySharedSelector,
    validate_sticky_ranges,
)
from magnetar.client.protocol import (
    ServerError,
    encode_headers_and_payload,
    entry_slot,
    key_shared_slot,
)
from magnetar.client.protocol.proto import pulsar_api_pb2 as pb


class C:
    """An opaque consumer (identity-hashed, like the broker's Consumer)."""

    def __init__(self, name: str) -> None:
        self.name = name

    def __repr__(self) -> str:
        return f"C({self.name})"


# ---------------------------------------------------------------- STICKY


def sticky() -> KeySharedSelector[C]:
    return KeySharedSelector(KeySharedMode.STICKY)


def test_sticky_selects_by_declared_ranges_and_leaves_holes_unowned() -> None:
    sel = sticky()
    a, b = C("a"), C("b")
    sel.add_consumer(a, "a", [(0, 99), (200, 299)])
    sel.add_consumer(b, "b", [(100, 199)])
    sel.check_invariants()
    assert [sel.select(s) for s in (0, 99, 100, 199, 200, 299)] == [a, a, b, b, a, a]
    assert sel.select(300) is None and sel.select(KEY_SHARED_SLOTS - 1) is None
    assert sel.hash_ranges() == {
        a: [HashRange(0, 99), HashRange(200, 299)],
        b: [HashRange(100, 199)],
    }
    sel.remove_consumer(b)
    assert sel.select(150) is None and sel.select(250) is a
    sel.check_invariants()


@pytest.mark.parametrize(
    ("ranges", "message"),
    [
        ([], "Ranges for KeyShared policy must not be empty."),
        ([(10, 5)], "Fixed hash range start > end: [10, 5]"),
        ([(0, 65536)], "out of the hash space [0, 65535]"),
        ([(-1, 3)], "out of the hash space"),
        ([(0, 10), (10, 20)], "Fixed hash ranges [0, 10] and [10, 20] of the consumer overlap"),
        ([(500, 600)], "Range conflict with consumer a: [500, 600] overlaps its range [0, 1000]"),
        ([(2000, 3000), (1000, 1000)], "Range conflict with consumer a"),
        (
            [(4000, 5000)],
            "Range conflict with consumer b: [4000, 5000] overlaps its range [5000, 6000]",
        ),
    ],
)
def test_sticky_rejects_bad_or_overlapping_ranges_and_changes_nothing(
    ranges: list[tuple[int, int]], message: str
) -> None:
    sel = sticky()
    a, b = C("a"), C("b")
    sel.add_consumer(a, "a", [(0, 1000)])
    sel.add_consumer(b, "b", [(5000, 6000)])
    x = C("x")
    with pytest.raises(ConsumerAssignError) as err:
        sel.add_consumer(x, "x", ranges)
    assert message in str(err.value)
    assert err.value.code == ServerError.ConsumerAssignError and not err.value.retriable
    assert isinstance(err.value, ValueError)  # the subscription translates ValueError today
    assert x not in sel and len(sel) == 2
    assert sel.select(500) is a and sel.select(2500) is None
    sel.check_invariants()


def test_sticky_adjacent_ranges_are_fine_and_validate_sorts() -> None:
    assert validate_sticky_ranges([(10, 19), (0, 9)]) == [HashRange(0, 9), HashRange(10, 19)]
    sel = sticky()
    a, b = C("a"), C("b")
    sel.add_consumer(a, "a", [(0, 32767)])
    sel.add_consumer(b, "b", [(32768, 65535)])
    assert sel.select(32767) is a and sel.select(32768) is b


def test_policy_mismatch_is_consumer_busy() -> None:
    s: KeySharedScheduler[C, int] = KeySharedScheduler(KeySharedPolicy(KeySharedMode.AUTO_SPLIT))
    s.add_consumer(C("a"), "a", policy=KeySharedPolicy())
    with pytest.raises(KeySharedPolicyMismatch) as err:
        s.add_consumer(C("b"), "b", policy=KeySharedPolicy(KeySharedMode.STICKY))
    assert err.value.code == ServerError.ConsumerBusy
    assert "Subscription is of different type" in str(err.value)
    with pytest.raises(KeySharedPolicyMismatch):
        s.add_consumer(C("c"), "c", policy=KeySharedPolicy(allow_out_of_order=True))
    assert len(s.selector) == 1


# ---------------------------------------------------------------- AUTO_SPLIT


def owners(sel: KeySharedSelector[C]) -> list[C | None]:
    return [sel.select(s) for s in range(KEY_SHARED_SLOTS)]


def test_auto_split_ring_has_100_points_per_consumer_from_the_shared_hash() -> None:
    sel: KeySharedSelector[C] = KeySharedSelector()
    assert sel.select(0) is None
    a = C("a")
    sel.add_consumer(a, "a")
    sel.check_invariants()
    assert all(o is a for o in owners(sel)[::997])
    # point i of "a" (first of its name) is key_shared_slot("a\0" "0\0" i): select lands there
    p = key_shared_slot("a\x000\x007")
    b = C("b")
    sel.add_consumer(b, "b")
    assert sel.select(p) is a
    with pytest.raises(ValueError, match="already added"):
        sel.add_consumer(a, "a")


def test_auto_split_spreads_slots_roughly_evenly() -> None:
    sel: KeySharedSelector[C] = KeySharedSelector()
    cs = [C(f"consumer-{i}") for i in range(5)]
    for c in cs:
        sel.add_consumer(c, c.name)
    counts = dict.fromkeys(cs, 0)
    for o in owners(sel):
        assert o is not None
        counts[o] += 1
    share = KEY_SHARED_SLOTS / len(cs)
    for c, n in counts.items():
        assert 0.5 * share < n < 1.6 * share, (c, n)
    # and keys (not just slots) spread too
    key_counts = dict.fromkeys(cs, 0)
    for i in range(20_000):
        o = sel.select(key_shared_slot(f"key-{i}"))
        assert o is not None
        key_counts[o] += 1
    assert min(key_counts.values()) > 0.5 * 20_000 / 5


def test_auto_split_join_moves_slots_only_to_the_newcomer_and_leave_restores() -> None:
    sel: KeySharedSelector[C] = KeySharedSelector()
    cs = [C(f"c{i}") for i in range(3)]
    for c in cs:
        sel.add_consumer(c, c.name)
    before = owners(sel)
    d = C("d")
    sel.add_consumer(d, "d")
    after = owners(sel)
    moved = [s for s in range(KEY_SHARED_SLOTS) if before[s] is not after[s]]
    assert moved and all(after[s] is d for s in moved)
    assert len(moved) < 0.45 * KEY_SHARED_SLOTS  # about a quarter
    sel.remove_consumer(d)
    assert owners(sel) == before
    sel.check_invariants()


def test_same_name_consumers_get_distinct_points_and_the_survivor_keeps_slots() -> None:
    sel: KeySharedSelector[C] = KeySharedSelector()
    a1, a2 = C("a"), C("a")
    sel.add_consumer(a1, "a")
    sel.add_consumer(a2, "a")
    got = owners(sel)
    assert got.count(a1) > 10_000 and got.count(a2) > 10_000
    sel.remove_consumer(a1)
    assert all(o is a2 for o in owners(sel)[::101])
    a3 = C("a")
    sel.add_consumer(a3, "a")  # takes the free name index 0, i.e. a1's old points
    assert owners(sel) == [a3 if o is a1 else o for o in got]


def test_auto_split_hash_ranges_partition_the_space() -> None:
    sel: KeySharedSelector[C] = KeySharedSelector(points_per_consumer=7)
    cs = [C(n) for n in "xyz"]
    for c in cs:
        sel.add_consumer(c, c.name)
    ranges = sel.hash_ranges()
    seen = [None] * KEY_SHARED_SLOTS
    for c, rs in ranges.items():
        for r in rs:
            for s in range(r.start, r.end + 1):
                assert seen[s] is None
                seen[s] = c  # type: ignore[call-overload]
    assert seen == owners(sel)


def test_entry_slot_uses_ordering_key_then_partition_key_then_none_key() -> None:
    md = pb.MessageMetadata(producer_name="p", sequence_id=1, publish_time=1)

    def slot() -> int:
        return entry_slot(encode_headers_and_payload(md, b""))

    assert slot() == key_shared_slot(b"NONE_KEY")
    md.partition_key = "k1"
    assert slot() == key_shared_slot(b"k1")
    md.ordering_key = b"ok"
    assert slot() == key_shared_slot(b"ok")
