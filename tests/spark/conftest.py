"""The spark tier's fixtures: one real ``magnetar standalone`` and one local Spark session
per module (a session takes seconds to start), plus small helpers to publish and read
directly with ``magnetar.client``.

Spark's Python workers must run the venv's interpreter (``PYSPARK_PYTHON``), or they start
the system ``python3`` without pyarrow. ``local[2, 4]``: two cores, and a failed task is
retried (up to 4 attempts) as on a cluster. ``cluster_spark``: ``local-cluster[2,1,1024]``,
a standalone master and two worker JVMs started by Spark itself, each executor with its own
Python workers: nothing shared with the driver's process (about a minute to start on a
loaded two-core machine, so one module uses it).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import pathlib
import signal
import sys
import threading
from collections.abc import Iterator
from typing import Any

import pytest
from support.admin import http
from support.standalone import StandaloneProcess

from magnetar.client import Client as AsyncClient
from magnetar.client import MessageId
from magnetar.client.sync import Client


@pytest.fixture(scope="module")
def standalone(tmp_path_factory: pytest.TempPathFactory) -> Iterator[StandaloneProcess]:
    base = tmp_path_factory.mktemp("standalone")
    sa = StandaloneProcess(base / "data", base / "standalone.log").start()
    try:
        yield sa
    finally:
        sa.stop()


def spark_session(app: str, master: str = "local[2, 4]", executor_memory: str | None = None) -> Any:
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    from pyspark.sql import SparkSession

    builder = SparkSession.builder
    if executor_memory is not None:
        builder = builder.config("spark.executor.memory", executor_memory)
    return (
        builder.master(master)
        .appName(app)
        .config("spark.ui.enabled", "false")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.sql.streaming.stopTimeout", "60s")
        .config("spark.python.worker.reuse", "true")
        .config("spark.python.worker.faulthandler.enabled", "true")
        .config("spark.python.authenticate.socketTimeout", "180s")  # a loaded CI machine
        .getOrCreate()
    )


@pytest.fixture(scope="module")
def spark(request: pytest.FixtureRequest) -> Iterator[Any]:
    import magnetar.spark

    session = spark_session(pathlib.Path(str(request.fspath)).stem)
    magnetar.spark.register(session)
    try:
        yield session
    finally:
        session.stop()


@pytest.fixture(scope="module")
def cluster_spark(request: pytest.FixtureRequest) -> Iterator[Any]:
    import magnetar.spark

    session = spark_session(
        pathlib.Path(str(request.fspath)).stem, master=LOCAL_CLUSTER, executor_memory="768m"
    )
    magnetar.spark.register(session)
    try:
        yield session
    finally:
        session.stop()


LOCAL_CLUSTER = "local-cluster[2,1,1024]"
"""Two executors of one core and 1,024 MB each (their worker's memory)."""


def publish(
    service_url: str, topic: str, payloads: list[bytes], *, batch: bool = False, **send: Any
) -> list[MessageId]:
    """Send ``payloads`` (a partitioned topic: round robin); their ids, in order. ``batch``:
    in batch entries of 1,000 (``send_batch``), else one entry each."""

    async def go() -> list[MessageId]:
        async with AsyncClient(service_url) as client:
            producer = await client.create_producer(
                topic, batching_enabled=False, block_if_queue_full=True
            )
            if batch:
                return list(await (await producer.send_batch(payloads)))
            futs = [await producer.send_async(p, **send) for p in payloads]
            await producer.flush()
            return [f.result() for f in futs]

    return asyncio.run(go())


def read_all(service_url: str, topic: str, timeout_ms: int = 5000) -> list[Any]:
    """Every message of a (non-partitioned) topic, with a reader from the earliest."""
    out = []
    with Client(service_url) as client:
        for part in client.get_topic_partitions(topic):
            reader = client.create_reader(part, MessageId.earliest)
            while reader.has_message_available():
                out.append(reader.read_next(timeout_ms))
            reader.close()
    return out


def kill_python_workers() -> int:
    """SIGKILL the Python worker processes Spark forked for running tasks (the children of
    ``pyspark.daemon``): their tasks fail as on a lost executor, and Spark retries them."""
    procs: dict[int, tuple[int, str]] = {}
    for d in pathlib.Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            cmd = (d / "cmdline").read_bytes().replace(b"\0", b" ").decode()
            ppid = int((d / "stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        procs[int(d.name)] = (ppid, cmd)
    daemons = {pid for pid, (_, cmd) in procs.items() if "pyspark.daemon" in cmd}
    killed = 0
    for pid, (ppid, _) in procs.items():
        if ppid in daemons:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
                killed += 1
    return killed


def admin(sa: StandaloneProcess, method: str, path: str, body: Any = None) -> Any:
    status, got = http(sa.web_url, method, path, body)
    assert status in (200, 204), (method, path, status, got)
    return got


class DispatchWatch:
    """Samples, while a read runs, what the broker reports it dispatched from a topic: the
    ``msgOutCounter`` of every consumer of its subscriptions (readers included) in the
    topic's stats; ``most`` is the largest total seen."""

    def __init__(self, sa: StandaloneProcess, name: str) -> None:
        """``name``: a topic of ``public/default``, or a full ``persistent://`` name."""
        local = name.removeprefix("persistent://")
        self.path = (
            "/admin/v2/persistent/"
            + (local if "/" in local else f"public/default/{local}")
            + "/stats"
        )
        self.sa = sa
        self.most = 0
        self.samples = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            status, stats = http(self.sa.web_url, "GET", self.path)
            if status == 200:
                out = sum(
                    c.get("msgOutCounter", 0)
                    for s in stats.get("subscriptions", {}).values()
                    for c in s.get("consumers", [])
                )
                self.most = max(self.most, out)
                self.samples += 1
            self._stop.wait(0.01)  # sampling period, not a synchronisation

    def __enter__(self) -> DispatchWatch:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(10)
