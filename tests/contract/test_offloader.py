"""The ``Offloader`` contract, run against every store: the S3 driver on a real S3 server
(``moto_server`` over HTTP), the filesystem driver on a directory, and the fault-injecting
wrapper (over the filesystem store, no fault scheduled: it must be transparent).

Proves: ledgers of many shapes round-trip byte for byte (empty, one entry, entries bigger than
a block, thousands of small ones); ranged and random reads; read-ahead stays within its bound;
a corrupted data or index object is detected (never wrong bytes); only sealed ledgers move; a
store that goes down during an upload leaves nothing recorded and at most orphans, and during
a read makes the reader wait and then resume; a crashed upload (SIGKILL of the writing
process) leaves only objects under its own UUID, which ``delete_orphans`` removes.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import os
import random
import signal
import sys
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest
from support.azurite import AzureContainer
from support.s3 import S3Bucket, S3Server
from support.waiting import wait_for

from magnetar.broker.offload import (
    BlobStore,
    BlobStoreOffloader,
    EntryOutOfRange,
    FaultInjectingBlobStore,
    LedgerNotSealed,
    ObjectNotFound,
    OffloadCorrupt,
    OffloadedLedger,
    OffloaderTuning,
    OffloadPolicies,
    RetryPolicy,
    StoreUnavailable,
    create_offloader,
    open_blob_store,
    parse_key,
    store_spec,
)
from magnetar.broker.offload.blocks import HEADER_BYTES
from magnetar.broker.offload.policies import EffectiveOffloadPolicies
from magnetar.broker.offload.store import drain
from magnetar.broker.offload.testing import MemoryLedgerSource, payloads_of

BLOCK_BYTES = 16 * 1024  # readBufferSizeInBytes: the unit a reader fetches
PART_BYTES = 5 * 1024 * 1024  # maxBlockSizeInBytes: S3's smallest multipart part

FAST_TUNING = OffloaderTuning(
    read_ahead_bytes_max=4 * BLOCK_BYTES,
    read_retry=RetryPolicy(initial_backoff_ms=20, max_backoff_ms=200, deadline_ms=60_000),
)


@dataclass
class Env:
    """One store under test and how to build offloaders on it."""

    name: str
    policies: EffectiveOffloadPolicies
    make_store: Callable[[], BlobStore]
    take_down: Callable[[], None] | None = None
    bring_back: Callable[[], None] | None = None

    def offloader(self, tuning: OffloaderTuning = FAST_TUNING) -> BlobStoreOffloader:
        """A fresh offloader (empty index cache) on the same store."""
        return create_offloader(self.policies, tuning=tuning, store=self.make_store())


def _s3_policies(bucket: S3Bucket) -> EffectiveOffloadPolicies:
    doc = {**bucket.policies_json(), "s3ManagedLedgerOffloadReadBufferSizeInBytes": BLOCK_BYTES}
    resolved = OffloadPolicies.from_json(doc).resolve()
    assert resolved is not None
    return resolved


def _azure_policies(container: AzureContainer) -> EffectiveOffloadPolicies:
    doc = {
        **container.policies_json(),
        "managedLedgerOffloadReadBufferSizeInBytes": BLOCK_BYTES,
    }
    resolved = OffloadPolicies.from_json(doc).resolve()
    assert resolved is not None
    return resolved


def _fs_policies(root: str) -> EffectiveOffloadPolicies:
    resolved = OffloadPolicies.from_json(
        {
            "managedLedgerOffloadDriver": "filesystem",
            "fileSystemURI": f"file://{root}",
            "managedLedgerOffloadReadBufferSizeInBytes": BLOCK_BYTES,
            "managedLedgerOffloadMaxBlockSizeInBytes": PART_BYTES,
        }
    ).resolve()
    assert resolved is not None
    return resolved


def _quick_s3_store(policies: EffectiveOffloadPolicies) -> BlobStore:
    """Short request timeouts (a paused server accepts connections and never answers) and no
    library retries: our own retries are what is tested. 3 s: a loaded machine's moto still
    answers a 5 MiB part within it."""
    spec = dataclasses.replace(
        store_spec(policies), request_timeout_ms=3000, connect_timeout_ms=1000, library_retries=0
    )
    return open_blob_store(spec)


def _env(name: str, request: pytest.FixtureRequest, tmp_path: Any) -> Env:
    if name == "s3":
        bucket: S3Bucket = request.getfixturevalue("s3_bucket")
        policies = _s3_policies(bucket)
        return Env("s3", policies, lambda: open_blob_store(store_spec(policies)))
    if name == "azure":
        box: AzureContainer = request.getfixturevalue("azure_container")
        azure = _azure_policies(box)
        # the account and its key from the environment, as Pulsar's azureblob driver reads them
        environ = box.server.environment()
        return Env("azure", azure, lambda: open_blob_store(store_spec(azure, environ)))
    policies = _fs_policies(str(tmp_path / "offload"))
    if name == "filesystem":
        return Env("filesystem", policies, lambda: open_blob_store(store_spec(policies)))
    return Env(
        "faults",
        policies,
        lambda: FaultInjectingBlobStore(open_blob_store(store_spec(policies))),
    )


@pytest.fixture(params=["s3", "azure", "filesystem", "faults"])
def env(request: pytest.FixtureRequest, tmp_path: Any) -> Env:
    return _env(request.param, request, tmp_path)


@pytest.fixture(params=["s3", "filesystem"])
def real_env(request: pytest.FixtureRequest, tmp_path: Any) -> Env:
    """A real store another process can write to (a crash is of a real process)."""
    return _env(request.param, request, tmp_path)


@pytest.fixture(params=["s3", "faults"])
def down_env(request: pytest.FixtureRequest, tmp_path: Any) -> Env:
    """A store that can be taken down and brought back with its data: a paused moto server
    (SIGSTOP) of this test's own, or the fault wrapper."""
    if request.param == "s3":
        server: S3Server = request.getfixturevalue("private_s3_server")
        policies = _s3_policies(S3Bucket(server, server.create_bucket()))
        return Env("s3", policies, lambda: _quick_s3_store(policies), server.pause, server.resume)
    policies = _fs_policies(str(tmp_path / "offload"))
    wrapper = FaultInjectingBlobStore(open_blob_store(store_spec(policies)))
    return Env("faults", policies, lambda: wrapper, wrapper.take_down, wrapper.bring_back)


