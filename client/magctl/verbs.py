"""What each verb does: resolve the resource, call the admin API, print.

Owns: ``dispatch`` (argparse namespace -> verb) and the CRUD and declarative verbs (get,
describe, create, delete, apply, diff, explain, api-resources). Topic and subscription
operations live in ``operations``, tooling (config, completion, version) in ``tooling``.
Must not know: argparse internals, REST paths beyond the kinds' and manifests' own.
"""

from __future__ import annotations

import argparse
import os
import time
from collections.abc import Callable
from typing import IO, TYPE_CHECKING, Any

from magnetar.client.magctl.errors import EXIT_OK, MagctlError, UsageError
from magnetar.client.magctl.progress import Progress
from magnetar.client.magctl.resources import RESOURCES, ResourceType, resolve, targets
from magnetar.client.magctl.session import open_session

if TYPE_CHECKING:
    from magnetar.client.magctl.api import Api, Scope


def run(verb: str, args: argparse.Namespace, out: IO[str], err: IO[str]) -> int:
    """One of ``commands.RESOURCE_VERBS``."""
    if verb == "api-resources":
        return api_resources(args, out)
    if verb == "explain":
        return explain(args, out)
    return _COMMANDS[verb](args, out, err)


# ------------------------------------------------------------------------------- get
def _fetch(
    api: Api, scope: Scope, rtype: ResourceType, names: list[str], *, full: bool
) -> list[dict[str, Any]]:
    from magnetar.client.magctl.kinds import KINDS

    kind = KINDS[rtype.plural]
    if names:
        return [kind.get(api, n, scope, full=full) for n in names]
    return kind.list_all(api, scope, full=full)


def _select(objects: list[dict[str, Any]], selector: str | None) -> list[dict[str, Any]]:
    if not selector:
        return objects
    from magnetar.client.magctl.selectors import matches, parse_selector

    sel = parse_selector(selector)
    return [o for o in objects if matches(sel, (o.get("metadata") or {}).get("labels"))]


def _check_selector(selector: str | None) -> None:
    """A bad ``-l`` is a usage error before any request."""
    if selector:
        from magnetar.client.magctl.selectors import parse_selector

        parse_selector(selector)


def _scope_words(rtype: ResourceType, scope: Scope) -> str:
    if rtype.scope == "namespace":
        return f" in {scope.namespace} namespace"
    if rtype.scope == "topic" and scope.topic:
        return f" in topic {scope.topic}"
    return ""


def cmd_get(args: argparse.Namespace, out: IO[str], err: IO[str]) -> int:
    from magnetar.client.magctl.kinds import KINDS
    from magnetar.client.magctl.output import OutputFormat, print_objects, sort_objects

    fmt = OutputFormat.parse(args.output)
    fmt.check()
    rtype, names = targets(args.resource, args.names)
    _check_selector(args.selector)
    if args.sort_by:
        from magnetar.client.magctl.jsonpath import compile_expr

        compile_expr(args.sort_by)
    api, scope, _ = open_session(args)
    kind = KINDS[rtype.plural]
    columns = kind.columns(fmt.kind == "wide")
    last: dict[str, str] = {}
    first = True
    while True:
        objects = _select(_fetch(api, scope, rtype, names, full=fmt.needs_full), args.selector)
        if args.sort_by:
            objects = sort_objects(objects, args.sort_by)
        if not args.watch:
            if not objects and fmt.kind in ("table", "wide"):
                err.write(f"No resources found{_scope_words(rtype, scope)}.\n")
                return EXIT_OK
            print_objects(
                out,
                objects,
                fmt,
                columns=columns,
                name_of=kind.key,
                singular=rtype.singular,
                single=len(names) == 1,
                no_headers=args.no_headers,
            )
            return EXIT_OK
        # -w: print the table once, then every object whose row changed or appeared
        import json

        changed = []
        now = {}
        for o in objects:
            k = kind.key(o)
            now[k] = json.dumps(o, sort_keys=True, default=str)
            if last.get(k) != now[k]:
                changed.append(o)
        if changed or first:
            print_objects(
                out,
                changed,
                fmt,
                columns=columns,
                name_of=kind.key,
                singular=rtype.singular,
                single=False,
                no_headers=args.no_headers or not first,
            )
            out.flush()
        last, first = now, False
        time.sleep(max(0.1, args.watch_interval))  # the watch's polling period


