"""Advertised listeners: the broker URLs a client is given per listener name.

Owns: parsing and checking Pulsar's ``advertisedListeners`` setting
(``name:pulsar://host:port,name:pulsar+ssl://host:port,...``) and ``internalListenerName``
as Pulsar's ``MultipleListenerValidator`` does (at most one ``pulsar://`` and one
``pulsar+ssl://`` URL per name, one ``host:port`` never shared by two names, the internal
name among them, else the first one), and answering which URLs a lookup naming a listener
gets (``ListenerNotFound`` with Pulsar's message when this broker has no such listener).
Must not know: lookups, ownership, the wire protocol. Pure.
"""

from __future__ import annotations

import urllib.parse
from dataclasses import dataclass


class ListenerNotFound(LookupError):
    """A lookup named a listener this broker does not advertise."""

    def __init__(self, name: str) -> None:
        super().__init__(f"the broker do not have {name} listener")  # Pulsar's wording
        self.name = name


@dataclass(frozen=True, slots=True)
class Listener:
    name: str
    broker_service_url: str = ""
    broker_service_url_tls: str = ""


@dataclass(frozen=True, slots=True)
class AdvertisedListeners:
    """The listeners of one broker, in configuration order; empty when not configured."""

    listeners: tuple[Listener, ...] = ()
    internal_name: str = ""

    def __bool__(self) -> bool:
        return bool(self.listeners)

    @property
    def internal(self) -> Listener | None:
        return self.get(self.internal_name) if self.listeners else None

    def get(self, name: str) -> Listener | None:
        for listener in self.listeners:
            if listener.name == name:
                return listener
        return None

    def require(self, name: str) -> Listener:
        got = self.get(name)
        if got is None:
            raise ListenerNotFound(name)
        return got

    def to_json(self) -> dict[str, dict[str, str]]:
        """Pulsar's ``advertisedListeners`` map in ownership and load data."""
        return {
            x.name: {
                "brokerServiceUrl": x.broker_service_url,
                "brokerServiceUrlTls": x.broker_service_url_tls,
            }
            for x in self.listeners
        }

    @classmethod
    def from_json(cls, data: object) -> AdvertisedListeners:
        """Tolerant: whatever is not a listener entry is skipped."""
        if not isinstance(data, dict):
            return cls()
        out = []
        for name, urls in data.items():
            if isinstance(name, str) and isinstance(urls, dict):
                out.append(
                    Listener(
                        name,
                        str(urls.get("brokerServiceUrl") or ""),
                        str(urls.get("brokerServiceUrlTls") or ""),
                    )
                )
        return cls(tuple(out))


LISTENERS_MAX = 64
"""Listener names per broker at most (bounds the setting and the ownership data)."""


def parse_advertised_listeners(value: str, internal_name: str = "") -> AdvertisedListeners:
    """The checked listeners of ``advertisedListeners``; raises ``ValueError`` with Pulsar's
    messages for a setting Pulsar refuses."""
    text = value.strip()
    if not text:
        if internal_name.strip():
            raise ValueError(
                "the `advertisedListeners` configure do not contain `internalListenerName` entry"
            )
        return AdvertisedListeners()
    by_name: dict[str, list[str]] = {}
    for raw in text.split(","):
        entry = raw.strip()
        if not entry:
            continue
        index = entry.find(":")
        if index <= 0:
            raise ValueError(
                "the configure entry `advertisedListeners` is invalid. because "
                f"{entry} do not contain listener name"
            )
        by_name.setdefault(entry[:index].strip(), []).append(entry[index + 1 :].strip())
    if len(by_name) > LISTENERS_MAX:
        raise ValueError(f"at most {LISTENERS_MAX} advertised listeners")
    internal = internal_name.strip() or next(iter(by_name))
    if internal not in by_name:
        raise ValueError(
            "the `advertisedListeners` configure do not contain `internalListenerName` entry"
        )
    owners: dict[str, str] = {}
    listeners = []
    for name, urls in by_name.items():
        if len(urls) > 2:
            raise ValueError(f"there are redundant configure for listener `{name}`")
        plain = tls = ""
        for url in urls:
            parts = urllib.parse.urlsplit(url)
            try:
                port = parts.port
            except ValueError:
                port = None
            scheme = parts.scheme.lower()
            if scheme not in ("pulsar", "pulsar+ssl") or not parts.hostname or port is None:
                raise ValueError(
                    f"the value {url} in the `advertisedListeners` configure is invalid"
                )
            if (scheme == "pulsar" and plain) or (scheme == "pulsar+ssl" and tls):
                raise ValueError(f"there are redundant configure for listener `{name}`")
            if scheme == "pulsar":
                plain = url
            else:
                tls = url
            host_port = f"{parts.hostname}:{port}"
            if owners.setdefault(host_port, name) != name:
                raise ValueError(f"must not specify `{host_port}` to different listener.")
        listeners.append(Listener(name, plain, tls))
    return AdvertisedListeners(tuple(listeners), internal)


__all__ = [
    "LISTENERS_MAX",
    "AdvertisedListeners",
    "Listener",
    "ListenerNotFound",
    "parse_advertised_listeners",
]
