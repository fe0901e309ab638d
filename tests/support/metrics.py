"""Reading Prometheus text in tests: parsed with ``prometheus_client.parser``, never by
substring, so value formatting (``3`` vs ``3.0``) and label order do not matter."""

from __future__ import annotations

from prometheus_client.parser import text_string_to_metric_families


def families(text: str) -> dict[str, object]:
    """Family name -> prometheus_client Metric (its ``type``, ``documentation``, samples)."""
    return {f.name: f for f in text_string_to_metric_families(text)}


def sample(text: str, name: str, **labels: str) -> float | None:
    """The value of the sample ``name`` whose labels include ``labels``; None if absent.
    The parser names every counter sample ``..._total``; either name finds it."""
    names = (name, name + "_total")
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            if s.name in names and all(s.labels.get(k) == v for k, v in labels.items()):
                return float(s.value)
    return None
