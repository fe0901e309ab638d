"""Key hashing for partition routing, matching the official clients bit for bit.

Owns: ``HashingScheme`` and ``hash_key``. The official Python client (C++ 4.2) routes keyed
messages with its default ``BoostHash`` scheme: ``boost::hash<std::string>`` as built with
Boost >= 1.83 on 64-bit (Boost.ContainerHash ``hash_range`` for char ranges, "mulx" mixing),
masked to a non-negative int32, modulo the partition count. ``Murmur3_32Hash`` (Pulsar's
Murmur3, seed 0) and ``JavaStringHash`` (Java clients' default) are available too.
Verified against pulsar-client 3.13 in ``tests/compat/test_client_interop.py``.
"""

from __future__ import annotations

import enum

from magnetar.client.protocol import murmur3_32_hash

_M64 = (1 << 64) - 1


class HashingScheme(enum.IntEnum):
    JavaStringHash = 0
    Murmur3_32Hash = 1
    BoostHash = 2


def _mulx(x: int, y: int) -> int:
    r = (x & _M64) * (y & _M64)
    return (r & _M64) ^ (r >> 64)


def _read32le(b: bytes, p: int) -> int:
    return int.from_bytes(b[p : p + 4], "little")


def boost_hash(data: bytes, seed: int = 0) -> int:
    """``boost::hash_range`` over chars, 64-bit ``size_t`` (Boost >= 1.83)."""
    q = 0x9E3779B97F4A7C15
    k = 0xDF442D22CE4859B9
    n = len(data)
    p = 0
    w = _mulx((seed + q) & _M64, k)
    h = w ^ n
    while n >= 8:
        v1 = int.from_bytes(data[p : p + 8], "little")
        w = (w + q) & _M64
        h ^= _mulx((v1 + w) & _M64, k)
        p += 8
        n -= 8
    v1 = 0
    if n >= 4:
        v1 = ((_read32le(data, p + n - 4) << ((n - 4) * 8)) | _read32le(data, p)) & _M64
    elif n >= 1:
        x1 = (n - 1) & 2
        x2 = n >> 1
        v1 = (data[p + x1] << (x1 * 8)) | (data[p + x2] << (x2 * 8)) | data[p]
    w = (w + q) & _M64
    h ^= _mulx((v1 + w) & _M64, k)
    return _mulx((h + w) & _M64, k)


def java_string_hash(key: str) -> int:
    h = 0
    for unit in key.encode("utf-16-be").hex(" ", 2).split():
        h = (31 * h + int(unit, 16)) & 0xFFFFFFFF
    return h - (1 << 32) if h >= 1 << 31 else h


def hash_key(key: str, scheme: HashingScheme = HashingScheme.BoostHash) -> int:
    """Non-negative hash of a partition key (``% partitions`` picks the partition)."""
    if scheme == HashingScheme.BoostHash:
        return boost_hash(key.encode("utf-8")) & 0x7FFFFFFF
    if scheme == HashingScheme.Murmur3_32Hash:
        return murmur3_32_hash(key)
    h = java_string_hash(key)
    return abs(h) if h != -(1 << 31) else 0


__all__ = ["HashingScheme", "boost_hash", "hash_key", "java_string_hash"]
