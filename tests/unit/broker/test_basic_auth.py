"""Basic authentication (Pulsar's ``AuthenticationProviderBasic``): ``basic_auth_conf`` in
each of its forms, htpasswd hashes (Apache MD5, crypt, SHA, as ``htpasswd`` writes them),
CONNECT and HTTP credentials, and the refusals."""

from __future__ import annotations

import base64
import pathlib
from types import SimpleNamespace

import pytest
from passlib.hash import apr_md5_crypt, bcrypt, des_crypt, ldap_sha1

from magnetar.broker.security.authentication import AuthenticationError, AuthenticationService
from magnetar.broker.security.basic import PasswordFile, read_conf

HTPASSWD = (
    f"alice:{apr_md5_crypt.hash('wonder:land')}\n"  # a password may hold ':'
    f"bob:{des_crypt.hash('builder')}\n"
    f"carol:{ldap_sha1.hash('s3cret')}\n"
    f"dave:{bcrypt.using(rounds=4, ident='2y').hash('hunter2')}\n"
).encode()


def service(conf: str) -> AuthenticationService:
    config = SimpleNamespace(
        authentication_enabled=True,
        authentication_providers="org.apache.pulsar.broker.authentication.AuthenticationProviderBasic",
        basic_auth_conf=conf,
        anonymous_user_role="",
        authentication_refresh_check_seconds=60,
    )
    return AuthenticationService.from_config(config)


@pytest.mark.parametrize("form", ["path", "file-url", "data-url", "base64"])
def test_every_form_of_basic_auth_conf_reads_the_file(tmp_path: pathlib.Path, form: str) -> None:
    path = tmp_path / ".htpasswd"
    path.write_bytes(HTPASSWD)
    encoded = base64.b64encode(HTPASSWD).decode()
    value = {
        "path": str(path),
        "file-url": path.as_uri(),
        "data-url": f"data:;base64,{encoded}",
        "base64": encoded,
    }[form]
    assert read_conf(value) == HTPASSWD
    assert PasswordFile.from_conf(value).users == {"alice", "bob", "carol", "dave"}


def test_passwords_are_checked_against_each_kind_of_hash() -> None:
    passwords = PasswordFile(HTPASSWD)
    assert passwords.check("alice", "wonder:land")
    assert passwords.check("bob", "builder")
    assert passwords.check("carol", "s3cret")
    assert passwords.check("dave", "hunter2")
    assert not passwords.check("alice", "wonder")
    assert not passwords.check("zoe", "builder")  # unknown user


@pytest.mark.parametrize(
    ("conf", "message"),
    [
        ("/nowhere/.htpasswd", "is not a file, a file: or data: URL, nor base64"),
        ("file:///nowhere/.htpasswd", "cannot read /nowhere/.htpasswd"),
        ("data:;base64,@@", "bad base64"),
        (base64.b64encode(b"alice\n").decode(), "line 1: expected user:hash"),
        (base64.b64encode(b"# nobody\n").decode(), "names no user"),
        (base64.b64encode(b"eve:plaintext\n").decode(), "line 1: eve's hash is none"),
    ],
)
def test_a_bad_password_file_is_refused_with_the_reason(conf: str, message: str) -> None:
    with pytest.raises(ValueError, match=None) as refused:
        service(conf)
    assert message in str(refused.value)


def test_basic_needs_its_conf() -> None:
    with pytest.raises(ValueError, match="basic_auth_conf"):
        service("")


def test_connect_and_http_credentials_give_the_user_as_role() -> None:
    authn = service(base64.b64encode(HTPASSWD).decode())
    assert authn.authenticate("basic", b"alice:wonder:land").role == "alice"
    header = "Basic " + base64.b64encode(b"bob:builder").decode()
    who = authn.authenticate_http(header, None)
    assert (who.role, who.method, who.expires_at_ms) == ("bob", "basic", None)
    for method, data in (("basic", b"alice:wrong"), ("basic", b"nocolon"), ("token", b"x")):
        with pytest.raises(AuthenticationError) as refused:
            authn.authenticate(method, data)
        assert refused.value.message == "Unable to authenticate"  # the reason is logged only
    with pytest.raises(AuthenticationError):
        authn.authenticate_http("Basic !!!", None)
    assert authn.failures == 4
