"""``magnetar zookeeper-init`` on a real ZooKeeper: writes the cluster node (with its URLs),
the public tenant and public/default once; a second run changes nothing."""

from __future__ import annotations

import json
import subprocess
import sys
import uuid

from support.net import free_port
from support.zookeeper import ZooKeeperServer

from magnetar.zk import paths
from magnetar.zk.factory import open_metadata_store


def _init(url: str, *extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [
            sys.executable, "-m", "magnetar.broker.cli", "zookeeper-init",
            "--metadata", url, "--cluster-name", "east",
            "--web-service-url", "http://b1:8080,b2:8080",
            "--broker-service-url", "pulsar://b1:6650,b2:6650", *extra,
        ],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip


async def test_zookeeper_init_writes_cluster_metadata_once(
    zookeeper_server: ZooKeeperServer,
) -> None:
    url = f"{zookeeper_server.url}/init-{uuid.uuid4().hex[:8]}"
    first = _init(url)
    assert first.returncode == 0, first.stderr
    assert "created cluster east, tenant public, namespace public/default" in first.stdout
    store = await open_metadata_store(url)
    try:
        node = await store.get(paths.cluster("east"))
        assert node is not None
        assert json.loads(node.value) == {
            "serviceUrl": "http://b1:8080,b2:8080",
            "brokerServiceUrl": "pulsar://b1:6650,b2:6650",
        }
        assert await store.get(paths.tenant_policies("public")) is not None
        assert await store.get(paths.namespace_policies("public", "default")) is not None
        version = node.stat.version
        second = _init(url)
        assert second.returncode == 0, second.stderr
        assert "metadata already initialised" in second.stdout
        again = await store.get(paths.cluster("east"))
        assert again is not None and again.stat.version == version
    finally:
        await store.close()


def test_zookeeper_init_refuses_an_unknown_setting_clearly(
    zookeeper_server: ZooKeeperServer,
) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "magnetar.broker.cli", "zookeeper-init", "--metadata",
         zookeeper_server.url],
        capture_output=True, text=True, timeout=120, check=False,
        env={"MAGNETAR_CLUSTER_NAM": "x", "PATH": "/usr/bin:/bin"},
    )  # fmt: skip
    assert result.returncode == 2
    assert "MAGNETAR_CLUSTER_NAM (did you mean MAGNETAR_CLUSTER_NAME?)" in result.stderr


def test_zookeeper_init_without_zookeeper_exits_1_with_a_message() -> None:
    result = _init(f"zk://127.0.0.1:{free_port()}")
    assert result.returncode == 1
    assert "metadata store unavailable: cannot connect to ZooKeeper" in result.stderr
    assert "Traceback" not in result.stderr