SHAPES = {
    "empty": [],
    "one entry": [100],
    "entries bigger than a block": [3 * BLOCK_BYTES, 10, 5 * BLOCK_BYTES + 7, 1],
    "thousands of small entries": [40] * 3000,
    "mixed": [random.Random(3).choice([0, 1, 90, 4000, 20_000]) for _ in range(400)],
    "several upload parts": [200_000] * 60,  # 12 MB: three PART_BYTES parts (multipart)
}


async def _entries_of(handle: Any, first: int, last: int) -> list[bytes]:
    return [e.payload for e in await handle.read(first, last)]


@pytest.mark.parametrize("shape", list(SHAPES))
async def test_round_trip(env: Env, shape: str) -> None:
    source = MemoryLedgerSource(41, payloads_of(SHAPES[shape], seed=len(shape)))
    attempt = uuid.uuid4()
    offloader = env.offloader()
    done = await offloader.offload(source, attempt, {"ManagedLedgerName": "t/ns/persistent/x"})

    assert done.ledger_id == 41 and done.attempt == attempt
    assert done.last_entry_id == source.last_add_confirmed
    assert done.ledger_length == source.length
    assert done.data_key == f"{attempt}-ledger-41" and done.index_key == done.data_key + "-index"
    assert done.driver == env.policies.driver.value
    assert done.driver_metadata["bucket"] == env.policies.driver_metadata()["bucket"]
    assert OffloadedLedger.from_json(json.loads(json.dumps(done.to_json()))) == done
    keys = {info.key: info.size for info in await drain(offloader.store.list())}
    assert keys == {done.data_key: done.data_object_bytes, done.index_key: done.index_object_bytes}

    fresh = env.offloader()  # nothing cached: the index comes from the store
    handle = await fresh.open(done)
    assert handle.ledger_id == 41 and handle.is_closed
    assert handle.last_add_confirmed == source.last_add_confirmed
    assert handle.length == source.length
    assert await handle.read_lac() == source.last_add_confirmed
    if source.entries:
        assert await _entries_of(handle, 0, source.last_add_confirmed) == source.payloads
        got = [e.entry_id for e in await handle.read(0, source.last_add_confirmed)]
        assert got == list(range(source.last_add_confirmed + 1))
    else:
        assert done.data_object_bytes == 0
        with pytest.raises(EntryOutOfRange):
            await handle.read(0, 0)
    await handle.close()


