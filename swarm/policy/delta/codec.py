"""Byte streams of a delta: zstd packing, byte planes, index coding and value coding."""

from __future__ import annotations

import numpy as np
import zstandard

from swarm.policy.delta.container import (
    _BITMAP_MIN_DENSITY,
    PROBE,
    SAMPLE,
    SCAN_CHUNK,
    DeltaError,
    _compressor,
    _decompressor,
    _require,
)
from swarm.policy.delta.tensors import _le_bytes

# -- streams


def _pack(buf: np.ndarray, level: int) -> bytes:
    """zstd-compress one stream; keep it verbatim when zstd does not make it smaller."""
    raw = np.ascontiguousarray(buf).data.cast("B")
    if len(raw) >= 16 * PROBE and len(_compressor(level).compress(raw[:PROBE])) > PROBE * 0.98:
        # Incompressible, like the mantissa bytes of an anchor: spare zstd the full pass.
        return bytes(raw)
    packed = _compressor(level).compress(raw)
    return packed if len(packed) < len(raw) else bytes(raw)


def _unpack(data: memoryview, raw_len: int) -> np.ndarray:
    if len(data) == raw_len:
        return np.frombuffer(data, dtype=np.uint8)
    try:
        out = _decompressor().decompress(data, max_output_size=raw_len)
    except zstandard.ZstdError as e:
        raise DeltaError(f"corrupt section: {e}") from e
    if len(out) != raw_len:
        raise DeltaError(f"corrupt section: {len(out)} bytes, header says {raw_len}")
    return np.frombuffer(out, dtype=np.uint8)


def _planes(values: np.ndarray, width: int) -> list[np.ndarray]:
    """Split unsigned ints into `width` byte planes, least significant first."""
    as_bytes = np.ascontiguousarray(values, dtype=values.dtype.newbyteorder("<")).view(np.uint8)
    as_bytes = as_bytes.reshape(-1, values.dtype.itemsize)
    return [as_bytes[:, i] for i in range(width)]


def _join(planes: list[np.ndarray], count: int) -> np.ndarray:
    """Inverse of `_planes`: byte planes into `count` unsigned ints of the narrowest of
    1, 2, 4 or 8 bytes that holds them (shift-or from the top plane down: measured 1.7x
    faster than filling the columns of a byte view)."""
    itemsize = next(size for size in (1, 2, 4, 8) if size >= len(planes))
    out = planes[-1].astype(f"u{itemsize}") if planes else np.zeros(count, f"u{itemsize}")
    for plane in reversed(planes[:-1]):
        out <<= 8
        out |= plane
    return out


# -- index coding


