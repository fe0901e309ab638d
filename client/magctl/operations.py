"""Topic, subscription and bundle operations as verbs: unload, split, seek, skip, clear,
expire, peek, compact, offload, terminate, truncate, scale, lookup.

Owns: each verb's REST call with Pulsar's paths (``.../subscription/{s}/resetcursor/{ts}``,
``.../skip/{n}``, ``.../skip_all``, ``.../expireMessages/{s}``, ``.../position/{n}``,
``.../examinemessage``, ``.../compaction``, ``.../offload``, ``.../terminate[/partitions]``,
``.../truncate``,
``.../partitions``, ``/lookup/v2/topic/...``, ``/admin/v2/namespaces/{t}/{ns}[/{bundle}]/unload``,
``.../{bundle}/split``)
and their one-line results. A partitioned topic is operated partition by partition where
Pulsar's API is per partition. Must not know: argparse beyond the namespace it is given.
"""

from __future__ import annotations

import argparse
import base64
import json
import time
from typing import IO, Any, NamedTuple
from urllib.parse import quote

from magnetar.client.magctl.api import Api, Scope
from magnetar.client.magctl.errors import EXIT_OK, MagctlError, ServerError, UsageError
from magnetar.client.magctl.http import HttpError, reason_of
from magnetar.client.magctl.kinds import KINDS, TOPICS, position_body
from magnetar.client.magctl.progress import Progress
from magnetar.client.magctl.resources import TopicName, split_namespace, targets
from magnetar.client.magctl.session import open_session
from magnetar.client.magctl.units import parse_duration_s


class _Op(NamedTuple):
    api: Api
    scope: Scope
    plural: str
    args: argparse.Namespace
    out: IO[str]
    err: IO[str]


def run(verb: str, args: argparse.Namespace, *, out: IO[str], err: IO[str]) -> int:
    """One of ``commands.OPERATION_VERBS``, on each name given."""
    rtype, names = targets(args.resource, args.names)
    if not names:
        raise UsageError(f"{verb} {rtype.singular}: a name is required")
    allowed = {
        "unload": ("topics", "namespaces", "bundles"),
        "split": ("bundles",),
        "seek": ("subscriptions",),
        "skip": ("subscriptions",),
        "clear": ("subscriptions",),
        "expire": ("subscriptions",),
        "peek": ("subscriptions", "topics"),
        "compact": ("topics",),
        "offload": ("topics",),
        "terminate": ("topics",),
        "truncate": ("topics",),
        "scale": ("topics",),
        "lookup": ("topics",),
    }[verb]
    if rtype.plural not in allowed:
        raise UsageError(f"{verb} does not apply to {rtype.plural} (only {', '.join(allowed)})")
    api, scope, _ = open_session(args)
    handler = globals()[f"_{verb}"]
    op = _Op(api, scope, rtype.plural, args, out, err)
    for name in names:
        handler(op, name)
    return EXIT_OK


def _topic(api: Api, scope: Scope, name: str) -> tuple[TopicName, int]:
    tn = TopicName.parse(name, scope.namespace)
    n = TOPICS.partitions_of(api, tn)
    if n is None:
        raise ServerError(404, f'topics "{tn.full}" not found')
    return tn, n


def _parts(tn: TopicName, n: int) -> list[TopicName]:
    return [tn.partition(i) for i in range(n)] if n > 0 else [tn]


def _sub_topic(api: Api, scope: Scope, sub: str) -> tuple[TopicName, int]:
    if scope.topic:
        return _topic(api, scope, scope.topic)
    found = KINDS["subscriptions"].get(api, sub, scope, full=False)
    return _topic(api, scope, found["spec"]["topic"])


def _sub_path(tn: TopicName, sub: str) -> str:
    return f"/admin/v2/{tn.path}/subscription/{quote(sub, safe='')}"


# ------------------------------------------------------------------------------ unload
def _unload(op: _Op, name: str) -> None:
    api, scope, plural, _args, out, _err = op
    if plural == "topics":
        tn, n = _topic(api, scope, name)
        with Progress(op.err, n, "unloading") as progress:
            for part in _parts(tn, n):
                progress.advance(part.full)
                api.put(f"/admin/v2/{part.path}/unload", what=("topics", part.full))
        out.write(f"topic/{tn.full} unloaded\n")
    elif plural == "namespaces":
        tenant, ns = split_namespace(name)
        api.put(f"/admin/v2/namespaces/{tenant}/{ns}/unload", what=("namespaces", name))
        out.write(f"namespace/{name} unloaded\n")
    else:
        tenant, ns = split_namespace(scope.namespace)
        api.put(f"/admin/v2/namespaces/{tenant}/{ns}/{name}/unload", what=("bundles", name))
        out.write(f"bundle/{name} unloaded\n")