def cmd_describe(args: argparse.Namespace, out: IO[str], err: IO[str]) -> int:
    from magnetar.client.magctl.output import describe

    rtype, names = targets(args.resource, args.names)
    api, scope, _ = open_session(args)
    objects = _fetch(api, scope, rtype, names, full=True)
    if rtype.plural in ("topics", "partitions"):
        for o in objects:
            _describe_topic_extras(api, o)
    if not objects:
        err.write(f"No resources found{_scope_words(rtype, scope)}.\n")
    for i, o in enumerate(objects):
        if i:
            out.write("\n\n")
        out.write(describe(o))
    return EXIT_OK


def _describe_topic_extras(api: Api, obj: dict[str, Any]) -> None:
    """Owner broker, subscriptions and replication per remote cluster, as far as the server
    tells them."""
    from magnetar.client.magctl.kinds import dig, topic_stats
    from magnetar.client.magctl.resources import TopicName

    tn = TopicName.parse(dig(obj, "status", "fullName"))
    n = int(dig(obj, "spec", "partitions", default=0) or 0)
    looked = api.try_get(
        f"/lookup/v2/topic/{tn.path}" if n == 0 else f"/lookup/v2/topic/{tn.partition(0).path}"
    )
    if isinstance(looked, dict):
        obj["owner"] = {"brokerUrl": looked.get("brokerUrl"), "httpUrl": looked.get("httpUrl")}
    parts = [tn] if n == 0 else [tn.partition(i) for i in range(n)]
    bundles = {p.local: api.try_get(f"/lookup/v2/topic/{p.path}/bundle") for p in parts}
    if all(isinstance(b, str) for b in bundles.values()):
        obj["bundle"] = bundles[tn.local] if n == 0 else bundles
    stats = topic_stats(api, tn, n)
    subs = stats.get("subscriptions") or {}
    if subs:
        obj["subscriptions"] = {
            name: {
                "type": s.get("type"),
                "backlog": s.get("msgBacklog"),
                "consumers": len(s.get("consumers") or []),
            }
            for name, s in sorted(subs.items())
        }
    pubs = stats.get("publishers") or []
    if pubs:
        obj["producers"] = [p.get("producerName") for p in pubs]
    replication = stats.get("replication") or {}
    if replication:
        obj["replication"] = {
            remote: {
                "connected": r.get("connected"),
                "backlog": r.get("replicationBacklog"),
                "delaySeconds": r.get("replicationDelayInSeconds"),
                "rateOut": round(float(r.get("msgRateOut", 0.0)), 1),
                "rateIn": round(float(r.get("msgRateIn", 0.0)), 1),
                "outbound": r.get("outboundConnection") or "<none>",
                "inbound": r.get("inboundConnection") or "<none>",
                **({"state": r["state"]} if "state" in r else {}),
                **({"lastError": r["lastError"]} if r.get("lastError") else {}),
            }
            for remote, r in sorted(replication.items())
        }


