"""The broker's side of the offload worker process (``worker.py``).

Owns: ``OffloadWorker``: starts the child on the first job (``python -m
magnetar.broker.offload.worker --priority ...``), hands it ``OffloadJob``s and returns their
``UploadResult``s, answers its ``pace`` requests from the broker's own ``FlowPermits`` (one
rate for all of the broker's offloads, wherever they run), cancels a job whose caller was
cancelled, and fails every job in flight with ``OffloadError`` when the child exits (the next
job starts a new one). ``close`` ends the child (closing its standard input is enough).
Invariants: a result is only returned for a job the child answered ``ok`` (its upload was
verified there); one child at a time.
Must not know: managed ledgers, topics; how the child reads bookies or writes stores.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import logging
import sys
from typing import Any

from magnetar.bookie.tls import GrpcTls
from magnetar.broker.offload.errors import OffloadError
from magnetar.broker.offload.flow import FlowPermits
from magnetar.broker.offload.index import OffloadIndex
from magnetar.broker.offload.jobs import OffloadJob, bytes_from_json, error_from_json
from magnetar.broker.offload.upload import UploadResult

log = logging.getLogger(__name__)

START_TIMEOUT_S = 60.0
"""How long the child may take to import and announce itself (a loaded two-core machine)."""

LINE_LIMIT = 1 << 26
"""The longest answer read from the child (an index object of a very large ledger, base64)."""


class OffloadWorker:
    """One broker's offload worker process, started when first needed."""

    def __init__(
        self,
        priority: str = "idle",
        *,
        bookie_tls: GrpcTls | None = None,
        bookie_timeout_ms: int = 30_000,
        python: str = sys.executable,
    ) -> None:
        self.priority = priority
        self.bookie_tls = bookie_tls
        self.bookie_timeout_ms = bookie_timeout_ms
        self._python = python
        self._proc: asyncio.subprocess.Process | None = None
        self._starting: asyncio.Future[asyncio.subprocess.Process] | None = None
        self._reader: asyncio.Task[None] | None = None
        self._pending: dict[int, asyncio.Future[dict[str, Any]]] = {}
        self._flows: dict[int, FlowPermits] = {}
        self._pacing: set[asyncio.Future[None]] = set()
        self._ids = itertools.count(1)
        self._closed = False
        self.pid: int | None = None
        self.granted_priority: str | None = None
        """What the child got: ``idle`` (SCHED_IDLE), ``nice`` or ``normal``."""
        self.starts = 0
        self.jobs = 0
        self.jobs_failed = 0

    def __repr__(self) -> str:
        return f"<OffloadWorker {self.priority} pid={self.pid} jobs={self.jobs}>"

    async def run(self, job: OffloadJob, flow: FlowPermits) -> UploadResult:
        """``job`` done in the child; raises the ``OffloadError`` it answered, or one saying
        it exited."""
        self.jobs += 1
        try:
            proc = await self._process()
        except OffloadError:
            self.jobs_failed += 1  # the worker could not be started
            raise
        job_id = next(self._ids)
        answer: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self._pending[job_id] = answer
        self._flows[job_id] = flow
        try:
            self._send(proc, {"id": job_id, "job": job.to_json()})
            try:
                got = await asyncio.shield(answer)
            except OffloadError:
                self.jobs_failed += 1  # the child exited under it
                raise
            except asyncio.CancelledError:
                if proc.returncode is None:
                    with contextlib.suppress(OSError, RuntimeError):
                        self._send(proc, {"id": job_id, "cancel": True})
                raise
        finally:
            self._pending.pop(job_id, None)
            self._flows.pop(job_id, None)
        if "error" in got:
            self.jobs_failed += 1
            raise error_from_json(got["error"])
        ok = got["ok"]
        return UploadResult(
            OffloadIndex.decode(bytes_from_json(ok["index"])), int(ok["index_object_bytes"])
        )

    @property
    def running(self) -> bool:
        """The child process is alive."""
        return self._proc is not None and self._proc.returncode is None

    def _send(self, proc: asyncio.subprocess.Process, message: dict[str, Any]) -> None:
        assert proc.stdin is not None
        proc.stdin.write(json.dumps(message, separators=(",", ":")).encode() + b"\n")

    async def _process(self) -> asyncio.subprocess.Process:
        if self._closed:
            raise OffloadError("the broker's offload worker is closed")
        if self._proc is not None and self._proc.returncode is None:
            return self._proc
        if self._starting is None or self._starting.done():
            self._starting = asyncio.ensure_future(self._start())
        return await asyncio.shield(self._starting)

    async def _start(self) -> asyncio.subprocess.Process:
        proc = await asyncio.create_subprocess_exec(
            self._python,
            "-m",
            "magnetar.broker.offload.worker",
            "--priority",
            self.priority,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            limit=LINE_LIMIT,
        )
        self.starts += 1  # spawned (one killed before it said it was ready counts too)
        assert proc.stdout is not None
        try:
            line = await asyncio.wait_for(proc.stdout.readline(), START_TIMEOUT_S)
            ready = json.loads(line)["ready"] if line else None
        except (TimeoutError, ValueError, KeyError):
            ready = None
        if ready is None:
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
            await proc.wait()
            raise OffloadError(f"the offload worker did not start (exit code {proc.returncode})")
        self.pid = int(ready["pid"])
        self.granted_priority = str(ready["priority"])
        log.info("offload worker started: pid %d, priority %s", self.pid, self.granted_priority)
        self._proc = proc
        self._reader = asyncio.ensure_future(self._read(proc))
        return proc

    async def _read(self, proc: asyncio.subprocess.Process) -> None:
        assert proc.stdout is not None
        try:
            while True:
                line = await proc.stdout.readline()
                if not line:
                    break
                message = json.loads(line)
                job_id = int(message.get("id", 0))
                if "pace" in message:
                    pacing = asyncio.ensure_future(self._pace(proc, job_id, int(message["pace"])))
                    self._pacing.add(pacing)
                    pacing.add_done_callback(self._pacing.discard)
                    continue
                answer = self._pending.get(job_id)
                if answer is not None and not answer.done():
                    answer.set_result(message)
        except (ValueError, OSError) as exc:
            log.warning("offload worker pid %s: unreadable answer: %r", proc.pid, exc)
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
        code = await proc.wait()
        if not self._closed:
            log.warning("offload worker pid %s exited with code %s", proc.pid, code)
        gone = OffloadError(f"the offload worker (pid {proc.pid}) exited with code {code}")
        for job_id, answer in list(self._pending.items()):
            if not answer.done():
                answer.set_exception(gone)
                self._pending.pop(job_id, None)

    async def _pace(self, proc: asyncio.subprocess.Process, job_id: int, read_bytes: int) -> None:
        flow = self._flows.get(job_id)
        if flow is not None:
            await flow.pace(read_bytes)
        if proc.returncode is None:
            with contextlib.suppress(OSError, RuntimeError):
                self._send(proc, {"id": job_id, "paced": True})

    async def close(self) -> None:
        self._closed = True
        proc = self._proc
        if proc is None or proc.returncode is not None:
            return
        assert proc.stdin is not None
        proc.stdin.close()  # the child ends when its input does
        try:
            await asyncio.wait_for(proc.wait(), 10)
        except TimeoutError:
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
            await proc.wait()
        if self._reader is not None:
            with contextlib.suppress(asyncio.CancelledError):
                await self._reader


__all__ = ["OffloadWorker"]
