"""The fault-injecting object store: each fault kind, over the in-memory store (and the
contract suite in ``test_offloader.py`` shows the wrapper is transparent without faults)."""

from __future__ import annotations

import re

import pytest
from support.autojump import AutojumpClock

from magnetar.broker.offload import (
    FaultInjectingBlobStore,
    ObjectNotFound,
    StoreUnavailable,
    memory_blob_store,
)
from magnetar.broker.offload.store import drain


async def _chunks(*parts: bytes):  # type: ignore[no-untyped-def]
    for part in parts:
        yield part


async def test_fail_next_by_prefix_regex_and_count() -> None:
    store = FaultInjectingBlobStore(memory_blob_store())
    await store.put("a-1", b"x")
    store.fail_next("a-", count=2, operations="get")
    await store.put("a-2", b"y")  # another operation: not matched
    for _ in range(2):
        with pytest.raises(StoreUnavailable):
            await store.get("a-1")
    assert await store.get("a-1") == b"x"
    store.fail_next(re.compile(r"-index$"), ObjectNotFound)
    assert await store.get("a-2") == b"y"
    with pytest.raises(ObjectNotFound):
        await store.put("k-index", b"i")
    stats = store.statistics()
    assert stats.injected_failures == 3 and stats.pending_faults == 0
    with pytest.raises(ValueError):
        store.fail_next("a", operations="rename")


async def test_a_failure_after_the_operation_took_effect() -> None:
    store = FaultInjectingBlobStore(memory_blob_store())
    store.fail_next("k", after=True, operations="put")
    with pytest.raises(StoreUnavailable):
        await store.put("k", b"v")
    assert await store.get("k") == b"v"  # written, but the caller was told it failed


async def test_delays_run_on_the_injected_clock() -> None:
    async with AutojumpClock() as clock:
        store = FaultInjectingBlobStore(memory_blob_store(), clock=clock)
        await store.put("k", b"v")
        store.delay_next("k", 30.0, operations="get")
        start = clock.monotonic_ms()
        assert await store.get("k") == b"v"
        assert clock.monotonic_ms() - start >= 30_000
        assert store.statistics().injected_delays == 1


async def test_corrupt_flips_one_byte_at_an_offset_or_the_last() -> None:
    store = FaultInjectingBlobStore(memory_blob_store())
    await store.put("k", bytes(100))
    store.corrupt_next("k", at=50)
    assert await store.get_range("k", 0, 10) == bytes(10)  # does not cover 50: left alone
    got = await store.get_range("k", 40, 20)
    assert got[10] == 0xFF and got.count(0) == 19
    assert await store.get("k") == bytes(100)  # used up
    store.corrupt_next("k", operations="stream")
    streamed = b"".join([c async for c in store.stream("k")])
    assert streamed[-1] == 0xFF and streamed.count(0) == 99
    assert store.statistics().corrupted_reads == 2
    with pytest.raises(ValueError):
        store.corrupt_next("k", operations="put")


async def test_a_store_taken_down_fails_everything_until_brought_back() -> None:
    store = FaultInjectingBlobStore(memory_blob_store())
    await store.put("k", b"v")
    store.take_down()
    assert store.statistics().down
    for op in (store.get("k"), store.delete("k"), store.put("j", b"")):
        with pytest.raises(StoreUnavailable):
            await op
    with pytest.raises(StoreUnavailable):
        await drain(store.list())
    store.bring_back()
    assert [i.key for i in await drain(store.list())] == ["k"]


async def test_a_store_going_down_mid_upload_fails_the_upload() -> None:
    store = FaultInjectingBlobStore(memory_blob_store())

    async def parts():  # type: ignore[no-untyped-def]
        yield b"a" * 10
        store.take_down()
        yield b"b" * 10

    with pytest.raises(StoreUnavailable):
        await store.put_stream("big", parts(), part_bytes=5 << 20, concurrency=1)
    store.bring_back()
    assert await drain(store.list()) == []
    await store.put_stream("big", _chunks(b"a", b"b"), part_bytes=5 << 20, concurrency=1)
    assert await store.get("big") == b"ab"
