"""Reading a delta or an anchor for applying, before anything is written: the payload split
into each tensor's sections and checked against its record, one changed tensor decoded, the
target's layout planned against the header; and the version and hash comparisons that name
what mismatched.
"""

from __future__ import annotations

import numpy as np
import torch

from swarm.policy.delta.codec import (
    _decode_index,
    _decode_values,
    _index_stream_lens,
    _unpack,
)
from swarm.policy.delta.container import (
    _DTYPE,
    _TAG_LEN,
    DeltaError,
    LayoutMismatch,
    Weights,
    _require,
)
from swarm.policy.delta.tensors import (
    _layout,
    _overall_digest,
)


def _split_sections(header: dict, payload: memoryview) -> dict[str, list[tuple[memoryview, int]]]:
    """Each canonical tensor's sections as (stored bytes, raw length), checked against its
    shape and codings; the payload must be claimed exactly."""
    out: dict[str, list[tuple[memoryview, int]]] = {}
    offset = 0
    for rec in header["tensors"]:
        if rec["alias_of"] is not None:
            continue
        n = int(np.prod(rec["shape"], dtype=np.int64))
        _check_record(rec, n)
        slices = []
        for stored, raw in rec.get("sections", []):
            _require(offset + stored <= len(payload), rec, "section runs past the payload")
            slices.append((payload[offset : offset + stored], raw))
            offset += stored
        out[rec["name"]] = slices
    if offset != len(payload):
        raise DeltaError(f"corrupt delta: {len(payload) - offset} payload bytes not claimed")
    return out


def _check_record(rec: dict, n: int) -> None:
    """Counts, codings and section lengths of one canonical record agree with its shape."""
    _require(rec["dtype"] == _DTYPE, rec, f"dtype {rec['dtype']!r}")
    _require(0 <= rec["count"] <= n, rec, f"count {rec['count']} for {n} elements")
    coding = rec["index"]
    _require(coding in ("none", "gaps", "bitmap", "all"), rec, f"index coding {coding!r}")
    if coding == "none":
        _require(rec["count"] == 0 and not rec.get("sections"), rec, "'none' index with data")
        return
    _require(rec.get("values") in ("zdiff", "xor", "raw"), rec, f"values {rec.get('values')!r}")
    expected = _index_stream_lens(rec, n) + [rec["count"]] * 2
    got = [raw for _, raw in rec.get("sections", [])]
    _require(got == expected, rec, f"section lengths {got}, expected {expected}")


def _decode_change(
    rec: dict, slices: list[tuple[memoryview, int]], old: np.ndarray | None
) -> tuple[np.ndarray | None, np.ndarray | None, np.ndarray]:
    """Decode one changed canonical tensor without writing anything.

    Returns (positions, or None for "all"; a copy of the `old` bits there, or None when
    `old` is None; the new bits there). The old bits double as the undo record.
    """
    streams = [_unpack(data, raw) for data, raw in slices]
    n = int(np.prod(rec["shape"], dtype=np.int64))
    n_index = len(streams) - 2
    idx = _decode_index(rec, streams[:n_index], n)
    if rec["values"] != "raw" and old is None:
        raise DeltaError(f"tensor {rec['name']!r}: {rec['values']} values need old weights")
    old_v = None if old is None else (old.copy() if idx is None else old[idx])
    return idx, old_v, _decode_values(rec, streams[n_index:], old_v)


def _target_plan(
    weights: Weights, header: dict, what: str
) -> tuple[dict[str, str], dict[str, list[str]]]:
    """Check the target against the header; return its layout and the writes to make.

    Returns (target canonical map, delta canonical name -> distinct target tensors to
    write). A name the delta ties but the target keeps separate is written separately;
    a name the target ties but the delta does not is refused, since one write would then
    land twice.
    """
    recs = {r["name"]: r for r in header["tensors"]}
    missing, extra = sorted(set(recs) - set(weights)), sorted(set(weights) - set(recs))
    if missing or extra:
        raise LayoutMismatch(f"{what}: target lacks tensors {missing}, has unexpected {extra}")
    for name, rec in recs.items():
        t = weights[name]
        if isinstance(t, torch.Tensor) and tuple(t.shape) != tuple(rec["shape"]):
            raise LayoutMismatch(
                f"{what}: shape mismatch for {name!r}: delta has {tuple(rec['shape'])}, "
                f"target has {tuple(t.shape)}"
            )
    target = _layout(weights, what)
    delta_canon = {n: r["alias_of"] or n for n, r in recs.items()}
    writes: dict[str, list[str]] = {}
    for name in sorted(recs):
        if delta_canon[target[name]] != delta_canon[name]:
            raise LayoutMismatch(
                f"{what}: target ties {name!r} to {target[name]!r} but the delta does not"
            )
        group = writes.setdefault(delta_canon[name], [])
        if target[name] not in group:
            group.append(target[name])
    return target, writes


def _check_versions(header: dict, expect_from_version: int | None) -> None:
    if expect_from_version is None or header["kind"] != "delta":
        return
    if header["from_version"] != expect_from_version:
        raise DeltaError(
            f"version mismatch: delta goes {header['from_version']} -> {header['to_version']}, "
            f"target is at version {expect_from_version}"
        )


def _compare(
    entries: dict[str, bytes], header: dict, tag_key: str, overall: bytes, what: str
) -> None:
    if _overall_digest(entries) == overall:
        return
    bad = [r["name"] for r in header["tensors"] if r.get(tag_key) != entries[r["name"]][:_TAG_LEN]]
    shown = ", ".join(repr(n) for n in bad[:5]) + (
        f" and {len(bad) - 5} more" if len(bad) > 5 else ""
    )
    raise DeltaError(f"{what} hash mismatch (tensors: {shown or 'none individually'})")
