"""The delta container: its constants, errors, header records, framing and header checks."""

from __future__ import annotations

import struct
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import NoReturn

import blake3
import msgpack
import numpy as np
import torch
import zstandard

from swarm.core.errors import SwarmError

FORMAT_VERSION = 1
HASH_ALG = "blake3"
# zstd level. The streams are near-random symbols that zstd mostly entropy-codes: measured
# at 1% density, level 9 is 3% and level 15 7% smaller than level 1, at 2x and 5x the
# compression time. Callers short of bandwidth rather than CPU can pass a higher level.
DEFAULT_LEVEL = 1

# The container's frame: magic, format version and header length up front, a blake3 trailer.
MAGIC = b"SWPD"
PREFIX = struct.Struct("<4sHI")
TRAILER_LEN = 32
_TAG_LEN = 16
_MAX_HEADER = 64 << 20  # decompressed; ~300 bytes per tensor, so far beyond any model
_DTYPE = "bfloat16"
_EXPONENT = np.uint16(0x7F80)  # a bf16 value whose exponent bits are all set is NaN or +-inf

# Scanning for changes in slices of this many elements keeps both slices and the mask in
# L2 for the gathers that follow (measured: 4.2 GB/s vs 3.6 at 1M and 1.2 unchunked).
SCAN_CHUNK = 1 << 18
# Candidate codings are compared on a strided sample of this many values when a stream is
# longer; compressing every candidate in full would triple the encoder's zstd time.
SAMPLE = 1 << 16
# Measured on Bernoulli positions: a zstd'd bitmap beats zstd'd gap planes only above ~20%
# density (at 12.5% it is 3% bigger, at 5% 25% bigger), so it is not even tried below 1/8.
_BITMAP_MIN_DENSITY = 1 / 8
# Long streams whose first this-many bytes zstd cannot shrink by 2% are stored verbatim.
PROBE = 1 << 16

Weights = Mapping[str, torch.Tensor]


_local = threading.local()


def _compressor(level: int) -> zstandard.ZstdCompressor:
    """This thread's compressor for `level`: contexts are not thread-safe, and making one
    per stream costs ~17 us, which adds up over the thousands of small streams of a model."""
    cache = _local.__dict__.setdefault("compressors", {})
    if level not in cache:
        cache[level] = zstandard.ZstdCompressor(level=level)
    return cache[level]


def _decompressor() -> zstandard.ZstdDecompressor:
    if not hasattr(_local, "decompressor"):
        _local.decompressor = zstandard.ZstdDecompressor()
    return _local.decompressor


class DeltaError(SwarmError):
    """A delta or anchor cannot be built, parsed, or applied to the given weights.

    The message names what mismatched (tensor, shape, dtype, version, hash, checksum). When
    raised by `apply_delta` the target weights are bit-identical to before the call.
    """


class NonFiniteWeights(DeltaError):
    """Applying would write NaN or infinity into the weights (asked for with `finite=True`)."""


class LayoutMismatch(DeltaError):
    """A delta's tensor names, shapes or dtypes are not those of the weights it targets."""


@dataclass(frozen=True)
class TensorInfo:
    """One tensor's entry in a delta header, as `read_header` reports it."""

    name: str
    shape: tuple[int, ...]
    dtype: str
    alias_of: str | None  # canonical name when this name is tied to another one
    count: int  # changed elements (numel for an anchor)
    index_coding: str  # "none", "gaps", "bitmap", "all" ("alias" for a tied name)
    value_coding: str | None  # "zdiff", "xor", "raw"; None when nothing changed
    payload_bytes: int  # compressed bytes this tensor adds to the payload

    @property
    def numel(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64))


@dataclass(frozen=True)
class DeltaInfo:
    """What a delta or anchor says about itself (the parsed, checksum-verified header)."""

    kind: str  # "delta" or "anchor"
    format_version: int
    from_version: int | None  # None for an anchor
    to_version: int
    base_hash: bytes | None  # `weights_hash` of the weights the delta applies to
    result_hash: bytes  # `weights_hash` of the weights after applying it
    tensors: tuple[TensorInfo, ...]
    nbytes: int  # size of the whole container

    @property
    def numel(self) -> int:
        """Elements in the weight set, each tied tensor counted once."""
        return sum(t.numel for t in self.tensors if t.alias_of is None)

    @property
    def changed(self) -> int:
        """Changed elements, each tied tensor counted once."""
        return sum(t.count for t in self.tensors if t.alias_of is None)


# -- container


