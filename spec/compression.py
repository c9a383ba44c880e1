"""The payload codecs of ``MessageMetadata.compression``: bytes in, bytes out, for the wire and the topic.

A producer compresses a message's payload (a batch's whole payload, every ``[4 size]
[SingleMessageMetadata][payload]`` of it, at once) and says how in the metadata: ``compression``
(the codec) and ``uncompressed_size`` (the bytes before it).  Pulsar's broker stores and delivers the
message as it came; the consumer's client decompresses it.  What each codec's bytes are, as Pulsar's
clients write and read them (``CompressionCodec*`` of Pulsar's Java and C++ clients):

* ``LZ4``: one LZ4 *block*, without LZ4's frame and without the size prefix that some block
  libraries prepend: the size is ``uncompressed_size``;
* ``ZLIB``: a zlib stream (RFC 1950, a header and deflate blocks).  Pulsar's Java client ends it
  with a sync flush, not a finished stream (no final block, no Adler-32 trailer), so a reader takes
  ``uncompressed_size`` bytes out and asks no more of the stream;
* ``ZSTD``: one Zstandard frame;
* ``SNAPPY``: Snappy's *raw* format (its length preamble and elements), not the framing format.

:func:`decompress` never makes more than ``uncompressed_size`` bytes (a payload that would is
corrupt: nothing is allocated past it), and ``uncompressed_size`` is bounded by
:data:`MAX_UNCOMPRESSED_SIZE`, so a small payload cannot claim gigabytes.  The codecs are
``cramjam``'s (LZ4 block, Zstandard, raw Snappy: one well-kept binding of the reference C and Rust
implementations) and the standard library's ``zlib``.
"""

from __future__ import annotations

import zlib
from collections.abc import Callable
from typing import Final

import cramjam

from spec.errors import BadRecord
from spec.pb import PulsarApi_pb2 as api

__all__ = [
    "CODEC_NAMES",
    "MAX_UNCOMPRESSED_SIZE",
    "SUPPORTED",
    "CorruptPayload",
    "codec_name",
    "compress",
    "decompress",
]

# The largest uncompressed payload this model decompresses (a batch's, or one message's).  Pulsar
# bounds the compressed bytes (maxMessageSize) and leaves the uncompressed size to the client's
# batching limits; a bound is needed here because a reader of a socket or a file decompresses
# what it is handed.
MAX_UNCOMPRESSED_SIZE: Final = 256 * 1024 * 1024

CODEC_NAMES: Final[dict[int, str]] = {
    api.NONE: "NONE",
    api.LZ4: "LZ4",
    api.ZLIB: "ZLIB",
    api.ZSTD: "ZSTD",
    api.SNAPPY: "SNAPPY",
}
SUPPORTED: Final = frozenset(CODEC_NAMES)


class CorruptPayload(BadRecord):
    """A compressed payload that does not decompress to its ``uncompressed_size``, or a codec this
    model does not know (``offset``: where the payload starts; ``reason``: the message without it)."""

    def __init__(self, message: str, *, offset: int, where: str | None = None) -> None:
        self.reason = message
        super().__init__(message, offset=offset, where=where)


def codec_name(compression: int) -> str:
    """Pulsar's name of a ``CompressionType`` value (``"LZ4"``), or ``"codec 7"`` for an unknown one."""
    return CODEC_NAMES.get(compression, f"codec {compression}")


def compress(compression: int, data: bytes) -> bytes:
    """``data`` compressed as a Pulsar client compresses a payload with ``compression``."""
    if compression == api.NONE:
        return data
    if compression == api.LZ4:
        return bytes(cramjam.lz4.compress_block(data, store_size=False))
    if compression == api.ZLIB:
        return zlib.compress(data)
    if compression == api.ZSTD:
        return bytes(cramjam.zstd.compress(data, level=3))  # Pulsar's clients' level
    if compression == api.SNAPPY:
        return bytes(cramjam.snappy.compress_raw(data))
    raise ValueError(f"no codec for {codec_name(compression)}")


def decompress(
    compression: int, data: bytes, uncompressed_size: int, *, base: int = 0, where: str | None = None
) -> bytes:
    """The ``uncompressed_size`` bytes that ``data`` holds compressed with ``compression``.

    Raises :class:`CorruptPayload` (offset ``base``, where the payload starts) if the codec is not
    one of Pulsar's, if ``uncompressed_size`` is over :data:`MAX_UNCOMPRESSED_SIZE`, or if ``data``
    does not decompress to exactly ``uncompressed_size`` bytes."""
    if compression == api.NONE:
        return data
    name = codec_name(compression)
    if compression not in SUPPORTED:
        raise CorruptPayload(f"the payload's compression is {name}, not one of Pulsar's", offset=base, where=where)
    if uncompressed_size > MAX_UNCOMPRESSED_SIZE:
        raise CorruptPayload(
            f"{name} payload claims {uncompressed_size} bytes uncompressed, over the {MAX_UNCOMPRESSED_SIZE} "
            "this broker decompresses",
            offset=base,
            where=where,
        )
    try:
        if compression == api.ZLIB:
            out = _inflate(data, uncompressed_size)
        else:
            buffer = bytearray(uncompressed_size)
            size = _INTO[compression](data, buffer)
            out = bytes(buffer) if size == uncompressed_size else bytes(buffer[:size])
    except (cramjam.DecompressionError, zlib.error, ValueError) as exc:
        raise CorruptPayload(
            f"{name} payload of {len(data)} bytes does not decompress to its uncompressed_size {uncompressed_size}: "
            f"{exc}",
            offset=base,
            where=where,
        ) from None
    if len(out) != uncompressed_size:
        raise CorruptPayload(
            f"{name} payload decompresses to {len(out)} bytes, not its uncompressed_size {uncompressed_size}",
            offset=base,
            where=where,
        )
    return out


def _inflate(data: bytes, size: int) -> bytes:
    # A stream object, not zlib.decompress: Pulsar's Java client ends the stream with a sync flush
    # (no trailer), and max_length keeps a payload from inflating past what it claims.  One byte
    # more out of what is left means the payload holds more than it claims: corrupt.
    stream = zlib.decompressobj()
    out = stream.decompress(data, size) if size else b""
    rest = stream.unconsumed_tail if size else data
    if rest and stream.decompress(rest, 1):
        raise ValueError(f"the stream holds more than {size} bytes")
    return out


_INTO: Final[dict[int, Callable[[bytes, bytearray], int]]] = {
    api.LZ4: cramjam.lz4.decompress_block_into,
    api.ZSTD: cramjam.zstd.decompress_into,
    api.SNAPPY: cramjam.snappy.decompress_raw_into,
}
