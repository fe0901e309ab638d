"""Real bookie processes on real disks, against a real ZooKeeper: lifecycle, identity,
fencing and bad input at process level."""

from __future__ import annotations

import asyncio
import json
import os
import pathlib
import shutil
import socket
from collections.abc import AsyncIterator

import aiohttp
import crc32c
import grpc
import pytest
from support.bookies import BookieFactory, health
from support.net import free_port
from support.waiting import wait_for

from magnetar.bookie.api import AddRequest
from magnetar.bookie.client import BookieClient
from magnetar.bookie.errors import (
    BadRequest,
    BookieUnavailable,
    EntryTooLarge,
    Fenced,
    NoEntry,
    NoLedger,
    Unauthorized,
)
from magnetar.bookie.proto import bookie_pb2 as pb
from magnetar.bookie.proto import bookie_pb2_grpc as pb_grpc
from magnetar.zk import paths
from magnetar.zk.zookeeper import ZooKeeperMetadataStore

KEY = b"master-key-0123456789"
STORAGE = os.environ.get("MAGNETAR_TEST_BOOKIE_STORAGE", "disk")


def req(
    ledger: int,
    entry: int,
    payload: bytes,
    *,
    key: bytes = KEY,
    lac: int = -1,
    recovery: bool = False,
) -> AddRequest:
    return AddRequest(ledger, entry, lac, crc32c.crc32c(payload), payload, key, recovery)


@pytest.fixture
async def zk(zookeeper_server) -> AsyncIterator[ZooKeeperMetadataStore]:
    store = await ZooKeeperMetadataStore.connect(zookeeper_server.url)
    try:
        yield store
    finally:
        await store.close()


@pytest.fixture
def chroot_url(zookeeper_server, request) -> str:
    """A private chroot per test so bookie ids and cookies never collide across tests."""
    return f"{zookeeper_server.url}/t-{request.node.name[:40]}-{os.getpid()}"


async def add_retrying(client: BookieClient, request: AddRequest, timeout_s: float = 10.0) -> None:
    """An add that retries while the client's stream is re-established after a restart
    (the first add after a bookie restart may ride the dead stream and fail retriably)."""

    async def added() -> bool:
        await client.add(request)
        return True

    await wait_for(added, timeout_s, "an add after the restart", ignore=(BookieUnavailable,))


async def test_sigterm_is_graceful_registration_follows_and_restart_keeps_data(
    bookie_factory: BookieFactory, chroot_url: str
) -> None:
    http_port = free_port()
    bookie = bookie_factory.start(
        metadata=chroot_url, storage=STORAGE, extra_args=["--http-port", str(http_port)]
    )
    store = await ZooKeeperMetadataStore.connect(chroot_url)
    client = BookieClient(bookie.address)
    try:
        reg = await store.get(paths.bookie_registration(bookie.bookie_id))
        assert reg is not None and reg.stat.ephemeral
        value = json.loads(reg.value)
        assert value["address"] == bookie.address and value["read_only"] is False
        cookie = await store.get(paths.bookie_cookie(bookie.bookie_id))
        assert cookie is not None
        await asyncio.gather(*(client.add(req(1, i, b"e%d" % i, lac=i - 1)) for i in range(200)))
        async with (
            aiohttp.ClientSession() as http,
            http.get(f"http://127.0.0.1:{http_port}/metrics") as resp,
        ):
            text = await resp.text()
        assert "bookkeeper_server_ADD_ENTRY_count 200" in text
        assert "bookie_SERVER_STATUS 1" in text

        assert bookie.stop() == 0, bookie.log_tail()
        assert "bookie stopped" in bookie.log_text()
        assert await store.exists(paths.bookie_registration(bookie.bookie_id)) is None

        bookie.start()
        entries = await client.read_range(1, 0, 199)
        assert [e.payload for e in entries] == [b"e%d" % i for i in range(200)]
        await wait_for(
            lambda: store.exists(paths.bookie_registration(bookie.bookie_id)),
            what="re-registration",
        )
    finally:
        await client.close()
        await store.close()


