"""Position: a strict, ordered, hashable value (hand-written for speed)."""

from __future__ import annotations

import pickle

import pytest
from hypothesis import given
from hypothesis import strategies as st

from magnetar.broker.ledger import EARLIEST, LATEST, Position

ids = st.integers(min_value=-1, max_value=2**63 - 1)


@given(ids, ids, ids, ids)
def test_order_equality_and_hash_follow_the_pair(a: int, b: int, c: int, d: int) -> None:
    p, q = Position(a, b), Position(c, d)
    assert (p == q) == ((a, b) == (c, d))
    assert (p != q) == ((a, b) != (c, d))
    assert (p < q) == ((a, b) < (c, d))
    assert (p <= q) == ((a, b) <= (c, d))
    assert (p > q) == ((a, b) > (c, d))
    assert (p >= q) == ((a, b) >= (c, d))
    assert max(p, q) == Position(*max((a, b), (c, d)))
    if p == q:
        assert hash(p) == hash(q)
    assert Position.parse(str(p)) == p
    assert pickle.loads(pickle.dumps(p)) == p


def test_strict_type() -> None:
    p = Position(1, 2)
    assert p != (1, 2) and (1, 2) != p  # noqa: SIM300 (both operand orders)
    assert {p: 1}.get((1, 2)) is None  # type: ignore[call-overload]
    with pytest.raises(TypeError):
        _ = p < (1, 3)  # type: ignore[operator]
    assert repr(p) == "Position(ledger_id=1, entry_id=2)"
    assert str(p) == "1:2"
    assert EARLIEST < p < LATEST
    assert sorted([Position(2, 0), Position(1, 5), Position(1, -1)]) == [
        Position(1, -1),
        Position(1, 5),
        Position(2, 0),
    ]
    match p:
        case Position(ledger, entry):
            assert (ledger, entry) == (1, 2)
