"""magctl's pure parts: units, JSONPath templates, label selectors, resource names,
policy canonical forms, table layout, client.conf parsing, the progress line's drawing."""

from __future__ import annotations

import io

import pytest

from magnetar.client.magctl.config import parse_client_conf
from magnetar.client.magctl.errors import UsageError
from magnetar.client.magctl.jsonpath import render
from magnetar.client.magctl.output import OutputFormat, table
from magnetar.client.magctl.policyspec import POLICIES, canonical_policies
from magnetar.client.magctl.progress import CLEAR_LINE, Progress
from magnetar.client.magctl.resources import RESOURCES, TopicName, resolve
from magnetar.client.magctl.selectors import matches, parse_selector
from magnetar.client.magctl.units import (
    format_duration_s,
    format_size_bytes,
    parse_duration_s,
    parse_size_bytes,
)

DOC = {
    "kind": "List",
    "items": [
        {"metadata": {"name": "a", "labels": {"team": "pay"}}, "spec": {"partitions": 3}},
        {"metadata": {"name": "b"}, "spec": {"partitions": 0}},
    ],
}


def test_durations_and_sizes_round_trip() -> None:
    assert parse_duration_s("3h") == 10800
    assert parse_duration_s("7d") == 604800
    assert parse_duration_s(90) == 90
    assert format_duration_s(604800) == "1w"
    assert format_duration_s(5400) == "90m"
    assert parse_size_bytes("10G") == 10 << 30
    assert format_size_bytes(512 << 20) == "512M"
    assert parse_duration_s(-1) == -1
    with pytest.raises(UsageError):
        parse_duration_s("3 fortnights")
    with pytest.raises(UsageError):
        parse_size_bytes("lots")


def test_jsonpath_kubectl_templates() -> None:
    assert render("{.items[*].metadata.name}", DOC) == "a b"
    assert render('{range .items[*]}{.metadata.name}:{.spec.partitions}{"\\n"}{end}', DOC) == (
        "a:3\nb:0\n"
    )
    assert render(".items[0].metadata.name", DOC) == "a"
    assert render("name={.items[1].metadata.name}", DOC) == "name=b"
    with pytest.raises(UsageError):
        render("{range .items[*]}{.metadata.name}", DOC)


def test_label_selectors() -> None:
    labels = {"team": "pay", "tier": "prod"}
    assert matches(parse_selector("team=pay"), labels)
    assert matches(parse_selector("team==pay,tier!=test"), labels)
    assert matches(parse_selector("tier in (prod,staging)"), labels)
    assert not matches(parse_selector("tier notin (prod)"), labels)
    assert matches(parse_selector("team"), labels)
    assert matches(parse_selector("!owner"), labels)
    assert not matches(parse_selector("team=ops"), labels)
    assert not matches(parse_selector("team"), None)


def test_every_resource_resolves_by_plural_singular_and_short_name() -> None:
    for r in RESOURCES:
        for name in (r.plural, r.singular, r.short, r.plural.upper()):
            assert resolve(name) is r
    assert resolve("tp").plural == "topics"
    assert resolve("sub").plural == "subscriptions"
    with pytest.raises(UsageError, match='resource type "topcs"'):
        resolve("topcs")


def test_topic_names_full_short_and_three_part() -> None:
    assert TopicName.parse("persistent://acme/prod/x").full == "persistent://acme/prod/x"
    assert TopicName.parse("x", "acme/prod").full == "persistent://acme/prod/x"
    assert TopicName.parse("acme/prod/x").full == "persistent://acme/prod/x"
    assert TopicName.parse("non-persistent://a/b/c").persistent is False
    assert TopicName.parse("a/b/c-partition-3").partition_index == 3
    with pytest.raises(UsageError):
        TopicName.parse("a/b")
    with pytest.raises(UsageError):
        TopicName.parse("kafka://a/b/c")


def test_policies_canonical_forms_compare_equal_to_the_servers() -> None:
    got = canonical_policies({"retention": {"time": "7d", "size": "10G"}, "messageTTL": 3600})
    assert got["retention"] == POLICIES["retention"].from_server(
        {"retentionTimeInMinutes": 7 * 24 * 60, "retentionSizeInMB": 10240}
    )
    assert got["messageTTL"] == POLICIES["messageTTL"].from_server(3600) == "1h"
    assert canonical_policies({"messageTTL": None}) == {"messageTTL": None}
    with pytest.raises(UsageError, match="unknown policy"):
        canonical_policies({"retension": {}})
    with pytest.raises(UsageError):
        canonical_policies({"backlogQuotas": [{"type": "nope"}]})


def test_output_formats_and_table_layout() -> None:
    assert OutputFormat.parse("jsonpath={.a}").arg == "{.a}"
    assert OutputFormat.parse(None).kind == "table"
    with pytest.raises(UsageError, match="allowed formats"):
        OutputFormat.parse("xml")
    with pytest.raises(UsageError):
        OutputFormat.parse("jsonpath")
    assert table(["NAME", "N"], [["a", "1"], ["long-name", "22"]]) == (
        "NAME        N\na           1\nlong-name   22\n"
    )
    assert table(["NAME"], [["a"]], no_headers=True) == "a\n"


def test_client_conf_properties() -> None:
    props = parse_client_conf(
        "# comment\nwebServiceUrl=http://h:8080/\nbrokerServiceUrl = pulsar://h:6650\n"
        "authPlugin=org.apache.pulsar.client.impl.auth.AuthenticationToken\n"
        "authParams=token:abc\n"
    )
    assert props["webServiceUrl"] == "http://h:8080/"
    assert props["brokerServiceUrl"] == "pulsar://h:6650"
    assert props["authParams"] == "token:abc"


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        if self.closed:
            raise ValueError("I/O operation on closed file")  # as a real file does
        return True


def test_progress_draws_on_a_terminal_around_result_lines(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("TERM", "xterm")
    err, out = _Terminal(), io.StringIO()
    with Progress(err, 2, "applying") as progress:
        progress.advance("a.yaml")
        progress.echo(out, "tenant/a created\n")
        progress.advance("b.yaml")
        progress.status("b.yaml (running)")
    assert out.getvalue() == "tenant/a created\n"
    c = CLEAR_LINE
    assert err.getvalue() == (
        f"{c}[1/2] applying a.yaml{c}{c}[1/2] applying a.yaml"
        f"{c}[2/2] applying b.yaml{c}[2/2] applying b.yaml (running){c}"
    )


def test_progress_is_silent_on_a_pipe_a_dumb_terminal_and_a_closed_stream(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("TERM", "dumb")
    for err in (io.StringIO(), _Terminal()):
        out = io.StringIO()
        with Progress(err, 3, "deleting") as progress:
            progress.advance("x")
            progress.echo(out, "deleted\n")
        assert (err.getvalue(), out.getvalue()) == ("", "deleted\n")
    closed = _Terminal()
    closed.close()
    monkeypatch.setenv("TERM", "xterm")
    assert not Progress(closed, 3, "x").enabled
