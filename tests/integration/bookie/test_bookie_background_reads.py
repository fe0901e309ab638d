"""Background reads (``ReadRequest.background``) on a real bookie process: while adds come in
they are spaced to ``background_read_share_percent`` of the bookie's time, and /metrics counts
them; reads not marked background are neither counted nor spaced; a share outside 1..100
refuses to start with a clear message. (A bookie with no recent add serves them at once:
tests/unit/bookie/test_background_reads.py.)"""

from __future__ import annotations

import asyncio

import aiohttp
import crc32c
from prometheus_client.parser import text_string_to_metric_families
from support.bookies import BookieFactory
from support.net import free_port

from magnetar.bookie.api import AddRequest
from magnetar.bookie.client import BookieClient, read_clients

KEY = b"master-key-0123456789"
SERIES = ("bookie_background_READ_count", "bookie_background_READ_PACED_count")


def _add(ledger: int, entry: int) -> AddRequest:
    payload = b"x" * 1000
    return AddRequest(ledger, entry, entry - 1, crc32c.crc32c(payload), payload, KEY, False)


async def _series(http_port: int) -> dict[str, float]:
    async with (
        aiohttp.ClientSession() as http,
        http.get(f"http://127.0.0.1:{http_port}/metrics") as resp,
    ):
        text = await resp.text()
    return {
        name: sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        # the parser adds OpenMetrics' _total to a counter's sample; the bookie writes none
        if (name := sample.name.removesuffix("_total")) in SERIES
    }


async def test_background_reads_are_spaced_while_adds_come_in(
    bookie_factory: BookieFactory,
) -> None:
    http_port = free_port()
    bookie = bookie_factory.start(
        extra_args=["--http-port", str(http_port), "--background-read-share-percent", "5"]
    )
    writer = BookieClient(bookie.address, fast_add=False)
    background = read_clients(background=True)(bookie.address)
    foreground = read_clients()(bookie.address)
    try:
        await asyncio.gather(*(writer.add(_add(1, e)) for e in range(200)))
        for first in range(0, 200, 50):
            run = await foreground.read_packed(1, first, first + 49)
            assert len(run) == 50
        assert await _series(http_port) == dict.fromkeys(SERIES, 0)

        # A writer adding one entry at a time, all through the reads.
        reading = True

        async def add_while_reading() -> int:
            entry = 0
            while reading:
                await writer.add(_add(2, entry))
                entry += 1
            return entry

        adder = asyncio.create_task(add_while_reading())
        try:
            for first in range(0, 200, 20):
                run = await background.read_packed(1, first, first + 19)
                assert len(run) == 20
        finally:
            reading = False
            added = await adder
        assert added > 0
        seen = await _series(http_port)
        assert seen["bookie_background_READ_count"] == 10
        assert seen["bookie_background_READ_PACED_count"] >= 9  # each after the first
        for first in range(0, 200, 50):  # unmarked reads are not counted, never spaced
            await foreground.read_packed(1, first, first + 49)
        assert await _series(http_port) == seen
    finally:
        for client in (writer, background, foreground):
            await client.close()


def test_a_share_outside_1_to_100_refuses_to_start(bookie_factory: BookieFactory) -> None:
    bookie = bookie_factory.create(extra_args=["--background-read-share-percent", "0"])
    bookie.spawn()
    assert bookie.wait_exit(30) == 2
    assert "background_read_share_percent must be 1..100, not 0" in bookie.log_text()
    assert "Traceback" not in bookie.log_text()