# ------------------------------------------------------------------------- create/delete
def cmd_create(args: argparse.Namespace, out: IO[str], err: IO[str]) -> int:
    from magnetar.client.magctl.kinds import KINDS

    rtype, names = targets(args.resource, args.names)
    if not names:
        raise UsageError(f"create {rtype.singular}: a name is required")
    if args.partitions < 0:
        raise UsageError("--partitions: 0 (not partitioned) or more")
    if args.bundles is not None and args.bundles < 1:
        raise UsageError("--bundles: 1 or more")
    api, scope, _ = open_session(args)
    opts = {
        "partitions": args.partitions,
        "bundles": args.bundles,
        "admin_roles": [r for r in (args.admin_roles or "").split(",") if r],
        "allowed_clusters": [c for c in (args.allowed_clusters or "").split(",") if c],
        "position": args.position,
        "url": args.url,
        "url_tls": args.url_tls,
        "broker_url": args.broker_url,
        "broker_url_tls": args.broker_url_tls,
    }
    for name in names:
        KINDS[rtype.plural].create(api, name, scope, opts)
        out.write(f"{rtype.singular}/{_display(rtype, name, scope)} created\n")
    return EXIT_OK


def _display(rtype: ResourceType, name: str, scope: Scope) -> str:
    if rtype.plural == "topics":
        from magnetar.client.magctl.resources import TopicName

        return TopicName.parse(name, scope.namespace).full
    return name


def cmd_delete(args: argparse.Namespace, out: IO[str], err: IO[str]) -> int:
    from magnetar.client.magctl.kinds import KINDS

    rtype, names = targets(args.resource, args.names)
    _check_selector(args.selector)
    api, scope, _ = open_session(args)
    kind = KINDS[rtype.plural]
    if not names:
        if not (args.all or args.selector):
            raise UsageError(
                "resource(s) were provided, but no name was specified "
                "(give names, -l SELECTOR or --all)"
            )
        objects = _select(kind.list_all(api, scope, full=False), args.selector)
        names = [kind.key(o) for o in objects]
        if not names:
            err.write(f"No resources found{_scope_words(rtype, scope)}.\n")
            return EXIT_OK
    failed: MagctlError | None = None
    with Progress(err, len(names), f"deleting {rtype.plural}") as progress:
        for name in names:
            shown = _display(rtype, name, scope)
            progress.advance(shown)
            try:
                if rtype.plural == "namespaces" and args.force:
                    _delete_topics_of(api, name, out, err)
                    progress.status(shown)  # redrawn after the topics' own line
                kind.delete(api, name, scope, force=args.force)
                progress.echo(out, f'{rtype.singular} "{shown}" deleted\n')
            except MagctlError as exc:
                if len(names) == 1:
                    raise
                progress.echo(err, exc.render() + "\n")
                failed = exc
    return failed.exit_code if failed else EXIT_OK


def _delete_topics_of(api: Api, namespace: str, out: IO[str], err: IO[str]) -> None:
    """``delete ns --force``: every persistent topic of the namespace first (Pulsar's force
    delete), with progress on a terminal. Active non-persistent topics still make the server
    refuse: they end when their clients go."""
    from magnetar.client.magctl.api import Scope
    from magnetar.client.magctl.kinds import TOPICS

    topics = [n for n in TOPICS.names(api, namespace) if n.startswith("persistent://")]
    scope = Scope(namespace, True)
    with Progress(err, len(topics), f"deleting the topics of {namespace}") as progress:
        for name in sorted(topics):
            progress.advance(name)
            TOPICS.delete(api, name, scope, force=True)


# --------------------------------------------------------------------------------- edit
_EDITABLE = ("tenants", "namespaces", "topics")


