"""Decoding and applying a delta or an anchor, all or nothing (a journal undoes a failure)."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor, wait

import blake3
import numpy as np
import torch

from swarm.policy.delta.codec import (
    _combine,
    _decode_index,
    _decode_values,
    _index_stream_lens,
    _join,
    _unpack,
)
from swarm.policy.delta.container import (
    _DTYPE,
    _EXPONENT,
    _TAG_LEN,
    SCAN_CHUNK,
    DeltaError,
    DeltaInfo,
    LayoutMismatch,
    NonFiniteWeights,
    Weights,
    _info,
    _require,
    parse_container,
)
from swarm.policy.delta.tensors import (
    _bits,
    _content_digest,
    _entries,
    _layout,
    _le_bytes,
    _overall_digest,
    _pool,
)

# -- decoding


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


class _Journal:
    """Undo log of in-place writes, so a failed apply leaves the target untouched.

    With ``keep=False`` it only writes (for freshly allocated targets nobody else holds).
    With ``finite=True`` it refuses (`NonFiniteWeights`) to write a NaN or an infinity.
    """

    def __init__(self, keep: bool, finite: bool = False) -> None:
        self._keep = keep
        self._finite = finite
        self._undo: list[Callable[[], object]] = []

    def check(self, values: np.ndarray, name: str) -> None:
        """Refuse bf16 bit patterns whose exponent is all ones (NaN, +-inf), if asked to."""
        if self._finite and np.any((values & _EXPONENT) == _EXPONENT):
            bad = int(np.count_nonzero((values & _EXPONENT) == _EXPONENT))
            raise NonFiniteWeights(f"tensor {name!r}: {bad} new values are NaN or infinite")

    def write(
        self,
        t: torch.Tensor,
        idx: np.ndarray | None,
        old_v: np.ndarray | None,
        new_v: np.ndarray,
        name: str = "",
    ) -> None:
        """Write `new_v` at `idx` (everywhere for None); `old_v`: t's bits there, if known."""
        self.check(new_v, name)
        t = t.detach()
        if not t.is_contiguous():
            if self._keep:
                saved_t = t.clone()
                self._undo.append(lambda: t.copy_(saved_t))
            work = t.contiguous()
            put_values(_bits(work), idx, new_v)
            t.copy_(work)
            return
        flat = _bits(t)
        if self._keep:
            saved = old_v if old_v is not None else flat.copy() if idx is None else flat[idx]
            # Logged before writing: putting the saved bits back is right even after a
            # write that failed halfway.
            self._undo.append(lambda: put_values(flat, idx, saved))
        put_values(flat, idx, new_v)

    def patch(self, flat: np.ndarray, idx: np.ndarray, v: np.ndarray, rec: dict) -> bytes:
        """Write a sparse change into contiguous `flat` bits and return their content digest.

        One pass, a cache-sized slice at a time: gather the old bits at the slice's changed
        positions, combine them with the coded values `v`, keep them for undo, write, and
        feed the slice to blake3 while it is still in cache (instead of a gather pass, a
        scatter pass and a hash pass over the whole tensor).
        """
        saved: list[np.ndarray] = []
        if self._keep:
            # Logged before writing; restores exactly the positions written so far.
            self._undo.append(lambda: put_values(flat, idx[: sum(map(len, saved))], _concat(saved)))
        hasher = blake3.blake3()
        starts = range(0, flat.size, SCAN_CHUNK)
        bounds = np.searchsorted(idx, [*starts, flat.size])
        for start, lo, hi in zip(starts, bounds[:-1], bounds[1:], strict=True):
            if hi > lo:
                where = idx[lo:hi]
                old_v = flat[where]
                saved.append(old_v)
                new_v = _combine(rec, v[lo:hi], old_v)
                self.check(new_v, rec["name"])
                put_values(flat, where, new_v)
            hasher.update(_le_bytes(flat[start : start + SCAN_CHUNK]))
        return hasher.digest()

    def rollback(self) -> None:
        for undo in reversed(self._undo):
            undo()
        self._undo.clear()


def _concat(parts: list[np.ndarray]) -> np.ndarray:
    return np.concatenate(parts) if parts else np.empty(0, np.uint16)


def put_values(flat: np.ndarray, idx: np.ndarray | None, values: np.ndarray) -> None:
    """Write `values` into a flat bit view at `idx` (all of it for None): the only place
    applying writes target weights, so a failure here exercises the rollback."""
    if idx is None:
        flat[...] = values
    else:
        flat[idx] = values


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
