"""Applying a delta or an anchor, all or nothing: check, decode, write, verify the result.

The reading before any write is in `decode`; the journal that undoes a failed apply, and the
one function that writes target weights (`put_values`), in `journal`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor, wait

import numpy as np
import torch

from swarm.policy.delta.codec import (
    _combine,
    _decode_index,
    _join,
    _unpack,
)
from swarm.policy.delta.container import (
    DeltaError,
    DeltaInfo,
    Weights,
    _info,
    parse_container,
)
from swarm.policy.delta.decode import (
    _check_versions,
    _compare,
    _decode_change,
    _split_sections,
    _target_plan,
)
from swarm.policy.delta.journal import _Journal
from swarm.policy.delta.tensors import (
    _bits,
    _content_digest,
    _entries,
    _overall_digest,
    _pool,
)


def _run_all(pool: ThreadPoolExecutor, fn: Callable, items: list) -> list:
    """fn over items on the pool, in order; the first error is re-raised only once every
    call has stopped, so a caller never rolls back while a worker is still writing."""
    futures = [pool.submit(fn, item) for item in items]
    try:
        return [f.result() for f in futures]
    finally:
        wait(futures)


def _apply(
    weights: Weights,
    header: dict,
    payload: memoryview,
    expect_from_version: int | None,
    threads: int | None,
    keep_undo: bool,
    finite: bool = False,
) -> _Journal:
    """Check, decode, write, verify; see `apply_delta`. Without `keep_undo` (fresh target
    tensors nobody else holds) tensors are decoded and written one by one, and a failure
    leaves them partly written. Returns the journal of the writes (to undo them later)."""
    _check_versions(header, expect_from_version)
    target, writes = _target_plan(weights, header, f"apply {header['kind']}")
    slices = _split_sections(header, payload)
    recs = {r["name"]: r for r in header["tensors"]}
    is_delta = header["kind"] == "delta"
    todo = sorted((n for n in slices if recs[n]["count"]), key=lambda n: -recs[n]["count"])
    changed = {t for n in todo for t in writes[n]}
    # One hash pass in all: tensors the change leaves alone are hashed as they are, changed
    # ones after writing. The base is not hashed up front: a wrong base cannot produce the
    # right result (except where every differing bit is overwritten, which is then correct
    # anyway), so it shows as a result mismatch, and only then is the base hashed to say so.
    hashed = sorted(set(target.values()) - changed)
    journal = _Journal(keep_undo, finite)

    def content(name: str) -> bytes:
        return _content_digest(_bits(weights[name]))

    def decode(name: str):
        # Old bits are needed to decode a delta, and to undo an anchor applied in place.
        old = _bits(weights[writes[name][0]]) if is_delta or keep_undo else None
        return _decode_change(recs[name], slices[name], old)

    def known_old(i: int, old_v: np.ndarray | None) -> np.ndarray | None:
        # Untied copies of one delta tensor may differ in a wrong target: only the bits of
        # the copy that was decoded against are known; the journal reads the others.
        return old_v if i == 0 else None

    def write_and_hash(job: tuple) -> tuple[str, bytes]:
        name, idx, old_v, new_v = job
        journal.write(weights[name], idx, old_v, new_v, name)
        return name, content(name)

    def prepare(name: str) -> tuple[np.ndarray | None, np.ndarray]:
        # Read-only: decompress and validate a tensor's index and coded values.
        rec, streams = recs[name], [_unpack(data, raw) for data, raw in slices[name]]
        if rec["values"] != "raw" and not is_delta:
            raise DeltaError(f"tensor {rec['name']!r}: an anchor's values cannot need old weights")
        k = len(streams) - 2
        n = int(np.prod(rec["shape"], dtype=np.int64))
        return _decode_index(rec, streams[:k], n), _join(streams[k:], rec["count"])

    def write_prepared(item: tuple) -> list[tuple[str, bytes]]:
        name, (idx, v) = item
        copies, rec = writes[name], recs[name]
        first = weights[copies[0]]
        if idx is not None and len(copies) == 1 and first.is_contiguous():
            return [(copies[0], journal.patch(_bits(first), idx, v, rec))]  # the usual case
        old = _bits(first)
        old_v = old.copy() if idx is None else old[idx]
        new_v = _combine(rec, v, old_v)
        return [write_and_hash((t, idx, known_old(i, old_v), new_v)) for i, t in enumerate(copies)]

    def decode_write_and_hash(name: str) -> list[tuple[str, bytes]]:
        idx, old_v, new_v = decode(name)
        return [
            write_and_hash((t, idx, known_old(i, old_v), new_v)) for i, t in enumerate(writes[name])
        ]

    with _pool(threads) as pool:
        # Read-only phase: hash what the target holds and decode (so validate) every change
        # side by side; nothing is written until both are done.
        base = pool.map(content, hashed)
        prepared = pool.map(prepare, todo) if keep_undo else iter(())
        contents = dict(zip(hashed, base, strict=True))
        try:
            if keep_undo:
                for pairs in _run_all(pool, write_prepared, list(zip(todo, prepared, strict=True))):
                    contents.update(pairs)
            else:
                for pairs in _run_all(pool, decode_write_and_hash, todo):
                    contents.update(pairs)
            entries = _entries(weights, contents, target)
            if _overall_digest(entries) != header["result_hash"]:
                journal.rollback()
                if is_delta:  # name the cause: weights other than the delta's base?
                    rewritten = sorted(changed)
                    contents.update(zip(rewritten, pool.map(content, rewritten), strict=True))
                    _compare(
                        _entries(weights, contents, target),
                        header,
                        "base_tag",
                        header["base_hash"],
                        "base",
                    )
                _compare(entries, header, "result_tag", header["result_hash"], "result")
        except BaseException:
            journal.rollback()
            raise
    return journal


def apply_delta(
    weights: Weights,
    blob: bytes | bytearray | memoryview,
    *,
    expect_from_version: int | None = None,
    threads: int | None = None,
    finite: bool = False,
) -> DeltaInfo:
    """Apply a delta (or an anchor, which overwrites everything) to `weights` in place.

    Before touching anything it verifies the container checksum, the version (when
    `expect_from_version` is given), tensor names, shapes and dtype, and decodes every
    tensor. After writing it verifies the result hash; on a mismatch it rolls back and
    says whether the target was not the delta's base ("base hash mismatch", naming the
    tensors) or the result is wrong. With `finite`, a NaN or an infinity among the values
    written is refused (`NonFiniteWeights`); by default every bit pattern is carried as
    is. On any failure the writes are rolled back and `DeltaError` is raised, so the
    caller holds either the old weights or the new ones, bit for bit, never a mix. Costs
    extra memory for the old values of the changed elements (a whole copy of the weights
    for an anchor). Not safe against other writers of `weights` during the call.
    """
    return apply_delta_undoable(
        weights, blob, expect_from_version=expect_from_version, threads=threads, finite=finite
    )[0]


class Undo:
    """Puts back the weights an `apply_delta_undoable` changed (once; later calls do nothing).

    Holds the old values of the changed elements until it is dropped."""

    def __init__(self, journal: _Journal) -> None:
        self._journal = journal

    def __call__(self) -> None:
        self._journal.rollback()


def apply_delta_undoable(
    weights: Weights,
    blob: bytes | bytearray | memoryview,
    *,
    expect_from_version: int | None = None,
    threads: int | None = None,
    finite: bool = False,
) -> tuple[DeltaInfo, Undo]:
    """`apply_delta`, and an `Undo` that restores the weights as they were before it, for a
    caller that checks the result further (say, a forward pass of the model) first."""
    header, payload = parse_container(blob)
    journal = _apply(weights, header, payload, expect_from_version, threads, True, finite)
    return _info(header, len(memoryview(blob).cast("B"))), Undo(journal)


def decode_anchor(
    blob: bytes | bytearray | memoryview, *, threads: int | None = None
) -> tuple[dict[str, torch.Tensor], DeltaInfo]:
    """Rebuild the weight set an anchor holds as new CPU bf16 tensors, hash-verified.

    Tied names come back as one shared tensor. To load into an existing model in place,
    use `apply_delta` on the model's bf16 tensors instead.
    """
    header, payload = parse_container(blob)
    if header["kind"] != "anchor":
        raise DeltaError(f"decode_anchor: blob is a {header['kind']}, not an anchor")
    weights: dict[str, torch.Tensor] = {}
    for rec in header["tensors"]:
        canon = rec["alias_of"] or rec["name"]
        if canon not in weights:
            weights[canon] = torch.empty(tuple(rec["shape"]), dtype=torch.bfloat16)
        weights[rec["name"]] = weights[canon]
    # Fresh tensors nobody else holds: decode and write tensor by tensor, no undo copies.
    _apply(weights, header, payload, None, threads, keep_undo=False)
    return weights, _info(header, len(memoryview(blob).cast("B")))


def apply_chain(
    anchor: bytes | bytearray | memoryview,
    deltas: Iterable[bytes | bytearray | memoryview],
    *,
    threads: int | None = None,
) -> tuple[dict[str, torch.Tensor], DeltaInfo]:
    """Late-joiner path: decode `anchor`, then apply `deltas` in order, each verified.

    Each delta must start at the version the previous step ended at. Returns the final
    weights and the info of the last step.
    """
    weights, info = decode_anchor(anchor, threads=threads)
    for blob in deltas:
        info = apply_delta(weights, blob, expect_from_version=info.to_version, threads=threads)
    return weights, info
