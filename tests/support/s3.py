"""A real S3 server for tests: ``moto_server`` (the ``moto[server]`` package) over HTTP.

Owns: ``S3Server`` (one ``moto_server`` process on 127.0.0.1 and a free port; ``start``,
``pause``/``resume`` (SIGSTOP/SIGCONT: a store that stops answering and comes back with its
data), ``kill``; ``create_bucket`` through boto3, which moto itself depends on: tests only, the
product never speaks S3 but through obstore), the session-scoped ``s3_server`` fixture and the
per-test ``s3_bucket`` fixture (a fresh bucket, so tests share the server but not objects).
Readiness is a polled ``ListBuckets``, never a sleep. Every process started here is killed at
teardown (and with the test process, through ``setpriv --pdeathsig``).
"""

from __future__ import annotations

import pathlib
import shutil
import sys
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from support.store_server import StoreServer

ACCESS_KEY = "testing"
SECRET_KEY = "testing"
REGION = "us-east-1"
MISSING = "moto_server not found: pip install 'moto[server]' (make test does)"


def moto_server_command() -> list[str] | None:
    """How to start moto's server here, or None when the package is missing."""
    beside = pathlib.Path(sys.executable).with_name("moto_server")
    if beside.exists():
        return [str(beside)]
    found = shutil.which("moto_server")
    return [found] if found else None


class S3Server(StoreServer):
    name = "moto_server"

    def __init__(self, host: str = "127.0.0.1") -> None:
        super().__init__(moto_server_command(), MISSING, host)

    def __repr__(self) -> str:
        return f"<S3Server {self.endpoint} {'running' if self.running else 'stopped'}>"

    @property
    def endpoint(self) -> str:
        return f"http://{self.host}:{self.port}"

    def client(self) -> Any:
        import boto3

        return boto3.client(
            "s3",
            endpoint_url=self.endpoint,
            aws_access_key_id=ACCESS_KEY,
            aws_secret_access_key=SECRET_KEY,
            region_name=REGION,
        )

    def start(self, timeout_s: float = 30.0) -> None:
        self.spawn(
            [*self.command, "-H", self.host, "-p", str(self.port)],
            env={"MOTO_ALLOW_NONEXISTENT_REGION": "True"},
        )
        client = self.client()
        self.wait_ready(client.list_buckets, timeout_s)

    def create_bucket(self, name: str | None = None) -> str:
        bucket = name or f"offload-{uuid.uuid4().hex[:12]}"
        self.client().create_bucket(Bucket=bucket)
        return bucket


@dataclass(frozen=True)
class S3Bucket:
    """A fresh bucket on the shared server, and how to reach it."""

    server: S3Server
    name: str

    @property
    def endpoint(self) -> str:
        return self.server.endpoint

    def policies_json(self) -> dict[str, Any]:
        """Pulsar's offload policies naming this bucket (driver S3, an HTTP endpoint)."""
        return {
            "managedLedgerOffloadDriver": "S3",
            "s3ManagedLedgerOffloadBucket": self.name,
            "s3ManagedLedgerOffloadRegion": REGION,
            "s3ManagedLedgerOffloadServiceEndpoint": self.endpoint,
            "s3ManagedLedgerOffloadCredentialId": ACCESS_KEY,
            "s3ManagedLedgerOffloadCredentialSecret": SECRET_KEY,
            "s3ManagedLedgerOffloadMaxBlockSizeInBytes": 5 * 1024 * 1024,
        }


@pytest.fixture(scope="session")
def s3_server() -> Iterator[S3Server]:
    """One moto S3 server for the whole run (shared: tests that pause it use their own)."""
    if moto_server_command() is None:
        pytest.skip(MISSING)
    server = S3Server()
    try:
        server.start()
        yield server
    finally:
        server.close()


@pytest.fixture
def s3_bucket(s3_server: S3Server) -> S3Bucket:
    return S3Bucket(s3_server, s3_server.create_bucket())


@pytest.fixture
def private_s3_server() -> Iterator[S3Server]:
    """A moto server of this test's own (for tests that pause or kill it)."""
    if moto_server_command() is None:
        pytest.skip(MISSING)
    server = S3Server()
    try:
        server.start()
        yield server
    finally:
        server.close()
