"""Shared fixtures, registered as a pytest plugin by ``tests/conftest.py``.

Each support module owns one real dependency (a ZooKeeper server, bookie processes, a
standalone broker) and exposes it as a fixture here.
"""

from __future__ import annotations

from support.bookies import bookie_factory  # noqa: F401
from support.ledger_fakes import fake_bookies, meta_server  # noqa: F401
from support.metadata_backends import metadata_backend, metadata_backend_factory  # noqa: F401
from support.zookeeper import zookeeper_server, zookeeper_server_factory  # noqa: F401
from support.broker import magnetar_broker  # noqa: F401
from support.standalone import standalone_factory  # noqa: F401
from support.bookie_storage import open_bookie  # noqa: F401
from support.admin import admin  # noqa: F401
from support.broker_process import broker_processes  # noqa: F401
from support.cluster import two_broker_cluster  # noqa: F401
from support.interop import interop_broker, official, ours  # noqa: F401
from support.geo import geo_pair, geo_shared_configuration, geo_standalones  # noqa: F401
from support.azurite import azure_container, azurite_server  # noqa: F401
from support.s3 import private_s3_server, s3_bucket, s3_server  # noqa: F401
