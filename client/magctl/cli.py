"""The command line: kubectl's grammar ``magctl <verb> <resource> [name...] [flags]``.

Owns: the argparse tree (every verb, its flags, global flags accepted before or after the
verb), kubectl-form usage errors (``error: unknown flag: --partitons``, exit 2) and ``run``,
which maps every failure to a one-line message and an exit code, never a traceback, and
``dispatch``, which imports the module of the parsed verb (``commands`` says which) only
then: verbs import HTTP, YAML and JSONPath when they run, so ``magctl --help`` and ``magctl
version --client`` start fast. Imports point one way: ``cli`` -> verb modules -> ``session``
-> transport; no verb module imports ``cli``. Must not know: REST paths.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from typing import IO, Any, NoReturn

from magnetar.client.magctl.commands import OPERATION_VERBS, TOOLING_VERBS, VERBS
from magnetar.client.magctl.errors import MagctlError, UnknownFlag, UsageError

DESCRIPTION = """magctl controls a Magnetar (or any Pulsar-compatible) cluster through its admin
REST API, with kubectl's grammar and Pulsar's nouns.

Basic commands:
  get            Display one or many resources (-o wide|json|yaml|name|jsonpath=|custom-columns=)
  describe       Show details of a resource: spec, policies and stats
  create         Create a tenant, namespace, topic or subscription
  delete         Delete resources by name, by label selector or --all
  edit           Edit a tenant, namespace or topic in $EDITOR; applied on save
  explain        Documentation of a manifest kind and its fields

Declarative:
  apply          Apply manifests (-f FILE|DIR|-) to the cluster; idempotent
  diff           Diff manifests against the live cluster (exit 0 same, 1 differ, >1 error)

Topic and subscription operations:
  unload         Unload a topic, a namespace or a bundle from its broker
  split          Split a namespace bundle (--algorithm, --boundaries)
  seek           Move a subscription's cursor (--to earliest|latest|L:E, --time 3h)
  skip           Skip N messages of a subscription
  clear          Clear a subscription's backlog
  expire         Expire messages older than a duration
  peek           Show messages of a subscription or a topic without consuming them
  compact        Compact a topic (--wait for the end)
  offload        Move a topic's sealed ledgers to tiered storage (--until, --wait)
  terminate      Terminate a topic: no more messages, ever (prints the last message id)
  truncate       Delete every message of a topic (all ledgers but the current one)
  scale          Grow a partitioned topic (--partitions N)
  lookup         The broker that serves a topic
  top            Rates, throughput and backlog of topics, subscriptions, bundles, brokers

Settings and tooling:
  api-resources  The resource types, with short names
  config         Contexts: get-contexts, use-context, current-context, set-context, view
  completion     Shell completion script for bash, zsh or fish
  version        Client and server versions

Usage:
  magctl <verb> <resource> [name...] [-n tenant/namespace] [flags]
"""


class Parser(argparse.ArgumentParser):
    """argparse with kubectl's error wording: errors raise ``UsageError`` (exit 2)."""

    def error(self, message: str) -> NoReturn:
        if message.startswith("unrecognized arguments: "):
            extras = message[len("unrecognized arguments: ") :].split()
            flag = next((e for e in extras if e.startswith("-")), None)
            if flag is not None:
                raise UnknownFlag(flag.split("=")[0])
            raise UsageError(
                f"unexpected argument(s): {' '.join(extras)}\nSee '{self.prog} --help' for usage."
            )
        if message.startswith("the following arguments are required: resource"):
            verb = self.prog.removeprefix("magctl ")
            raise UsageError(
                f'You must specify the type of resource to {verb}. Use "magctl api-resources" '
                "for a complete list of supported resources."
            )
        if message.startswith("argument <verb>: invalid choice: "):
            verb = message.split("invalid choice: ", 1)[1].split(" (choose", 1)[0].strip("'")
            raise UsageError(
                f'unknown command "{verb}" for "magctl"\nRun \'magctl --help\' for usage.'
            )
        if message.startswith("argument ") and ": invalid choice: " in message:
            head, _, rest = message.partition(": invalid choice: ")
            raise UsageError(f"{head.removeprefix('argument ')}: invalid value {rest}")
        raise UsageError(f"{message}\nSee '{self.prog} --help' for usage.")

    def exit(self, status: int = 0, message: str | None = None) -> NoReturn:
        if message:
            sys.stderr.write(message)
        raise SystemExit(status)