def build_container(header: dict, streams: list[bytes]) -> bytes:
    """The container of a header map and its payload streams (compressed header, checksum).

    Does not check the header: `encode_delta` and `encode_anchor` build valid ones, and
    `parse_container` checks any it reads."""
    head = zstandard.ZstdCompressor(level=3).compress(msgpack.packb(header, use_bin_type=True))
    parts = [PREFIX.pack(MAGIC, FORMAT_VERSION, len(head)), head, *streams]
    # Hash the parts in place and join once: an anchor is hundreds of MB.
    digest = blake3.blake3()
    for part in parts:
        digest.update(part)
    return b"".join([*parts, digest.digest()])


def parse_container(blob: bytes | bytearray | memoryview) -> tuple[dict, memoryview]:
    """Verify the container and return (header, payload); nothing is trusted before this."""
    view = memoryview(blob).cast("B")
    if len(view) < PREFIX.size + TRAILER_LEN:
        raise DeltaError(f"not a delta: {len(view)} bytes is too short")
    head_end = header_extent(view[: PREFIX.size], check_version=False)
    body = view[: len(view) - TRAILER_LEN]
    if blake3.blake3(body).digest() != bytes(view[len(body) :]):
        raise DeltaError("corrupt delta: checksum mismatch")
    header_extent(view[: PREFIX.size])  # the version, once the bytes are known to be intact
    if head_end > len(body):
        raise DeltaError("corrupt delta: header runs past the end")
    return _decode_header(view[PREFIX.size : head_end], _MAX_HEADER), body[head_end:]


def header_extent(prefix: bytes | bytearray | memoryview, *, check_version: bool = True) -> int:
    """Bytes from a container's start to the end of its header, read from its first
    `PREFIX.size` bytes (magic, format version, header length)."""
    if len(prefix) < PREFIX.size:
        raise DeltaError(f"not a delta: {len(prefix)} bytes is too short")
    magic, version, head_len = PREFIX.unpack_from(prefix)
    if magic != MAGIC:
        raise DeltaError(f"not a delta: magic {bytes(magic)!r}")
    if check_version and version != FORMAT_VERSION:
        raise DeltaError(
            f"unsupported delta format version {version} (this node reads {FORMAT_VERSION})"
        )
    return PREFIX.size + head_len


def peek_header(
    head: bytes | bytearray | memoryview, *, max_header: int = _MAX_HEADER
) -> DeltaInfo:
    """The header of a container from its first `header_extent` bytes, before the payload.

    Nothing is verified yet (the checksum covers the whole container): this is only for
    refusing a payload early, say one for other tensors, without reading the rest of it.
    `max_header` bounds the decompressed header; `nbytes` of the result is 0 (unknown).
    """
    view = memoryview(head).cast("B")
    end = header_extent(view)
    if len(view) < end:
        raise DeltaError(f"peek_header: {len(view)} bytes given, the header ends at {end}")
    return _info(_decode_header(view[PREFIX.size : end], max_header), 0)


def _decode_header(head: memoryview, max_header: int) -> dict:
    """The header map of its zstd frame (its declared size at most `max_header`), checked."""
    try:
        if not 0 <= zstandard.frame_content_size(head) <= max_header:
            raise DeltaError("corrupt delta header: bad or oversized frame")
        raw = _decompressor().decompress(head)
        header = msgpack.unpackb(raw, raw=False)
    except (zstandard.ZstdError, ValueError, msgpack.UnpackException) as e:
        raise DeltaError(f"corrupt delta header: {e}") from e
    _validate_header(header)
    return header


def check_layout(info: DeltaInfo, shapes: Mapping[str, Sequence[int]]) -> None:
    """Raise `LayoutMismatch` unless `info` lists exactly the tensors named in `shapes` (a
    weight set's names and shapes, `{name: t.shape}`), each with its shape, as bfloat16."""
    listed = {t.name: t for t in info.tensors}
    missing, extra = sorted(set(shapes) - set(listed)), sorted(set(listed) - set(shapes))
    if missing or extra:
        raise LayoutMismatch(
            f"{info.kind} lacks tensors {missing[:5]} and has unknown {extra[:5]}"
            f" ({len(missing)} missing, {len(extra)} unknown)"
        )
    for name, t in listed.items():
        if t.dtype != _DTYPE:
            raise LayoutMismatch(f"{info.kind}: {name!r} is {t.dtype}, not {_DTYPE}")
        if tuple(t.shape) != tuple(shapes[name]):
            raise LayoutMismatch(
                f"{info.kind}: shape mismatch for {name!r}: {tuple(t.shape)}, the weights "
                f"hold {tuple(shapes[name])}"
            )