async def test_ranged_and_random_reads(env: Env) -> None:
    sizes = [random.Random(7).randrange(1, 3000) for _ in range(1500)]
    source = MemoryLedgerSource(5, payloads_of(sizes, seed=7))
    offloader = env.offloader()
    done = await offloader.offload(source, uuid.uuid4(), {})
    handle = await env.offloader().open(done)
    rng = random.Random(11)
    last = source.last_add_confirmed
    for _ in range(60):
        first = rng.randrange(0, last + 1)
        stop = min(last, first + rng.randrange(0, 120))
        assert await _entries_of(handle, first, stop) == source.payloads[first : stop + 1]
        handle.check_invariants()
    assert await _entries_of(handle, last, last) == [source.payloads[last]]
    with pytest.raises(EntryOutOfRange):
        await handle.read(last, last + 1)
    with pytest.raises(ValueError):
        await handle.read(5, 4)


async def test_sequential_reader_reads_ahead_within_its_bound(env: Env) -> None:
    source = MemoryLedgerSource(6, payloads_of([700] * 2000, seed=2))
    done = await env.offloader().offload(source, uuid.uuid4(), {})
    reader_side = env.offloader()
    handle = await reader_side.open(done)
    bound = FAST_TUNING.read_ahead_bytes_max
    out: list[bytes] = []
    for first in range(0, 2000, 50):
        out += await _entries_of(handle, first, first + 49)
        handle.check_invariants()
        assert handle.statistics().buffered_bytes <= bound + BLOCK_BYTES
    assert out == source.payloads
    stats = reader_side.statistics()
    assert stats.blocks_fetched == len(handle.index.blocks)  # each block fetched once
    assert stats.corrupt_reads == 0


async def test_only_sealed_ledgers_are_offloaded(env: Env) -> None:
    source = MemoryLedgerSource(8, payloads_of([10, 20]), closed=False)
    offloader = env.offloader()
    with pytest.raises(LedgerNotSealed):
        await offloader.offload(source, uuid.uuid4(), {})
    assert await drain(offloader.store.list()) == []


async def test_a_failing_source_leaves_nothing_and_nothing_recorded(env: Env) -> None:
    source = MemoryLedgerSource(9, payloads_of([2000] * 500))
    source.fail_reads_from = 300
    offloader = env.offloader()
    with pytest.raises(ConnectionError):
        await offloader.offload(source, uuid.uuid4(), {})
    assert await drain(offloader.store.list()) == []
    assert offloader.statistics().offloads_failed == 1


async def test_a_corrupted_data_object_is_detected(env: Env) -> None:
    source = MemoryLedgerSource(10, payloads_of([1000] * 100, seed=4))
    offloader = env.offloader()
    done = await offloader.offload(source, uuid.uuid4(), {})
    raw = await offloader.store.get(done.data_key)
    handle = await env.offloader().open(done)
    second = handle.index.blocks[1]
    damaged = bytearray(raw)
    damaged[second.offset + HEADER_BYTES + 40] ^= 0x01  # inside the block's first payload
    await offloader.store.put(done.data_key, bytes(damaged))

    first_block_last = handle.index.last_entry_of(0)
    assert await _entries_of(handle, 0, first_block_last) == source.payloads[: first_block_last + 1]
    with pytest.raises(OffloadCorrupt):
        await handle.read(second.first_entry_id, second.first_entry_id)