async def test_wiped_data_dir_with_existing_cookie_refuses_to_start(
    bookie_factory: BookieFactory, chroot_url: str
) -> None:
    bookie = bookie_factory.start(metadata=chroot_url, storage=STORAGE)
    assert bookie.stop() == 0
    shutil.rmtree(bookie.data_dir)
    bookie.spawn()
    rc = bookie.wait_exit(30)
    assert rc == 2
    log = bookie.log_text()
    assert "refusing to start" in log and "wiped" in log, log
    # A different bookie id on someone else's data dir is refused too.
    other = bookie_factory.create(metadata=chroot_url, storage=STORAGE)
    other.start()
    assert other.stop() == 0
    swapped = bookie_factory.create(
        "swapped", metadata=chroot_url, storage=STORAGE, data_dir=other.data_dir
    )
    swapped.spawn()
    assert swapped.wait_exit(30) == 2
    assert "not " + swapped.bookie_id in swapped.log_text() or "swapped" in swapped.log_text()


async def test_fencing_over_grpc_is_typed_and_survives_restart(
    bookie_factory: BookieFactory,
) -> None:
    bookie = bookie_factory.start(storage=STORAGE)
    old_writer = BookieClient(bookie.address)
    new_owner = BookieClient(bookie.address)
    try:
        await asyncio.gather(*(old_writer.add(req(42, i, b"x" * 100)) for i in range(10)))
        assert await new_owner.fence(42, KEY) == 9
        with pytest.raises(Fenced):
            await old_writer.add(req(42, 10, b"too late"))
        with pytest.raises(Unauthorized):
            await new_owner.fence(42, b"not the key")

        bookie.restart(kill=True)
        with pytest.raises(Fenced):
            await add_retrying(old_writer, req(42, 10, b"still too late"))
        # Recovery adds (re-replication by the new owner) are accepted on a fenced ledger.
        await add_retrying(new_owner, req(42, 10, b"recovered", recovery=True))
        assert (await new_owner.read_entry(42, 10)).payload == b"recovered"
        assert (await new_owner.read_entry(42, -1)).entry_id == 10
    finally:
        await old_writer.close()
        await new_owner.close()


async def test_bad_input_gets_typed_errors_and_bookie_stays_healthy(
    bookie_factory: BookieFactory,
) -> None:
    bookie = bookie_factory.start(storage=STORAGE)
    client = BookieClient(bookie.address)
    try:
        await client.add(req(5, 0, b"first"))
        with pytest.raises(EntryTooLarge):
            await client.add(req(5, 1, b"z" * (6 * 1024 * 1024)))
        with pytest.raises(Unauthorized):
            await client.add(req(5, 1, b"wrong key", key=b"other"))
        with pytest.raises(NoLedger):
            await client.read_entry(777, 0)
        with pytest.raises(NoEntry):
            await client.read_entry(5, 99)
        with pytest.raises(BadRequest):
            await client.add(req(5, -3, b"negative entry id"))
        with pytest.raises(BadRequest):
            await client.read_entry(-1, 0)

        # Raw garbage on the gRPC port: the connection dies, the bookie does not.
        for garbage in (b"\x00" * 64, b"GET / HTTP/1.1\r\n\r\n", os.urandom(4096)):
            with socket.create_connection(("127.0.0.1", bookie.port), timeout=5) as sock:
                sock.sendall(garbage)
                sock.settimeout(5)
                try:
                    while sock.recv(4096):
                        pass
                except OSError:
                    pass
        # A malformed protobuf on the Add stream and invalid field values on unary calls.
        async with grpc.aio.insecure_channel(bookie.address) as channel:
            raw = channel.stream_stream(
                "/magnetar.bookie.v1.Bookie/Add",
                request_serializer=lambda b: b,
                response_deserializer=pb.AddResponse.FromString,
            )
            call = raw()
            await call.write(b"\x1a\xff\xff\xff\xff\x0fnot a protobuf")
            try:
                first = await call.read()
            except grpc.aio.AioRpcError:
                first = None
            assert first is None or first is grpc.aio.EOF
            stub = pb_grpc.BookieStub(channel)
            resp = await stub.Read(pb.ReadRequest(ledger_id=5, first_entry_id=-9))
            assert resp.status == 404
            resp = await stub.WriteLac(pb.WriteLacRequest(ledger_id=5, master_key=KEY, lac=-5))
            assert resp.status == 404

        h = health(bookie.address)
        assert h is not None and h.serving
        await client.add(req(5, 1, b"second"))
        assert [e.payload for e in await client.read_range(5, 0, 1)] == [b"first", b"second"]
        assert bookie.running
    finally:
        await client.close()


