"""Payload compression codecs, framed exactly as the official C++ client frames them.

Owns: ``compress(type, data)`` and ``decompress(type, data, uncompressed_size)``. The whole
payload (one message, or a whole batch) is compressed; ``MessageMetadata.compression`` and
``uncompressed_size`` are set by the producer. Formats (C++ ``CompressionCodec*.cc``):

    LZ4     raw LZ4 block (no frame header, no stored size): lz4.block, store_size=False
    ZLIB    zlib stream (RFC 1950 header + adler32): zlib.compress / zlib.decompress
    ZSTD    one zstd frame (ZSTD_compress, level 3)
    SNAPPY  raw snappy block (snappy::RawCompress): python-snappy's compress/uncompress

The codec libraries (``lz4``, ``zstandard``, ``python-snappy``) are the ``compression`` extra;
they are imported on first use, and a missing one raises ``InvalidConfiguration``.
Invariant: ``decompress`` returns exactly ``uncompressed_size`` bytes or raises
``DecompressionError``.
"""

from __future__ import annotations

import zlib
from typing import Any

from magnetar.client._config import CompressionType
from magnetar.client._errors import InvalidConfiguration


class DecompressionError(Exception):
    """The payload does not decompress to its announced size with its announced codec."""


def _module(name: str) -> Any:
    try:
        if name == "lz4":
            import lz4.block

            return lz4.block
        if name == "zstd":
            import zstandard

            return zstandard
        import snappy

        return snappy
    except ImportError as exc:  # pragma: no cover - depends on the install
        raise InvalidConfiguration(
            f"compression codec {name} needs the 'compression' extra (pip install "
            f"'magnetar[compression]'): {exc}"
        ) from None


def compress(kind: CompressionType, data: bytes) -> bytes:
    if kind == CompressionType.NONE:
        return data
    if kind == CompressionType.LZ4:
        return bytes(_module("lz4").compress(data, store_size=False))
    if kind == CompressionType.ZLIB:
        return zlib.compress(data)
    if kind == CompressionType.ZSTD:
        return bytes(_module("zstd").ZstdCompressor(level=3).compress(data))
    if kind == CompressionType.SNAPPY:
        return bytes(_module("snappy").compress(data))
    raise InvalidConfiguration(f"unknown compression type {kind}")


def decompress(kind: int, data: bytes, uncompressed_size: int) -> bytes:
    try:
        if kind == CompressionType.NONE:
            out = data
        elif kind == CompressionType.LZ4:
            out = _module("lz4").decompress(data, uncompressed_size=uncompressed_size)
        elif kind == CompressionType.ZLIB:
            out = zlib.decompress(data)
        elif kind == CompressionType.ZSTD:
            out = (
                _module("zstd")
                .ZstdDecompressor()
                .decompress(data, max_output_size=max(uncompressed_size, 1))
            )
        elif kind == CompressionType.SNAPPY:
            out = _module("snappy").uncompress(data)
        else:
            raise DecompressionError(f"unknown compression type {kind}")
    except InvalidConfiguration:
        raise
    except DecompressionError:
        raise
    except Exception as exc:
        raise DecompressionError(f"{CompressionType(kind).name}: {exc}") from None
    out = bytes(out)
    if len(out) != uncompressed_size:
        raise DecompressionError(
            f"decompressed {len(out)} bytes, metadata says {uncompressed_size}"
        )
    return out


__all__ = ["DecompressionError", "compress", "decompress"]
