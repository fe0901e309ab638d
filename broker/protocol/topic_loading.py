"""Loading the topic a PRODUCER or SUBSCRIBE names, its failures as refusals.

Owns: ``load_topic``: the service's topic for a client (loaded here when this broker owns
it), where every failure becomes a ``BrokerError`` to answer: the service's own refusal as
it is; storage not available (``LedgerError``: no bookies, ...) as ServiceNotReady without a
traceback; anything else as ServiceNotReady, logged with its traceback.
Must not know: frames, producers, consumers.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from magnetar.broker.errors import CodedError, ServerError
from magnetar.broker.ledger.errors import LedgerError
from magnetar.broker.service import BrokerService, ServiceError

if TYPE_CHECKING:
    from magnetar.broker.topics.contract import Topic

log = logging.getLogger(__name__)


async def load_topic(service: BrokerService, name: str, what: str) -> Topic:
    """The topic ``name`` for a ``what`` (``"producer"``, ``"subscribe"``); raises
    ``BrokerError`` (retriable ServiceNotReady unless the service refused)."""
    try:
        return await service.topic_for_client(name)
    except ServiceError:
        raise
    except LedgerError as exc:
        reason = f"cannot open topic {name}: {type(exc).__name__}: {exc}"
        log.warning("%s failed: %s", what, reason)
        raise CodedError(ServerError.ServiceNotReady, reason) from None
    except Exception as exc:
        log.exception("%s on %s failed", what, name)
        raise CodedError(ServerError.ServiceNotReady, str(exc)) from None


__all__ = ["load_topic"]