def _globals(with_namespace: bool = True) -> Parser:
    """Flags every verb takes; defaults are SUPPRESS so a later parser cannot reset them."""
    p = Parser(add_help=False, argument_default=argparse.SUPPRESS, allow_abbrev=False)
    g = p.add_argument_group("global flags")
    if with_namespace:
        g.add_argument("-n", "--namespace", help="tenant/namespace to work in")
    else:
        g.add_argument("--namespace", help="tenant/namespace to work in")
    g.add_argument("--context", help="the context of the config file to use")
    g.add_argument(
        "-s",
        "--admin-url",
        "--server",
        dest="admin_url",
        help="admin REST URL (overrides the context)",
    )
    g.add_argument("--token", help="bearer token (overrides the context)")
    g.add_argument("--username", help="basic authentication user (overrides the context)")
    g.add_argument("--password", help="basic authentication password (with --username)")
    g.add_argument("--request-timeout", type=float, help="seconds per request (default 30)")
    return p


def _sub(subs: Any, name: str, help_: str, *, namespace_flag: bool = True) -> Parser:
    p: Parser = subs.add_parser(
        name, help=help_, description=help_, parents=[_globals(namespace_flag)], allow_abbrev=False
    )
    p.prog = f"magctl {name}"
    return p


def _resource_args(p: Parser, *, names: bool = True) -> None:
    p.add_argument("resource", help="TYPE, TYPE/NAME or TYPE NAME... (see api-resources)")
    if names:
        p.add_argument("names", nargs="*", help="names (all when none)")
    p.add_argument("--topic", "-t", help="the topic of subscriptions, partitions or ledgers")


def _resource_verbs(subs: argparse._SubParsersAction[Parser]) -> None:
    """get, describe, create, delete, edit: one resource type and names."""
    p = _sub(subs, "get", "Display one or many resources")
    _resource_args(p)
    p.add_argument(
        "-o", "--output", help="table|wide|json|yaml|name|jsonpath=...|custom-columns=..."
    )
    p.add_argument("--no-headers", action="store_true", help="no header row in tables")
    p.add_argument("--sort-by", help="a JSONPath, e.g. .status.backlog")
    p.add_argument("-l", "--selector", help="label selector, e.g. team=pay,tier!=test")
    p.add_argument("-w", "--watch", action="store_true", help="keep printing changes")
    p.add_argument("--watch-interval", type=float, default=2.0, help="seconds between polls")

    p = _sub(subs, "describe", "Show details of a resource")
    _resource_args(p)

    p = _sub(subs, "create", "Create a resource")
    _resource_args(p)
    p.add_argument("-p", "--partitions", type=int, default=0, help="topics: partitions")
    p.add_argument("--bundles", type=int, help="namespaces: number of bundles")
    p.add_argument("--admin-roles", help="tenants: comma-separated roles")
    p.add_argument("--allowed-clusters", help="tenants: comma-separated clusters")
    p.add_argument("--url", help="clusters: the admin URL, http://host:8080")
    p.add_argument("--url-tls", help="clusters: the HTTPS admin URL, https://host:8443")
    p.add_argument("--broker-url", help="clusters: the service URL, pulsar://host:6650")
    p.add_argument("--broker-url-tls", help="clusters: the TLS service URL, pulsar+ssl://...")
    p.add_argument(
        "--position", default="latest", help="subscriptions: earliest, latest or LEDGER:ENTRY"
    )

    p = _sub(subs, "delete", "Delete resources")
    _resource_args(p)
    p.add_argument("--force", action="store_true", help="also when in use")
    p.add_argument("--all", action="store_true", help="every resource of the type in scope")
    p.add_argument("-l", "--selector", help="label selector")

    p = _sub(subs, "edit", "Edit a resource in $EDITOR (MAGCTL_EDITOR, EDITOR, vi)")
    _resource_args(p)


