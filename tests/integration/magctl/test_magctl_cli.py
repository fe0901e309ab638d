"""magctl without a server: usage errors, unreachable servers, contexts, completion, tooling.

Exit codes and stderr are checked on the real process (``magctl_proc``); nothing may print a
traceback.
"""

from __future__ import annotations

import pathlib
import shutil
import subprocess
import sys

import pytest
import yaml
from support.magctl import Magctl
from support.net import free_port


def _no_traceback(text: str) -> None:
    assert "Traceback" not in text


def test_unknown_resource_is_a_usage_error(magctl_proc: Magctl) -> None:
    r = magctl_proc("get", "topcs")
    assert r.code == 2
    assert r.err.strip() == 'error: the server doesn\'t have a resource type "topcs"'
    _no_traceback(r.err)


def test_unknown_flag_in_kubectl_form(magctl_proc: Magctl) -> None:
    r = magctl_proc("create", "topic", "x", "--partitons", "3")
    assert r.code == 2
    assert r.err.strip() == "error: unknown flag: --partitons"
    _no_traceback(r.err)


def test_unknown_command(magctl_proc: Magctl) -> None:
    r = magctl_proc("gett", "topics")
    assert r.code == 2
    assert r.err.splitlines()[0] == 'error: unknown command "gett" for "magctl"'
    _no_traceback(r.err)


def test_missing_argument_and_bad_output_format_are_usage_errors(magctl: Magctl) -> None:
    r = magctl("skip", "sub", "s")
    assert r.code == 2
    assert r.err.startswith("error: ")
    r = magctl("get", "topics", "-o", "xml", admin_url="http://127.0.0.1:1")
    assert r.code == 2
    assert "unable to match a printer" in r.err


def test_unreachable_server_is_a_clear_error(magctl_proc: Magctl) -> None:
    port = free_port()
    r = magctl_proc("get", "tenants", admin_url=f"http://127.0.0.1:{port}")
    assert r.code == 1
    assert r.err.strip() == (
        f"error: The connection to the server 127.0.0.1:{port} was refused - "
        "did you specify the right host or port?"
    )
    _no_traceback(r.err)


def test_help_and_client_version_need_no_server(magctl_proc: Magctl) -> None:
    r = magctl_proc("--help")
    assert r.code == 0
    assert "magctl <verb> <resource>" in r.out
    r = magctl_proc("version", "--client")
    assert r.code == 0
    assert r.out == "Client Version: 0.1.0\n"


def test_api_resources_lists_every_type_with_its_short_name(magctl: Magctl) -> None:
    r = magctl("api-resources")
    assert r.code == 0
    lines = r.out.splitlines()
    assert lines[0].split() == ["NAME", "SHORTNAMES", "APIVERSION", "NAMESPACED", "KIND"]
    rows = {line.split()[0]: line.split()[1] for line in lines[1:]}
    assert rows == {
        "clusters": "cl",
        "tenants": "tn",
        "namespaces": "ns",
        "topics": "tp",
        "partitions": "pt",
        "subscriptions": "sub",
        "bundles": "bdl",
        "brokers": "br",
        "bookies": "bk",
        "ledgers": "lg",
    }


def test_explain_a_kind_and_a_policy(magctl: Magctl) -> None:
    r = magctl("explain", "topic")
    assert r.code == 0
    assert "partitions" in r.out
    r = magctl("explain", "namespace.spec.policies.retention")
    assert r.code == 0
    assert "7d" in r.out
    assert magctl("explain", "topic.nope").code == 2


@pytest.mark.parametrize(
    ("manifest", "message"),
    [
        ("apiVersion: v1\nkind: Topic\nmetadata: {name: x}\n", "apiVersion must be"),
        ("apiVersion: magnetar.io/v1alpha1\nkind: Pod\nmetadata: {name: x}\n", 'no kind "Pod"'),
        ("apiVersion: magnetar.io/v1alpha1\nkind: Topic\nmetadata: {}\n", "metadata.name"),
        (
            "apiVersion: magnetar.io/v1alpha1\nkind: Topic\nmetadata: {name: x}\n"
            "spec: {partitons: 3}\n",
            "unknown field(s) in Topic.spec: partitons",
        ),
        (
            "apiVersion: magnetar.io/v1alpha1\nkind: Namespace\nmetadata: {name: a/b}\n"
            "spec: {policies: {messageTTL: soon}}\n",
            "expected a duration",
        ),
        ("kind: [unclosed\n", "error parsing"),
    ],
)
def test_bad_manifests_are_refused_before_anything_is_sent(
    magctl_proc: Magctl, tmp_path: pathlib.Path, manifest: str, message: str
) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text(manifest)
    unreachable = f"http://127.0.0.1:{free_port()}"  # validation happens before any request
    r = magctl_proc("apply", "-f", str(path), admin_url=unreachable)
    assert r.code == 2, r.err
    assert message in r.err
    _no_traceback(r.err)
    d = magctl_proc("diff", "-f", str(path), admin_url=unreachable)
    assert d.code > 1
    assert message in d.err