def cmd_edit(args: argparse.Namespace, out: IO[str], err: IO[str]) -> int:
    """kubectl edit: the object's YAML (no status) in an editor; saved changes are applied
    as a manifest, and a policy deleted from the file is removed."""
    import shlex
    import subprocess
    import tempfile

    from magnetar.client.magctl.manifests import Manifest, plan, validate
    from magnetar.client.magctl.output import dump_yaml

    rtype, names = targets(args.resource, args.names)
    if rtype.plural not in _EDITABLE:
        raise UsageError(f"edit applies to {', '.join(_EDITABLE)}, not {rtype.plural}")
    if len(names) != 1:
        raise UsageError("edit takes exactly one name")
    api, scope, _ = open_session(args)
    obj = _fetch(api, scope, rtype, names, full=True)[0]
    obj.pop("status", None)
    original = dump_yaml(obj)
    editor = (
        os.environ.get("MAGCTL_EDITOR")
        or os.environ.get("KUBE_EDITOR")
        or os.environ.get("EDITOR")
        or "vi"
    )
    with tempfile.NamedTemporaryFile("w", suffix=".yaml", prefix="magctl-edit-", delete=False) as f:
        f.write(original)
        path = f.name
    try:
        done = subprocess.run([*shlex.split(editor), path], check=False)
        if done.returncode != 0:
            raise MagctlError(
                f"the editor {editor!r} exited with {done.returncode}; nothing was changed"
            )
        with open(path) as f:
            edited = f.read()
    finally:
        os.unlink(path)
    if edited == original:
        err.write("Edit cancelled, no changes made.\n")
        return EXIT_OK
    import yaml

    try:
        new = yaml.safe_load(edited)
    except yaml.YAMLError as exc:
        raise UsageError(f"the edited YAML does not parse: {exc}") from None
    if not isinstance(new, dict):
        raise UsageError("the edited document must be a mapping")
    new.pop("status", None)
    removed = set((obj.get("spec") or {}).get("policies") or {}) - set(
        (new.get("spec") or {}).get("policies") or {}
    )
    if removed:
        new.setdefault("spec", {}).setdefault("policies", {})
        new["spec"]["policies"] = {**(new["spec"]["policies"] or {}), **dict.fromkeys(removed)}
    m = Manifest(new, "edited")
    validate(m)
    p = plan(api, m, scope.namespace)
    for w in p.warnings:
        err.write(f"Warning: {w}\n")
    for write in p.writes:
        write()
    out.write(f"{p.singular}/{p.name} {'edited' if p.changed else 'unchanged'}\n")
    return EXIT_OK


# ---------------------------------------------------------------------------- apply/diff
def cmd_apply(args: argparse.Namespace, out: IO[str], err: IO[str]) -> int:
    from magnetar.client.magctl.manifests import load_manifests, plan

    if args.prune and not args.selector:
        raise UsageError("--prune needs -l SELECTOR: only objects with matching labels are pruned")
    manifests = load_manifests(args.filename)
    api, scope, _ = open_session(args)
    dry = {"none": "", "client": " (dry run)", "server": " (server dry run)"}[args.dry_run]
    applied: set[tuple[str, str]] = set()
    with Progress(err, len(manifests), "applying") as progress:
        for m in manifests:
            progress.advance(m.source)
            p = plan(api, m, scope.namespace)
            for w in p.warnings:
                progress.echo(err, f"Warning: {w}\n")
            if not dry:
                for write in p.writes:
                    write()
            word = "created" if not p.exists else ("configured" if p.changed else "unchanged")
            progress.echo(out, f"{p.singular}/{p.name} {word}{dry}\n")
            applied.add((p.kind, p.name))
    if args.prune:
        _prune(api, applied, args.selector, dry, out)
    return EXIT_OK


def _prune(api: Api, applied: set[tuple[str, str]], selector: str, dry: str, out: IO[str]) -> None:
    """kubectl apply --prune: objects of the scopes the manifests touch, matching the
    selector, that no manifest names any more, are deleted (topics first)."""
    from magnetar.client.magctl.api import Scope
    from magnetar.client.magctl.kinds import KINDS
    from magnetar.client.magctl.resources import TopicName

    namespaces = {name for kind, name in applied if kind == "Namespace"}
    topic_scopes = {TopicName.parse(name).ns for kind, name in applied if kind == "Topic"}
    tenants = {ns.split("/")[0] for ns in namespaces}
    doomed: list[tuple[str, str, str]] = []
    for ns in sorted(topic_scopes | namespaces):
        for o in _select(KINDS["topics"].list_all(api, Scope(ns, True), full=False), selector):
            name = KINDS["topics"].key(o)
            if ("Topic", name) not in applied:
                doomed.append(("topics", name, ns))
    for tenant in sorted(tenants):
        objs = KINDS["namespaces"].list_all(api, Scope(f"{tenant}/x", True), full=False)
        for o in _select(objs, selector):
            name = o["metadata"]["name"]
            if ("Namespace", name) not in applied:
                doomed.append(("namespaces", name, name))
    for plural, name, ns in doomed:
        if not dry:
            KINDS[plural].delete(api, name, Scope(ns, True), force=False)
        out.write(f"{plural[:-1]}/{name} pruned{dry}\n")


