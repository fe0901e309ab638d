"""Fixtures of the compat-behaviour tier: ONE real ``magnetar standalone`` process per module
(started on free ports, killed at the end) and official ``pulsar.Client`` s on it."""

from __future__ import annotations

import pathlib
from collections.abc import Iterator

import pulsar
import pytest
from support.standalone import StandaloneProcess


def start_standalone(
    base: pathlib.Path, config: dict[str, object] | None = None
) -> Iterator[StandaloneProcess]:
    proc = StandaloneProcess(base / "data", base / "standalone.log", config=config)
    try:
        yield proc.start()
    finally:
        proc.stop()


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[StandaloneProcess]:
    yield from start_standalone(tmp_path_factory.mktemp("standalone"))


@pytest.fixture
def client(server: StandaloneProcess) -> Iterator[pulsar.Client]:
    c = pulsar.Client(server.service_url, operation_timeout_seconds=30, log_conf_file_path=None)
    try:
        yield c
    finally:
        c.close()
