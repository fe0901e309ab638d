"""Basic authentication's password file (Pulsar's ``AuthenticationProviderBasic``).

Owns: reading ``basic_auth_conf`` (Pulsar's ``basicAuthConf``: a file path, a ``file:`` or
``data:`` URL, or the file's content in base64), checking its ``user:hash`` lines (htpasswd:
Apache MD5 ``$apr1$`` and ``crypt`` hashes as Pulsar takes, and ``{SHA}`` / bcrypt as
``htpasswd`` writes them; any other line stops the broker at start), and checking a user's
password against it, through passlib's ``HtpasswdFile``. The credentials a client sends
are ``user:password`` (CONNECT) or ``Authorization: Basic base64(user:password)`` (HTTP); a
password may contain ``:``.

Errors: a file that cannot be read or parsed is a ``ValueError`` naming the problem (the
broker refuses to start); a wrong password or an unknown user is ``False``, never an error.
Must not know: the wire format, roles beyond the user name, permissions.
"""

from __future__ import annotations

import base64
import binascii
import pathlib
import urllib.parse

from passlib.apache import HtpasswdFile
from passlib.context import CryptContext

#: the hashes ``htpasswd`` writes: ``-m`` (Apache MD5, Pulsar's), ``-d`` (crypt, Pulsar's),
#: ``-s`` (SHA-1), ``-B`` (bcrypt); not plaintext, which Apache takes on no Unix either
HASHES = CryptContext(schemes=["apr_md5_crypt", "bcrypt", "ldap_sha1", "des_crypt"])


def read_conf(value: str) -> bytes:
    """The password file's bytes from ``basic_auth_conf``'s forms (as Pulsar reads them)."""
    value = value.strip()
    if value.startswith("data:"):
        header, sep, data = value.partition(",")
        if not sep:
            raise ValueError("basic_auth_conf: a data: URL needs a ',' before its data")
        if header.endswith(";base64"):
            try:
                return base64.b64decode(data, validate=True)
            except binascii.Error as exc:
                raise ValueError(f"basic_auth_conf: bad base64 in the data: URL ({exc})") from None
        return urllib.parse.unquote_to_bytes(data)
    if value.startswith("file:"):
        path = pathlib.Path(urllib.parse.unquote(urllib.parse.urlparse(value).path))
        return _read_file(path)
    path = pathlib.Path(value)
    if path.exists():
        return _read_file(path)
    try:
        return base64.b64decode(value, validate=True)
    except binascii.Error:
        raise ValueError(
            f"basic_auth_conf: {value!r} is not a file, a file: or data: URL, nor base64 content"
        ) from None


def _read_file(path: pathlib.Path) -> bytes:
    try:
        return path.read_bytes()
    except OSError as exc:
        raise ValueError(f"basic_auth_conf: cannot read {path}: {exc.strerror}") from None


class PasswordFile:
    """The users and password hashes of one htpasswd file."""

    def __init__(self, content: bytes) -> None:
        try:
            text = content.decode("utf-8")
        except UnicodeDecodeError:
            raise ValueError("basic_auth_conf: the password file is not UTF-8") from None
        users = []
        for lineno, line in enumerate(text.splitlines(), 1):
            if not line.strip() or line.lstrip().startswith("#"):
                continue
            user, sep, hashed = line.strip().partition(":")
            if not sep or not user or not hashed or ":" in hashed:
                raise ValueError(
                    f"basic_auth_conf line {lineno}: expected user:hash (as htpasswd writes)"
                )
            if HASHES.identify(hashed, required=False) is None:
                raise ValueError(
                    f"basic_auth_conf line {lineno}: {user}'s hash is none htpasswd writes "
                    "(Apache MD5 $apr1$, crypt, {SHA}, bcrypt $2y$)"
                )
            users.append(user)
        if not users:
            raise ValueError("basic_auth_conf: the password file names no user")
        self._file = HtpasswdFile.from_string(text, context=HASHES)
        self.users = frozenset(users)

    @classmethod
    def from_conf(cls, value: str) -> PasswordFile:
        return cls(read_conf(value))

    def check(self, user: str, password: str) -> bool:
        """Whether ``password`` is the user's (False for an unknown user or a hash this file
        cannot check)."""
        try:
            return self._file.check_password(user, password) is True
        except ValueError:  # a malformed hash for this user
            return False


def split_credentials(data: bytes) -> tuple[str, str]:
    """``user:password`` as a client sends it; ``ValueError`` when it is not that."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise ValueError("basic credentials are not UTF-8") from None
    user, sep, password = text.partition(":")
    if not sep or not user:
        raise ValueError("basic credentials are not user:password")
    return user, password


def decode_http(value: str) -> bytes:
    """The ``user:password`` of an ``Authorization: Basic`` header's value."""
    try:
        return base64.b64decode(value.strip(), validate=True)
    except binascii.Error:
        raise ValueError("the Basic credentials are not base64") from None


__all__ = ["PasswordFile", "decode_http", "read_conf", "split_credentials"]
