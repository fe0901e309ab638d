"""The spark tier's fixtures: one real ``magnetar standalone`` and one local Spark session
per module (a session takes seconds to start), plus small helpers to publish and read
directly with ``magnetar.client``.

Spark's Python workers must run the venv's interpreter (``PYSPARK_PYTHON``), or they start
the system ``python3`` without pyarrow. ``local[2, 4]``: two cores, and a failed task is
retried (up to 4 attempts) as on a cluster.
"""

from __future__ import annotations

import asyncio
import os
import pathlib
import sys
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


def spark_session(app: str, master: str = "local[2, 4]") -> Any:
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    from pyspark.sql import SparkSession

    return (
        SparkSession.builder.master(master)
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


def admin(sa: StandaloneProcess, method: str, path: str, body: Any = None) -> Any:
    status, got = http(sa.web_url, method, path, body)
    assert status in (200, 204), (method, path, status, got)
    return got
