"""The verbs of ``magctl``, grouped by the module that carries them out.

Owns: the verb names (the command line's choices, completion's words) and which module runs
each: ``verbs`` (resources: CRUD and declarative), ``operations`` (topic, subscription and
bundle operations), ``top`` and ``tooling``. A leaf: it imports nothing, so the parser and the
completion script both read it without loading any verb. Must not know: what a verb does.
"""

from __future__ import annotations

RESOURCE_VERBS = (
    "get",
    "describe",
    "create",
    "delete",
    "edit",
    "apply",
    "diff",
    "explain",
    "api-resources",
)
OPERATION_VERBS = (
    "unload",
    "split",
    "seek",
    "skip",
    "clear",
    "expire",
    "peek",
    "compact",
    "offload",
    "terminate",
    "truncate",
    "scale",
    "lookup",
)
MONITORING_VERBS = ("top",)
TOOLING_VERBS = ("config", "completion", "version")
VERBS = RESOURCE_VERBS + OPERATION_VERBS + MONITORING_VERBS + TOOLING_VERBS

__all__ = ["MONITORING_VERBS", "OPERATION_VERBS", "RESOURCE_VERBS", "TOOLING_VERBS", "VERBS"]
