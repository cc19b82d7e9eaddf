"""`swarm-node export`: a node's current policy as a standard Hugging Face model folder.

The policy a node trains lives in its newest checkpoint (weights as safetensors, plus the
optimizer and RNG state only a resuming node needs). Export loads the checkpoint's base
model (the model name the checkpoint records, built-in tiny models included), puts the
checkpoint's weights into it and writes `config.json`, `model.safetensors`, the tokenizer
files and `generation_config.json` with `save_pretrained`, in the checkpoint's dtype, so
`AutoModelForCausalLM.from_pretrained(DIR)` and `AutoTokenizer.from_pretrained(DIR)` load it
anywhere, without swarm-node. `swarm_export.json` says where it came from: the run folder's
name (not its path), the checkpoint, and the base model as peers know it (name@content hash,
never a local path), so the folder can be shared as it is.

The folder is written under a temporary name and renamed into place; an existing non-empty
folder is refused. Reading a running node's folder is safe: checkpoints are complete or absent.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

from swarm.core.errors import SwarmError


@dataclass(frozen=True)
class ExportResult:
    out: Path
    checkpoint: Path
    model: str
    policy_version: int
    round: int
    dtype: str


def export_policy(run_dir: Path, out: Path) -> ExportResult:
    """Write the newest checkpoint in `run_dir` to `out` as a Hugging Face model folder."""
    from transformers.utils import logging as hf_logging

    from swarm.policy.checkpoint import latest_checkpoint, load_checkpoint, read_state
    from swarm.policy.model import load_policy

    checkpoint = latest_checkpoint(run_dir / "checkpoints")
    if checkpoint is None:
        raise SwarmError(
            f"no checkpoint in {run_dir / 'checkpoints'}: a node writes one every "
            "node.checkpoint_every rounds and when it stops cleanly"
        )
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise SwarmError(f"{out} already exists and is not an empty folder: choose a new --out")
    state = read_state(checkpoint)
    hf_logging.disable_progress_bar()  # no "Writing model shards" bar in the output
    policy = load_policy(state.model_name, device="cpu", dtype="float32")
    load_checkpoint(checkpoint, policy.model, optimizer=None, restore_rng=False)
    dtype = _saved_dtype(checkpoint)
    policy.model.to(dtype)
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=out.parent))
        try:
            policy.model.save_pretrained(staging, safe_serialization=True)
            policy.tokenizer.save_pretrained(staging)
            provenance = {
                "source": "swarm-node export",
                "run": Path(os.path.abspath(run_dir)).name,  # its name: no path leaves the machine
                "checkpoint": checkpoint.name,
                "base_model": policy.model_id,
                "base_hash": state.base_hash,
                "policy_version": state.policy_version,
                "round": state.round,
            }
            (staging / "swarm_export.json").write_text(json.dumps(provenance, indent=2) + "\n")
            _usual_modes(staging)
            if out.exists():
                out.rmdir()  # empty, checked above
            os.rename(staging, out)
        finally:
            shutil.rmtree(staging, ignore_errors=True)
    except OSError as e:
        raise SwarmError(f"cannot write {out}: {e.strerror or e}") from None
    return ExportResult(
        out,
        checkpoint,
        state.model_name,
        state.policy_version,
        state.round,
        str(dtype).removeprefix("torch."),
    )


def _usual_modes(folder: Path) -> None:
    """The modes of a plain new folder and files (the temporary folder is private, 0700)."""
    umask = os.umask(0)
    os.umask(umask)
    folder.chmod(0o777 & ~umask)
    for path in folder.iterdir():
        path.chmod(0o666 & ~umask)


def _saved_dtype(checkpoint: Path):
    """The dtype of the checkpoint's floating-point weights (what the node trained in)."""
    import torch
    from safetensors import safe_open

    with safe_open(checkpoint / "model.safetensors", framework="pt") as f:
        for name in f.keys():  # noqa: SIM118 - safe_open has no __iter__
            tensor = f.get_slice(name)
            dtype = {"F32": torch.float32, "BF16": torch.bfloat16, "F16": torch.float16}.get(
                tensor.get_dtype()
            )
            if dtype is not None:
                return dtype
    return torch.float32
