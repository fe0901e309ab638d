"""Policies: the namespace/topic policy model with Pulsar's JSON shapes and schemas, the
policy manager applying them live, rate limits, backlog quotas and message TTL.

Owns: what a policy says and applying it to loaded topics.
Must not know: connections or HTTP.
"""
