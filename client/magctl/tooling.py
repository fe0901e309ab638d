"""Tooling verbs: ``config`` (contexts), ``completion`` (bash, zsh, fish), ``version``.

Owns: the config subcommands over ``ConfigFile``, the completion scripts (verbs and resource
types; each verb's flags as the parser reads them, handed in by ``cli``; resource names by
asking ``magctl get TYPE -o name``), and the
version report (the client's own, and the server's from ``/admin/v2/brokers/version`` when
it answers). ``version --client`` touches no network and no YAML. Must not know: REST beyond
the version path.
"""

from __future__ import annotations

import argparse
import json
from typing import IO, Any

from magnetar.client.magctl.errors import EXIT_OK, MagctlError, UsageError

CLIENT_VERSION = "0.1.0"


# ------------------------------------------------------------------------------- version
def cmd_version(args: argparse.Namespace, out: IO[str], err: IO[str]) -> int:
    report: dict[str, Any] = {
        "clientVersion": {"version": CLIENT_VERSION, "apiVersion": "magnetar.io/v1alpha1"}
    }
    if not args.client:
        from magnetar.client.magctl.session import open_session

        api, _, conn = open_session(args)
        server = api.try_get("/admin/v2/brokers/version")
        report["serverVersion"] = {
            "version": server if server is not None else "unknown",
            "adminUrl": conn.admin_url,
        }
    if args.output == "json":
        out.write(json.dumps(report, indent=2) + "\n")
    elif args.output == "yaml":
        from magnetar.client.magctl.output import dump_yaml

        out.write(dump_yaml(report))
    elif args.output:
        raise UsageError('--output: "json" or "yaml"')
    else:
        out.write(f"Client Version: {CLIENT_VERSION}\n")
        if "serverVersion" in report:
            out.write(f"Server Version: {report['serverVersion']['version']}\n")
    return EXIT_OK


# -------------------------------------------------------------------------------- config
def cmd_config(args: argparse.Namespace, out: IO[str], err: IO[str]) -> int:
    from magnetar.client.magctl.config import ConfigFile, import_client_conf

    cfg = ConfigFile()
    verb = args.config_verb
    if verb == "current-context":
        if not cfg.current:
            raise MagctlError("current-context is not set")
        out.write(cfg.current + "\n")
    elif verb == "get-contexts":
        from magnetar.client.magctl.output import table

        rows = []
        for item in cfg.data["contexts"]:
            c = item.get("context") or {}
            rows.append(
                [
                    "*" if item["name"] == cfg.current else "",
                    item["name"],
                    str(c.get("cluster", "")),
                    str(c.get("user", "")),
                    str(c.get("namespace", "")),
                ]
            )
        out.write(table(["CURRENT", "NAME", "CLUSTER", "AUTHINFO", "NAMESPACE"], rows))
    elif verb == "use-context":
        if cfg.entry("contexts", args.name) is None:
            raise MagctlError(f'no context exists with the name: "{args.name}"')
        cfg.data["current-context"] = args.name
        cfg.save()
        out.write(f'Switched to context "{args.name}".\n')
    elif verb == "set-context":
        _set_context(cfg, args, out)
    elif verb == "view":
        from magnetar.client.magctl.output import dump_yaml

        data = json.loads(json.dumps(cfg.data))
        if args.minify:
            cur = cfg.current
            ctx = cfg.entry("contexts", cur) or {}
            data["contexts"] = [c for c in data["contexts"] if c["name"] == cur]
            data["clusters"] = [c for c in data["clusters"] if c["name"] == ctx.get("cluster")]
            data["users"] = [u for u in data["users"] if u["name"] == ctx.get("user")]
        if not args.raw:
            for u in data["users"]:
                for secret in ("token", "password"):
                    if (u.get("user") or {}).get(secret):
                        u["user"][secret] = "REDACTED"
        out.write(dump_yaml(data))
    elif verb == "import":
        try:
            with open(args.file) as f:
                text = f.read()
        except OSError as exc:
            raise UsageError(f"cannot read {args.file}: {exc}") from None
        import_client_conf(cfg, text, args.name)
        if not cfg.current:
            cfg.data["current-context"] = args.name
        path = cfg.save()
        out.write(f'Context "{args.name}" imported from {args.file} into {path}.\n')
    return EXIT_OK


