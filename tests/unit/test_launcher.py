"""magnetar cluster (the Docker SDK launcher) without an engine: the layout it derives, the
checks on a spec, and the command line."""

from __future__ import annotations

import pytest

from magnetar import launcher
from magnetar.launcher import ClusterSpec, LauncherError


def test_default_layout_matches_compose_and_uses_host_networking_settings() -> None:
    spec = ClusterSpec.from_base_ports()
    assert spec.service_url == "pulsar://127.0.0.1:6650,127.0.0.1:6651"
    roles = [m.role for m in spec.members()]
    assert roles == ["zookeeper", "bookie", "bookie", "bookie", "broker", "broker"]
    bookie = spec.bookie_container(1)
    assert bookie.environment["MAGNETAR_BOOKIE_PORT"] == "3182"
    assert bookie.environment["MAGNETAR_BOOKIE_BOOKIE_ID"] == "127.0.0.1:3182"
    assert bookie.environment["MAGNETAR_BOOKIE_FAST_ADD_PORT"] == "3282"
    assert bookie.volume == "magnetar-bookie-1-data"
    broker = spec.broker_container(0)
    assert broker.environment["MAGNETAR_METADATA_STORE_URL"] == "zk://127.0.0.1:2181"
    assert broker.environment["MAGNETAR_MANAGED_LEDGER_DEFAULT_ACK_QUORUM"] == "2"
    assert broker.volume is None
    init = spec.init_container()
    assert init.command[0] == "zookeeper-init" and not init.restart


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"bookie_port": 6650}, "ports must be distinct"),
        ({"bookie_fast_add_port": 8002}, "ports must be distinct"),
        ({"bookies": 0}, "at least one bookie"),
        ({"bookies": 1, "ensemble_size": 2}, "ensemble size 2 > 1 bookies"),
    ],
)
def test_bad_specs_are_refused(kwargs: dict[str, int], message: str) -> None:
    with pytest.raises(LauncherError, match=message):
        ClusterSpec.from_base_ports(**kwargs)


def test_set_routes_settings_to_brokers_or_bookies() -> None:
    args = launcher.build_parser().parse_args(
        [
            "up",
            "--bookies",
            "1",
            "--set",
            "MAGNETAR_BOOKIE_GC_INTERVAL_S=5",
            "--set",
            "MAGNETAR_MAX_MESSAGE_SIZE=1024",
        ]
    )
    spec = launcher.spec_from_args(args)
    assert spec.ensemble_size == 1
    assert spec.bookie_container(0).environment["MAGNETAR_BOOKIE_GC_INTERVAL_S"] == "5"
    assert spec.broker_container(0).environment["MAGNETAR_MAX_MESSAGE_SIZE"] == "1024"
    off = launcher.build_parser().parse_args(["up", "--bookie-fast-add-port", "0"])
    assert (
        launcher.spec_from_args(off)
        .bookie_container(0)
        .environment["MAGNETAR_BOOKIE_FAST_ADD_PORT"]
        == "0"
    )
    with pytest.raises(LauncherError, match="one fast add port per bookie"):
        ClusterSpec(bookie_fast_add_ports=(3281,))
    bad = launcher.build_parser().parse_args(["up", "--set", "NOPE=1"])
    with pytest.raises(LauncherError, match="MAGNETAR_NAME=VALUE"):
        launcher.spec_from_args(bad)


def test_without_an_engine_the_command_fails_with_a_message(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("DOCKER_HOST", "unix:///nonexistent/docker.sock")
    args = launcher.build_parser().parse_args(["status"])
    assert launcher.main_with_args(args) == 1
    assert "no Docker engine answers" in capsys.readouterr().err