def _manifest_verbs(subs: argparse._SubParsersAction[Parser]) -> None:
    """apply and diff: manifests from files, folders or stdin."""
    for verb, help_ in (
        ("apply", "Apply manifests to the cluster"),
        ("diff", "Diff manifests against the live cluster"),
    ):
        p = _sub(subs, verb, help_)
        p.add_argument(
            "-f", "--filename", action="append", required=True, help="FILE, DIR or - (repeatable)"
        )
        if verb == "apply":
            p.add_argument(
                "--prune",
                action="store_true",
                help="delete topics and namespaces matching -l that the manifests "
                "no longer name (in the namespaces and tenants they touch)",
            )
            p.add_argument("-l", "--selector", help="label selector for --prune")
            p.add_argument(
                "--dry-run",
                nargs="?",
                const="client",
                default="none",
                choices=("none", "client", "server"),
                help="client|server: print what would change, change nothing",
            )


def _discovery_verbs(subs: argparse._SubParsersAction[Parser]) -> None:
    """explain and api-resources: answered without a server."""
    p = _sub(subs, "explain", "Documentation of a kind and its fields")
    p.add_argument("target", help="KIND or KIND.field.path")

    p = _sub(subs, "api-resources", "The resource types")
    p.add_argument("-o", "--output", help="wide|name")
    p.add_argument("--no-headers", action="store_true")


def _bundle_verbs(subs: argparse._SubParsersAction[Parser]) -> None:
    """unload (topics, namespaces, bundles) and split (bundles)."""
    p = _sub(subs, "unload", "Unload a topic, namespace or bundle")
    _resource_args(p)

    p = _sub(subs, "split", "Split a namespace bundle")
    _resource_args(p)
    p.add_argument(
        "--algorithm",
        default=None,
        choices=(
            "range_equally_divide",
            "topic_count_equally_divide",
            "specified_positions_divide",
            "flow_or_qps_equally_divide",
        ),
        help="default: specified_positions_divide with --boundaries, else the "
        "broker's default (range_equally_divide)",
    )
    p.add_argument("--boundaries", help="comma-separated hash boundaries (0x... or decimal)")
    p.add_argument(
        "--unload",
        action="store_true",
        help="unload both halves (their clients move; the leader places them)",
    )


