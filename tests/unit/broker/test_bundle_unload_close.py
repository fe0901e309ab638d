"""Unloading a bundle closes its topics together (bounded), not one after another: each
close may wait for its consumers' acknowledgements, and a bundle of many topics must not
add those waits up."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

from magnetar.broker.namespace.bundles import BundleRange
from magnetar.broker.namespace.ownership import NamespaceBundle
from magnetar.broker.naming import TopicName
from magnetar.broker.service import UNLOAD_CONCURRENCY, BrokerService


async def test_the_topics_of_a_bundle_close_concurrently_and_bounded() -> None:
    names = [f"persistent://t/ns/topic-{i}" for i in range(UNLOAD_CONCURRENCY + 8)]
    others = ["persistent://t/other/x"]
    running = 0
    peak = 0
    closed: list[str] = []
    release = asyncio.Event()

    async def close_topic(name: str, topic: Any) -> None:
        nonlocal running, peak
        running += 1
        peak = max(peak, running)
        await release.wait()
        running -= 1
        closed.append(name)

    service = SimpleNamespace(
        topics={n: SimpleNamespace(name=TopicName.parse(n)) for n in names + others},
        _close_topic=close_topic,
    )
    bundle = NamespaceBundle("t", "ns", BundleRange(0, 0xFFFFFFFF))
    task = asyncio.ensure_future(BrokerService.close_topics_of(service, bundle))  # type: ignore[arg-type]
    for _ in range(100):
        await asyncio.sleep(0)
        if peak == UNLOAD_CONCURRENCY:
            break
    assert peak == UNLOAD_CONCURRENCY  # many at once, never more than the bound
    release.set()
    await task
    assert sorted(closed) == sorted(names)
    assert list(service.topics) == others
