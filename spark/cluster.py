"""What the data source asks the cluster, through ``magnetar.client`` and the admin REST API.

Owns: opening a ``Client`` from ``ClientSettings``; resolving a topic selection to its
topic-partitions (a pattern through the namespace's topic list); each partition's last message
id (the fixed end of a batch read or a micro-batch), waiting for topics that do not exist yet
when asked (``waitingForNonExistedTopic``, else ``TopicMissing``); the first message at or
after a publish time; reading a range of one topic-partition with a non-durable reader
(``read_range``: the data-loss check and the end bound live here) and one split of it, its
entries ``first`` .. ``last`` (``read_entries``); a topic-partition's storage layout, its
ledgers and their bookies (``fetch_layout``: the broker's ``/ledgers`` admin endpoint, asked
of the topic's owner); the optional durable progress cursor (``advance_cursor``); and
deduplication on write targets (``ensure_deduplication``: the topic-level
``deduplicationEnabled`` policy over HTTP, then waiting until loaded partitions report it).

Must not know: Spark.
"""

from __future__ import annotations

import asyncio
import base64
import json
import logging
import ssl
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import AsyncGenerator
from typing import Any

from magnetar.client import Client, InitialPosition, Message, MessageId, Timeout, TopicNotFound
from magnetar.spark.layout import LayoutError, PartitionLayout, parse_layout
from magnetar.spark.options import ClientSettings, TopicSelection
from magnetar.spark.positions import Position, Start, ends_by

log = logging.getLogger(__name__)


class DataLossError(RuntimeError):
    """Messages a query still needed are gone (retention, a deleted topic)."""


class TopicMissing(RuntimeError):
    """A topic the query names does not exist (its namespace does not create topics on
    first use) and the query was not told to wait for it."""


class DeduplicationError(RuntimeError):
    """Exactly-once writes were asked for and the topic's deduplication is off."""


def open_client(settings: ClientSettings) -> Client:
    return Client(settings.service_url, **settings.client_kwargs)


def position_of(mid: MessageId) -> Position:
    return Position(mid.ledger_id(), mid.entry_id(), mid.batch_index())


def message_id(pos: Position) -> MessageId:
    return MessageId(-1, pos.ledger, pos.entry, pos.batch)


async def resolve_partitions(client: Client, selection: TopicSelection) -> list[str]:
    """Every topic-partition of the selection, sorted (a non-partitioned topic is itself)."""
    topics = (
        list(selection.topics)
        if selection.pattern is None
        else await client.get_topics_matching(selection.pattern)
    )
    parts = await asyncio.gather(*(client.get_topic_partitions(t) for t in topics))
    return sorted({p for group in parts for p in group})


async def last_positions(client: Client, partitions: list[str]) -> dict[str, Position | None]:
    """The id of each partition's last message now (``None``: the partition is empty)."""

    async def one(name: str) -> tuple[str, Position | None]:
        try:
            reader = await client.create_reader(name, MessageId.latest)
        except TopicNotFound:
            raise TopicMissing(f"topic {name} does not exist") from None
        try:
            last = await reader.get_last_message_id()
        finally:
            await reader.close()
        return name, (position_of(last) if last.entry_id() >= 0 else None)

    return dict(await asyncio.gather(*(one(p) for p in partitions)))


WAIT_FOR_TOPIC_POLL_S = 1.0
"""How often planning looks again for a topic it waits for (``waitingForNonExistedTopic``)."""


async def partitions_and_lasts(
    client: Client, selection: TopicSelection, *, wait: bool
) -> tuple[list[str], dict[str, Position | None]]:
    """``resolve_partitions`` and each one's ``last_positions``: where planning starts. A
    topic that does not exist: with ``wait`` (``waitingForNonExistedTopic``) look again every
    ``WAIT_FOR_TOPIC_POLL_S`` until it does (a pattern: until it matches a topic), else
    ``TopicMissing`` naming it and the option."""
    told = False
    while True:
        parts = await resolve_partitions(client, selection)
        what = f"a topic matching {selection.pattern!r}"
        if parts:
            try:
                return parts, await last_positions(client, parts)
            except TopicMissing as exc:
                if not wait:
                    raise TopicMissing(
                        f"{exc}; with option waitingForNonExistedTopic=true the query waits "
                        "until it is created"
                    ) from None
                what = str(exc).removeprefix("topic ").removesuffix(" does not exist")
        elif not wait:
            return parts, {}
        if not told:
            log.warning("waiting for %s to be created (waitingForNonExistedTopic)", what)
            told = True
        await asyncio.sleep(WAIT_FOR_TOPIC_POLL_S)