async def test_a_corrupted_index_is_detected(env: Env) -> None:
    source = MemoryLedgerSource(11, payloads_of([100] * 50))
    offloader = env.offloader()
    done = await offloader.offload(source, uuid.uuid4(), {})
    raw = bytearray(await offloader.store.get(done.index_key))
    raw[len(raw) // 2] ^= 0x40
    await offloader.store.put(done.index_key, bytes(raw))
    with pytest.raises(OffloadCorrupt):
        await env.offloader().open(done)


async def test_delete_removes_both_objects(env: Env) -> None:
    source = MemoryLedgerSource(12, payloads_of([100] * 10))
    offloader = env.offloader()
    kept = await offloader.offload(source, uuid.uuid4(), {})
    gone = await offloader.offload(source, uuid.uuid4(), {})
    await offloader.delete(gone)
    await offloader.delete(gone)  # twice is fine
    keys = {info.key for info in await drain(offloader.store.list())}
    assert keys == {kept.data_key, kept.index_key}
    with pytest.raises(ObjectNotFound):
        await env.offloader().open(gone)
    assert await _entries_of(await env.offloader().open(kept), 0, 9) == source.payloads


async def test_delete_orphans_keeps_the_named_attempt_and_other_ledgers(env: Env) -> None:
    offloader = env.offloader()
    source = MemoryLedgerSource(13, payloads_of([300] * 20))
    other = MemoryLedgerSource(130, payloads_of([300] * 20))
    kept = await offloader.offload(source, uuid.uuid4(), {})
    stale = [await offloader.offload(source, uuid.uuid4(), {}) for _ in range(2)]
    neighbour = await offloader.offload(other, uuid.uuid4(), {})
    removed = await offloader.delete_orphans(13, keep=[kept.attempt])
    assert sorted(removed) == sorted(k for s in stale for k in (s.data_key, s.index_key))
    keys = {info.key for info in await drain(offloader.store.list())}
    assert keys == {kept.data_key, kept.index_key, neighbour.data_key, neighbour.index_key}


# -- the store goes down -----------------------------------------------------------------------


class _HookedSource(MemoryLedgerSource):
    """Calls ``hook`` once, after its ``after_reads``-th read."""

    def __init__(self, *args: Any, after_reads: int, hook: Callable[[], None], **kw: Any) -> None:
        super().__init__(*args, **kw)
        self._after = after_reads
        self._hook: Callable[[], None] | None = hook

    async def read(self, first_entry_id: int, last_entry_id: int) -> Any:
        got = await super().read(first_entry_id, last_entry_id)
        if self.reads == self._after and self._hook is not None:
            hook, self._hook = self._hook, None
            hook()
        return got


async def test_store_down_during_upload_records_nothing_then_a_new_attempt_works(
    down_env: Env,
) -> None:
    assert down_env.take_down is not None and down_env.bring_back is not None
    offloader = down_env.offloader()
    source = _HookedSource(
        14, payloads_of([20_000] * 600, seed=9), after_reads=3, hook=down_env.take_down
    )
    failed = uuid.uuid4()
    try:
        with pytest.raises(StoreUnavailable) as raised:
            await offloader.offload(source, failed, {})
        assert raised.value.retriable
    finally:
        down_env.bring_back()
    keys = {info.key for info in await drain(offloader.store.list())}
    assert f"{failed}-ledger-14-index" not in keys  # never complete, so never readable
    await offloader.delete_attempt(14, failed)
    assert await drain(offloader.store.list()) == []

    retry = MemoryLedgerSource(14, source.payloads)
    done = await offloader.offload(retry, uuid.uuid4(), {})
    handle = await down_env.offloader().open(done)
    assert await _entries_of(handle, 0, retry.last_add_confirmed) == retry.payloads


async def test_store_down_during_read_the_reader_waits_and_resumes(down_env: Env) -> None:
    assert down_env.take_down is not None and down_env.bring_back is not None
    source = MemoryLedgerSource(15, payloads_of([900] * 600, seed=5))
    done = await down_env.offloader().offload(source, uuid.uuid4(), {})
    reader_side = down_env.offloader()
    handle = await reader_side.open(done)
    assert await _entries_of(handle, 0, 9) == source.payloads[:10]

    down_env.take_down()
    try:
        task = asyncio.ensure_future(handle.read(400, 450))
        await wait_for(lambda: reader_side.statistics().read_retries >= 2, 60, "read retries")
        assert not task.done()
    finally:
        down_env.bring_back()
    got = await asyncio.wait_for(task, 60)
    assert [e.payload for e in got] == source.payloads[400:451]
    assert [e.entry_id for e in got] == list(range(400, 451))


async def test_a_read_that_outlasts_its_deadline_fails_retriably(down_env: Env) -> None:
    assert down_env.take_down is not None and down_env.bring_back is not None
    source = MemoryLedgerSource(16, payloads_of([900] * 100))
    done = await down_env.offloader().offload(source, uuid.uuid4(), {})
    impatient = OffloaderTuning(
        read_retry=RetryPolicy(initial_backoff_ms=20, max_backoff_ms=50, deadline_ms=300)
    )
    handle = await down_env.offloader(impatient).open(done)
    down_env.take_down()
    try:
        with pytest.raises(StoreUnavailable):
            await handle.read(50, 60)
    finally:
        down_env.bring_back()
    assert await _entries_of(handle, 50, 60) == source.payloads[50:61]


# -- a crash of the writing process ------------------------------------------------------------

_CHILD = r"""
import asyncio, json, os, sys, uuid
from magnetar.broker.offload import FaultInjectingBlobStore, OffloadPolicies, create_offloader
from magnetar.broker.offload import open_blob_store, store_spec
from magnetar.broker.offload.testing import MemoryLedgerSource, payloads_of

policies = OffloadPolicies.from_json(json.loads(sys.argv[1])).resolve()
stage = sys.argv[2]
store = FaultInjectingBlobStore(open_blob_store(store_spec(policies)))
store.delay_next("", 3600, operations="get")  # the verification read never comes back

class Source(MemoryLedgerSource):
    async def read(self, first, last):
        got = await super().read(first, last)
        print(f"read {self.reads}", flush=True)
        if stage == "upload" and self.reads == 4:
            await asyncio.sleep(3600)
        return got

attempt = uuid.uuid4()
print(f"attempt {attempt}", flush=True)
asyncio.run(create_offloader(policies, store=store).offload(
    Source(77, payloads_of([20_000] * 600, seed=1)), attempt, {}))
"""


@pytest.mark.parametrize("stage", ["upload", "verification"])
async def test_a_crashed_upload_leaves_only_its_own_orphans(real_env: Env, stage: str) -> None:
    env = real_env
    offloader = env.offloader()
    kept = await offloader.offload(
        MemoryLedgerSource(77, payloads_of([500] * 30)), uuid.uuid4(), {}
    )
    doc = (
        _s3_policies_json(env)
        if env.name == "s3"
        else {
            "managedLedgerOffloadDriver": "filesystem",
            "fileSystemURI": f"file://{env.policies.file_system_root}",
            "managedLedgerOffloadReadBufferSizeInBytes": BLOCK_BYTES,
            "managedLedgerOffloadMaxBlockSizeInBytes": PART_BYTES,
        }
    )
    child = await asyncio.create_subprocess_exec(
        sys.executable,
        "-c",
        _CHILD,
        json.dumps(doc),
        stage,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    try:
        crashed = (await _line_from(child, "attempt ")).split()[1]
        if stage == "upload":
            await _line_from(child, "read 4")
        else:
            await wait_for(
                lambda: _has_key(offloader, f"{crashed}-ledger-77-index"), 60, "the index written"
            )
        child.send_signal(signal.SIGKILL)
        await asyncio.wait_for(child.wait(), 30)
    finally:
        if child.returncode is None:
            child.kill()
            await asyncio.wait_for(child.wait(), 30)
    removed = await offloader.delete_orphans(77, keep=[kept.attempt])
    if stage == "verification":
        assert sorted(removed) == [f"{crashed}-ledger-77", f"{crashed}-ledger-77-index"]
    assert all(parse_key(k) is not None and str(parse_key(k).attempt) == crashed for k in removed)
    keys = {info.key for info in await drain(offloader.store.list())}
    assert keys == {kept.data_key, kept.index_key}
    if env.name == "filesystem":  # the library's staging file of the unfinished write too
        assert removed, "the crashed write left a file"
        names = os.listdir(str(env.policies.file_system_root))
        assert not [name for name in names if name.startswith(crashed)]
    handle = await env.offloader().open(kept)
    assert await handle.read(0, 29)


def _s3_policies_json(env: Env) -> dict[str, Any]:
    p = env.policies
    return {
        "managedLedgerOffloadDriver": "S3",
        "s3ManagedLedgerOffloadBucket": p.bucket,
        "s3ManagedLedgerOffloadRegion": p.region,
        "s3ManagedLedgerOffloadServiceEndpoint": p.service_endpoint,
        "s3ManagedLedgerOffloadCredentialId": p.s3_credential_id,
        "s3ManagedLedgerOffloadCredentialSecret": p.s3_credential_secret,
        "s3ManagedLedgerOffloadMaxBlockSizeInBytes": PART_BYTES,
        "s3ManagedLedgerOffloadReadBufferSizeInBytes": BLOCK_BYTES,
    }


async def _line_from(child: asyncio.subprocess.Process, prefix: str) -> str:
    """The child's first output line starting with ``prefix`` (60 s at most)."""
    assert child.stdout is not None
    seen: list[str] = []

    async def scan() -> str:
        assert child.stdout is not None
        while True:
            raw = await child.stdout.readline()
            if not raw:
                raise AssertionError(f"child exited before {prefix!r}: {''.join(seen)}")
            text = raw.decode(errors="replace")
            seen.append(text)
            if text.startswith(prefix):
                return text.strip()

    try:
        return await asyncio.wait_for(scan(), 60)
    except TimeoutError:
        raise AssertionError(f"no {prefix!r} from the child in 60 s: {''.join(seen)}") from None


async def _has_key(offloader: BlobStoreOffloader, key: str) -> bool:
    return any(info.key == key for info in await drain(offloader.store.list()))
