"""The cursor's ack state: mark-delete advance, ranges, batch sets, compact codecs."""

from __future__ import annotations

import random

from hypothesis import given, settings
from hypothesis import strategies as st

from magnetar.broker.ledger.ackstate import (
    AckDelta,
    AckState,
    decode_delta,
    decode_uvarints,
    encode_delta,
    encode_uvarints,
)
from magnetar.broker.ledger.position import Position as P


class Nav:
    """Ledgers 1 (10 entries), 3 (10 entries), 5 (current, confirmed up to ``current``)."""

    def __init__(self, sizes: dict[int, int | None]) -> None:
        self.sizes = sizes

    def entries_in(self, ledger_id: int) -> int | None:
        return self.sizes.get(ledger_id)

    def next_ledger(self, ledger_id: int) -> int | None:
        later = [lid for lid in sorted(self.sizes) if lid > ledger_id]
        return later[0] if later else None


NAV = Nav({1: 10, 3: 10, 5: None})


def test_mark_delete_advances_over_contiguous_acks_and_ledger_boundaries() -> None:
    s = AckState(P(1, -1))
    for e in (1, 2, 3):
        s.ack(P(1, e))
    assert not s.advance(NAV) and s.mark_delete == P(1, -1)
    s.ack(P(1, 0))
    assert s.advance(NAV) and s.mark_delete == P(1, 3)
    for e in range(4, 10):
        s.ack(P(1, e))
    s.ack(P(3, 0))
    s.advance(NAV)
    assert s.mark_delete == P(3, 0)
    assert s.ranges() == []
    s.ack(P(3, 5))
    s.ack(P(3, 6))
    s.ack(P(5, 2))
    assert s.ranges() == [(P(3, 5), P(3, 6)), (P(5, 2), P(5, 2))]
    assert s.is_acked(P(3, 5)) and not s.is_acked(P(3, 4)) and s.is_acked(P(1, 7))


def test_batch_index_acks_complete_the_entry() -> None:
    s = AckState(P(1, -1))
    assert not s.ack_batch_index(P(1, 0), 3, 0)
    assert not s.ack_batch_index(P(1, 0), 3, 2)
    assert s.batch_sets[P(1, 0)] == (3, 0b101)
    assert s.ack_batch_index(P(1, 0), 3, 1)
    assert P(1, 0) not in s.batch_sets and s.is_acked(P(1, 0))


def test_varints_round_trip() -> None:
    vals = [0, 1, 127, 128, 300, 2**40, 2**63]
    assert decode_uvarints(encode_uvarints(vals)) == vals


@settings(max_examples=60, deadline=None)
@given(
    acks=st.lists(st.tuples(st.sampled_from([1, 3, 5]), st.integers(0, 200)), max_size=300),
    batches=st.lists(st.tuples(st.integers(0, 200), st.integers(1, 8), st.integers(0, 200))),
    redeliveries=st.dictionaries(st.integers(0, 200), st.integers(1, 50)),
)
def test_snapshot_and_delta_round_trip(
    acks: list[tuple[int, int]],
    batches: list[tuple[int, int, int]],
    redeliveries: dict[int, int],
) -> None:
    nav = Nav({1: 201, 3: 201, 5: None})
    s = AckState(P(1, 4))
    for ledger, entry in acks:
        s.ack(P(ledger, entry))
    for entry, size, mask in batches:
        s.set_batch_mask(P(5, entry), size, mask % (1 << size))
    for entry, count in redeliveries.items():
        if not s.is_acked(P(3, entry)):
            s.redeliveries[P(3, entry)] = count
    s.advance(nav)
    back = AckState.decode_snapshot(s.encode_snapshot())
    assert back.mark_delete == s.mark_delete
    assert back.ranges() == s.ranges()
    assert back.batch_sets == s.batch_sets
    assert back.redeliveries == s.redeliveries
    # a delta replayed on the original base gives the same state
    base = AckState(P(1, 4))
    delta = AckDelta(
        s.mark_delete,
        tuple(P(lg, e) for lg, e in acks),
        tuple((p, sz, m) for p, (sz, m) in s.batch_sets.items()),
        tuple(s.redeliveries.items()),
    )
    base.apply(decode_delta(encode_delta(delta)), nav)
    assert base.mark_delete == s.mark_delete and base.ranges() == s.ranges()
    assert base.redeliveries == s.redeliveries


def test_random_acks_with_many_holes_encode_compactly() -> None:
    rng = random.Random(1)
    n = 200_000
    holes = set(rng.sample(range(1, n), 20_000))
    order = [e for e in range(n) if e not in holes]
    rng.shuffle(order)
    s = AckState(P(7, -1))
    for e in order:
        s.ack(P(7, e))
    s.advance(Nav({7: None}))
    ranges = s.ranges()
    assert len(ranges) >= 17_000  # holes split ranges (adjacent holes share one gap)
    blob = s.encode_snapshot()
    assert len(blob) < 80_000  # about 4 bytes per hole; no range cap
    back = AckState.decode_snapshot(blob)
    assert back.ranges() == ranges and back.mark_delete == s.mark_delete
    assert not back.is_acked(P(7, min(holes))) and back.is_acked(P(7, 0))


def test_count_above_matches_the_runs() -> None:
    """The popcount that keeps the acked count at a mark-delete move agrees with the runs."""
    from magnetar.broker.ledger.ackstate import _count_above, _runs

    rng = random.Random(11)
    for _ in range(300):
        bm = bytearray(rng.getrandbits(8) for _ in range(rng.randrange(0, 40)))
        for above in (-1, 0, 1, 7, 8, 9, rng.randrange(-1, 330), 400):
            expected = sum(last - first + 1 for first, last in _runs(bm, above))
            assert _count_above(bm, above) == expected, (bytes(bm), above)


def test_none_acked_from_agrees_with_is_acked() -> None:
    """The reads' shortcut (no per-entry check) is taken only when no entry from there on
    in the ledger is acknowledged, through acks, mark-delete moves and a snapshot round trip."""
    rng = random.Random(5)
    nav = Nav({1: 40, 3: 40, 5: 40})
    for _ in range(60):
        s = AckState(P(1, -1))
        for _ in range(rng.randrange(0, 30)):
            lid = rng.choice((1, 3, 5))
            s.ack(P(lid, rng.randrange(0, 40)))
            if rng.random() < 0.2:
                s.advance(nav)
            if rng.random() < 0.1:
                s.set_mark_delete(P(rng.choice((1, 3)), rng.randrange(-1, 40)))
            if rng.random() < 0.1:
                s = AckState.decode_snapshot(s.encode_snapshot())
            for lid in (1, 3, 5):
                for e in range(0, 40, 3):
                    pos = P(lid, e)
                    truth = all(not s.is_acked(P(lid, x)) for x in range(e, 40))
                    if s.none_acked_from(pos):
                        assert truth, (pos, s.ranges(), s.mark_delete)
