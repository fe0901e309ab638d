"""The embedded store: persistence across restarts and crashes, and remote sessions of real
child processes (killed, stopped) over TCP."""

from __future__ import annotations

import asyncio
import os
import pathlib
import signal
import subprocess
import sys
import textwrap
from collections.abc import AsyncIterator, Iterator

import pytest
from support.net import free_port
from support.waiting import wait_for

from magnetar.zk import open_metadata_store
from magnetar.zk.embedded import EmbeddedMetadataServer
from magnetar.zk.embedded_client import RemoteMetadataStore
from magnetar.zk.errors import ConnectionLoss, MetadataError, SessionLost
from magnetar.zk.factory import close_shared_servers
from magnetar.zk.store import MetadataStore, Notification, NotificationType, SessionEvent

# A child process holding a remote session with one ephemeral node.
_CHILD = textwrap.dedent(
    """
    import asyncio, sys
    from magnetar.zk.embedded_client import RemoteMetadataStore

    async def main():
        store = await RemoteMetadataStore.connect(sys.argv[1], session_timeout_ms=1000)
        events = []
        store.add_session_listener(lambda e: print("event", e.value, flush=True))
        await store.put("/owners/child", b"alive", ephemeral=True)
        print("ready", store.session_id, flush=True)
        await asyncio.Event().wait()

    asyncio.run(main())
    """
)

# A child process writing through to RocksDB, then waiting to be SIGKILLed.
_WRITER = textwrap.dedent(
    """
    import asyncio, sys
    from magnetar.zk.embedded import EmbeddedMetadataServer

    async def main():
        server = EmbeddedMetadataServer(sys.argv[1])
        store = server.connect()
        for i in range(50):
            await store.put(f"/crash/n{i:02d}", str(i).encode())
        await store.put("/crash/n00", b"rewritten")
        await store.put("/crash/eph", b"", ephemeral=True)
        print("written", flush=True)
        await asyncio.Event().wait()

    asyncio.run(main())
    """
)


@pytest.fixture
def children() -> Iterator[list[subprocess.Popen[str]]]:
    procs: list[subprocess.Popen[str]] = []
    yield procs
    for proc in procs:
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGKILL)
        proc.wait(10)


