"""A real crash: a child process adds entries (and checkpoints now and then) and is killed with
SIGKILL mid-stream; every entry it reported as acknowledged must be readable after restart."""

from __future__ import annotations

import asyncio
import os
import pathlib
import signal
import sys
import textwrap

from support.bookie_storage import OpenBookie, payload_of

CHILD = textwrap.dedent(
    """
    import asyncio, sys
    import crc32c
    from magnetar.bookie.api import AddRequest
    from magnetar.bookie.core import Bookie, BookieConfig
    from magnetar.bookie.testing import submit_requests

    async def main(root):
        bookie = Bookie(BookieConfig(journal_dir=root + "/journal", ledger_dir=root + "/ledgers",
                                     write_cache_bytes_max=64 * 1024, entry_size_max=4096,
                                     checkpoint_interval_ms=50,
                                     journal_file_size_max=64 * 1024))
        await bookie.start()
        entry = 0
        while True:
            reqs = []
            for e in range(entry, entry + 20):
                data = f"L1E{e}".encode() * 10
                reqs.append(AddRequest(1, e, e - 1, crc32c.crc32c(data), data, b"k" * 20))
            statuses = await submit_requests(bookie, reqs)
            assert statuses == [0] * 20, statuses
            entry += 20
            print(entry - 1, flush=True)

    asyncio.run(main(sys.argv[1]))
    """
)


async def test_sigkill_loses_no_acknowledged_entry(
    open_bookie: OpenBookie, tmp_path: pathlib.Path
) -> None:
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-c",
        CHILD,
        str(tmp_path),
        stdout=asyncio.subprocess.PIPE,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    acked = -1
    try:
        assert proc.stdout is not None
        while acked < 3000:  # enough for several checkpoints and journal rollovers
            line = await asyncio.wait_for(proc.stdout.readline(), 30)
            assert line, "child exited early"
            acked = int(line)
    finally:
        if proc.returncode is None:
            proc.send_signal(signal.SIGKILL)
        await proc.wait()
    bookie = await open_bookie()
    got = await bookie.read_range(1, 0, acked, 64 << 20)
    assert [e.entry_id for e in got] == list(range(acked + 1))
    assert all(e.payload == payload_of(1, e.entry_id) for e in got)
    assert bookie.statistics().replay_corrupt_tails <= 1  # at most the torn tail of the kill
