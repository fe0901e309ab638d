"""The ``magnetar`` server command: one argparse dispatcher for every server process.

Owns: the subcommand table. Each subcommand is one ``Subcommand`` entry: a name, a help line,
a function adding its flags to a sub-parser, and a function running it with the parsed args
(returning the exit code). The implementation module is imported only when its subcommand
runs, so ``magnetar bookie`` never imports broker code and vice versa.

Adding a subcommand (broker, standalone, zookeeper-init, ...): write its ``add_arguments``
and ``run`` (lazily importing the implementation) and append one ``Subcommand`` to
``SUBCOMMANDS``.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from magnetar.broker.config import BrokerConfig


@dataclass(frozen=True, slots=True)
class Subcommand:
    name: str
    help: str
    add_arguments: Callable[[argparse.ArgumentParser], None]
    run: Callable[[argparse.Namespace], int]


def _bookie_arguments(parser: argparse.ArgumentParser) -> None:
    from magnetar.bookie.main import build_parser
    from magnetar.broker.autorecovery_main import add_bookie_action_arguments

    build_parser(parser)
    add_bookie_action_arguments(parser)


def _bookie_run(args: argparse.Namespace) -> int:
    """Run a bookie with its auto-recovery daemon, or a decommission/recover action."""
    import asyncio

    from magnetar.bookie.main import main_with_args
    from magnetar.broker.autorecovery_main import bookie_sidecar, run_bookie_action

    if args.action:
        logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
        return asyncio.run(run_bookie_action(args))
    return main_with_args(args, sidecar=bookie_sidecar)


def _autorecovery_arguments(parser: argparse.ArgumentParser) -> None:
    from magnetar.broker.autorecovery_main import add_autorecovery_arguments

    add_autorecovery_arguments(parser)


def _autorecovery_run(args: argparse.Namespace) -> int:
    import asyncio

    from magnetar.broker.autorecovery_main import run_autorecovery
    from magnetar.broker.runtime import setup_logging

    setup_logging(args.log_level)
    _install_uvloop()
    return asyncio.run(run_autorecovery(args))


def _broker_common(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config", help="broker.conf-style key=value file or YAML")
    parser.add_argument("--port", type=int, help="binary protocol port (default 6650)")
    parser.add_argument("--web-port", type=int, help="HTTP admin/lookup port (default 8080)")
    parser.add_argument("--bind-address", help="address to listen on (default 127.0.0.1)")
    parser.add_argument(
        "--advertised-address", help="host name given to clients in lookups (default localhost)"
    )
    parser.add_argument(
        "--log-level",
        default=os.environ.get("MAGNETAR_LOG_LEVEL", "INFO"),
        help="DEBUG, INFO, WARNING, ... (default: $MAGNETAR_LOG_LEVEL or INFO)",
    )


def _broker_config(args: argparse.Namespace, **extra: object) -> BrokerConfig:
    from magnetar.broker.config import BrokerConfig

    return BrokerConfig.load(
        args.config,
        environ=os.environ,
        broker_service_port=args.port,
        web_service_port=args.web_port,
        bind_address=args.bind_address,
        advertised_address=args.advertised_address,
        **extra,
    )


def _broker_arguments(parser: argparse.ArgumentParser) -> None:
    _broker_common(parser)
    parser.add_argument(
        "--metadata", help="metadata store URL, e.g. zk://127.0.0.1:2181 (or metadata_store_url)"
    )
    parser.add_argument("--cluster-name", help="cluster name (default standalone)")
    _configuration_store_argument(parser)


def _configuration_store_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--configuration-metadata-store",
        help="the configuration store shared by the clusters of an instance (clusters, "
        "tenants, policies), e.g. zk://127.0.0.1:2181/global "
        "(or configuration_metadata_store_url; default: the metadata store)",
    )


def _broker_run(args: argparse.Namespace) -> int:
    import asyncio

    from magnetar.broker.runtime import run_broker, setup_logging

    setup_logging(args.log_level)
    try:
        config = _broker_config(
            args,
            metadata_store_url=args.metadata,
            cluster_name=args.cluster_name,
            configuration_metadata_store_url=args.configuration_metadata_store,
        )
    except (ValueError, OSError) as exc:
        print(f"magnetar broker: configuration error: {exc}", file=sys.stderr)
        return 2
    problem = _shared_metadata_problem(config.metadata_store_url)
    if problem is None and config.configuration_metadata_store_url:
        problem = _shared_metadata_problem(config.configuration_metadata_store_url)
    if problem is not None:
        print(f"magnetar broker: {problem}", file=sys.stderr)
        return 2
    _log_effective(config, args.config)
    _exit_0_on_sigterm()
    _install_uvloop()
    return asyncio.run(run_broker(config))


def _shared_metadata_problem(url: str) -> str | None:
    """Why a broker cannot run on the metadata store ``url`` (None: it can).

    A broker finds its bookies, and the other brokers, in a metadata store shared between
    processes; an in-process ``memory://`` store (the default of ``metadata_store_url``) is
    seen by nobody else, so no bookie could ever register there and every topic would fail.
    """
    if url.startswith(("zk://", "embedded://")):
        return None
    if url.startswith("memory://"):
        return (
            f"no shared metadata store (metadata_store_url is {url}, private to this "
            "process: no bookie can register in it). Pass --metadata zk://HOST:PORT[/root], "
            "the ZooKeeper the bookies registered in; or run `magnetar standalone` for "
            "everything in one command"
        )
    return f"metadata store URL {url!r}: a broker needs zk://HOST:PORT[/root] (or embedded://)"


def _standalone_arguments(parser: argparse.ArgumentParser) -> None:
    _broker_common(parser)
    parser.add_argument("--data-dir", default="data/standalone", help="all state lives here")
    parser.add_argument("--cluster-name", help="cluster name (default standalone)")
    parser.add_argument("--bookies", type=int, default=1, help="bookie processes to run")
    parser.add_argument(
        "--bookie-port", type=int, default=3181, help="first bookie's port (then +1 each)"
    )
    parser.add_argument(
        "--bookie-http-port",
        type=int,
        default=0,
        help="first bookie's HTTP port for /metrics and /health (then +1 each; "
        "BookKeeper's default is 8000; 0 = none)",
    )
    parser.add_argument(
        "--bookie-fast-add-port",
        type=int,
        default=None,
        help="first bookie's fast add port (then +1 each; 0 = none; default: a free port "
        "per bookie when bookkeeper_fast_add_enabled, the default)",
    )


def _standalone_run(args: argparse.Namespace) -> int:
    import asyncio

    from magnetar.broker.runtime import setup_logging
    from magnetar.broker.standalone import run_standalone

    setup_logging(args.log_level)
    try:
        config = _broker_config(args, cluster_name=args.cluster_name)
    except (ValueError, OSError) as exc:
        print(f"magnetar standalone: configuration error: {exc}", file=sys.stderr)
        return 2
    _log_effective(config, args.config)
    _exit_0_on_sigterm()
    _install_uvloop()
    return asyncio.run(
        run_standalone(
            args.data_dir,
            config,
            num_bookies=args.bookies,
            bookie_port=args.bookie_port,
            log_level=args.log_level,
            bookie_http_port=args.bookie_http_port,
            bookie_fast_add_port=args.bookie_fast_add_port,
        )
    )


def _tokens_arguments(parser: argparse.ArgumentParser) -> None:
    from magnetar.broker.tokens_cli import add_arguments

    add_arguments(parser)


def _tokens_run(args: argparse.Namespace) -> int:
    from magnetar.broker.tokens_cli import run

    return run(args)


def _log_effective(config: BrokerConfig, path: str | None = None) -> None:
    """The effective configuration, then once each key of the config file accepted without
    a setting of its own and why (a WARNING where it names something not served)."""
    from magnetar import settings

    logger = logging.getLogger("magnetar.broker")
    logger.info("%s", config.effective_config_line())
    if path is None:
        return
    known = settings.field_types(type(config))
    values = settings.read_config_file(path)
    for accepted in settings.accepted_keys(settings.BROKER, values, known):
        line = settings.accepted_log_lines(settings.BROKER, [accepted])[0]
        logger.log(logging.WARNING if accepted.row.warn else logging.INFO, "%s", line)


def _init_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config", help="broker.conf-style key=value file or YAML")
    parser.add_argument("--metadata", help="metadata store URL, e.g. zk://127.0.0.1:2181")
    parser.add_argument("--cluster-name", help="cluster name (default standalone)")
    _configuration_store_argument(parser)
    parser.add_argument(
        "--web-service-url", help="the cluster's HTTP URL (default from the broker settings)"
    )
    parser.add_argument(
        "--broker-service-url", help="the cluster's pulsar:// URL (default from the settings)"
    )
    parser.add_argument(
        "--log-level", default=os.environ.get("MAGNETAR_LOG_LEVEL", "INFO"), help="log level"
    )


def _init_run(args: argparse.Namespace) -> int:
    import asyncio

    from magnetar.broker.config import BrokerConfig
    from magnetar.broker.runtime import initialize_metadata, setup_logging

    setup_logging(args.log_level)
    try:
        config = BrokerConfig.load(
            args.config,
            environ=os.environ,
            metadata_store_url=args.metadata,
            cluster_name=args.cluster_name,
            configuration_metadata_store_url=args.configuration_metadata_store,
        )
    except (ValueError, OSError) as exc:
        print(f"magnetar zookeeper-init: configuration error: {exc}", file=sys.stderr)
        return 2
    from magnetar.zk.errors import MetadataError

    try:
        return asyncio.run(
            initialize_metadata(
                config,
                web_service_url=args.web_service_url or config.web_service_url,
                broker_service_url=args.broker_service_url or config.service_url,
            )
        )
    except (MetadataError, OSError, TimeoutError) as exc:
        # Exit 1: a Kubernetes Job / compose restarts it until ZooKeeper answers.
        print(f"magnetar zookeeper-init: metadata store unavailable: {exc}", file=sys.stderr)
        return 1


def _healthcheck_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--pid", type=int, default=1, help="the server process to check (default 1: a container)"
    )
    parser.add_argument("--timeout", type=float, default=5.0, help="seconds (default 5)")


def _healthcheck_run(args: argparse.Namespace) -> int:
    from magnetar.broker.healthcheck import check_process

    roles = {sub.name for sub in SUBCOMMANDS}
    ok, detail = check_process(args.pid, roles, build_parser, timeout_s=args.timeout)
    print(detail)
    return 0 if ok else 1


def _cluster_arguments(parser: argparse.ArgumentParser) -> None:
    from magnetar.launcher import build_parser as launcher_parser

    launcher_parser(parser)


def _cluster_run(args: argparse.Namespace) -> int:
    from magnetar.launcher import main_with_args

    return main_with_args(args)


def _exit_0_on_sigterm() -> None:
    """Until the event loop installs its own handlers: SIGTERM exits 0 (as PID 1 of a
    container an unhandled SIGTERM would be ignored until the SIGKILL)."""
    import signal

    def stop(signum: int, frame: object) -> None:
        raise SystemExit(0)

    signal.signal(signal.SIGTERM, stop)


def _install_uvloop() -> None:
    try:
        import uvloop
    except ImportError:
        return
    uvloop.install()


SUBCOMMANDS: list[Subcommand] = [
    Subcommand("bookie", "run a bookie (storage node)", _bookie_arguments, _bookie_run),
    Subcommand(
        "autorecovery",
        "run the auditor and a replication worker (without a bookie)",
        _autorecovery_arguments,
        _autorecovery_run,
    ),
    Subcommand(
        "broker", "run a broker against a ZooKeeper cluster", _broker_arguments, _broker_run
    ),
    Subcommand(
        "standalone",
        "run a whole Magnetar (metadata, bookies, broker) in one command",
        _standalone_arguments,
        _standalone_run,
    ),
    Subcommand(
        "tokens",
        "create keys and JSON Web Tokens for token authentication (Pulsar's `pulsar tokens`)",
        _tokens_arguments,
        _tokens_run,
    ),
    Subcommand(
        "zookeeper-init",
        "initialise a cluster's metadata (cluster, public tenant, public/default) once",
        _init_arguments,
        _init_run,
    ),
    Subcommand(
        "healthcheck",
        "exit 0 when the server process of this container is healthy (the image's HEALTHCHECK)",
        _healthcheck_arguments,
        _healthcheck_run,
    ),
    Subcommand(
        "cluster",
        "a local multi-container cluster through the Docker SDK: up, down, status, logs",
        _cluster_arguments,
        _cluster_run,
    ),
]


def build_parser() -> argparse.ArgumentParser:
    from magnetar import __version__

    parser = argparse.ArgumentParser(prog="magnetar", description="Magnetar server processes.")
    parser.add_argument("--version", action="version", version=f"magnetar {__version__}")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for sub in SUBCOMMANDS:
        sp = subparsers.add_parser(sub.name, help=sub.help, description=sub.help)
        sub.add_arguments(sp)
        sp.set_defaults(_run=sub.run)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    run: Callable[[argparse.Namespace], int] = args._run
    return run(args)


if __name__ == "__main__":
    sys.exit(main())
