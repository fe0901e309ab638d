"""``magnetar cluster up|down|status|logs``: a local multi-container cluster (Docker SDK).

Owns: the cluster's layout (one ZooKeeper, N bookies, M brokers, each a container of the
``magnetar`` / ``magnetar-zookeeper`` images with host networking on distinct ports of one
loopback address), its container and volume names and labels, the start order (ZooKeeper,
the metadata init, bookies, brokers; each waited for until it answers its health endpoint
from the host) and tearing it down. For users without compose; ``deploy/compose.yaml`` is
the same cluster for those with it.
Must not know: broker or bookie internals (it speaks to them only through their images'
``MAGNETAR_*`` environment and their health endpoints). Only this module imports ``docker``.
"""

from __future__ import annotations

import argparse
import json
import socket
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

LABEL_CLUSTER = "io.magnetar.cluster"
LABEL_ROLE = "io.magnetar.role"
DATA = "/data"


class LauncherError(Exception):
    """The cluster could not be started or inspected (message for the operator)."""


@dataclass(frozen=True, slots=True)
class ClusterSpec:
    """Where every member of a cluster listens. Ports must be distinct: host networking."""

    name: str = "magnetar"
    address: str = "127.0.0.1"
    image: str = "magnetar:latest"
    zookeeper_image: str = "magnetar-zookeeper:latest"
    zookeeper_port: int = 2181
    bookie_ports: tuple[int, ...] = (3181, 3182, 3183)
    bookie_http_ports: tuple[int, ...] = (8001, 8002, 8003)
    # the bookies' fast add ports (docs/operations.md: plain TCP beside gRPC); () = gRPC only
    bookie_fast_add_ports: tuple[int, ...] = (3281, 3282, 3283)
    broker_ports: tuple[int, ...] = (6650, 6651)
    broker_web_ports: tuple[int, ...] = (8080, 8081)
    # Replication: E=Qw=Qa=2 by default (a cluster survives losing one of three bookies).
    ensemble_size: int = 2
    write_quorum: int = 2
    ack_quorum: int = 2
    # Extra MAGNETAR_* settings for every broker / bookie (e.g. session timeouts).
    broker_env: tuple[tuple[str, str], ...] = ()
    bookie_env: tuple[tuple[str, str], ...] = ()
    restart_policy: str = "unless-stopped"
    stop_timeout_s: int = 30
    labels: tuple[tuple[str, str], ...] = field(default=())

    def __post_init__(self) -> None:
        if len(self.bookie_ports) != len(self.bookie_http_ports):
            raise LauncherError("one HTTP port per bookie is needed")
        if self.bookie_fast_add_ports and len(self.bookie_fast_add_ports) != len(self.bookie_ports):
            raise LauncherError("one fast add port per bookie is needed (or none)")
        if len(self.broker_ports) != len(self.broker_web_ports):
            raise LauncherError("one web port per broker is needed")
        if not self.bookie_ports or not self.broker_ports:
            raise LauncherError("a cluster needs at least one bookie and one broker")
        if self.ensemble_size > len(self.bookie_ports):
            raise LauncherError(
                f"ensemble size {self.ensemble_size} > {len(self.bookie_ports)} bookies"
            )
        ports = [
            self.zookeeper_port,
            *self.bookie_ports,
            *self.bookie_http_ports,
            *self.bookie_fast_add_ports,
            *self.broker_ports,
            *self.broker_web_ports,
        ]
        if len(set(ports)) != len(ports):
            raise LauncherError(f"ports must be distinct (host networking): {ports}")

    @classmethod
    def from_base_ports(
        cls,
        *,
        bookies: int = 3,
        brokers: int = 2,
        zookeeper_port: int = 2181,
        bookie_port: int = 3181,
        bookie_http_port: int = 8001,
        bookie_fast_add_port: int = 3281,
        broker_port: int = 6650,
        web_port: int = 8080,
        **kwargs: Any,
    ) -> ClusterSpec:
        return cls(
            zookeeper_port=zookeeper_port,
            bookie_ports=tuple(bookie_port + i for i in range(bookies)),
            bookie_http_ports=tuple(bookie_http_port + i for i in range(bookies)),
            bookie_fast_add_ports=tuple(bookie_fast_add_port + i for i in range(bookies))
            if bookie_fast_add_port
            else (),
            broker_ports=tuple(broker_port + i for i in range(brokers)),
            broker_web_ports=tuple(web_port + i for i in range(brokers)),
            **kwargs,
        )

    # -- names ---------------------------------------------------------------------------

    @property
    def metadata_url(self) -> str:
        return f"zk://{self.address}:{self.zookeeper_port}"

    @property
    def zookeeper(self) -> str:
        return f"{self.name}-zookeeper"

    @property
    def init(self) -> str:
        return f"{self.name}-init"

    def bookie(self, index: int) -> str:
        return f"{self.name}-bookie-{index}"

    def broker(self, index: int) -> str:
        return f"{self.name}-broker-{index}"

    def volume(self, container: str) -> str:
        return f"{container}-data"

    def service_urls(self) -> list[str]:
        return [f"pulsar://{self.address}:{port}" for port in self.broker_ports]

    def web_urls(self) -> list[str]:
        return [f"http://{self.address}:{port}" for port in self.broker_web_ports]

    @property
    def service_url(self) -> str:
        """All brokers in one URL: the official client picks one and follows lookups."""
        return "pulsar://" + ",".join(f"{self.address}:{p}" for p in self.broker_ports)

    # -- container definitions ----------------------------------------------------------

    def _common_broker_env(self) -> dict[str, str]:
        return {
            "MAGNETAR_METADATA_STORE_URL": self.metadata_url,
            "MAGNETAR_CLUSTER_NAME": self.name,
            "MAGNETAR_MANAGED_LEDGER_DEFAULT_ENSEMBLE_SIZE": str(self.ensemble_size),
            "MAGNETAR_MANAGED_LEDGER_DEFAULT_WRITE_QUORUM": str(self.write_quorum),
            "MAGNETAR_MANAGED_LEDGER_DEFAULT_ACK_QUORUM": str(self.ack_quorum),
            **dict(self.broker_env),
        }

    def zookeeper_container(self) -> ContainerDef:
        return ContainerDef(
            name=self.zookeeper,
            role="zookeeper",
            image=self.zookeeper_image,
            command=["server"],
            environment={"ZOO_PORT": str(self.zookeeper_port), "ZOO_BIND_ADDRESS": self.address},
            volume=self.volume(self.zookeeper),
        )

    def init_container(self) -> ContainerDef:
        return ContainerDef(
            name=self.init,
            role="init",
            image=self.image,
            command=[
                "zookeeper-init",
                "--web-service-url",
                "http://" + ",".join(f"{self.address}:{p}" for p in self.broker_web_ports),
                "--broker-service-url",
                self.service_url,
            ],
            environment=self._common_broker_env(),
            volume=None,
            restart=False,
        )

    def bookie_container(self, index: int) -> ContainerDef:
        port = self.bookie_ports[index]
        return ContainerDef(
            name=self.bookie(index),
            role="bookie",
            image=self.image,
            command=["bookie"],
            environment={
                "MAGNETAR_BOOKIE_METADATA": self.metadata_url,
                "MAGNETAR_BOOKIE_HOST": self.address,
                "MAGNETAR_BOOKIE_PORT": str(port),
                "MAGNETAR_BOOKIE_HTTP_PORT": str(self.bookie_http_ports[index]),
                "MAGNETAR_BOOKIE_BOOKIE_ID": f"{self.address}:{port}",
                "MAGNETAR_BOOKIE_DATA_DIR": f"{DATA}/bookie",
                "MAGNETAR_BOOKIE_FAST_ADD_PORT": str(
                    self.bookie_fast_add_ports[index] if self.bookie_fast_add_ports else 0
                ),
                **dict(self.bookie_env),
            },
            volume=self.volume(self.bookie(index)),
        )

    def broker_container(self, index: int) -> ContainerDef:
        return ContainerDef(
            name=self.broker(index),
            role="broker",
            image=self.image,
            command=["broker"],
            environment={
                **self._common_broker_env(),
                "MAGNETAR_BIND_ADDRESS": self.address,
                "MAGNETAR_ADVERTISED_ADDRESS": self.address,
                "MAGNETAR_BROKER_SERVICE_PORT": str(self.broker_ports[index]),
                "MAGNETAR_WEB_SERVICE_PORT": str(self.broker_web_ports[index]),
            },
            volume=None,
        )

    def members(self) -> list[ContainerDef]:
        return [
            self.zookeeper_container(),
            *(self.bookie_container(i) for i in range(len(self.bookie_ports))),
            *(self.broker_container(i) for i in range(len(self.broker_ports))),
        ]

    def health_check(self, member: ContainerDef) -> Callable[[], bool]:
        """A check run from the host (host networking: the ports are local)."""
        return health_check(member.role, member.environment)


