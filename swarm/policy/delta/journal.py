"""The undo journal of an apply's in-place writes (`_Journal`), so a failed apply leaves the
target untouched, and `put_values`, the one place applying writes target weights.
"""

from __future__ import annotations

from collections.abc import Callable

import blake3
import numpy as np
import torch

from swarm.policy.delta.codec import (
    _combine,
)
from swarm.policy.delta.container import (
    _EXPONENT,
    SCAN_CHUNK,
    NonFiniteWeights,
)
from swarm.policy.delta.tensors import (
    _bits,
    _le_bytes,
)


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