async def start_at_time(
    client: Client, partition: str, time_ms: int, last: Position | None, timeout_ms: int
) -> Start:
    """Where to start so the first message read is the first published at or after
    ``time_ms`` (the broker's seek by publish time); after ``last`` when there is none."""
    if last is None:
        return Start.earliest()
    reader = await client.create_reader(partition, MessageId.earliest)
    try:
        await reader.seek(time_ms)
        try:
            msg = await reader.read_next(timeout_ms)
        except Timeout:
            return Start.after(last)
        return Start.at(position_of(msg.message_id()))
    finally:
        await reader.close()


async def read_range(
    client: Client,
    partition: str,
    start: Start,
    end: Position,
    *,
    fail_on_data_loss: bool,
    poll_timeout_ms: int,
    reader_kwargs: dict[str, Any],
) -> AsyncGenerator[Message, None]:
    """The messages of ``partition`` after/at ``start`` up to ``end`` inclusive, in order.

    Starting ``after`` a position, the reader opens inclusive on it and expects to read it
    first (then skips it): any other first message means it is gone, so data was lost.
    """
    if start.position is None:
        reader = await client.create_reader(partition, MessageId.earliest, **reader_kwargs)
    else:
        reader = await client.create_reader(
            partition,
            message_id(start.position),
            start_message_id_inclusive=True,
            **reader_kwargs,
        )
    try:
        first = start.position is not None
        while True:
            try:
                msg = await reader.read_next(poll_timeout_ms)
            except Timeout:
                data_loss(
                    fail_on_data_loss,
                    f"{partition}: no message after {poll_timeout_ms} ms (pollTimeoutMs) though "
                    f"the range ends at {end}; the messages may have been deleted",
                )
                return
            pos = position_of(msg.message_id())
            if first:
                first = False
                p = start.position
                assert p is not None
                if pos != p and (p.batch >= 0 or (pos.ledger, pos.entry) != (p.ledger, p.entry)):
                    data_loss(
                        fail_on_data_loss,
                        f"{partition}: the message {p} the query "
                        f"{'resumes after' if start.kind == 'after' else 'starts at'} is gone "
                        f"(the first message still there is {pos}); messages were deleted by "
                        "retention or the topic was deleted",
                    )
            if not ends_by(pos, end):
                return
            if start.includes(pos):
                yield msg
            if await _end_reached(reader, pos, end):
                return
    finally:
        await reader.close()


async def _end_reached(reader: Any, pos: Position, end: Position) -> bool:
    """Whether no message after ``pos`` is within ``end`` (an end naming a whole entry: once
    its members are read, which the reader tells when nothing more is available)."""
    if end.batch >= 0:
        return pos >= end
    if (pos.ledger, pos.entry) < (end.ledger, end.entry):
        return False
    return pos.batch < 0 or not await reader.has_message_available()