@dataclass(frozen=True, slots=True)
class ContainerDef:
    name: str
    role: str
    image: str
    command: list[str]
    environment: dict[str, str]
    volume: str | None
    restart: bool = True


# -- health probes from the host -----------------------------------------------------------


def _http_ok(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2) as response:
            return bool(response.status == 200)
    except (urllib.error.URLError, OSError):
        return False


def _bookie_ok(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2) as response:
            return bool(json.loads(response.read()).get("serving"))
    except (urllib.error.URLError, OSError, ValueError):
        return False


def _zookeeper_ok(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host, port), timeout=2) as sock:
            sock.sendall(b"ruok")
            return sock.recv(16) == b"imok"
    except OSError:
        return False


def health_check(role: str, env: dict[str, str]) -> Callable[[], bool]:
    """How the host asks a member (of ``role``, with its container ``env``) if it serves."""
    if role == "zookeeper":
        host = _local(env.get("ZOO_BIND_ADDRESS", "127.0.0.1"))
        port = int(env.get("ZOO_PORT", "2181"))
        return lambda: _zookeeper_ok(host, port)
    if role == "bookie":
        host = _local(env.get("MAGNETAR_BOOKIE_HOST", "127.0.0.1"))
        url = f"http://{host}:{env.get('MAGNETAR_BOOKIE_HTTP_PORT')}/health"
        return lambda: _bookie_ok(url)
    if role == "broker":
        host = _local(env.get("MAGNETAR_BIND_ADDRESS", "127.0.0.1"))
        web = env.get("MAGNETAR_WEB_SERVICE_PORT", "8080")
        return lambda: _http_ok(f"http://{host}:{web}/admin/v2/brokers/health")
    return lambda: True


