"""The deploy tier's set-up: a Docker engine, the images (built once per run), a cluster.

``images`` runs ``deploy/build-images.sh`` once per test run: it installs and starts the
engine when missing, makes the Debian base once and rebuilds the images from cached layers
(only the project's wheel layer changes between runs). ``cluster`` brings up one small
cluster for the tier through the Docker SDK launcher (``magnetar cluster``): one ZooKeeper,
three bookies (E=Qw=Qa=2) and two brokers, each a container with host networking on free
ports of 127.0.0.1, and removes it (containers and volumes) at the end.
"""

from __future__ import annotations

import os
import pathlib
import shutil
import subprocess
import sys
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from support.containers import free_ports

from magnetar.launcher import ClusterSpec, Launcher

ROOT = pathlib.Path(__file__).resolve().parents[2]
IMAGE_TAG = "latest"


def _engine_missing_reason() -> str | None:
    if os.geteuid() != 0 and shutil.which("sudo") is None and shutil.which("dockerd") is None:
        return "no Docker engine and no way to install one (not root, no sudo)"
    return None


@pytest.fixture(scope="session")
def docker_client() -> Any:
    reason = _engine_missing_reason()
    if reason is not None:
        pytest.skip(reason)
    import docker

    return docker


@pytest.fixture(scope="session")
def images(docker_client: Any) -> dict[str, str]:
    """Build (or re-use the cached layers of) magnetar and magnetar-zookeeper, once per run;
    ``make test`` builds them just before (``MAGNETAR_TEST_IMAGES_BUILT=1``)."""
    built = {"magnetar": f"magnetar:{IMAGE_TAG}", "zookeeper": f"magnetar-zookeeper:{IMAGE_TAG}"}
    if os.environ.get("MAGNETAR_TEST_IMAGES_BUILT"):
        client = docker_client.from_env(timeout=300)
        for image in built.values():
            client.images.get(image)  # raises when missing
        return built
    env = {**os.environ, "PYTHON": sys.executable, "TAG": IMAGE_TAG}
    result = subprocess.run(
        [str(ROOT / "deploy" / "build-images.sh")],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=1200,
        check=False,
    )
    assert result.returncode == 0, f"image build failed:\n{result.stdout}\n{result.stderr}"
    return built


@pytest.fixture(scope="session")
def engine(images: dict[str, str], docker_client: Any) -> Any:
    client = docker_client.from_env(timeout=300)  # a loaded machine can be slow to answer
    client.ping()
    return client


def make_spec(images: dict[str, str], *, bookies: int = 3, brokers: int = 2) -> ClusterSpec:
    ports = free_ports(1 + 3 * bookies + 2 * brokers)
    return ClusterSpec(
        name=f"mt-{uuid.uuid4().hex[:8]}",
        address="127.0.0.1",
        image=images["magnetar"],
        zookeeper_image=images["zookeeper"],
        zookeeper_port=ports[0],
        bookie_ports=ports[1 : 1 + bookies],
        bookie_http_ports=ports[1 + bookies : 1 + 2 * bookies],
        bookie_fast_add_ports=ports[1 + 2 * bookies : 1 + 3 * bookies],
        broker_ports=ports[1 + 3 * bookies : 1 + 3 * bookies + brokers],
        broker_web_ports=ports[1 + 3 * bookies + brokers :],
        # A killed broker's bundles move once its ZooKeeper session expires.
        broker_env=(("MAGNETAR_METADATA_STORE_SESSION_TIMEOUT_MILLIS", "6000"),),
        bookie_env=(("MAGNETAR_BOOKIE_GC_INTERVAL_S", "600"),),
        stop_timeout_s=30,
    )


@pytest.fixture(scope="module")
def cluster(images: dict[str, str], engine: Any) -> Iterator[Launcher]:
    """The compose-like cluster of test_cluster.py, down at the end of that module: left up
    for the whole session it ran beside every later tier, and its five containers'
    healthchecks (a Python process each every 10 s; slower than their timeout on a loaded
    machine, so the containers turned unhealthy) took about half the machine from them (a CI
    run: 46 min of user CPU against 18, and a load-balancer test that sheds by CPU failed)."""
    launcher = Launcher(make_spec(images), client=engine)
    try:
        launcher.up(timeout_s=180)
        yield launcher
    finally:
        launcher.down(volumes=True)
