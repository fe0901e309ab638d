"""Namespaces: the cluster/tenant/namespace resources as Pulsar stores them, bundles (hash
ranges of a namespace) and bundle ownership.

Owns: the metadata of namespaces and who serves which bundle.
Must not know: topics, connections or HTTP.
"""