def _cursor_and_topic_verbs(subs: argparse._SubParsersAction[Parser]) -> None:
    """seek, skip, clear, expire (subscriptions); peek, lookup, compact, offload, terminate,
    truncate, scale (topics)."""
    p = _sub(subs, "seek", "Move a subscription's cursor")
    _resource_args(p)
    g = p.add_mutually_exclusive_group(required=True)
    g.add_argument("--to", help="earliest, latest or LEDGER:ENTRY")
    g.add_argument("--time", help="a duration back from now (3h) or epoch milliseconds")

    p = _sub(subs, "skip", "Skip messages of a subscription")
    _resource_args(p)
    p.add_argument("--count", type=int, required=True, help="messages to skip")

    p = _sub(subs, "clear", "Clear a subscription's backlog")
    _resource_args(p)

    p = _sub(subs, "expire", "Expire a subscription's messages older than a duration")
    _resource_args(p)
    p.add_argument("--older-than", required=True, help="a duration, e.g. 2h")

    p = _sub(subs, "peek", "Show messages without consuming them", namespace_flag=False)
    _resource_args(p)
    p.add_argument("-n", "--count", type=int, default=1, help="messages to show")
    p.add_argument("--position", default="earliest", help="topics: earliest or latest")
    p.add_argument("-o", "--output", help="json|yaml")

    p = _sub(subs, "lookup", "The broker serving a topic")
    _resource_args(p)
    p.add_argument("-o", "--output", help="json|yaml")

    p = _sub(subs, "compact", "Compact a topic")
    _resource_args(p)
    p.add_argument("--wait", action="store_true", help="wait until compaction ends")
    p.add_argument("--timeout", type=float, default=300.0, help="seconds to wait at most")

    p = _sub(subs, "offload", "Move a topic's sealed ledgers to tiered storage")
    _resource_args(p)
    p.add_argument(
        "--until",
        help="offload every ledger before this message's (L:E); default: every sealed ledger",
    )
    p.add_argument("--wait", action="store_true", help="wait until the offload ends")
    p.add_argument("--timeout", type=float, default=600.0, help="seconds to wait at most")

    p = _sub(subs, "terminate", "Terminate a topic: no more messages, ever")
    _resource_args(p)
    p.add_argument("-o", "--output", help="json|yaml")

    p = _sub(subs, "truncate", "Delete every message of a topic")
    _resource_args(p)

    p = _sub(subs, "scale", "Grow a partitioned topic")
    _resource_args(p)
    p.add_argument("--partitions", type=int, required=True)


def _top_verb(subs: argparse._SubParsersAction[Parser]) -> None:
    """top: rates, throughput and backlog, refreshed."""
    p = _sub(subs, "top", "Rates, throughput and backlog, refreshed")
    p.add_argument("resource", help="topics, subscriptions, bundles or brokers")
    p.add_argument("--topic", "-t", help="subscriptions of this topic only")
    p.add_argument("--once", action="store_true", help="print once and exit (for scripts)")
    p.add_argument("--interval", type=float, default=2.0, help="seconds between refreshes")
    p.add_argument(
        "--sort-by",
        default="rate-in",
        help="rate-in, rate-out, throughput-in, backlog or replication-backlog",
    )


def _config_verb(subs: argparse._SubParsersAction[Parser]) -> None:
    """config: the contexts of the config file."""
    p = _sub(subs, "config", "Contexts of the config file")
    csub = p.add_subparsers(
        dest="config_verb", metavar="<subcommand>", parser_class=Parser, required=True
    )
    csub.add_parser("get-contexts", help="list contexts", parents=[_globals()])
    csub.add_parser("current-context", help="print the current context", parents=[_globals()])
    c = csub.add_parser("use-context", help="set the current context", parents=[_globals()])
    c.add_argument("name")
    c = csub.add_parser("set-context", help="create or change a context", parents=[_globals(False)])
    c.add_argument("name", nargs="?")
    c.add_argument("--current", action="store_true", help="change the current context")
    c.add_argument("--cluster")
    c.add_argument("--user")
    c.add_argument(
        "--ns", "-n", dest="ctx_namespace", help="default tenant/namespace (or --namespace)"
    )
    c.add_argument("--service-url")
    c.add_argument("--token-file")
    c.add_argument("--certificate-authority", help="CA bundle (PEM) to verify the admin URL")
    c.add_argument(
        "--insecure-skip-tls-verify",
        action="store_true",
        help="do not verify the admin URL's certificate",
    )
    c = csub.add_parser("view", help="print the merged config", parents=[_globals()])
    c.add_argument("--raw", action="store_true", help="show tokens")
    c.add_argument("--minify", action="store_true", help="only the current context")
    c = csub.add_parser(
        "import", help="add a context from a Pulsar client.conf", parents=[_globals()]
    )
    c.add_argument("file", help="path of client.conf")
    c.add_argument("--name", default="imported", help="the context's name")
    for cp in csub.choices.values():
        cp.prog = f"magctl config {cp.prog.split()[-1]}"