def test_missing_manifest_file(magctl: Magctl, tmp_path: pathlib.Path) -> None:
    r = magctl("apply", "-f", str(tmp_path / "nope.yaml"))
    assert r.code == 2
    assert "does not exist" in r.err


def test_contexts_set_use_view_and_select_the_admin_url(
    magctl: Magctl, config_file: pathlib.Path
) -> None:
    a, b = free_port(), free_port()
    assert (
        magctl(
            "config",
            "set-context",
            "one",
            "--admin-url",
            f"http://127.0.0.1:{a}",
            "--ns",
            "acme/prod",
            "--token",
            "s3cret",
        ).code
        == 0
    )
    assert magctl("config", "set-context", "two", "--admin-url", f"http://127.0.0.1:{b}").code == 0
    assert magctl("config", "current-context").out == "one\n"
    listed = magctl("config", "get-contexts").out.splitlines()
    assert listed[0].split() == ["CURRENT", "NAME", "CLUSTER", "AUTHINFO", "NAMESPACE"]
    assert listed[1].split() == ["*", "one", "one", "one", "acme/prod"]
    # the current context's URL is used; --context picks another; --admin-url wins over both
    assert f"127.0.0.1:{a}" in magctl("get", "tenants").err
    assert f"127.0.0.1:{b}" in magctl("get", "tenants", "--context", "two").err
    assert magctl("config", "use-context", "two").out == 'Switched to context "two".\n'
    assert f"127.0.0.1:{b}" in magctl("get", "tenants").err
    view = yaml.safe_load(magctl("config", "view").out)
    assert view["current-context"] == "two"
    assert {u["name"]: u["user"]["token"] for u in view["users"]} == {"one": "REDACTED"}
    raw = yaml.safe_load(magctl("config", "view", "--raw").out)
    assert raw["users"][0]["user"]["token"] == "s3cret"
    assert config_file.stat().st_mode & 0o077 == 0
    r = magctl("config", "use-context", "three")
    assert r.code == 1
    assert 'no context exists with the name: "three"' in r.err
    assert magctl("get", "tenants", "--context", "nope").err.strip() == (
        'error: context "nope" does not exist'
    )


def test_import_a_pulsar_client_conf(magctl: Magctl, tmp_path: pathlib.Path) -> None:
    port = free_port()
    conf = tmp_path / "client.conf"
    conf.write_text(
        f"webServiceUrl=http://127.0.0.1:{port}/\nbrokerServiceUrl=pulsar://127.0.0.1:6650\n"
        "authPlugin=org.apache.pulsar.client.impl.auth.AuthenticationToken\n"
        "authParams=token:abc\n"
    )
    r = magctl("config", "import", str(conf), "--name", "legacy")
    assert r.code == 0, r.err
    assert magctl("config", "current-context").out == "legacy\n"
    assert f"127.0.0.1:{port}" in magctl("get", "tenants").err
    raw = yaml.safe_load(magctl("config", "view", "--raw").out)
    assert raw["users"][0]["user"]["token"] == "abc"


def test_bash_completion_script_loads(tmp_path: pathlib.Path, magctl: Magctl) -> None:
    script = magctl("completion", "bash").out
    bindir = tmp_path / "bin"
    bindir.mkdir()
    shim = f'#!/bin/sh\nexec {sys.executable} -m magnetar.client.magctl "$@"\n'
    (bindir / "magctl").write_text(shim)
    (bindir / "magctl").chmod(0o755)
    done = subprocess.run(
        [
            "bash",
            "-c",
            "source <(magctl completion bash) && complete -p magctl && "
            "COMP_WORDS=(magctl ge); COMP_CWORD=1; _magctl; echo ${COMPREPLY[@]}; "
            "COMP_WORDS=(magctl get to); COMP_CWORD=2; _magctl; echo ${COMPREPLY[@]}; "
            "COMP_WORDS=(magctl compact topic x --w); COMP_CWORD=4; _magctl; echo ${COMPREPLY[@]}; "
            "COMP_WORDS=(magctl get --so); COMP_CWORD=2; _magctl; echo ${COMPREPLY[@]}; "
            "COMP_WORDS=(magctl expire --ol); COMP_CWORD=2; _magctl; echo ${COMPREPLY[@]}; "
            "COMP_WORDS=(magctl --na); COMP_CWORD=1; _magctl; echo ${COMPREPLY[@]}; "
            "COMP_WORDS=(magctl config set-context dev --se); COMP_CWORD=4; _magctl; "
            "echo ${COMPREPLY[@]}; "
            "COMP_WORDS=(magctl config view --mi); COMP_CWORD=3; _magctl; echo ${COMPREPLY[@]}; "
            "COMP_WORDS=(magctl config se); COMP_CWORD=2; _magctl; echo ${COMPREPLY[@]}",
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env={"PATH": f"{bindir}:/usr/bin:/bin", "HOME": str(tmp_path)},
    )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0] == "complete -o default -F _magctl magctl"
    assert lines[1] == "get"
    assert lines[2].split() == ["topics", "topic"]
    # each verb's own flags, read from the parser
    assert lines[3] == "--wait"
    assert lines[4] == "--sort-by"
    assert lines[5] == "--older-than"
    assert lines[6] == "--namespace"
    # a verb's subcommands, and each subcommand's own flags
    assert lines[7].split() == ["--server", "--service-url"]
    assert lines[8] == "--minify"
    assert lines[9] == "set-context"
    assert "complete -o default -F _magctl magctl" in script