async def test_gc_drops_ledgers_deleted_from_metadata(
    bookie_factory: BookieFactory, chroot_url: str
) -> None:
    store = await ZooKeeperMetadataStore.connect(chroot_url)
    await store.put(paths.ledger_metadata(1), b"{}")
    await store.put(paths.ledger_metadata(2), b"{}")
    bookie = bookie_factory.start(
        metadata=chroot_url, storage=STORAGE, extra_args=["--gc-interval-s", "0.2"]
    )
    client = BookieClient(bookie.address)
    try:
        await asyncio.gather(
            *(client.add(req(lid, i, b"v" * 200)) for lid in (1, 2) for i in range(20))
        )
        await store.delete(paths.ledger_metadata(2))

        async def ledger_2_gone() -> bool:
            try:
                await client.read_entry(2, 0)
            except NoLedger:
                return True
            return False

        await wait_for(ledger_2_gone, timeout_s=20, what="GC of the deleted ledger")
        assert [e.payload for e in await client.read_range(1, 0, 19)] == [b"v" * 200] * 20
    finally:
        await client.close()
        await store.close()


async def test_long_poll_tailing_and_explicit_lac_on_disk_engine(
    bookie_factory: BookieFactory,
) -> None:
    bookie = bookie_factory.start(storage=STORAGE)
    writer = BookieClient(bookie.address)
    reader = BookieClient(bookie.address)
    try:
        await writer.add(req(11, 0, b"zero"))
        await writer.add(req(11, 1, b"one", lac=0))
        poll = asyncio.ensure_future(reader.long_poll(11, 0, 10_000))
        await writer.add(req(11, 2, b"two", lac=1))
        lac, entry = await poll
        assert lac == 1 and entry is not None and entry.payload == b"one"
        # Nothing new: the poll times out with the same LAC.
        assert await reader.wait_for_lac(11, 1, 100) == 1
        await writer.write_lac(11, KEY, 2)
        assert await reader.read_lac(11) == 2
        await writer.force_ledger(11)
    finally:
        await writer.close()
        await reader.close()


@pytest.mark.skipif(STORAGE != "disk", reason="the journal belongs to the disk engine")
@pytest.mark.parametrize(
    ("setting", "expect_mb"),
    [(None, 16), ("journalPreAllocSizeMB=2", 2), ("journalPreAllocSizeMB=0", 0)],
)
async def test_journal_files_are_preallocated_by_journal_pre_alloc_size_mb(
    bookie_factory: BookieFactory, tmp_path: pathlib.Path, setting: str | None, expect_mb: int
) -> None:
    extra: list[str] = []
    if setting is not None:
        config = tmp_path / "bookie.conf"
        config.write_text(setting + "\n")  # BookKeeper's key=value form and name
        extra = ["--config", str(config)]
    bookie = bookie_factory.start(storage=STORAGE, extra_args=extra)
    client = BookieClient(bookie.address)
    try:
        await client.add(req(1, 0, b"p" * 300))
    finally:
        await client.close()
    (journal,) = sorted((bookie.data_dir / "journal").glob("*.txn"))
    size = journal.stat().st_size
    if expect_mb:
        assert size == expect_mb << 20, "the journal file is reserved a chunk ahead"
    else:
        assert 300 < size < 4096, "without preallocation the file ends at its last record"