def _tooling_verbs(subs: argparse._SubParsersAction[Parser]) -> None:
    """completion and version."""
    p = _sub(subs, "completion", "Shell completion script")
    p.add_argument("shell", choices=("bash", "zsh", "fish"))

    p = _sub(subs, "version", "Client and server versions")
    p.add_argument("--client", action="store_true", help="client version only")
    p.add_argument("-o", "--output", help="json|yaml")


def build() -> Parser:
    parser = Parser(
        prog="magctl",
        description=DESCRIPTION,
        allow_abbrev=False,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        parents=[_globals()],
        usage="magctl <verb> <resource> [name...] [flags]",
    )
    subs = parser.add_subparsers(dest="verb", metavar="<verb>", parser_class=Parser)

    _resource_verbs(subs)
    _manifest_verbs(subs)
    _discovery_verbs(subs)
    _bundle_verbs(subs)
    _top_verb(subs)
    _cursor_and_topic_verbs(subs)
    _config_verb(subs)
    _tooling_verbs(subs)
    return parser


def verb_flags(parser: argparse.ArgumentParser) -> dict[str, list[str]]:
    """Every flag each verb takes (``""``: the flags before any verb; ``"config
    set-context"``: a verb's subcommand), for completion."""

    def flags_of(p: argparse.ArgumentParser) -> list[str]:
        return sorted({o for a in p._actions for o in a.option_strings})

    def subcommands(p: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
        out: dict[str, argparse.ArgumentParser] = {}
        for action in p._actions:
            if isinstance(action, argparse._SubParsersAction):
                out.update(action.choices)
        return out

    table = {"": flags_of(parser)}
    for name, sub in subcommands(parser).items():
        table[name] = flags_of(sub)
        for sub_name, subsub in subcommands(sub).items():
            table[f"{name} {sub_name}"] = flags_of(subsub)
    return table


def dispatch(args: argparse.Namespace, out: IO[str], err: IO[str]) -> int:
    """Run the parsed verb; its module loads only now (start-up stays fast)."""
    verb = args.verb
    if verb in TOOLING_VERBS:
        from magnetar.client.magctl import tooling

        flags = verb_flags(build()) if verb == "completion" else {}
        return tooling.run(verb, args, out, err, flags=flags)
    if verb in OPERATION_VERBS:
        from magnetar.client.magctl import operations

        return operations.run(verb, args, out=out, err=err)
    if verb == "top":
        from magnetar.client.magctl import top
        from magnetar.client.magctl.session import open_session

        session = open_session(args)
        return top.run(args, session.api, session.scope, out)
    from magnetar.client.magctl import verbs

    return verbs.run(verb, args, out, err)


def run(
    argv: Sequence[str] | None = None, *, out: IO[str] | None = None, err: IO[str] | None = None
) -> int:
    """Parse and run one command; the exit code (0 ok, 1 failed, 2 usage)."""
    out = out if out is not None else sys.stdout
    err = err if err is not None else sys.stderr
    args_list = list(sys.argv[1:] if argv is None else argv)
    try:
        parser = build()
        if not args_list:
            parser.print_help(out)
            return 0
        try:
            args = parser.parse_args(args_list)
        except SystemExit as exc:  # --help
            return int(exc.code or 0)
        if args.verb is None:  # global flags only
            parser.print_help(out)
            return 0
        return dispatch(args, out, err)
    except MagctlError as exc:
        err.write(exc.render().rstrip("\n") + "\n")
        return exc.exit_code
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        try:
            sys.stdout = open(os.devnull, "w")  # noqa: SIM115 - stdout is gone
        except OSError:
            pass
        return 0
    except Exception as exc:
        if os.environ.get("MAGCTL_DEBUG"):
            raise
        err.write(
            f"error: internal error: {type(exc).__name__}: {exc} "
            "(MAGCTL_DEBUG=1 shows the traceback)\n"
        )
        return 1


__all__ = ["VERBS", "Parser", "build", "dispatch", "run", "verb_flags"]
