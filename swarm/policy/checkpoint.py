"""Checkpoints: model, optimizer, policy version and RNG state, written atomically.

Layout under a node's run folder::

    checkpoints/
      v000012-r000012/      one complete checkpoint (model.safetensors, optimizer.pt, state.json)
      .tmp-*/               a checkpoint being written (ignored, removed on the next save)

A checkpoint folder is written under a temporary name, fsynced, then renamed into place, so a
kill at any moment leaves either the previous checkpoints or the new one, never half of one.
`state.json` is written last inside the folder and doubles as the completeness marker.
Deliberately not here: deciding when to checkpoint (the node) or the ledger's consistency.
"""

from __future__ import annotations

import json
import os
import random
import re
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from safetensors.torch import load_file, save_file

from swarm.core.errors import CheckpointError

_NAME_RE = re.compile(r"^v(\d{6,})-r(\d{6,})$")
FORMAT_VERSION = 1


@dataclass(frozen=True)
class CheckpointState:
    """What a resumed node needs besides weights and optimizer."""

    policy_version: int  # number of updates applied to the base model
    round: int  # rounds completed
    model_name: str
    base_hash: str


def save_checkpoint(folder: Path, model, optimizer, state: CheckpointState, keep: int = 3) -> Path:
    """Write a checkpoint of `model` and `optimizer` atomically; prune to the `keep` newest."""
    folder.mkdir(parents=True, exist_ok=True)
    _remove_stale_temps(folder)
    final = folder / f"v{state.policy_version:06d}-r{state.round:06d}"
    tmp = Path(tempfile.mkdtemp(prefix=".tmp-", dir=folder))
    try:
        weights = {
            k: v.detach().to("cpu").contiguous()
            for k, v in _unique_tensors(model.state_dict()).items()
        }
        save_file(weights, tmp / "model.safetensors")
        if optimizer is not None:
            torch.save(optimizer.state_dict(), tmp / "optimizer.pt")
        torch.save(_rng_state(), tmp / "rng.pt")
        payload = {"format": FORMAT_VERSION, **state.__dict__}
        (tmp / "state.json").write_text(json.dumps(payload, indent=2))
        for path in tmp.iterdir():
            _fsync(path)
        if (final / "state.json").is_file():
            # The same version and round again (a stop right after a periodic save): the weights
            # cannot have changed, so keep the complete checkpoint rather than delete it first,
            # which a kill could interrupt halfway and leave a damaged newest checkpoint.
            shutil.rmtree(tmp, ignore_errors=True)
            return final
        if final.exists():  # an incomplete folder of that name: set it aside atomically first
            os.rename(final, Path(tempfile.mkdtemp(prefix=".tmp-", dir=folder)) / "old")
        os.rename(tmp, final)
        _fsync(folder)
    except OSError as e:
        shutil.rmtree(tmp, ignore_errors=True)
        raise CheckpointError(f"cannot write checkpoint in {folder}: {e}") from None
    _prune(folder, keep)
    return final


def latest_checkpoint(folder: Path) -> Path | None:
    """The newest complete checkpoint folder (by round), or None."""
    candidates = list_checkpoints(folder)
    return candidates[-1] if candidates else None


def list_checkpoints(folder: Path) -> list[Path]:
    """Complete checkpoints, oldest first."""
    if not folder.is_dir():
        return []
    found = []
    for path in folder.iterdir():
        match = _NAME_RE.match(path.name)
        if match and (path / "state.json").is_file():
            found.append((int(match.group(2)), int(match.group(1)), path))
    return [p for _, _, p in sorted(found)]


def completed_rounds(folder: Path) -> int:
    """Rounds the newest complete checkpoint in `folder` covers (0 without one): where a
    restarted node resumes."""
    path = latest_checkpoint(folder)
    return 0 if path is None else read_state(path).round


def read_state(path: Path) -> CheckpointState:
    try:
        data = json.loads((path / "state.json").read_text())
        if data.get("format") != FORMAT_VERSION:
            raise CheckpointError(f"{path}: unknown checkpoint format {data.get('format')!r}")
        return CheckpointState(
            policy_version=int(data["policy_version"]),
            round=int(data["round"]),
            model_name=str(data["model_name"]),
            base_hash=str(data["base_hash"]),
        )
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise CheckpointError(f"{path}: unreadable checkpoint state: {e}") from None


def load_checkpoint(path: Path, model, optimizer=None, restore_rng: bool = True) -> CheckpointState:
    """Load weights (and optimizer, RNG) from `path` into the given objects; return its state."""
    state = read_state(path)
    try:
        weights = load_file(path / "model.safetensors", device=str(next(model.parameters()).device))
        missing, unexpected = model.load_state_dict(weights, strict=False)
        # Tied weights are saved once; anything else missing means a different architecture.
        missing = [k for k in missing if not _is_tied(model, k)]
        if missing or unexpected:
            raise CheckpointError(
                f"{path}: checkpoint does not match the model (missing {missing[:3]}, unexpected {unexpected[:3]})"
            )
        if optimizer is not None and (path / "optimizer.pt").exists():
            optimizer.load_state_dict(torch.load(path / "optimizer.pt", weights_only=False))
        if restore_rng and (path / "rng.pt").exists():
            _set_rng_state(torch.load(path / "rng.pt", weights_only=False))
    except (OSError, RuntimeError, ValueError) as e:
        raise CheckpointError(f"{path}: cannot load checkpoint: {e}") from None
    return state


def _unique_tensors(state_dict: dict) -> dict:
    """Drop aliases of tensors already present (tied embeddings), which safetensors refuses."""
    seen: set[int] = set()
    unique = {}
    for name, tensor in state_dict.items():
        key = tensor.untyped_storage().data_ptr()
        if key in seen and tensor.numel() > 0:
            continue
        seen.add(key)
        unique[name] = tensor
    return unique


def _is_tied(model, name: str) -> bool:
    tied = getattr(model, "_tied_weights_keys", None) or {}
    return name in tied


def _rng_state() -> dict:
    state = {
        "python": random.getstate(),
        "numpy": np.random.get_state(),
        "torch": torch.get_rng_state(),
    }
    if torch.cuda.is_available():  # each GPU's generator: sampling on CUDA draws from it
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def _set_rng_state(state: dict) -> None:
    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    torch.set_rng_state(state["torch"])
    cuda = state.get("cuda")
    if cuda and torch.cuda.is_available() and len(cuda) == torch.cuda.device_count():
        torch.cuda.set_rng_state_all(cuda)


def _fsync(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _remove_stale_temps(folder: Path) -> None:
    for path in folder.glob(".tmp-*"):
        shutil.rmtree(path, ignore_errors=True)


def _prune(folder: Path, keep: int) -> None:
    for path in list_checkpoints(folder)[:-keep]:
        # Renamed out of the way first (atomic), so a kill mid-delete never leaves a
        # half-deleted folder that still looks like a checkpoint; .tmp-* goes on the next save.
        trash = Path(tempfile.mkdtemp(prefix=".tmp-", dir=folder)) / path.name
        os.rename(path, trash)
        shutil.rmtree(trash.parent, ignore_errors=True)
