"""Disk full at process level: a bookie on a tiny tmpfs turns read-only, says so (Info, log,
registration under the read-only path), keeps serving reads and loses no acked entry."""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
from collections.abc import Iterator

import crc32c
import pytest
from support.bookies import BookieFactory, health
from support.waiting import wait_for

from magnetar.bookie.api import AddRequest
from magnetar.bookie.client import BookieClient
from magnetar.bookie.errors import BookieError, BookieUnavailable, ReadOnly
from magnetar.zk import paths
from magnetar.zk.zookeeper import ZooKeeperMetadataStore

KEY = b"disk-full-key"


@pytest.fixture
def tiny_fs(tmp_path: pathlib.Path) -> Iterator[pathlib.Path]:
    mount_point = tmp_path / "tiny"
    mount_point.mkdir()
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=12m", "tmpfs", str(mount_point)],
        capture_output=True,
        check=False,
    )
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.decode().strip()}")
    try:
        yield mount_point
    finally:
        subprocess.run(["umount", "-l", str(mount_point)], check=False)


async def test_disk_full_turns_read_only_keeps_reads_and_loses_nothing(
    bookie_factory: BookieFactory, tiny_fs: pathlib.Path, zookeeper_server, request
) -> None:
    url = f"{zookeeper_server.url}/t-disk-full-{os.getpid()}"
    bookie = bookie_factory.start(metadata=url, data_dir=tiny_fs / "data")
    store = await ZooKeeperMetadataStore.connect(url)
    client = BookieClient(bookie.address)
    acked: dict[int, bytes] = {}
    try:
        payload_size = 64 * 1024
        refused: BookieError | None = None
        for entry in range(400):  # 25 MiB > the 12 MiB filesystem: must hit the limit
            data = os.urandom(payload_size)
            try:
                await client.add(AddRequest(1, entry, entry - 1, crc32c.crc32c(data), data, KEY))
            except BookieUnavailable:
                raise
            except BookieError as exc:
                refused = exc
                break
            acked[entry] = data
        assert refused is not None, "the tiny disk never filled up"
        assert acked, "nothing was acknowledged before the disk filled"

        info = await client.info()
        assert info.read_only
        h = health(bookie.address)
        assert h is not None and h.serving and h.read_only
        with pytest.raises(ReadOnly):
            data = b"after full"
            await client.add(AddRequest(2, 0, -1, crc32c.crc32c(data), data, KEY))
        # Every acknowledged entry is still served, byte for byte.
        for entry, data in acked.items():
            assert (await client.read_entry(1, entry)).payload == data
        assert "READ-ONLY" in bookie.log_text()

        # The registration moves under the read-only path.
        async def read_only() -> bool:
            path = paths.readonly_bookie_registration(bookie.bookie_id)
            return await store.exists(path) is not None

        await wait_for(read_only, 30, "the registration under the read-only path")
        got = await store.get(paths.readonly_bookie_registration(bookie.bookie_id))
        assert got is not None and json.loads(got.value)["read_only"] is True
        assert await store.exists(paths.bookie_registration(bookie.bookie_id)) is None
        assert bookie.running
    finally:
        await client.close()
        await store.close()
        bookie.kill()
