"""``magctl``: a kubectl-style admin CLI for Magnetar and Pulsar-compatible clusters.

    magctl get topics -n acme/prod -o wide
    magctl apply -f manifests/
    magctl seek sub orders-svc --topic orders --to earliest

Grammar, resources and output follow kubectl; nouns, policies and the REST API follow
Pulsar. Modules: ``cli`` (argparse tree, errors to exit codes, dispatch), ``commands`` (the
verb table), ``verbs`` (resource verbs), ``operations`` (topic and subscription operations),
``top``, ``tooling`` (config, completion, version), ``session`` (context -> API), ``kinds``
(resources as objects), ``manifests`` (apply/diff), ``output`` and ``jsonpath`` (printers),
``progress`` (status line of long verbs), ``config`` (contexts), ``api``/``http`` (the REST
transport). Only ``cli`` loads at start; the rest loads when a verb needs it, and imports
point one way (no cycles).
See ``docs/magctl.md``.
"""

from __future__ import annotations

from collections.abc import Sequence


def main(argv: Sequence[str] | None = None) -> int:
    """The ``magctl`` console script: run one command, return its exit code."""
    from magnetar.client.magctl.cli import run

    return run(argv)


__all__ = ["main"]
