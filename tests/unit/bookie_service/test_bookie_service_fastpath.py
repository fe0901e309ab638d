"""The service's fast ``AddRequest`` constructor builds exactly what the dataclass does."""

from __future__ import annotations

from magnetar.bookie.api import AddRequest
from magnetar.bookie.server import _new_add_request


def test_fast_constructor_equals_dataclass_constructor() -> None:
    args = (7, 3, 2, 0xDEADBEEF, b"payload", b"key", True)
    fast = _new_add_request(*args)
    slow = AddRequest(*args)
    assert fast == slow and hash(fast) == hash(slow) and repr(fast) == repr(slow)
    assert type(fast) is AddRequest
