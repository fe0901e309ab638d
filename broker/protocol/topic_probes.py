"""The questions the protocol asks a topic that persistent and non-persistent topics do not
both answer yet: each probe in one function, so a shared ``Topic`` contract can replace them
one by one.

Owns: ``is_terminated`` (only a persistent topic can be terminated) and
``takes_publish_runs`` (only a persistent topic publishes through ``publish_to`` and reports
its SENDs per run to a ``PublishSink``).
Must not know: anything else of a topic.
"""

from __future__ import annotations

from typing import Any


def is_terminated(topic: Any) -> bool:
    """The topic was terminated: it takes no producer."""
    return bool(getattr(topic, "terminated", False))


def takes_publish_runs(topic: Any) -> bool:
    """SENDs go through ``topic.publish_to(sink, ...)`` and come back per run of one sink
    (batched receipts); otherwise through ``topic.publish(..., callback)``, one by one."""
    return hasattr(topic, "publish_to")


__all__ = ["is_terminated", "takes_publish_runs"]
