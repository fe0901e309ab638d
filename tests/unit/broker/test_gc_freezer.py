"""``TopicGcFreezer``: after bulk topic loads the heap is frozen (collections skip it); after
churn of the whole topic set it is collected once, so frozen garbage cycles do not pile up."""

from __future__ import annotations

import gc
import weakref
from types import SimpleNamespace
from typing import Any

from magnetar.broker.runtime import TopicGcFreezer


class _Node:
    def __init__(self) -> None:
        self.me: Any = self  # a reference cycle: only the collector frees it


def test_freezes_after_bulk_loads_and_collects_after_churn() -> None:
    gc.collect()
    gc.unfreeze()
    service: Any = SimpleNamespace(topics={}, topics_loaded_total=0)
    freezer = TopicGcFreezer(service, every_topics=10)
    try:
        service.topics = {f"t{i}": object() for i in range(5)}
        service.topics_loaded_total = 5
        freezer.check()
        assert freezer.freezes == 0 and gc.get_freeze_count() == 0  # not a bulk load yet

        garbage = _Node()
        dead = weakref.ref(garbage)
        del garbage  # a cycle, garbage, not collected yet
        service.topics.update({f"t{i}": object() for i in range(5, 10)})
        service.topics_loaded_total = 10
        freezer.check()
        assert freezer.freezes == 1 and gc.get_freeze_count() > 0
        gc.collect()
        assert dead() is not None, "frozen: the collector no longer looks at it"

        service.topics.clear()  # every topic unloaded: churn of the whole set
        freezer.check()
        assert freezer.full_collections == 1
        assert dead() is None, "the one full collection freed the frozen cycle"
        assert gc.get_freeze_count() > 0, "and froze the heap again"
    finally:
        gc.unfreeze()