def _local(host: str) -> str:
    return "127.0.0.1" if host in ("", "0.0.0.0") else host


def wait_until(check: Callable[[], bool], timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        if time.monotonic() > deadline:
            raise LauncherError(f"{what} not healthy within {timeout_s:.0f} s")
        time.sleep(0.25)  # polling interval of a deadline-bounded wait


# -- the launcher --------------------------------------------------------------------------


class Launcher:
    """Start, inspect and remove one cluster's containers through the Docker SDK."""

    def __init__(self, spec: ClusterSpec, client: Any = None) -> None:
        self.spec = spec
        try:
            import docker
            import docker.errors
        except ImportError as exc:
            raise LauncherError(
                "the Docker SDK is missing: pip install 'magnetar[deploy]'"
            ) from exc
        self._not_found: type[Exception] = docker.errors.NotFound
        if client is None:
            try:
                client = docker.from_env()
                client.ping()
            except Exception as exc:
                raise LauncherError(f"no Docker engine answers: {exc}") from exc
        self.client = client

    # -- containers ---------------------------------------------------------------------

    def containers(self) -> list[Any]:
        return list(
            self.client.containers.list(
                all=True, filters={"label": f"{LABEL_CLUSTER}={self.spec.name}"}
            )
        )

    def container(self, name: str) -> Any:
        return self.client.containers.get(name)

    def _labels(self, member: ContainerDef) -> dict[str, str]:
        return {LABEL_CLUSTER: self.spec.name, LABEL_ROLE: member.role, **dict(self.spec.labels)}

    def create(self, member: ContainerDef) -> Any:
        """Create (not start) ``member``; its named volume is created or reused."""
        volumes = {}
        if member.volume is not None:
            try:
                self.client.volumes.get(member.volume)
            except self._not_found:
                self.client.volumes.create(member.volume, labels={LABEL_CLUSTER: self.spec.name})
            volumes[member.volume] = {"bind": DATA, "mode": "rw"}
        return self.client.containers.create(
            member.image,
            member.command,
            name=member.name,
            environment=member.environment,
            labels=self._labels(member),
            network_mode="host",
            volumes=volumes,
            restart_policy={"Name": self.spec.restart_policy if member.restart else "no"},
            stop_signal="SIGTERM",
            detach=True,
        )

    def start_member(self, member: ContainerDef, timeout_s: float = 120) -> None:
        try:
            container = self.container(member.name)
        except self._not_found:
            container = self.create(member)
        container.reload()
        if container.status != "running":
            container.start()
        self.wait_healthy(member, timeout_s)

    def wait_healthy(self, member: ContainerDef, timeout_s: float = 120) -> None:
        check = self.spec.health_check(member)

        def healthy() -> bool:
            container = self.container(member.name)
            container.reload()
            if container.status == "exited" and not member.restart:
                raise LauncherError(f"{member.name} exited: {self._tail(container)}")
            return check()

        try:
            wait_until(healthy, timeout_s, member.name)
        except LauncherError as exc:
            raise LauncherError(f"{exc}\n{self._tail(self.container(member.name))}") from None

    @staticmethod
    def _tail(container: Any, lines: int = 30) -> str:
        return bytes(container.logs(tail=lines)).decode(errors="replace")

    def run_init(self, timeout_s: float = 120) -> None:
        member = self.spec.init_container()
        try:
            self.container(member.name).remove(force=True, v=True)
        except self._not_found:
            pass
        container = self.create(member)
        container.start()
        result = container.wait(timeout=timeout_s)
        logs = self._tail(container)
        container.remove(v=True)
        if result.get("StatusCode") != 0:
            raise LauncherError(f"metadata init failed ({result}): {logs}")

    # -- the commands -------------------------------------------------------------------

    def up(self, timeout_s: float = 180, progress: Callable[[str], None] | None = None) -> None:
        say = progress or (lambda _msg: None)
        spec = self.spec
        say(f"zookeeper {spec.zookeeper} on {spec.address}:{spec.zookeeper_port}")
        self.start_member(spec.zookeeper_container(), timeout_s)
        say("initialising cluster metadata")
        self.run_init(timeout_s)
        bookies = [spec.bookie_container(i) for i in range(len(spec.bookie_ports))]
        for member in bookies:
            say(f"bookie {member.name} on {member.environment['MAGNETAR_BOOKIE_BOOKIE_ID']}")
            self.start_member_no_wait(member)
        for member in bookies:
            self.wait_healthy(member, timeout_s)
        brokers = [spec.broker_container(i) for i in range(len(spec.broker_ports))]
        for member in brokers:
            say(f"broker {member.name} on {member.environment['MAGNETAR_BROKER_SERVICE_PORT']}")
            self.start_member_no_wait(member)
        for member in brokers:
            self.wait_healthy(member, timeout_s)
        say(f"cluster {spec.name} is up: service URL {spec.service_url}")

    def start_member_no_wait(self, member: ContainerDef) -> None:
        try:
            container = self.container(member.name)
        except self._not_found:
            container = self.create(member)
        container.reload()
        if container.status != "running":
            container.start()

    def down(self, *, volumes: bool = False) -> list[str]:
        """Stop (SIGTERM, then SIGKILL after the grace period) and remove every container;
        with ``volumes`` also the named volumes (the data)."""
        removed = []
        order = {"broker": 0, "init": 1, "bookie": 2, "zookeeper": 3}
        containers = sorted(
            self.containers(), key=lambda c: order.get(c.labels.get(LABEL_ROLE, ""), 9)
        )
        for container in containers:
            if container.status == "running":
                container.stop(timeout=self.spec.stop_timeout_s)
            container.remove(force=True, v=True)
            removed.append(container.name)
        if volumes:
            for volume in self.client.volumes.list(
                filters={"label": f"{LABEL_CLUSTER}={self.spec.name}"}
            ):
                volume.remove(force=True)
                removed.append(f"volume {volume.name}")
        return removed

    def status(self) -> list[dict[str, Any]]:
        rows = []
        for container in sorted(self.containers(), key=lambda c: str(c.name)):
            container.reload()
            state = container.attrs.get("State", {})
            env = dict(
                item.split("=", 1)
                for item in container.attrs.get("Config", {}).get("Env") or []
                if "=" in item
            )
            role = container.labels.get(LABEL_ROLE, "?")
            healthy = container.status == "running" and health_check(role, env)()
            rows.append(
                {
                    "name": container.name,
                    "role": role,
                    "status": container.status,
                    "exit_code": state.get("ExitCode"),
                    "health": state.get("Health", {}).get("Status", "-"),
                    "answers": healthy,
                }
            )
        return rows

    def logs(self, name: str | None = None, tail: int = 100) -> Iterator[tuple[str, str]]:
        for container in sorted(self.containers(), key=lambda c: str(c.name)):
            if name and name not in (
                container.name,
                container.name.removeprefix(f"{self.spec.name}-"),
            ):
                continue
            yield container.name, self._tail(container, tail)


# -- the command line ----------------------------------------------------------------------


def build_parser(parser: argparse.ArgumentParser | None = None) -> argparse.ArgumentParser:
    p = parser or argparse.ArgumentParser(prog="magnetar cluster")
    p.add_argument("action", choices=["up", "down", "status", "logs"])
    p.add_argument("service", nargs="?", help="logs: one container (e.g. bookie-0)")
    p.add_argument("--name", default="magnetar", help="cluster name (container name prefix)")
    p.add_argument("--address", default="127.0.0.1", help="loopback address every member binds")
    p.add_argument("--image", default="magnetar:latest")
    p.add_argument("--zookeeper-image", default="magnetar-zookeeper:latest")
    p.add_argument("--bookies", type=int, default=3)
    p.add_argument("--brokers", type=int, default=2)
    p.add_argument("--zookeeper-port", type=int, default=2181)
    p.add_argument("--bookie-port", type=int, default=3181, help="first bookie's (then +1)")
    p.add_argument("--bookie-http-port", type=int, default=8001, help="first bookie's (then +1)")
    p.add_argument(
        "--bookie-fast-add-port",
        type=int,
        default=3281,
        help="first bookie's fast add port (then +1); 0: brokers add over gRPC only",
    )
    p.add_argument("--broker-port", type=int, default=6650, help="first broker's (then +1)")
    p.add_argument("--web-port", type=int, default=8080, help="first broker's (then +1)")
    p.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="MAGNETAR_X=VALUE",
        help="a setting for every broker (MAGNETAR_*) or bookie (MAGNETAR_BOOKIE_*)",
    )
    p.add_argument("--volumes", action="store_true", help="down: remove the data volumes too")
    p.add_argument("--tail", type=int, default=100, help="logs: lines per container")
    p.add_argument("--json", action="store_true", help="status: JSON")
    p.add_argument("--timeout", type=float, default=180, help="up: seconds per member")
    return p