def _set_context(cfg: Any, args: argparse.Namespace, out: IO[str]) -> None:
    name = cfg.current if args.current else args.name
    if not name:
        raise UsageError("set-context: give a context NAME or --current")
    existed = cfg.entry("contexts", name) is not None
    ctx: dict[str, Any] = {}
    cluster = args.cluster or (cfg.entry("contexts", name) or {}).get("cluster") or name
    user = args.user or (cfg.entry("contexts", name) or {}).get("user") or name
    admin_url = getattr(args, "admin_url", None)
    tls = args.certificate_authority or args.insecure_skip_tls_verify
    if admin_url or args.service_url or tls:
        values: dict[str, Any] = {}
        if admin_url:
            values["admin-url"] = admin_url
        if args.service_url:
            values["service-url"] = args.service_url
        if args.certificate_authority:
            values["certificate-authority"] = args.certificate_authority
        if args.insecure_skip_tls_verify:
            values["insecure-skip-tls-verify"] = True
        cfg.set_entry("clusters", cluster, values)
        ctx["cluster"] = cluster
    elif args.cluster:
        ctx["cluster"] = cluster
    token = getattr(args, "token", None)
    username = getattr(args, "username", None)
    if token or args.token_file:
        cfg.set_entry("users", user, {"token": token} if token else {"token-file": args.token_file})
        ctx["user"] = user
    elif username:
        if getattr(args, "password", None) is None:
            raise UsageError("--username and --password go together")
        cfg.set_entry("users", user, {"username": username, "password": args.password})
        ctx["user"] = user
    elif args.user:
        ctx["user"] = user
    # kubectl's set-context --namespace (the global flag's name here), or --ns / -n
    namespace = args.ctx_namespace or getattr(args, "namespace", None)
    if namespace:
        tenant, _, local = namespace.partition("/")
        if not tenant or not local or "/" in local:
            raise UsageError(
                f"set-context --namespace: expected tenant/namespace, not {namespace!r}"
            )
        ctx["namespace"] = namespace
    cfg.set_entry("contexts", name, ctx)
    if not cfg.current:
        cfg.data["current-context"] = name
    cfg.save()
    out.write(f'Context "{name}" {"modified" if existed else "created"}.\n')


# ---------------------------------------------------------------------------- completion
def _words() -> tuple[list[str], list[str]]:
    from magnetar.client.magctl.commands import VERBS
    from magnetar.client.magctl.resources import RESOURCES

    return list(VERBS), [n for r in RESOURCES for n in r.names]


_BASH = r"""# magctl completion for bash: source <(magctl completion bash)
_magctl() {
    local cur prev verb sub i
    cur="${COMP_WORDS[COMP_CWORD]}"
    prev="${COMP_WORDS[COMP_CWORD-1]}"
    verb=""
    sub=""
    for ((i=1; i<COMP_CWORD; i++)); do
        case "${COMP_WORDS[i]}" in
            -*) ;;
            *) if [[ -z "$verb" ]]; then verb="${COMP_WORDS[i]}"
               elif [[ -z "$sub" ]]; then sub="${COMP_WORDS[i]}"; fi ;;
        esac
    done
    if [[ "$cur" == -* ]]; then
        case "$verb $sub" in
__VERB_FLAGS__
            *) COMPREPLY=( $(compgen -W "__FLAGS__" -- "$cur") ) ;;
        esac
        return 0
    fi
    case "$prev" in
        -o|--output) COMPREPLY=( $(compgen -W "wide json yaml name jsonpath= custom-columns=" -- "$cur") ); return 0 ;;
        -f|--filename) COMPREPLY=( $(compgen -f -- "$cur") ); return 0 ;;
        --context) COMPREPLY=( $(compgen -W "$(magctl config get-contexts 2>/dev/null | awk 'NR>1 {print ($1=="*") ? $2 : $1}')" -- "$cur") ); return 0 ;;
    esac
    if [[ -z "$verb" ]]; then
        COMPREPLY=( $(compgen -W "__VERBS__" -- "$cur") )
        return 0
    fi
    case "$verb" in
        completion) COMPREPLY=( $(compgen -W "bash zsh fish" -- "$cur") ); return 0 ;;
__VERB_SUBCOMMANDS__
        apply|diff|version|api-resources) return 0 ;;
    esac
    case " __RESOURCES__ " in
        *" $prev "*)
            COMPREPLY=( $(compgen -W "$(magctl get "$prev" -o name 2>/dev/null | sed 's|^[^/]*/||')" -- "$cur") )
            return 0 ;;
    esac
    COMPREPLY=( $(compgen -W "__RESOURCES__" -- "$cur") )
    return 0
}
complete -o default -F _magctl magctl
"""