def _split(op: _Op, name: str) -> None:
    api, scope, _plural, args, out, _err = op
    tenant, ns = split_namespace(scope.namespace)
    body = None
    if args.boundaries:
        body = [b.strip() for b in args.boundaries.split(",") if b.strip()]
        for b in body:
            try:
                int(b, 16) if b.lower().startswith("0x") else int(b)
            except ValueError:
                raise UsageError(f'--boundaries: "{b}" is not a number') from None
        body = [b if b.lower().startswith("0x") else int(b) for b in body]
    query: dict[str, Any] = {"unload": bool(args.unload)}
    if args.algorithm:
        query["splitAlgorithmName"] = args.algorithm
    elif body:
        query["splitAlgorithmName"] = "specified_positions_divide"
    ranges = api.call(
        "PUT",
        f"/admin/v2/namespaces/{tenant}/{ns}/{name}/split",
        body,
        what=("bundles", name),
        query=query,
    )
    new = ", ".join(ranges) if isinstance(ranges, list) else "new bundles"
    out.write(f"bundle/{name} split into {new}\n")


# ------------------------------------------------------------------------ subscriptions
def _seek(op: _Op, name: str) -> None:
    api, scope, _plural, args, out, _err = op
    tn, n = _sub_topic(api, scope, name)
    with Progress(op.err, n, f"resetting {name} on") as progress:
        for part in _parts(tn, n):
            progress.advance(part.full)
            base = _sub_path(part, name)
            if args.time is not None:
                text = str(args.time)
                if text.isdigit() and len(text) >= 12:
                    ts = int(text)
                else:
                    ts = int(time.time() * 1000) - parse_duration_s(text, "--time") * 1000
                api.post(f"{base}/resetcursor/{ts}", what=("subscriptions", name))
            else:
                body = position_body(args.to)
                api.post(f"{base}/resetcursor", body, what=("subscriptions", name))
    out.write(f"subscription/{name} reset\n")


def _skip(op: _Op, name: str) -> None:
    api, scope, _plural, args, out, _err = op
    if args.count < 1:
        raise UsageError("--count must be 1 or more")
    tn, n = _sub_topic(api, scope, name)
    if n > 0:
        raise UsageError("skip applies to one partition: name it with --topic T-partition-N")
    api.post(f"{_sub_path(tn, name)}/skip/{args.count}", what=("subscriptions", name))
    out.write(f"subscription/{name} skipped {args.count}\n")


def _clear(op: _Op, name: str) -> None:
    api, scope, _plural, _args, out, _err = op
    tn, n = _sub_topic(api, scope, name)
    with Progress(op.err, n, f"clearing {name} on") as progress:
        for part in _parts(tn, n):
            progress.advance(part.full)
            api.post(f"{_sub_path(part, name)}/skip_all", what=("subscriptions", name))
    out.write(f"subscription/{name} cleared\n")


def _expire(op: _Op, name: str) -> None:
    api, scope, _plural, args, out, _err = op
    seconds = parse_duration_s(args.older_than, "--older-than")
    tn, n = _sub_topic(api, scope, name)
    with Progress(op.err, n, f"expiring {name} on") as progress:
        for part in _parts(tn, n):
            progress.advance(part.full)
            path = f"{_sub_path(part, name)}/expireMessages/{seconds}"
            api.post(path, what=("subscriptions", name))
    out.write(f"subscription/{name} expired messages older than {args.older_than}\n")


# --------------------------------------------------------------------------------- peek
def _message(http_raw: Any) -> dict[str, Any]:
    headers, payload = http_raw
    msg: dict[str, Any] = {}
    for k, v in headers.items():
        if k.lower().startswith("x-pulsar-"):
            msg[k[len("X-Pulsar-") :]] = v
    try:
        msg["payload"] = payload.decode("utf-8")
    except UnicodeDecodeError:
        msg["payloadBase64"] = base64.b64encode(payload).decode()
    return msg


def _raw_get(api: Api, path: str, what: tuple[str, str]) -> tuple[dict[str, str], bytes]:
    import urllib.request

    http = api.http
    req = urllib.request.Request(http.base_url + path, method="GET")
    if http.authorization:
        req.add_header("Authorization", http.authorization)
    try:
        with urllib.request.urlopen(req, timeout=http.timeout_s) as r:
            return dict(r.headers.items()), r.read()
    except urllib.error.HTTPError as exc:
        raise Api._error(
            HttpError(exc.code, reason_of(exc.code, exc.read())), "GET", path, what
        ) from None
    except OSError:
        http.request("GET", path)  # raises the transport's ConnectionFailed
        raise


