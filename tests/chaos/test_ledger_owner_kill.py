"""The process owning a managed ledger dies (SIGKILL) or freezes (SIGSTOP) mid-stream.

A new owner opens the managed ledger: every acknowledged entry is there byte-for-byte,
nothing past the recovered end is visible, and a frozen old owner resumed with SIGCONT is
fenced and cannot add.
"""

from __future__ import annotations

import asyncio
import os
import pathlib
import signal
import subprocess
import sys
import threading

import pytest
from support.ledger_cluster import chroot_url, open_factory, wait_registered
from support.waiting import wait_for

from magnetar.broker.ledger import EARLIEST, Position

OWNER = pathlib.Path(__file__).resolve().parents[1] / "support" / "ledger_owner.py"


class Owner:
    def __init__(self, url: str, name: str) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, str(OWNER), url, name],
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        self.lines: list[str] = []
        self._thread = threading.Thread(target=self._read, daemon=True)
        self._thread.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for raw in self.proc.stdout:
            self.lines.append(raw.decode().strip())

    def acked(self) -> dict[Position, bytes]:
        out = {}
        for line in list(self.lines):
            if line.startswith("ACK "):
                _, pos, i = line.split()
                out[Position.parse(pos)] = b"entry-%s" % i.encode()
        return out

    def close(self) -> None:
        if self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGCONT)
            self.proc.kill()
        self.proc.wait(10)
        self._thread.join(5)


@pytest.fixture
def owners():  # type: ignore[no-untyped-def]
    started: list[Owner] = []

    def start(url: str, name: str) -> Owner:
        o = Owner(url, name)
        started.append(o)
        return o

    yield start
    for o in started:
        o.close()


async def read_all(ml) -> list:  # type: ignore[no-untyped-def]
    cursor = ml.new_non_durable_cursor(EARLIEST)
    out = []
    while batch := await cursor.read_entries(2_000):
        out.extend(batch)
    return out


async def test_sigkill_owner_then_new_owner_sees_every_acked_entry(
    zookeeper_server,
    bookie_factory,
    owners,  # type: ignore[no-untyped-def]
) -> None:
    url = chroot_url(zookeeper_server.url)
    bookie_factory.start_many(2, metadata=url)
    factory = await open_factory(url, retention_time_ms=-1, retention_size_bytes=-1)
    await wait_registered(factory.store, 2)
    old = owners(url, "t/ns/persistent/owner-kill")
    await wait_for(lambda: len(old.acked()) >= 1_000, 60)
    old.proc.kill()
    old.proc.wait(10)
    acked = old.acked()
    ml = await factory.open("t/ns/persistent/owner-kill")
    end = ml.get_last_confirmed()
    got = await read_all(ml)
    by_pos = {e.position: e.payload for e in got}
    for pos, payload in acked.items():
        assert by_pos.get(pos) == payload, pos
    assert all(p <= end for p in by_pos)  # nothing past the recovered end
    # entries are dense: the recovered log is exactly 0..end of each ledger, in order
    assert [e.payload for e in got] == [b"entry-%d" % i for i in range(len(got))]
    new_pos = await ml.add(b"after")
    assert new_pos > end
    await factory.close()
    await factory.store.close()


async def test_frozen_owner_is_fenced_after_takeover(
    zookeeper_server,
    bookie_factory,
    owners,  # type: ignore[no-untyped-def]
) -> None:
    url = chroot_url(zookeeper_server.url)
    bookie_factory.start_many(2, metadata=url)
    factory = await open_factory(url, retention_time_ms=-1, retention_size_bytes=-1)
    await wait_registered(factory.store, 2)
    old = owners(url, "t/ns/persistent/owner-stop")
    await wait_for(lambda: len(old.acked()) >= 500, 60)
    os.kill(old.proc.pid, signal.SIGSTOP)
    ml = await factory.open("t/ns/persistent/owner-stop")
    end = ml.get_last_confirmed()
    os.kill(old.proc.pid, signal.SIGCONT)
    await wait_for(lambda: old.proc.poll() is not None, 60)
    assert old.proc.returncode == 3 and "FENCED" in old.lines
    acked = old.acked()
    assert max(acked) <= end  # the old owner never got an ack past the takeover
    got = {e.position: e.payload for e in await read_all(ml)}
    for pos, payload in acked.items():
        assert got[pos] == payload
    await asyncio.wait_for(ml.add(b"new owner writes"), 10)
    await factory.close()
    await factory.store.close()