def spawn(procs: list[subprocess.Popen[str]], code: str, *args: str) -> subprocess.Popen[str]:
    proc = subprocess.Popen(
        [sys.executable, "-c", code, *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    procs.append(proc)
    return proc


async def read_line(proc: subprocess.Popen[str], prefix: str, timeout_s: float = 20) -> str:
    assert proc.stdout is not None
    stdout = proc.stdout
    while True:
        line = await asyncio.wait_for(asyncio.to_thread(stdout.readline), timeout_s)
        if not line:
            assert proc.stderr is not None
            raise AssertionError(f"child exited: {proc.stderr.read()}")
        if line.startswith(prefix):
            return line.strip()


@pytest.fixture
async def served(tmp_path: pathlib.Path) -> AsyncIterator[EmbeddedMetadataServer]:
    server = EmbeddedMetadataServer(tmp_path / "meta")
    await server.start_serving()
    yield server
    await server.close()


async def test_persists_across_restart_without_ephemerals(tmp_path: pathlib.Path) -> None:
    server = EmbeddedMetadataServer(tmp_path / "meta")
    store = server.connect()
    await store.put("/a/b", b"v0")
    await store.put("/a/b", b"v1", expected_version=0)
    await store.put("/a/gone", b"")
    await store.delete("/a/gone")
    await store.put("/a/eph", b"", ephemeral=True)
    seq = [(await store.put("/q/s-", b"", sequential=True)).path for _ in range(3)]
    await store.put("/q/eph-", b"", sequential=True, ephemeral=True)  # advances the counter
    old_session = store.session_id
    await server.close()

    reopened = EmbeddedMetadataServer(tmp_path / "meta")
    try:
        again = reopened.connect()
        got = await again.get("/a/b")
        assert got is not None
        assert (got.value, got.stat.version) == (b"v1", 1)
        assert await again.exists("/a/gone") is None
        assert await again.exists("/a/eph") is None
        assert await again.children("/a") == ["b"]
        assert await again.children("/q") == [p.rpartition("/")[2] for p in seq]
        new = await again.put("/q/s-", b"", sequential=True)
        assert new.path > seq[-1]
        assert int(new.path[-10:]) == 4  # never reuses a name, even an ephemeral's
        assert again.session_id != old_session
        assert again.session_id > old_session
    finally:
        await reopened.close()


async def test_survives_sigkill_of_the_process(
    tmp_path: pathlib.Path, children: list[subprocess.Popen[str]]
) -> None:
    data_dir = tmp_path / "crash"
    proc = spawn(children, _WRITER, str(data_dir))
    await read_line(proc, "written")
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(10)

    server = EmbeddedMetadataServer(data_dir)
    try:
        store = server.connect()
        names = await store.children("/crash")
        assert names == [f"n{i:02d}" for i in range(50)]
        got = await store.get("/crash/n00")
        assert got is not None
        assert (got.value, got.stat.version) == (b"rewritten", 1)
    finally:
        await server.close()


async def test_one_process_per_directory(tmp_path: pathlib.Path) -> None:
    server = EmbeddedMetadataServer(tmp_path / "locked")
    try:
        with pytest.raises(MetadataError):
            EmbeddedMetadataServer(tmp_path / "locked")
    finally:
        await server.close()


async def test_killed_client_process_loses_its_ephemerals(
    served: EmbeddedMetadataServer, children: list[subprocess.Popen[str]]
) -> None:
    assert served.url is not None
    proc = spawn(children, _CHILD, served.url)
    await read_line(proc, "ready")
    local = served.connect()
    seen: list[Notification] = []
    local.add_listener(seen.append)
    assert await local.exists("/owners/child") is not None
    os.kill(proc.pid, signal.SIGKILL)
    await wait_for(
        lambda: Notification(NotificationType.DELETED, "/owners/child") in seen,
        what="ephemeral of a killed client removed",
    )
    assert await local.exists("/owners/child") is None
    session_server = served.session_server
    assert session_server is not None
    assert session_server.statistics().sessions == 0


async def test_stopped_client_process_times_out_and_learns_it_lost(
    served: EmbeddedMetadataServer, children: list[subprocess.Popen[str]]
) -> None:
    assert served.url is not None
    proc = spawn(children, _CHILD, served.url)
    await read_line(proc, "ready")
    local = served.connect()
    assert await local.exists("/owners/child") is not None
    os.kill(proc.pid, signal.SIGSTOP)  # connection open, heartbeats stop
    try:
        await wait_for(
            lambda: _absent(local, "/owners/child"),
            what="ephemeral of a silent client removed",
        )
    finally:
        os.kill(proc.pid, signal.SIGCONT)
    assert await read_line(proc, "event lost")


async def _absent(store: MetadataStore, path: str) -> bool:
    return await store.exists(path) is None


async def test_remote_reconnect_keeps_session_ephemerals_and_watches(
    served: EmbeddedMetadataServer,
) -> None:
    assert served.url is not None
    remote = await RemoteMetadataStore.connect(served.url, session_timeout_ms=3_000)
    local = served.connect()
    events: list[SessionEvent] = []
    seen: list[Notification] = []
    remote.add_session_listener(events.append)
    remote.add_listener(seen.append)
    try:
        await remote.put("/r/eph", b"", ephemeral=True)
        await local.put("/r/watched", b"0")
        assert await remote.get("/r/watched") is not None
        session_id = remote.session_id

        remote.abort_connection()
        await wait_for(lambda: SessionEvent.SUSPENDED in events, what="SUSPENDED")
        await wait_for(lambda: SessionEvent.RECONNECTED in events, what="RECONNECTED")
        assert remote.session_id == session_id
        stat = await local.exists("/r/eph")
        assert stat is not None
        assert stat.ephemeral_owner == session_id
        await local.put("/r/watched", b"1")
        await wait_for(
            lambda: Notification(NotificationType.MODIFIED, "/r/watched") in seen,
            what="notification after reconnect",
        )
    finally:
        await remote.close()
    assert await local.exists("/r/eph") is None  # close ends the session at once


async def test_remote_client_loses_session_when_server_is_gone(tmp_path: pathlib.Path) -> None:
    server = EmbeddedMetadataServer(tmp_path / "meta")
    url = await server.start_serving()
    remote = await RemoteMetadataStore.connect(url, session_timeout_ms=600)
    events: list[SessionEvent] = []
    remote.add_session_listener(events.append)
    await server.close()
    await wait_for(lambda: SessionEvent.SUSPENDED in events, what="SUSPENDED")
    with pytest.raises((ConnectionLoss, SessionLost)):
        await remote.get("/x")
    await wait_for(lambda: SessionEvent.LOST in events, what="LOST after the timeout")
    with pytest.raises(SessionLost):
        await remote.get("/x")
    await remote.close()


async def test_remote_connect_refused_is_connection_loss() -> None:
    with pytest.raises(ConnectionLoss):
        await RemoteMetadataStore.connect(f"embedded://127.0.0.1:{free_port()}")


async def test_factory_urls(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "factory"
    a = await open_metadata_store(f"embedded-file://{path}")
    b = await open_metadata_store(f"embedded-file://{path}")
    try:
        await a.put("/shared", b"1")
        got = await b.get("/shared")
        assert got is not None
        assert got.value == b"1"
    finally:
        await close_shared_servers()
    m1 = await open_metadata_store("memory://unit-a")
    m2 = await open_metadata_store("memory://unit-a")
    m3 = await open_metadata_store("memory://unit-b")
    await m1.put("/m", b"")
    assert await m2.exists("/m") is not None
    assert await m3.exists("/m") is None
    await close_shared_servers()
    with pytest.raises(ValueError):
        await open_metadata_store("nope://x")
    with pytest.raises(TypeError):
        await open_metadata_store("memory://", sync_writes=True)