def _peek(op: _Op, name: str) -> None:
    api, scope, plural, args, out, _err = op
    if args.count < 1:
        raise UsageError("-n/--count must be 1 or more")
    messages = []
    if plural == "subscriptions":
        tn, n = _sub_topic(api, scope, name)
        if n > 0:
            raise UsageError("peek applies to one partition: name it with --topic T-partition-N")
        for i in range(1, args.count + 1):
            try:
                got = _raw_get(api, f"{_sub_path(tn, name)}/position/{i}", ("subscriptions", name))
            except MagctlError as exc:
                if i > 1 and isinstance(exc, ServerError) and exc.status == 404:
                    break
                raise
            messages.append(_message(got))
    else:
        tn, n = _topic(api, scope, name)
        if n > 0:
            raise UsageError("peek applies to one partition: name it as T-partition-N")
        if args.position not in ("earliest", "latest"):
            raise UsageError('--position: "earliest" or "latest"')
        for i in range(1, args.count + 1):
            path = (
                f"/admin/v2/{tn.path}/examinemessage?initialPosition={args.position}"
                f"&messagePosition={i}"
            )
            try:
                got = _raw_get(api, path, ("topics", tn.full))
            except ServerError as exc:
                if i > 1 and exc.status == 404:
                    break
                raise
            messages.append(_message(got))
    if args.output == "yaml":
        from magnetar.client.magctl.output import dump_yaml

        out.write(dump_yaml(messages))
    elif args.output == "json":
        out.write(json.dumps(messages, indent=4) + "\n")
    else:
        for m in messages:
            mid = m.get("Message-ID", "?")
            out.write(f"--- message {mid}\n")
            for k, v in m.items():
                if k not in ("payload", "payloadBase64", "Message-ID"):
                    out.write(f"{k}: {v}\n")
            out.write((m.get("payload") or m.get("payloadBase64") or "") + "\n")


# --------------------------------------------------------------------------------- topics
def _compact(op: _Op, name: str) -> None:
    api, scope, _plural, args, out, err = op
    tn, n = _topic(api, scope, name)
    api.put(f"/admin/v2/{tn.path}/compaction", what=("topics", tn.full))
    if not args.wait:
        out.write(f"topic/{tn.full} compaction started\n")
        return
    deadline = time.monotonic() + args.timeout
    parts = _parts(tn, n)
    with Progress(err, len(parts), "compacting") as progress:
        for part in parts:
            progress.advance(part.full)
            while True:
                try:
                    status = (
                        api.get(f"/admin/v2/{part.path}/compaction", what=("topics", part.full))
                        or {}
                    )
                except ServerError as exc:
                    if n > 0 and exc.status == 404:
                        break  # a partition never written to has nothing to compact
                    raise
                state = str(status.get("status", "")).upper()
                if state == "ERROR":
                    raise MagctlError(
                        f"compaction of {part.full} failed: {status.get('lastError')}"
                    )
                if state != "RUNNING":
                    break
                if time.monotonic() > deadline:
                    raise MagctlError(
                        f"compaction of {part.full} still running after {args.timeout:g} s"
                    )
                progress.status(f"{part.full} (running)")
                time.sleep(0.5)  # polling period of a deadline-bounded wait
    out.write(f"topic/{tn.full} compacted\n")


