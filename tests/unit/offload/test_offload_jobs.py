"""An offload job and its answer cross the pipe to the offload worker unchanged."""

from __future__ import annotations

import json

import pytest

from magnetar.bookie.tls import GrpcTls
from magnetar.broker.bookkeeper.metadata import LedgerMetadata
from magnetar.broker.bookkeeper.states import LedgerState
from magnetar.broker.offload import errors
from magnetar.broker.offload.drivers import StoreKind, StoreSpec
from magnetar.broker.offload.jobs import (
    LocatedLedger,
    OffloadJob,
    error_from_json,
    error_to_json,
)

pytestmark = pytest.mark.unit


def _job(**changes: object) -> OffloadJob:
    meta = LedgerMetadata(
        ledger_id=7,
        ensemble_size=2,
        write_quorum=2,
        ack_quorum=2,
        state=LedgerState.CLOSED,
        ensembles=((0, ("b1", "b2")), (40, ("b1", "b3"))),
        master_key=b"\x01\x02",
        last_entry_id=99,
        length=12_345,
    )
    values: dict[str, object] = {
        "ledger": LocatedLedger(meta, {"b1": "127.0.0.1:1", "b2": "127.0.0.1:2", "b3": "b3"}),
        "spec": StoreSpec(
            StoreKind.S3,
            "bucket",
            {"region": "eu", "access_key_id": "k", "secret_access_key": "s"},
            allow_http=True,
            request_timeout_ms=2_000,
            library_retries=1,
        ),
        "data_key": "u-ledger-7",
        "index_key": "u-ledger-7-index",
        "extra": {"ManagedLedgerName": "t", "LedgerId": "7"},
        "block_bytes": 1 << 20,
        "part_bytes": 64 << 20,
        "part_concurrency": 2,
        "prefetch_rounds": 1,
        "paced": True,
        "bookie_tls": GrpcTls("c.pem", "k.pem", "ca.pem"),
        "bookie_timeout_ms": 5_000,
    }
    values.update(changes)
    return OffloadJob(**values)  # type: ignore[arg-type]


@pytest.mark.parametrize("tls", [None, GrpcTls("c.pem", "k.pem", "ca.pem")])
def test_a_job_survives_its_json(tls: GrpcTls | None) -> None:
    job = _job(bookie_tls=tls)
    assert OffloadJob.from_json(json.loads(json.dumps(job.to_json()))) == job


def test_a_local_store_spec_survives_its_json() -> None:
    job = _job(spec=StoreSpec(StoreKind.LOCAL, "/tmp/x", supports_attributes=False))
    assert OffloadJob.from_json(json.loads(json.dumps(job.to_json()))).spec == job.spec


@pytest.mark.parametrize(
    "exc",
    [
        errors.OffloadCorrupt("block 3 differs"),
        errors.StoreUnavailable("down"),
        errors.SourceMismatch("short"),
        errors.LedgerNotSealed("open"),
        errors.OffloadError("plain"),
    ],
)
def test_an_offload_error_keeps_its_class_and_message(exc: errors.OffloadError) -> None:
    back = error_from_json(json.loads(json.dumps(error_to_json(exc))))
    assert type(back) is type(exc) and str(back) == str(exc)


def test_any_other_failure_becomes_an_offload_error_naming_it() -> None:
    back = error_from_json(error_to_json(KeyError("b9")))
    assert type(back) is errors.OffloadError and "KeyError" in str(back) and "b9" in str(back)


def test_the_worker_reads_a_job_in_big_background_reads() -> None:
    """The worker's plan keeps the job's sizes and reads up to 1 MiB or 4,096 entries a call
    (test_offload_flow.py shows such a plan reading 1 KB entries 1,024 at a time)."""
    from magnetar.broker.offload.flow import FlowPermits
    from magnetar.broker.offload.upload import ENTRIES_PER_READ
    from magnetar.broker.offload.worker import (
        WORKER_READ_BYTES,
        WORKER_READ_ENTRIES_MAX,
        worker_plan,
    )

    job = _job()
    plan = worker_plan(job, FlowPermits(-1))
    assert (plan.read_bytes, plan.read_entries_max) == (WORKER_READ_BYTES, WORKER_READ_ENTRIES_MAX)
    assert plan.read_entries_max > ENTRIES_PER_READ and plan.read_bytes >= 1 << 20
    assert (plan.block_bytes, plan.part_bytes) == (job.block_bytes, job.part_bytes)
    assert (plan.part_concurrency, plan.prefetch_rounds) == (2, 1)
