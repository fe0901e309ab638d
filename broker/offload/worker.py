"""The offload worker process: a broker's offloads run here, at idle CPU priority.

An offload reads a whole sealed ledger from the bookies, packs it into blocks, uploads it and
reads it all back to verify it: seconds of CPU per 64 MB. On the broker's event loop that CPU
is taken from the publishes and dispatches the broker serves (publish p99 several times its
idle value while an offload ran: docs/benchmarks.md, issue 30). Here it runs in a child
process whose scheduling class is ``SCHED_IDLE`` (``--priority idle``, the default of
``managedLedgerOffloadWorker``): the kernel gives it a CPU only when no normal task wants one,
so the broker's and the bookies' own work always comes first.

Owns: the child's ``main``: lowers its priority, announces itself (``ready``: pid, priority),
then runs the ``OffloadJob``s it is given on standard input, concurrently, and answers each
(``ok``: the index object as written, ``error``: an ``OffloadError`` of the same class). When
the broker paces its offloads (``managedLedgerOffloadFlowPermitsPerSecond``), each source read
asks the broker (``pace``) and waits for its answer (``paced``): the rate stays one for the
whole broker. Standard input closing (the broker stopped or was killed) ends the process at
once; what an unfinished attempt wrote is an orphan its broker's next run deletes.
Messages are JSON lines; standard output carries only them (anything else printed goes to
standard error, the broker's log).
Must not know: managed ledgers, the metadata store (a job carries the ledger's metadata and
its bookies' addresses), topics.
"""

from __future__ import annotations

import argparse
import asyncio
import ctypes
import json
import logging
import os
import signal
import sys
from typing import IO, Any

from magnetar.bookie.client import read_clients
from magnetar.broker.bookkeeper.read_handle import open_sealed_ledger
from magnetar.broker.bookkeeper.replicas import BookiePool
from magnetar.broker.offload.errors import OffloadError
from magnetar.broker.offload.flow import FlowPermits
from magnetar.broker.offload.jobs import (
    OffloadJob,
    bytes_to_json,
    error_to_json,
    spec_to_json,
)
from magnetar.broker.offload.store import BlobStore, open_blob_store
from magnetar.broker.offload.upload import UploadPlan, upload_ledger

log = logging.getLogger(__name__)

_PR_SET_PDEATHSIG = 1

PRIORITIES = ("idle", "normal")

WORKER_READ_ENTRIES_MAX = 4096
"""Entries per read here: ``WORKER_READ_BYTES`` of entries down to 256 bytes (the broker's
loop reads at most 100 at a time, as it decodes them between publishes; at 100 entries of
1 KB a background read carried 100 KB for the cost of a call, and a standalone's offload
beside a publisher read 0.6 MB/s at the 1 % share)."""

WORKER_READ_BYTES = 1 << 20
"""About this many bytes per bookie read here. The reads are background reads: a bookie that
takes adds spaces them to its ``background_read_share_percent`` of its time, and what a read
costs it is mostly per call, so bigger reads carry more bytes in the same share
(docs/benchmarks.md, issue 30, session 13: 1 MiB reads at a 1 % share read 3.5-3.8 MB/s
beside lone adds with their p99 within +13 %, 256 KiB reads 1.1 MB/s)."""


def worker_plan(job: OffloadJob, flow: FlowPermits) -> UploadPlan:
    """How the worker uploads ``job``: the job's sizes, with the worker's bigger reads."""
    return UploadPlan(
        block_bytes=job.block_bytes,
        part_bytes=job.part_bytes,
        part_concurrency=job.part_concurrency,
        prefetch_rounds=job.prefetch_rounds,
        flow=flow,
        read_bytes=WORKER_READ_BYTES,
        read_entries_max=WORKER_READ_ENTRIES_MAX,
    )


def die_with_parent() -> None:
    """On Linux, be killed when the broker that started this process dies (a SIGKILLed
    broker's worker must not finish an upload its successor does not know of); elsewhere the
    closing standard input ends the process."""
    parent = os.getppid()
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    except (OSError, AttributeError):
        return
    if os.getppid() != parent:  # the parent died before the request took effect
        os._exit(1)


def _threads() -> list[int]:
    try:
        return [int(t) for t in os.listdir("/proc/self/task")]
    except OSError:
        return [0]  # no /proc: this thread (the only one yet, where this runs first)


def lower_priority(priority: str) -> str:
    """Put this process (and the threads it starts later) in ``priority``'s scheduling class;
    returns what it got: ``idle`` (Linux ``SCHED_IDLE``), ``nice`` (19, where there is no
    ``SCHED_IDLE``) or ``normal``."""
    if priority == "normal":
        return "normal"
    if sys.platform.startswith("linux"):
        sched_idle = os.SCHED_IDLE
        try:
            # each thread has its own class (imports may have started some): all of them;
            # threads started from now on inherit it
            for tid in _threads():
                os.sched_setscheduler(tid, sched_idle, os.sched_param(0))
            return "idle"
        except OSError as exc:
            log.warning("SCHED_IDLE refused (%s): running at nice 19 instead", exc)
    os.nice(19)
    return "nice"


