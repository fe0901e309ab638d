"""A client reconnecting while its topic is being unloaded waits for the close (issue 12 §5).

An unload tells producers and consumers to go away before it closes the managed ledger; a
client reconnecting at once used to load a new topic over the still-closing managed ledger,
whose appends then failed ("is Closed"), fencing the topic again with warnings. While an
unload runs, loading the topic answers ServiceNotReady (the client retries, as Pulsar's
does on a fenced topic); a bundle being unloaded is not taken back either.
"""

from __future__ import annotations

import asyncio

import pytest
from support.broker import InProcessBroker

from magnetar.broker.service import ServiceError
from magnetar.client.protocol import ServerError

TOPIC = "persistent://public/default/unload-race"


def test_topic_is_not_loaded_again_while_its_unload_runs(
    magnetar_broker: InProcessBroker,
) -> None:
    service = magnetar_broker.service
    assert service is not None

    async def scenario() -> None:
        first = await service.topic_for_client(TOPIC)
        release, closing = asyncio.Event(), asyncio.Event()
        close = first.close

        async def slow_close() -> None:  # the managed ledger takes a while to close
            closing.set()
            await release.wait()
            await close()

        first.close = slow_close  # type: ignore[method-assign]
        unload = asyncio.create_task(service.unload_topic(TOPIC))
        async with asyncio.timeout(10):
            await closing.wait()
        assert TOPIC not in service.topics
        with pytest.raises(ServiceError, match="being unloaded") as refused:
            await service.topic_for_client(TOPIC)
        assert refused.value.code == ServerError.ServiceNotReady
        release.set()
        await unload
        second = await service.topic_for_client(TOPIC)
        assert second is not first

    magnetar_broker.call(scenario)


def test_bundle_being_unloaded_loads_no_topic_and_is_released(
    magnetar_broker: InProcessBroker,
) -> None:
    service = magnetar_broker.service
    assert service is not None

    async def scenario() -> None:
        first = await service.topic_for_client(TOPIC)
        bundle = await service.namespaces.bundle_of(service.parse_topic(TOPIC))
        # a topic of the same bundle, not loaded yet
        others = [f"{TOPIC}-{i}" for i in range(200)]
        bundles = [await service.namespaces.bundle_of(service.parse_topic(c)) for c in others]
        other = others[bundles.index(bundle)]
        release, closing = asyncio.Event(), asyncio.Event()
        close = first.close

        async def slow_close() -> None:
            closing.set()
            await release.wait()
            await close()

        first.close = slow_close  # type: ignore[method-assign]
        unload = asyncio.create_task(
            service.namespaces.unload_namespace_bundle("public", "default", bundle.range.name)
        )
        async with asyncio.timeout(10):
            await closing.wait()
        for name in (TOPIC, other):
            with pytest.raises(ServiceError, match="being unloaded"):
                await service.topic_for_client(name)
        release.set()
        assert await unload is None
        ownership = service.namespaces.ownership
        assert ownership is not None and not ownership.is_owned(bundle)

    magnetar_broker.call(scenario)