def cmd_diff(args: argparse.Namespace, out: IO[str], err: IO[str]) -> int:
    import difflib

    from magnetar.client.magctl.manifests import load_manifests, plan
    from magnetar.client.magctl.output import dump_yaml

    try:
        manifests = load_manifests(args.filename)
        api, scope, _ = open_session(args)
        differs = False
        for m in manifests:
            p = plan(api, m, scope.namespace)
            if not p.changed:
                continue
            differs = True
            live = dump_yaml(p.live) if p.exists else ""
            merged = dump_yaml(p.desired)
            label = f"{p.singular}.{p.name.replace('/', '.').replace(':', '')}"
            external = os.environ.get("MAGCTL_EXTERNAL_DIFF")
            if external:
                _external_diff(external, label, live, merged, out)
            else:
                out.writelines(
                    difflib.unified_diff(
                        live.splitlines(keepends=True),
                        merged.splitlines(keepends=True),
                        fromfile=f"live/{label}",
                        tofile=f"merged/{label}",
                    )
                )
        return 1 if differs else EXIT_OK
    except MagctlError as exc:  # kubectl diff: >1 on error
        err.write(exc.render() + "\n")
        return max(2, exc.exit_code)


def _external_diff(cmd: str, label: str, live: str, merged: str, out: IO[str]) -> None:
    import subprocess
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        a, b = os.path.join(tmp, "live", label), os.path.join(tmp, "merged", label)
        for path, text in ((a, live), (b, merged)):
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(path, "w") as f:
                f.write(text)
        done = subprocess.run([*cmd.split(), a, b], capture_output=True, text=True, check=False)
        out.write(done.stdout)


# ------------------------------------------------------------------------ api-resources
def api_resources(args: argparse.Namespace, out: IO[str]) -> int:
    from magnetar.client.magctl.output import table

    if args.output == "name":
        for r in RESOURCES:
            out.write(r.plural + "\n")
        return EXIT_OK
    wide = args.output == "wide"
    if args.output not in (None, "wide", "name"):
        raise UsageError(f'--output: "{args.output}" is not one of wide, name')
    headers = ["NAME", "SHORTNAMES", "APIVERSION", "NAMESPACED", "KIND"]
    if wide:
        headers += ["VERBS", "DESCRIPTION"]
    rows = []
    for r in RESOURCES:
        row = [
            r.plural,
            r.short,
            "magnetar.io/v1alpha1",
            str(r.scope in ("namespace", "topic")).lower(),
            r.kind,
        ]
        if wide:
            verbs = "get,describe" + (",create,delete,apply" if r.writable else "")
            row += [verbs, r.description]
        rows.append(row)
    out.write(table(headers, rows, no_headers=args.no_headers))
    return EXIT_OK