class _Channel:
    """The JSON lines to the broker."""

    def __init__(self, out: IO[bytes]) -> None:
        self._out = out

    def send(self, message: dict[str, Any]) -> None:
        self._out.write(json.dumps(message, separators=(",", ":")).encode() + b"\n")
        self._out.flush()


class _AskTheBroker(FlowPermits):
    """The broker's ``FlowPermits``, reached over the pipe: each read waits for ``paced``."""

    def __init__(self, channel: _Channel, job_id: int) -> None:
        super().__init__(-1)
        self._channel = channel
        self._job_id = job_id
        self.answers: asyncio.Queue[None] = asyncio.Queue()

    @property
    def limited(self) -> bool:
        return True

    async def pace(self, read_bytes: int) -> None:
        self._channel.send({"id": self._job_id, "pace": read_bytes})
        await self.answers.get()


class Worker:
    """Runs the jobs of one broker; stores stay open between jobs (one per spec)."""

    def __init__(self, channel: _Channel) -> None:
        self._channel = channel
        self._stores: dict[str, BlobStore] = {}
        self._jobs: dict[int, asyncio.Task[None]] = {}
        self._pacers: dict[int, _AskTheBroker] = {}

    def _store(self, job: OffloadJob) -> BlobStore:
        key = json.dumps(spec_to_json(job.spec), sort_keys=True)
        store = self._stores.get(key)
        if store is None:
            store = self._stores[key] = open_blob_store(job.spec)
        return store

    def handle(self, message: dict[str, Any]) -> None:
        job_id = int(message["id"])
        if "job" in message:
            self._jobs[job_id] = asyncio.ensure_future(self._run(job_id, message["job"]))
        elif "paced" in message:
            pacer = self._pacers.get(job_id)
            if pacer is not None:
                pacer.answers.put_nowait(None)
        elif "cancel" in message:
            task = self._jobs.get(job_id)
            if task is not None:
                task.cancel()

    async def _run(self, job_id: int, doc: dict[str, Any]) -> None:
        try:
            job = OffloadJob.from_json(doc)
            flow: FlowPermits = FlowPermits(-1)
            if job.paced:
                flow = self._pacers[job_id] = _AskTheBroker(self._channel, job_id)
            plan = worker_plan(job, flow)
            async with BookiePool(
                # Background: a bookie taking adds spaces these reads (bookie/background.py).
                read_clients(tls=job.bookie_tls, timeout_ms=job.bookie_timeout_ms, background=True),
                job.ledger.addresses,
            ) as pool:
                result = await upload_ledger(
                    self._store(job),
                    open_sealed_ledger(job.ledger.metadata, pool),
                    data_key=job.data_key,
                    index_key=job.index_key,
                    extra=job.extra,
                    plan=plan,
                )
            self._channel.send(
                {
                    "id": job_id,
                    "ok": {
                        "index": bytes_to_json(result.index.encode()),
                        "index_object_bytes": result.index_object_bytes,
                    },
                }
            )
        except asyncio.CancelledError:
            self._channel.send({"id": job_id, "error": error_to_json(OffloadError("cancelled"))})
        except Exception as exc:  # every failure is the job's answer, never the worker's end
            self._channel.send({"id": job_id, "error": error_to_json(exc)})
        finally:
            self._jobs.pop(job_id, None)
            self._pacers.pop(job_id, None)

    async def close(self) -> None:
        for task in list(self._jobs.values()):
            task.cancel()
        for store in self._stores.values():
            await store.close()


async def serve(channel: _Channel, priority: str) -> None:
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader(limit=1 << 26)
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
    worker = Worker(channel)
    channel.send({"ready": {"pid": os.getpid(), "priority": priority}})
    try:
        while True:
            line = await reader.readline()
            if not line:
                return  # the broker went: what runs is abandoned (its attempt is an orphan)
            worker.handle(json.loads(line))
    finally:
        await worker.close()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m magnetar.broker.offload.worker")
    parser.add_argument("--priority", choices=PRIORITIES, default="idle")
    args = parser.parse_args(argv)
    die_with_parent()
    # standard output is the broker's channel: anything else printed goes to standard error
    channel = _Channel(os.fdopen(os.dup(sys.stdout.fileno()), "wb"))
    os.dup2(sys.stderr.fileno(), sys.stdout.fileno())
    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(levelname)s offload-worker %(message)s"
    )
    got = lower_priority(args.priority)
    try:
        asyncio.run(serve(channel, got))
    except KeyboardInterrupt:
        pass
    os._exit(0)  # abandon whatever still runs: the broker is gone or closed us


if __name__ == "__main__":
    main()