async def read_entries(
    client: Client,
    partition: str,
    first: Position,
    last: Position,
    *,
    start: Start,
    end: Position,
    fail_on_data_loss: bool,
    poll_timeout_ms: int,
    reader_kwargs: dict[str, Any],
) -> AsyncGenerator[Message, None]:
    """The messages of the entries ``first`` .. ``last`` (their ledger and entry ids) of
    ``partition`` that lie after/at ``start`` and up to ``end``, in order: one split of a
    read, through a non-durable reader opened inclusive on ``first``'s entry.

    The first message must be in that entry: a later one means the entries before it are
    gone (or are chunks of a message that started before the split: a split boundary must
    not cut a chunked message, see docs/spark.md), which is data loss."""
    reader = await client.create_reader(
        partition,
        MessageId(-1, first.ledger, first.entry, -1),
        start_message_id_inclusive=True,
        **reader_kwargs,
    )
    last_entry = (last.ledger, last.entry)
    try:
        checked = False
        while True:
            try:
                msg = await reader.read_next(poll_timeout_ms)
            except Timeout:
                data_loss(
                    fail_on_data_loss,
                    f"{partition}: no message after {poll_timeout_ms} ms (pollTimeoutMs) though "
                    f"the split ends at {last.ledger}:{last.entry}; the messages may have been "
                    "deleted",
                )
                return
            pos = position_of(msg.message_id())
            if not checked:
                checked = True
                if (pos.ledger, pos.entry) != (first.ledger, first.entry):
                    data_loss(
                        fail_on_data_loss,
                        f"{partition}: entry {first.ledger}:{first.entry} is gone (the first "
                        f"message there is {pos}); messages were deleted by retention, the "
                        "topic was deleted, or a chunked message crosses a split boundary",
                    )
            if (pos.ledger, pos.entry) > last_entry or not ends_by(pos, end):
                return
            if start.includes(pos):
                yield msg
            if (pos.ledger, pos.entry) == last_entry and (
                pos.batch < 0 or await _end_reached(reader, pos, end)
            ):
                return  # else more members, or the next entry (beyond the split) ends it
    finally:
        await reader.close()


def data_loss(fail: bool, what: str) -> None:
    """Lost messages: ``DataLossError`` (``failOnDataLoss=true``) or a warning."""
    if fail:
        raise DataLossError(
            f"data loss: {what}. Set the option failOnDataLoss=false to skip the lost "
            "messages with a warning instead."
        )
    log.warning("data loss (failOnDataLoss=false, skipping): %s", what)


async def advance_cursor(client: Client, subscription: str, positions: dict[str, Position]) -> None:
    """Move the durable ``subscription`` of each partition to ``positions`` (cumulative
    acknowledgement): progress for backlog and retention only, never for correctness."""

    async def one(name: str, pos: Position) -> None:
        consumer = await client.subscribe(
            name, subscription, initial_position=InitialPosition.Earliest
        )
        try:
            await consumer.acknowledge_cumulative(message_id(pos))
            await consumer.flush_acknowledgements()
        finally:
            await consumer.close()

    await asyncio.gather(*(one(n, p) for n, p in positions.items()))


# ---------------------------------------------------------------------------- admin REST


def _admin_auth(settings: ClientSettings | None) -> tuple[dict[str, str], ssl.SSLContext | None]:
    """The client options' token as ``Authorization: Bearer`` (basic credentials as
    ``Authorization: Basic``) and their CA (and client certificate) as the HTTPS context, so
    admin calls carry the reads' credentials."""
    if settings is None:
        return {}, None
    kw = settings.client_kwargs
    headers = {}
    auth = kw.get("authentication")
    if auth is not None:
        method = getattr(auth, "auth_method_name", "")
        if method == "token":
            headers["Authorization"] = f"Bearer {auth.auth_data().decode()}"
        elif method == "basic":
            headers["Authorization"] = f"Basic {base64.b64encode(auth.auth_data()).decode()}"
    ctx = None
    if kw.get("tls_trust_certs_file_path") or kw.get("tls_certificate_file_path"):
        ctx = ssl.create_default_context(cafile=kw.get("tls_trust_certs_file_path") or None)
        ctx.check_hostname = bool(kw.get("tls_validate_hostname", False))
        if kw.get("tls_certificate_file_path"):
            ctx.load_cert_chain(
                kw["tls_certificate_file_path"], kw.get("tls_private_key_file_path") or None
            )
    if kw.get("tls_allow_insecure_connection"):
        ctx = ctx or ssl.create_default_context()
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
    return headers, ctx


def _http(
    method: str,
    url: str,
    body: Any = None,
    timeout_s: float = 30,
    settings: ClientSettings | None = None,
) -> tuple[int, Any]:
    data = None if body is None else json.dumps(body).encode()
    headers, ctx = _admin_auth(settings)
    req = urllib.request.Request(url, data=data, method=method, headers=headers)
    req.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(req, timeout=timeout_s, context=ctx) as resp:
            raw = resp.read()
            return resp.status, (json.loads(raw) if raw else None)
    except urllib.error.HTTPError as exc:
        raw = exc.read()
        try:
            return exc.code, (json.loads(raw) if raw else None)
        except ValueError:
            return exc.code, raw.decode(errors="replace")
    except (urllib.error.URLError, OSError) as exc:  # unreachable, TLS refused
        return 0, f"{url}: {getattr(exc, 'reason', exc)}"


