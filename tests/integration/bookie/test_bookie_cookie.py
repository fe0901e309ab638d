"""Cookie checks on a real data dir (fast: in-memory metadata)."""

from __future__ import annotations

import pathlib

import pytest

from magnetar.bookie.registration import COOKIE_FILE, CookieError, check_cookie
from magnetar.zk import paths
from magnetar.zk.memory import MemoryMetadataServer


async def test_first_start_writes_both_cookies_and_restart_accepts(tmp_path: pathlib.Path) -> None:
    store = MemoryMetadataServer().connect()
    data = tmp_path / "data"
    data.mkdir()
    cookie = await check_cookie(store, "b1", [str(data)])
    assert (data / COOKIE_FILE).exists()
    got = await store.get(paths.bookie_cookie("b1"))
    assert got is not None and cookie.instance_id.encode() in got.value
    assert await check_cookie(store, "b1", [str(data)]) == cookie


async def test_wiped_dir_mismatch_and_swapped_id_are_refused(tmp_path: pathlib.Path) -> None:
    store = MemoryMetadataServer().connect()
    data = tmp_path / "data"
    data.mkdir()
    await check_cookie(store, "b1", [str(data)])
    (data / COOKIE_FILE).unlink()
    with pytest.raises(CookieError, match="wiped"):
        await check_cookie(store, "b1", [str(data)])

    other = tmp_path / "other"
    other.mkdir()
    await check_cookie(store, "b2", [str(other)])
    with pytest.raises(CookieError, match="belongs to bookie b2"):
        await check_cookie(store, "b1", [str(other)])

    # Same id, a different instance's cookie in metadata.
    await store.put(
        paths.bookie_cookie("b2"),
        b'{"bookie_id": "b2", "instance_id": "x", '
        b'"data_dirs": ["' + str(other.resolve()).encode() + b'"]}',
    )
    with pytest.raises(CookieError, match="does not match"):
        await check_cookie(store, "b2", [str(other)])


async def test_unknown_data_without_cookie_is_refused(tmp_path: pathlib.Path) -> None:
    data = tmp_path / "data"
    (data / "journal").mkdir(parents=True)
    with pytest.raises(CookieError, match="no cookie"):
        await check_cookie(None, "b1", [str(data)])