_ZSH = """#compdef magctl
# magctl completion for zsh: source <(magctl completion zsh)
autoload -U +X bashcompinit && bashcompinit
"""

_FISH = """# magctl completion for fish: magctl completion fish | source
complete -c magctl -f
complete -c magctl -n '__fish_use_subcommand' -a '__VERBS__'
complete -c magctl -n 'not __fish_use_subcommand' -a '__RESOURCES__'
complete -c magctl -s n -l namespace -d 'tenant/namespace' -r
complete -c magctl -s o -l output -d 'output format' -xa 'wide json yaml name jsonpath= custom-columns='
complete -c magctl -l context -d 'context of the config file' -r
complete -c magctl -l admin-url -d 'admin REST URL' -r
complete -c magctl -s f -l filename -d 'manifest file or directory' -rF
complete -c magctl -l no-headers -d 'no header row'
complete -c magctl -s l -l selector -d 'label selector' -r
complete -c magctl -l topic -d 'topic of subscriptions' -r
"""


def completion_script(shell: str, flags: dict[str, list[str]]) -> str:
    """The script for ``shell``; ``flags``: each verb's flags (``""``: before a verb), as
    ``cli.verb_flags`` reads them from the parser, so completion offers what parses."""
    verbs, resources = _words()
    nested: dict[str, list[str]] = {}  # verb -> its subcommands ("config" -> "set-context"...)
    for key in flags:
        if " " in key:
            verb, sub = key.split(" ", 1)
            nested.setdefault(verb, []).append(sub)
    # "config set-context" before "config *": the most specific pattern first
    keys = sorted((k for k in flags if k), key=lambda k: " " not in k)
    per_verb = "\n".join(
        f'            "{key}"{"" if " " in key else "*"}) '
        f'COMPREPLY=( $(compgen -W "{" ".join(flags[key])}" -- "$cur") ) ;;'
        if " " in key
        else f'            "{key} "*) COMPREPLY=( $(compgen -W "{" ".join(flags[key])}" -- "$cur") ) ;;'
        for key in keys
    )
    per_verb_subs = "\n".join(
        f'        {verb}) [[ -z "$sub" ]] && COMPREPLY=( $(compgen -W "{" ".join(subs)}" -- "$cur") );'
        " return 0 ;;"
        for verb, subs in nested.items()
    )
    bash = (
        _BASH.replace("__VERB_FLAGS__", per_verb)
        .replace("__VERB_SUBCOMMANDS__", per_verb_subs)
        .replace("__FLAGS__", " ".join(flags.get("", [])))
        .replace("__VERBS__", " ".join(verbs))
        .replace("__RESOURCES__", " ".join(resources))
    )
    if shell == "bash":
        return bash
    if shell == "zsh":
        return _ZSH + bash.split("\n", 1)[1]
    fish = _FISH.replace("__VERBS__", " ".join(verbs)).replace("__RESOURCES__", " ".join(resources))
    common = set(flags.get("", []))
    for verb, subs in nested.items():
        fish += (
            f"complete -c magctl -n '__fish_seen_subcommand_from {verb}' -a '{' '.join(subs)}'\n"
        )
    for key, fl in flags.items():
        word = key.split(" ")[-1]  # a subcommand's flags once its own word is seen
        for flag in fl:
            if key and flag.startswith("--") and flag not in common:
                fish += (
                    f"complete -c magctl -n '__fish_seen_subcommand_from {word}' -l {flag[2:]}\n"
                )
    return fish


def cmd_completion(
    args: argparse.Namespace, out: IO[str], err: IO[str], flags: dict[str, list[str]]
) -> int:
    out.write(completion_script(args.shell, flags))
    return EXIT_OK


def run(
    verb: str,
    args: argparse.Namespace,
    out: IO[str],
    err: IO[str],
    *,
    flags: dict[str, list[str]],
) -> int:
    """One of ``commands.TOOLING_VERBS``; ``flags`` (for ``completion``): each verb's flags."""
    if verb == "completion":
        return cmd_completion(args, out, err, flags)
    return cmd_config(args, out, err) if verb == "config" else cmd_version(args, out, err)


__all__ = [
    "CLIENT_VERSION",
    "cmd_completion",
    "cmd_config",
    "cmd_version",
    "completion_script",
    "run",
]