def _corrupt(rec: dict, what: str) -> NoReturn:
    raise DeltaError(f"corrupt delta: tensor {rec.get('name')!r}: {what}")


def _require(ok: bool, rec: dict, what: str) -> None:
    if not ok:
        _corrupt(rec, what)


_REC_TYPES: dict[str, type] = {
    "name": str,
    "shape": list,
    "dtype": str,
    "count": int,
    "index": str,
    "result_tag": bytes,
}


def _validate_header(h: object) -> None:
    """Type- and consistency-check a decoded header so later code can index it blindly."""
    if not isinstance(h, dict):
        raise DeltaError("corrupt delta header: not a map")
    if h.get("kind") not in ("delta", "anchor"):
        raise DeltaError(f"corrupt delta header: kind {h.get('kind')!r}")
    if h.get("hash") != HASH_ALG:
        raise DeltaError(f"unsupported weight hash {h.get('hash')!r} (this node uses {HASH_ALG})")
    is_delta = h["kind"] == "delta"
    for key, typ in (("to_version", int), ("result_hash", bytes), ("tensors", list)):
        if not isinstance(h.get(key), typ):
            raise DeltaError(f"corrupt delta header: {key} is {h.get(key)!r}")
    for key, typ in (("from_version", int), ("base_hash", bytes)):
        if is_delta != isinstance(h.get(key), typ):
            raise DeltaError(f"corrupt delta header: {key} is {h.get(key)!r} in a {h['kind']}")
    names = []
    for rec in h["tensors"]:
        if not isinstance(rec, dict):
            raise DeltaError("corrupt delta header: tensor entry is not a map")
        for key, rec_type in _REC_TYPES.items():
            _require(isinstance(rec.get(key), rec_type), rec, f"field {key} is {rec.get(key)!r}")
        _require(all(isinstance(d, int) and d >= 0 for d in rec["shape"]), rec, "bad shape")
        _require(not is_delta or isinstance(rec.get("base_tag"), bytes), rec, "no base_tag")
        _require("alias_of" in rec, rec, "no alias_of")
        _require(rec["alias_of"] is None or isinstance(rec["alias_of"], str), rec, "bad alias_of")
        sections = rec.get("sections", [])
        _require(
            isinstance(sections, list)
            and all(
                isinstance(s, list)
                and len(s) == 2
                and all(isinstance(x, int) and x >= 0 for x in s)
                for s in sections
            ),
            rec,
            "bad sections",
        )
        names.append(rec["name"])
    if names != sorted(set(names)):
        raise DeltaError("corrupt delta header: tensor names not sorted and unique")
    _validate_aliases(h["tensors"])


def _validate_aliases(recs: list[dict]) -> None:
    """Each tied name points at a non-tied entry of the same shape, and carries no data."""
    canonical = {r["name"]: r for r in recs if r["alias_of"] is None}
    for rec in recs:
        if rec["alias_of"] is None:
            continue
        target = canonical.get(rec["alias_of"])
        if target is None:
            _corrupt(rec, f"alias_of {rec['alias_of']!r} is not a tensor entry")
        _require(target["shape"] == rec["shape"], rec, "alias shape differs from its tensor")
        _require(rec["index"] == "alias" and not rec.get("sections"), rec, "alias with data")


def _info(header: dict, nbytes: int) -> DeltaInfo:
    tensors = tuple(
        TensorInfo(
            name=r["name"],
            shape=tuple(r["shape"]),
            dtype=r["dtype"],
            alias_of=r["alias_of"],
            count=r["count"],
            index_coding=r["index"],
            value_coding=r.get("values"),
            payload_bytes=sum(s[0] for s in r.get("sections", [])),
        )
        for r in header["tensors"]
    )
    return DeltaInfo(
        kind=header["kind"],
        format_version=FORMAT_VERSION,
        from_version=header["from_version"],
        to_version=header["to_version"],
        base_hash=header["base_hash"],
        result_hash=header["result_hash"],
        tensors=tensors,
        nbytes=nbytes,
    )


def read_header(blob: bytes | bytearray | memoryview) -> DeltaInfo:
    """Verify a delta/anchor's checksum and return its header; touches no weights.

    Cheap (one blake3 pass over the blob), so a node can check versions and hashes of a
    delta it received before deciding to apply it.
    """
    header, _ = parse_container(blob)
    return _info(header, len(memoryview(blob).cast("B")))
