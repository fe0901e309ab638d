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
import sys
from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Subcommand:
    name: str
    help: str
    add_arguments: Callable[[argparse.ArgumentParser], None]
    run: Callable[[argparse.Namespace], int]


def _bookie_arguments(parser: argparse.ArgumentParser) -> None:
    from magnetar.bookie.main import build_parser

    build_parser(parser)


def _bookie_run(args: argparse.Namespace) -> int:
    from magnetar.bookie.main import main_with_args

    return main_with_args(args)


SUBCOMMANDS: list[Subcommand] = [
    Subcommand("bookie", "run a bookie (storage node)", _bookie_arguments, _bookie_run),
]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="magnetar", description="Magnetar server processes.")
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