# ------------------------------------------------------------------------------ explain
_EXPLAIN: dict[str, dict[str, str]] = {
    "Cluster": {
        "serviceUrl": "<string> admin URL, http://host:8080 (Pulsar's ClusterData names)",
        "serviceUrlTls": "<string> HTTPS admin URL, https://host:8443",
        "brokerServiceUrl": "<string> service URL replicators connect to, pulsar://host:6650",
        "brokerServiceUrlTls": "<string> TLS service URL, pulsar+ssl://host:6651",
        "authenticationPlugin": "<string> what replicators present: token, basic or tls",
        "authenticationParameters": "<string> the plugin's parameters (token:..., file:///...)",
        "brokerClientTlsEnabled": "<boolean> replicate over TLS (brokerServiceUrlTls)",
        "tlsAllowInsecureConnection": "<boolean> accept an untrusted certificate",
        "brokerClientTrustCertsFilePath": "<string> PEM file of the CAs to trust",
        "brokerClientCertificateFilePath": "<string> PEM client certificate (mutual TLS)",
        "brokerClientKeyFilePath": "<string> PEM client key (mutual TLS)",
        "listenerName": "<string> the advertised listener to reach the cluster through",
        "peerClusterNames": "<[]string> clusters holding the same data (never replicated "
        "to together)",
    },
    "Tenant": {
        "adminRoles": "<[]string> roles that administer the tenant",
        "allowedClusters": "<[]string> clusters the tenant's namespaces may use "
        "(default: this cluster)",
    },
    "Namespace": {
        "bundles": "<integer> number of bundles at creation (split them later)",
        "replicationClusters": "<[]string> clusters the namespace is replicated to "
        "(geo-replication; default: this cluster)",
        "policies": "<Object> namespace policies (see explain namespace.policies)",
    },
    "Topic": {
        "partitions": "<integer> 0 = not partitioned; can only grow",
        "persistent": "<boolean> false = non-persistent:// (default true)",
        "policies": "<Object> topic-level policies overriding the namespace's",
    },
    "Subscription": {
        "topic": "<string> the topic (persistent://t/ns/x, t/ns/x or short with "
        "metadata.namespace)",
        "initialPosition": "<string> earliest, latest (default) or LEDGER:ENTRY",
    },
}


def explain(args: argparse.Namespace, out: IO[str]) -> int:
    """kubectl explain: the whole text is built first, so a bad field prints nothing."""
    out.write(_explain_text(args.target))
    return EXIT_OK


def _explain_text(target: str) -> str:
    from magnetar.client.magctl.policyspec import POLICIES

    head, *path = target.split(".")
    rtype = resolve(head)
    fields = _EXPLAIN.get(rtype.kind)
    text = f"KIND:     {rtype.kind}\nVERSION:  magnetar.io/v1alpha1\n\n"
    if path and path[0] == "spec":
        path = path[1:]
    if fields is None:
        return text + f"DESCRIPTION:\n     {rtype.description} (read-only: status only)\n"
    if not path:
        text += f"DESCRIPTION:\n     {rtype.description}\n\nFIELDS (spec):\n"
        return text + "".join(f"   {k}\t{v}\n" for k, v in fields.items())
    if path[0] == "policies" and "policies" in fields:
        if len(path) == 1:
            text += "FIELD:    policies <Object>\n\nFIELDS:\n"
            return text + "".join(f"   {k}\t{pol.description}\n" for k, pol in POLICIES.items())
        found = POLICIES.get(path[1])
        if found is not None and len(path) == 2:
            return text + (
                f"FIELD:    policies.{found.key}\n\nDESCRIPTION:\n     "
                f"{found.description}\n     REST: POST .../{found.segment}\n"
            )
    if len(path) == 1 and path[0] in fields:
        return text + f"FIELD:    {path[0]} {fields[path[0]]}\n"
    raise UsageError(f'field "{".".join(path)}" does not exist in {rtype.kind}')


_COMMANDS: dict[str, Callable[[argparse.Namespace, IO[str], IO[str]], int]] = {
    "get": cmd_get,
    "describe": cmd_describe,
    "create": cmd_create,
    "delete": cmd_delete,
    "edit": cmd_edit,
    "apply": cmd_apply,
    "diff": cmd_diff,
}
"""The resource verbs' commands (``commands.RESOURCE_VERBS`` but ``api-resources`` and
``explain``, answered without a server)."""

__all__ = ["run"]
