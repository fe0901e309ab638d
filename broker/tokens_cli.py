"""``magnetar tokens``: Pulsar's ``pulsar tokens`` commands.

    magnetar tokens create-secret-key [--output FILE] [--base64] [-a HS256]
    magnetar tokens create-key-pair --output-private-key F --output-public-key F [-a ES256]
    magnetar tokens create (--secret-key KEY | --private-key KEY) --subject ROLE [--expiry-time 1y]
    magnetar tokens show (-t TOKEN | -f FILE | -i)
    magnetar tokens validate (--secret-key KEY | --public-key KEY) (-t TOKEN | -f FILE | -i)

Keys are given as Pulsar takes them: ``file:///path``, ``data:;base64,...``, a path, or
base64. Exit codes: 0 success, 1 invalid token, 2 bad usage / unreadable key.
Owns: argument parsing and printing; the work is ``tokens.py``.
"""

from __future__ import annotations

import argparse
import base64
import json
import pathlib
import sys

from magnetar.broker.security.tokens import (
    EC_ALGS,
    RSA_ALGS,
    TokenError,
    TokenValidator,
    create_token,
    generate_key_pair,
    generate_secret_key,
    load_public_key,
    parse_duration_s,
    read_key_bytes,
    show_token,
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="tokens_command", metavar="TOKENS_COMMAND", required=True)
    p = sub.add_parser("create-secret-key", help="a new HMAC secret key")
    p.add_argument("--output", help="write the raw key bytes to this file")
    p.add_argument("--base64", action="store_true", help="print the key base64-encoded")
    p.add_argument("-a", "--signature-algorithm", default="HS256")

    p = sub.add_parser("create-key-pair", help="a new RSA/EC key pair (DER files)")
    p.add_argument("--output-private-key", required=True)
    p.add_argument("--output-public-key", required=True)
    p.add_argument("-a", "--signature-algorithm", default="RS256")

    p = sub.add_parser("create", help="a signed token for a role")
    key = p.add_mutually_exclusive_group(required=True)
    key.add_argument("--secret-key", "-sk")
    key.add_argument("--private-key", "-pk")
    p.add_argument("--subject", "-s", required=True, help="the role")
    p.add_argument("--expiry-time", "-e", help="e.g. 3600s, 30m, 12h, 7d, 1y (default: never)")
    p.add_argument("-a", "--signature-algorithm", help="default HS256, or from the private key")
    p.add_argument("--headers", "-hs", action="append", default=[], help="KEY=VALUE")

    for name, helptext in (
        ("show", "print a token's header and claims"),
        ("validate", "check a token's signature and expiry"),
    ):
        p = sub.add_parser(name, help=helptext)
        src = p.add_mutually_exclusive_group(required=True)
        src.add_argument("-t", "--token")
        src.add_argument("-f", "--token-file")
        src.add_argument("-i", "--stdin", action="store_true")
        if name == "validate":
            vkey = p.add_mutually_exclusive_group(required=True)
            vkey.add_argument("--secret-key", "-sk")
            vkey.add_argument("--public-key", "-pk")
            p.add_argument("-a", "--signature-algorithm", help="default: from the key")


def _token_arg(args: argparse.Namespace) -> str:
    if args.token:
        return str(args.token).strip()
    if args.token_file:
        return pathlib.Path(args.token_file).read_text().strip()
    return sys.stdin.read().strip()


def _public_alg(public_key: str | None) -> str:
    from cryptography.hazmat.primitives.asymmetric import ec

    if public_key and isinstance(
        load_public_key(read_key_bytes(public_key)), ec.EllipticCurvePublicKey
    ):
        return "ES256"
    return "RS256"


def run(args: argparse.Namespace) -> int:
    try:
        return _run(args)
    except TokenError as exc:
        print(f"magnetar tokens: {exc}", file=sys.stderr)
        return 1 if args.tokens_command in ("show", "validate") else 2
    except OSError as exc:
        print(f"magnetar tokens: {exc}", file=sys.stderr)
        return 2


def _run(args: argparse.Namespace) -> int:
    cmd = args.tokens_command
    if cmd == "create-secret-key":
        key = generate_secret_key(args.signature_algorithm)
        if args.output:
            pathlib.Path(args.output).write_bytes(key)
        elif args.base64:
            print(base64.b64encode(key).decode())
        else:
            sys.stdout.buffer.write(key)
        return 0
    if cmd == "create-key-pair":
        alg = args.signature_algorithm
        if alg not in RSA_ALGS + EC_ALGS:
            raise TokenError(f"unsupported key-pair algorithm {alg}")
        private, public = generate_key_pair(alg)
        pathlib.Path(args.output_private_key).write_bytes(private)
        pathlib.Path(args.output_public_key).write_bytes(public)
        return 0
    if cmd == "create":
        headers = {}
        for item in args.headers:
            k, sep, v = item.partition("=")
            if not sep:
                raise TokenError(f"--headers expects KEY=VALUE, got {item!r}")
            headers[k] = v
        token = create_token(
            args.subject,
            secret_key=read_key_bytes(args.secret_key) if args.secret_key else None,
            private_key=read_key_bytes(args.private_key) if args.private_key else None,
            alg=args.signature_algorithm,
            expires_in_s=parse_duration_s(args.expiry_time) if args.expiry_time else None,
            headers=headers or None,
        )
        print(token)
        return 0
    token = _token_arg(args)
    if cmd == "show":
        header, body = show_token(token)
        print(json.dumps(header))
        print(json.dumps(body))
        return 0
    validator = TokenValidator(
        secret_key=read_key_bytes(args.secret_key) if args.secret_key else None,
        public_key=read_key_bytes(args.public_key) if args.public_key else None,
        public_alg=args.signature_algorithm or _public_alg(args.public_key),
    )
    claims = validator.validate(token)
    print(json.dumps(claims.claims))
    return 0


__all__ = ["add_arguments", "run"]