def _diff(
    old: np.ndarray, new: np.ndarray, hashers: tuple | None = None
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Sorted positions where the bit patterns differ, with the old and new bits there.

    Works one cache-sized slice at a time so the gathers (and the optional blake3
    `hashers` of old and new, fed slice by slice) read memory the compare just brought
    in, instead of four passes over the whole tensors.
    """
    positions, old_v, new_v = [], [], []
    for start in range(0, old.size, SCAN_CHUNK):
        o, w = old[start : start + SCAN_CHUNK], new[start : start + SCAN_CHUNK]
        if hashers is not None:
            hashers[0].update(_le_bytes(o))
            hashers[1].update(_le_bytes(w))
        local = np.flatnonzero(o != w)
        positions.append(local + start)
        old_v.append(o[local])
        new_v.append(w[local])
    if len(positions) <= 1:
        empty = (np.empty(0, np.int64), np.empty(0, np.uint16), np.empty(0, np.uint16))
        return (positions[0], old_v[0], new_v[0]) if positions else empty
    return np.concatenate(positions), np.concatenate(old_v), np.concatenate(new_v)


def _encode_index(idx: np.ndarray, n: int, level: int) -> tuple[str, int, list[bytes]]:
    """Cheapest coding of sorted changed positions: (coding, gap width, streams).

    Gaps are fixed-width little-endian ints split into byte planes, each zstd'd: measured
    4% (1% density) to 12% (0.1%) smaller than LEB128 varints under zstd, and decoding is
    a column copy instead of bit twiddling.
    """
    k = idx.size
    if k == 0:
        return "none", 0, []
    if k == n:
        return "all", 0, []
    gaps = (np.diff(idx, prepend=-1) - 1).astype("<u8")
    width = max(1, (int(gaps.max()).bit_length() + 7) // 8)
    best = ("gaps", width, [_pack(p, level) for p in _planes(gaps, width)])
    if k >= n * _BITMAP_MIN_DENSITY:
        mask = np.zeros(n, dtype=bool)
        mask[idx] = True
        bitmap = ("bitmap", 0, [_pack(np.packbits(mask, bitorder="little"), level)])
        if len(bitmap[2][0]) < sum(map(len, best[2])):
            best = bitmap
    return best


def _decode_index(rec: dict, streams: list[np.ndarray], n: int) -> np.ndarray | None:
    """Changed positions as int64 (None for "all"); validates them against the shape."""
    coding, count = rec["index"], rec["count"]
    if coding == "all":
        _require(count == n, rec, "'all' index with count != numel")
        return None
    if coding == "gaps":
        gaps = _join(streams, count)
        _require(count == 0 or int(gaps.max()) < n, rec, "gap beyond the tensor")
        # Position i is the sum of the first i + 1 gaps plus the i positions before it.
        idx = np.cumsum(gaps, dtype=np.int64)
        idx += np.arange(count, dtype=np.int64)
        _require(count == 0 or int(idx[-1]) < n, rec, "position beyond the tensor")
        return idx
    if coding == "bitmap":
        mask = np.unpackbits(streams[0], count=n, bitorder="little").view(bool)
        idx = np.flatnonzero(mask)
        _require(idx.size == count, rec, "bitmap popcount != count")
        return idx
    raise DeltaError(f"tensor {rec['name']!r}: unknown index coding {coding!r}")


def _index_stream_lens(rec: dict, n: int) -> list[int]:
    coding, count = rec["index"], rec["count"]
    if coding == "gaps":
        _require(isinstance(rec.get("width"), int) and 1 <= rec["width"] <= 8, rec, "bad width")
        return [count] * rec["width"]
    if coding == "bitmap":
        return [(n + 7) // 8]
    return []


# -- value coding


def _zigzag(d: np.ndarray) -> np.ndarray:
    """Wrapped uint16 difference -> small unsigned codes (0, -1, 1, -2, 2 -> 0, 1, 2, 3, 4)."""
    s = d.view(np.int16)
    return ((s << 1) ^ (s >> 15)).view(np.uint16)


def _unzigzag(z: np.ndarray) -> np.ndarray:
    return (z >> 1) ^ (np.uint16(0) - (z & np.uint16(1)))


def _value_candidates(old_v: np.ndarray | None, new_v: np.ndarray) -> dict[str, np.ndarray]:
    if old_v is None:
        return {"raw": new_v}
    return {"zdiff": _zigzag(new_v - old_v), "xor": old_v ^ new_v, "raw": new_v}


def _encode_values(
    old_v: np.ndarray | None, new_v: np.ndarray, level: int
) -> tuple[str, list[bytes]]:
    """Cheapest value coding: (coding, [low-byte plane, high-byte plane])."""
    candidates = _value_candidates(old_v, new_v)
    if len(candidates) > 1 and new_v.size > SAMPLE:
        # Choose on a strided sample, then compress only the winner in full.
        step = new_v.size // SAMPLE
        trial = {
            c: sum(len(_pack(p, level)) for p in _planes(v[::step], 2))
            for c, v in candidates.items()
        }
        coding = min(trial, key=trial.__getitem__)
        return coding, [_pack(p, level) for p in _planes(candidates[coding], 2)]
    packed = {c: [_pack(p, level) for p in _planes(v, 2)] for c, v in candidates.items()}
    coding = min(packed, key=lambda c: sum(map(len, packed[c])))
    return coding, packed[coding]


def _decode_values(rec: dict, streams: list[np.ndarray], old_v: np.ndarray | None) -> np.ndarray:
    return _combine(rec, _join(streams, rec["count"]), old_v)


def _combine(rec: dict, v: np.ndarray, old_v: np.ndarray | None) -> np.ndarray:
    """New bits from coded values `v` and the old bits at the same positions."""
    coding = rec["values"]
    if coding == "raw":
        return v
    if old_v is None:
        raise DeltaError(f"tensor {rec['name']!r}: {coding} values need old weights")
    if coding == "zdiff":
        return old_v + _unzigzag(v)
    if coding == "xor":
        return old_v ^ v
    raise DeltaError(f"tensor {rec['name']!r}: unknown value coding {coding!r}")