def _rest_path(topic: str) -> str:
    domain, _, rest = topic.partition("://")
    tenant, ns, local = rest.split("/", 2)
    return f"{domain}/{tenant}/{ns}/{urllib.parse.quote(local, safe='')}"


class LayoutUnavailable(RuntimeError):
    """The admin REST API did not give a topic-partition's ledgers (no admin URL, refused,
    unreachable, or a broker without the ``/ledgers`` endpoint)."""


def fetch_layout(settings: ClientSettings, partition: str) -> PartitionLayout:
    """Where ``partition``'s entries are stored: its ``/ledgers`` document from the broker
    that owns it (found with the HTTP lookup; the admin URL itself when the lookup names no
    other), with the client options' credentials. ``LayoutUnavailable`` says why not."""
    admin = settings.admin_url
    if admin is None:
        raise LayoutUnavailable("no 'admin.url' option")
    path = _rest_path(partition)
    owner = admin
    status, doc = _http("GET", f"{admin}/lookup/v2/topic/{path}", settings=settings)
    if status == 200 and isinstance(doc, dict):
        key = "httpUrlTls" if admin.startswith("https:") else "httpUrl"
        owner = str(doc.get(key) or admin).rstrip("/")
    status, doc = _http("GET", f"{owner}/admin/v2/{path}/ledgers", settings=settings)
    if status != 200 and owner != admin:
        status, doc = _http("GET", f"{admin}/admin/v2/{path}/ledgers", settings=settings)
    if status != 200:
        raise LayoutUnavailable(f"GET {owner}/admin/v2/{path}/ledgers: HTTP {status}: {doc}")
    try:
        return parse_layout(partition, doc)
    except LayoutError as exc:
        raise LayoutUnavailable(f"{partition}: {exc}") from None


def ensure_deduplication(
    admin_url: str,
    topic: str,
    partitions: list[str],
    timeout_s: float = 60,
    settings: ClientSettings | None = None,
) -> None:
    """Turn on the topic's ``deduplicationEnabled`` policy and wait until every loaded
    partition applies it; ``DeduplicationError`` when that cannot be done. ``settings``:
    the client options, whose token and CA the admin calls use."""
    base = f"{admin_url}/admin/v2/{_rest_path(topic)}"
    # Pulsar's topic path, then the namespace's name
    status, body = _http("POST", f"{base}/deduplicationEnabled", True, settings=settings)
    if status in (404, 405):
        status, body = _http("POST", f"{base}/deduplication", True, settings=settings)
    if status not in (200, 204):
        raise DeduplicationError(
            f"exactlyOnce=true: cannot enable deduplication on {topic} through {admin_url} "
            f"(HTTP {status}: {body}); enable it (pulsar-admin topics set-deduplication "
            "--enable) or write with exactlyOnce=false"
        )
    deadline = time.monotonic() + timeout_s
    pending = list(partitions)
    while pending:
        name = pending[0]
        status, stats = _http(
            "GET", f"{admin_url}/admin/v2/{_rest_path(name)}/stats", settings=settings
        )
        if status == 404 or (
            isinstance(stats, dict) and stats.get("deduplicationStatus") == "Enabled"
        ):
            pending.pop(0)  # not loaded: it loads with the policy
            continue
        if status != 200:
            raise DeduplicationError(
                f"exactlyOnce=true: cannot read the stats of {name} (HTTP {status}: {stats})"
            )
        if time.monotonic() > deadline:
            raise DeduplicationError(
                f"exactlyOnce=true: deduplication on {name} is still "
                f"{stats.get('deduplicationStatus')!r} {timeout_s:.0f} s after enabling it"
            )
        time.sleep(0.05)  # polling interval of a deadline-bounded wait


__all__ = [
    "DataLossError",
    "DeduplicationError",
    "LayoutUnavailable",
    "advance_cursor",
    "data_loss",
    "ensure_deduplication",
    "fetch_layout",
    "last_positions",
    "message_id",
    "open_client",
    "position_of",
    "read_entries",
    "read_range",
    "resolve_partitions",
    "start_at_time",
]