def _offload(op: _Op, name: str) -> None:
    """Pulsar's ``topics offload``: every sealed ledger (or every ledger before ``--until``)
    moves to tiered storage, partition by partition; ``--wait`` follows each one's status
    (``GET .../offload``) and how many of its ledgers are offloaded (internal stats)."""
    api, scope, _plural, args, out, err = op
    tn, n = _topic(api, scope, name)
    if args.until and n > 0:
        raise UsageError(
            f"--until names a message of one partition: give the partition ({tn.full}-partition-N)"
        )
    body = position_body(args.until) if args.until else None
    started: list[TopicName] = []
    for part in _parts(tn, n):
        try:
            api.put(f"/admin/v2/{part.path}/offload", body, what=("topics", part.full))
        except ServerError as exc:
            if n > 0 and exc.status == 404:
                continue  # a partition never written to has nothing to offload
            raise
        started.append(part)
    if not args.wait:
        out.write(f"topic/{tn.full} offload started\n")
        return
    deadline = time.monotonic() + args.timeout
    firsts: list[str] = []
    with Progress(err, len(started), "offloading") as progress:
        for part in started:
            progress.advance(part.full)
            while True:
                status = api.get(f"/admin/v2/{part.path}/offload", what=("topics", part.full))
                state = str((status or {}).get("status", "")).upper()
                if state == "ERROR":
                    raise MagctlError(f"offload of {part.full} failed: {status.get('lastError')}")
                if state != "RUNNING":
                    first = (status or {}).get("firstUnoffloadedMessage") or {}
                    firsts.append(f"{first.get('ledgerId', -1)}:{first.get('entryId', -1)}")
                    break
                if time.monotonic() > deadline:
                    raise MagctlError(
                        f"offload of {part.full} still running after {args.timeout:g} s"
                    )
                stats = api.get(f"/admin/v2/{part.path}/internalStats", what=("topics", part.full))
                ledgers = (stats or {}).get("ledgers") or []
                done = sum(1 for ledger in ledgers[:-1] if ledger.get("offloaded"))
                progress.status(f"{part.full} ({done}/{max(0, len(ledgers) - 1)} ledgers)")
                time.sleep(0.5)  # polling period of a deadline-bounded wait
    before = ", ".join(firsts) if firsts else "nothing to offload"
    out.write(f"topic/{tn.full} offloaded (messages before {before})\n")


def _terminate(op: _Op, name: str) -> None:
    api, scope, _plural, args, out, _err = op
    tn, n = _topic(api, scope, name)
    if n > 0:
        got = api.post(f"/admin/v2/{tn.path}/terminate/partitions", what=("topics", tn.full))
    else:
        got = api.post(f"/admin/v2/{tn.path}/terminate", what=("topics", tn.full))
    got = got or {}
    if args.output == "json":
        out.write(json.dumps(got, indent=4) + "\n")
    elif args.output == "yaml":
        from magnetar.client.magctl.output import dump_yaml

        out.write(dump_yaml(got))
    elif n > 0:
        ids = ", ".join(
            f"{i}={m.get('ledgerId')}:{m.get('entryId')}"
            for i, m in sorted(got.items(), key=lambda kv: int(kv[0]))
        )
        out.write(f"topic/{tn.full} terminated (last message ids {ids})\n")
    else:
        out.write(
            f"topic/{tn.full} terminated (last message id "
            f"{got.get('ledgerId')}:{got.get('entryId')})\n"
        )


def _truncate(op: _Op, name: str) -> None:
    api, scope, _plural, _args, out, _err = op
    tn, _n = _topic(api, scope, name)
    api.delete(f"/admin/v2/{tn.path}/truncate", what=("topics", tn.full))
    out.write(f"topic/{tn.full} truncated\n")


def _scale(op: _Op, name: str) -> None:
    api, scope, _plural, args, out, _err = op
    tn, n = _topic(api, scope, name)
    if n == 0:
        raise UsageError(f"topic {tn.full} is not partitioned; only partitioned topics scale")
    if args.partitions < n:
        raise UsageError(f"partitions can only grow ({n} -> {args.partitions})")
    if args.partitions == n:
        out.write(f"topic/{tn.full} unchanged ({n} partitions)\n")
        return
    api.post(f"/admin/v2/{tn.path}/partitions", args.partitions, what=("topics", tn.full))
    out.write(f"topic/{tn.full} scaled to {args.partitions} partitions\n")


def _lookup(op: _Op, name: str) -> None:
    api, scope, _plural, args, out, _err = op
    tn, n = _topic(api, scope, name)
    rows = []
    for part in _parts(tn, n):
        got = api.get(f"/lookup/v2/topic/{part.path}", what=("topics", part.full)) or {}
        rows.append(
            {
                "topic": part.full,
                "brokerUrl": str(got.get("brokerUrl")),
                "httpUrl": str(got.get("httpUrl")),
            }
        )
    if args.output == "json":
        out.write(json.dumps(rows if n else rows[0], indent=4) + "\n")
    elif args.output == "yaml":
        from magnetar.client.magctl.output import dump_yaml

        out.write(dump_yaml(rows if n else rows[0]))
    else:
        from magnetar.client.magctl.output import table

        out.write(
            table(
                ["TOPIC", "BROKER-URL", "HTTP-URL"],
                [[r["topic"], r["brokerUrl"], r["httpUrl"]] for r in rows],
            )
        )


__all__ = ["run"]