def spec_from_args(args: argparse.Namespace) -> ClusterSpec:
    broker_env: list[tuple[str, str]] = []
    bookie_env: list[tuple[str, str]] = []
    for item in args.set:
        key, sep, value = item.partition("=")
        if not sep or not key.startswith("MAGNETAR_"):
            raise LauncherError(f"--set expects MAGNETAR_NAME=VALUE, got {item!r}")
        (bookie_env if key.startswith("MAGNETAR_BOOKIE_") else broker_env).append((key, value))
    return ClusterSpec.from_base_ports(
        bookies=args.bookies,
        brokers=args.brokers,
        zookeeper_port=args.zookeeper_port,
        bookie_port=args.bookie_port,
        bookie_http_port=args.bookie_http_port,
        bookie_fast_add_port=args.bookie_fast_add_port,
        broker_port=args.broker_port,
        web_port=args.web_port,
        name=args.name,
        address=args.address,
        image=args.image,
        zookeeper_image=args.zookeeper_image,
        broker_env=tuple(broker_env),
        bookie_env=tuple(bookie_env),
        ensemble_size=min(2, args.bookies),
        write_quorum=min(2, args.bookies),
        ack_quorum=min(2, args.bookies),
    )


def main_with_args(args: argparse.Namespace) -> int:
    try:
        return _run_command(args)
    except LauncherError as exc:
        print(f"magnetar cluster: {exc}", file=sys.stderr)
        return 1
    except Exception as exc:  # the Docker SDK's errors (no such image, port in use, ...)
        if type(exc).__module__.startswith(("docker", "requests", "urllib3")):
            print(f"magnetar cluster: {type(exc).__name__}: {exc}", file=sys.stderr)
            return 1
        raise


def _run_command(args: argparse.Namespace) -> int:
    try:
        launcher = Launcher(spec_from_args(args))
        if args.action == "up":
            launcher.up(args.timeout, progress=lambda msg: print(msg, flush=True))
        elif args.action == "down":
            for name in launcher.down(volumes=args.volumes):
                print(f"removed {name}")
        elif args.action == "status":
            rows = launcher.status()
            if args.json:
                print(json.dumps(rows, indent=2))
            else:
                for row in rows:
                    print(
                        f"{row['name']:28s} {row['role']:10s} {row['status']:10s} "
                        f"health={row['health']} answers={row['answers']}"
                    )
                if not rows:
                    print(f"no containers of cluster {launcher.spec.name}")
        else:
            for name, text in launcher.logs(args.service, args.tail):
                print(f"==> {name} <==\n{text}")
    except LauncherError as exc:
        print(f"magnetar cluster: {exc}", file=sys.stderr)
        return 1
    return 0


__all__ = ["ClusterSpec", "ContainerDef", "Launcher", "LauncherError", "build_parser"]