def test_zsh_and_fish_completion_scripts(magctl: Magctl) -> None:
    zsh = magctl("completion", "zsh").out
    assert zsh.startswith("#compdef magctl")
    fish = magctl("completion", "fish").out
    assert "complete -c magctl" in fish
    assert "-n '__fish_seen_subcommand_from set-context' -l service-url" in fish
    assert "-n '__fish_seen_subcommand_from config' -a 'get-contexts" in fish
    if shutil.which("zsh"):
        done = subprocess.run(["zsh", "-c", zsh], capture_output=True, text=True, check=False)
        assert done.returncode == 0, done.stderr
    assert magctl("completion", "tcsh").code == 2


def test_https_admin_url_with_the_contexts_tls_settings(
    magctl: Magctl, tmp_path: pathlib.Path
) -> None:
    import http.server
    import ssl
    import threading

    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(
        [
            "openssl",
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-days",
            "1",
            "-subj",
            "/CN=127.0.0.1",
            "-addext",
            "subjectAltName=IP:127.0.0.1",
            "-keyout",
            str(key),
            "-out",
            str(cert),
        ],
        check=True,
        capture_output=True,
        timeout=60,
    )

    class Admin(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body = b'["secure"]' if self.path == "/admin/v2/tenants" else b"{}"
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Admin)
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(cert, key)
    server.socket = ctx.wrap_socket(server.socket, server_side=True)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"https://127.0.0.1:{server.server_address[1]}"
    try:
        names = ("get", "tenants", "-o", "jsonpath={.items[*].metadata.name}")
        r = magctl(*names, admin_url=url)  # no CA: refused, clearly
        assert r.code == 1
        assert "certificate is not trusted" in r.err
        assert (
            magctl(
                "config",
                "set-context",
                "tls",
                "--admin-url",
                url,
                "--certificate-authority",
                str(cert),
            ).code
            == 0
        )
        assert magctl(*names).out == "secure"
        assert (
            magctl(
                "config", "set-context", "loose", "--admin-url", url, "--insecure-skip-tls-verify"
            ).code
            == 0
        )
        assert magctl(*names, "--context", "loose").out == "secure"
        assert (
            magctl(
                "config",
                "set-context",
                "bad",
                "--admin-url",
                url,
                "--certificate-authority",
                str(tmp_path / "none.pem"),
            ).code
            == 0
        )
        assert magctl(*names, "--context", "bad").code == 2
    finally:
        server.shutdown()


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (
            ["get"],
            'error: You must specify the type of resource to get. Use "magctl api-resources"',
        ),
        (["get", "tenants", "-s", "http://host:notaport"], 'error: invalid admin URL "http://'),
        (["get", "tenants", "-s", "ftp://host"], 'error: invalid admin URL "ftp://host"'),
        (["get", "tenants", "-s", "http://127.0.0.1:99999"], "error: invalid admin URL"),
        (["create", "topic", "x", "-p", "-1"], "error: --partitions: 0 (not partitioned) or more"),
        (["create", "ns", "a/b", "--bundles", "0"], "error: --bundles: 1 or more"),
        (["get", "topics", "-o", "jsonpath={.bad["], "error: error parsing jsonpath {.bad["),
        (["get", "topics", "--sort-by", "bad["], "error: error parsing jsonpath bad["),
        (["get", "topics", "-o", "custom-columns=X"], "error: custom-columns format: expected"),
        (["get", "topics", "-l", "="], 'error: unable to parse requirement: "="'),
        (["delete", "topics", "--all", "-l", "="], 'error: unable to parse requirement: "="'),
        (["explain", "topic.nope"], 'error: field "nope" does not exist in Topic'),
    ],
)
def test_bad_input_is_refused_before_any_request(
    magctl_proc: Magctl, argv: list[str], message: str
) -> None:
    """Usage errors (exit 2, one line, nothing on stdout) found before the server is asked:
    the admin URL given here by default is never reached (port 1 would answer refused, 1)."""
    admin = [] if any(a.startswith("-s") for a in argv) else ["-s", "http://127.0.0.1:1"]
    r = magctl_proc(*argv, *admin)
    assert (r.code, r.out) == (2, ""), r.err
    assert r.err.startswith(message), r.err
    assert len(r.err.strip().splitlines()) == 1
    _no_traceback(r.err)
