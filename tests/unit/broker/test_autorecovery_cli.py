"""``magnetar autorecovery`` and ``magnetar bookie decommission|recover``: clear errors, no
tracebacks, on bad use (the working paths run against real processes in the integration and
chaos tiers)."""

from __future__ import annotations

import asyncio

import pytest
from support.waiting import wait_for

from magnetar.broker import cli
from magnetar.zk import paths
from magnetar.zk.factory import memory_server


def test_autorecovery_needs_metadata(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["autorecovery"]) == 2
    assert "--metadata" in capsys.readouterr().err


def test_autorecovery_refuses_a_bad_setting(capsys: pytest.CaptureFixture[str]) -> None:
    rc = cli.main(
        ["autorecovery", "--metadata", "memory://x", "--rereplication-entry-batch-size", "0"]
    )
    assert rc == 2
    assert "rereplication_entry_batch_size" in capsys.readouterr().err


def test_bookie_action_needs_an_id(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["bookie", "recover", "--metadata", "memory://x"]) == 2
    assert "bookie id is required" in capsys.readouterr().err


def test_recover_refuses_a_live_bookie(capsys: pytest.CaptureFixture[str]) -> None:
    server = memory_server("cli-recover")

    async def register() -> None:
        store = server.connect()
        await store.put(paths.bookie_registration("b1:1"), b"{}")

    asyncio.run(register())
    rc = cli.main(["bookie", "recover", "b1:1", "--metadata", "memory://cli-recover"])
    assert rc == 1
    assert "decommission" in capsys.readouterr().err


def test_decommission_refuses_an_unknown_bookie(capsys: pytest.CaptureFixture[str]) -> None:
    rc = cli.main(["bookie", "decommission", "nobody:1", "--metadata", "memory://cli-decom"])
    assert rc == 1
    assert "no cookie" in capsys.readouterr().err


def test_autorecovery_refuses_a_bad_metadata_url(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["autorecovery", "--metadata", "nonsense"]) == 2
    assert "scheme" in capsys.readouterr().err


async def test_supervisor_starts_again_on_a_new_session_after_session_loss() -> None:
    from magnetar.broker.autorecovery_main import Supervisor
    from magnetar.broker.bookkeeper.autorecovery import AutoRecoveryConfig

    server = memory_server("cli-supervisor")
    supervisor = Supervisor("memory://cli-supervisor", 4000, AutoRecoveryConfig(), "node-a")
    await supervisor.start()
    try:
        first = supervisor.daemon
        assert first is not None
        server.expire_session(first.store.session_id)
        await wait_for(lambda: supervisor.daemon not in (first, None), 30, "the daemon restarted")
        assert supervisor.restarts == 1
        new = supervisor.daemon
        assert new is not None
        # the new session joins the election again and leads
        await wait_for(lambda: new.is_auditor, 30, "an auditor after the restart")
    finally:
        await supervisor.stop()


async def test_broker_conf_rack_settings_reach_the_brokers_placement(tmp_path) -> None:  # type: ignore[no-untyped-def]
    from magnetar.broker.config import BrokerConfig
    from magnetar.broker.runtime import BrokerRuntime

    conf = tmp_path / "broker.conf"
    conf.write_text(
        "bookkeeper_client_min_num_racks_per_write_quorum=3\n"
        "bookkeeper_client_enforce_min_num_racks_per_write_quorum=true\n"
    )
    config = BrokerConfig.load(conf)
    runtime = BrokerRuntime(config, memory_server("cli-broker-racks").connect())
    policy = runtime.factory.ledger_client.registry.rack_policy
    assert policy.min_num_racks_per_write_quorum == 3
    assert policy.enforce_min_num_racks_per_write_quorum is True
