"""A real Azure Blob Storage server for tests: Azurite (Microsoft's emulator, the ``azurite``
npm package) over HTTP.

Owns: ``azurite_command`` (where ``make test`` installed it: ``.deps/azurite``, or one on
``PATH``), ``AzuriteServer`` (one ``azurite-blob`` process on 127.0.0.1 and a free port, in
memory; ``start``, ``kill``; ``create_container`` through Azure's SDK, tests only), the
session-scoped ``azurite_server`` fixture and the per-test ``azure_container`` fixture (a
fresh container).
Azurite's well-known development account (``devstoreaccount1`` and its published key) is the
only one it has. Readiness is a polled request, never a sleep; the process is killed at
teardown (and with the test process, through ``setpriv --pdeathsig``).
"""

from __future__ import annotations

import pathlib
import shutil
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from support.store_server import StoreServer

ACCOUNT = "devstoreaccount1"
ACCOUNT_KEY = (
    "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="
)
"""Azurite's published development key: not a secret (the emulator has no other account)."""

ROOT = pathlib.Path(__file__).resolve().parents[2]
INSTALLED = ROOT / ".deps" / "azurite" / "node_modules" / ".bin" / "azurite-blob"
MISSING = "azurite-blob not found: `make azurite` installs it (make test does)"


def azurite_command() -> list[str] | None:
    """How to start Azurite's blob service here, or None when it is not installed."""
    if INSTALLED.exists():
        return [str(INSTALLED)]
    found = shutil.which("azurite-blob")
    return [found] if found else None


class AzuriteServer(StoreServer):
    name = "azurite"

    def __init__(self, host: str = "127.0.0.1") -> None:
        super().__init__(azurite_command(), MISSING, host)

    def __repr__(self) -> str:
        return f"<AzuriteServer {self.endpoint}>"

    @property
    def endpoint(self) -> str:
        """The account's URL: what ``managedLedgerOffloadServiceEndpoint`` names."""
        return f"http://{self.host}:{self.port}/{ACCOUNT}"

    def environment(self) -> dict[str, str]:
        """Pulsar's variables for the account, as a broker reads them."""
        return {"AZURE_STORAGE_ACCOUNT": ACCOUNT, "AZURE_STORAGE_ACCESS_KEY": ACCOUNT_KEY}

    def start(self, timeout_s: float = 60.0) -> None:
        self.spawn(
            [
                *self.command,
                "--blobHost",
                self.host,
                "--blobPort",
                str(self.port),
                "--inMemoryPersistence",
                "--skipApiVersionCheck",
                "--disableProductStyleUrl",
                "--silent",
            ]
        )
        self.wait_ready(lambda: self.create_container(f"ready-{uuid.uuid4().hex[:8]}"), timeout_s)

    def connection_string(self) -> str:
        return (
            f"DefaultEndpointsProtocol=http;AccountName={ACCOUNT};AccountKey={ACCOUNT_KEY};"
            f"BlobEndpoint={self.endpoint};"
        )

    def create_container(self, name: str | None = None) -> str:
        """A new container, made through Azure's own SDK (``azure-storage-blob``, tests only:
        obstore has no call for it, and the product only ever speaks to Azure through obstore)."""
        from azure.storage.blob import BlobServiceClient

        container = name or f"offload-{uuid.uuid4().hex[:12]}"
        client = BlobServiceClient.from_connection_string(self.connection_string())
        with client:
            client.create_container(container)
        return container


@dataclass(frozen=True)
class AzureContainer:
    """A fresh container on the shared server, and how to reach it."""

    server: AzuriteServer
    name: str

    @property
    def endpoint(self) -> str:
        return self.server.endpoint

    def keys(self) -> set[str]:
        """The names of the container's blobs (through Azure's SDK)."""
        from azure.storage.blob import ContainerClient

        client = ContainerClient.from_connection_string(self.server.connection_string(), self.name)
        with client:
            return {blob.name for blob in client.list_blobs()}

    def policies_json(self) -> dict[str, Any]:
        """Pulsar's offload policies naming this container (driver azureblob, an endpoint);
        the account and key come from the environment (``server.environment()``)."""
        return {
            "managedLedgerOffloadDriver": "azureblob",
            "managedLedgerOffloadBucket": self.name,
            "managedLedgerOffloadServiceEndpoint": self.endpoint,
            "managedLedgerOffloadMaxBlockSizeInBytes": 5 * 1024 * 1024,
        }


@pytest.fixture(scope="session")
def azurite_server() -> Iterator[AzuriteServer]:
    """One Azurite server for the whole run."""
    if azurite_command() is None:
        pytest.skip(MISSING)
    server = AzuriteServer()
    try:
        server.start()
        yield server
    finally:
        server.close()


@pytest.fixture
def azure_container(azurite_server: AzuriteServer) -> AzureContainer:
    return AzureContainer(azurite_server, azurite_server.create_container())


__all__ = [
    "ACCOUNT",
    "ACCOUNT_KEY",
    "AzureContainer",
    "AzuriteServer",
    "azure_container",
    "azurite_command",
    "azurite_server",
]
