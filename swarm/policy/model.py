"""Loading a policy: any Hugging Face causal LM by name or path, or the built-in tiny model.

Device and dtype are chosen sensibly ("auto": CUDA with bf16 if present, else CPU with fp32)
and loading errors become `ModelError` with the name that failed. The built-in model
(`TINY_MODEL_NAME`) is built on first use and then loaded through the very same
`from_pretrained` path as a real model.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch

from swarm.core.errors import ModelError

if TYPE_CHECKING:
    from transformers import PreTrainedModel

TINY_MODEL_NAME = "swarm-tiny"

_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


@dataclass
class Policy:
    """A loaded model and tokenizer, with where they live and what they are."""

    name: str
    model: PreTrainedModel
    tokenizer: Any  # a transformers tokenizer
    device: torch.device
    dtype: torch.dtype
    base_hash: str  # identifies the base weights, so peers know whether deltas can apply
    model_id: str  # how peers know the model: name@content hash, never a local path
    family: str = ""  # architecture and tokenizer (`swarm.policy.source.family_digest`)

    @property
    def stop_token_ids(self) -> set[int]:
        return stop_token_ids(self.model, self.tokenizer)


def pick_device(preference: str) -> torch.device:
    """'auto' -> cuda if available, else cpu. An explicit 'cuda' without CUDA is a clear error."""
    if preference == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if preference.startswith("cuda") and not torch.cuda.is_available():
        raise ModelError(
            f"device {preference!r} requested but CUDA is not available on this machine"
        )
    try:
        return torch.device(preference)
    except RuntimeError as e:
        raise ModelError(f"unknown device {preference!r}: {e}") from None


def pick_dtype(preference: str, device: torch.device) -> torch.dtype:
    """'auto' -> bf16 on CUDA (if supported), fp32 on CPU (bf16 matmuls are slow on most CPUs)."""
    if preference == "auto":
        if device.type == "cuda" and torch.cuda.is_bf16_supported():
            return torch.bfloat16
        return torch.float32
    if preference not in _DTYPES:
        raise ModelError(f"unknown dtype {preference!r}; choose one of auto, {', '.join(_DTYPES)}")
    return _DTYPES[preference]


def resolve_model_path(name: str) -> str:
    """A loadable name or path: built-in tiny models are built, GGUF sources converted (or
    found in the cache) first."""
    from swarm.policy.gguf import ensure_gguf_model, is_gguf_source
    from swarm.policy.tiny import TINY_MODELS, ensure_tiny_model

    if name in TINY_MODELS:
        return str(ensure_tiny_model(name))
    if is_gguf_source(name):
        return str(ensure_gguf_model(name))
    return name


def load_tokenizer(path: str):
    """Tokenizer for generation: left padding, and a pad token even if the model has none."""
    from transformers import AutoTokenizer

    try:
        tokenizer = AutoTokenizer.from_pretrained(path)
    except (OSError, ValueError, KeyError, IndexError, TypeError) as e:  # what broken folders raise
        first = str(e).strip().splitlines()[0] if str(e).strip() else e.__class__.__name__
        raise ModelError(f"cannot load tokenizer {path!r}: {first}") from None
    tokenizer.padding_side = "left"
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    return tokenizer


def load_policy(
    name: str, device: str = "auto", dtype: str = "auto", shown_name: str = ""
) -> Policy:
    """Load model and tokenizer by Hugging Face name or local path (or `TINY_MODEL_NAME`).

    `shown_name` is the name peers see before the content hash (`policy.model_name`)."""
    from transformers import AutoModelForCausalLM
    from transformers.utils import logging as hf_logging

    from swarm.policy.source import family_digest, model_identity, model_problem

    hf_logging.disable_progress_bar()  # a per-load bar is noise in a node's output
    problem = model_problem(name)
    if problem:
        raise ModelError(f"policy.model = {name!r}: {problem}")
    path = resolve_model_path(name)
    dev = pick_device(device)
    dt = pick_dtype(dtype, dev)
    tokenizer = load_tokenizer(path)
    try:
        model = AutoModelForCausalLM.from_pretrained(path, dtype=dt)
    except (OSError, ValueError, KeyError, IndexError, TypeError) as e:
        first = str(e).strip().splitlines()[0] if str(e).strip() else e.__class__.__name__
        raise ModelError(f"cannot load model {name!r}: {first}") from None
    model.to(dev)  # type: ignore[arg-type]
    model.eval()
    base_hash = weights_hash(model)
    return Policy(
        name=name,
        model=model,
        tokenizer=tokenizer,
        device=dev,
        dtype=dt,
        base_hash=base_hash,
        model_id=model_identity(name, base_hash, shown_name),
        family=family_digest(model.config.to_dict(), tokenizer.get_vocab()),
    )


def weights_hash(model: torch.nn.Module) -> str:
    """Hex hash of the model's bf16 weights, the same identity sparse deltas check against."""
    from swarm.policy.delta import bf16_state_dict
    from swarm.policy.delta import weights_hash as bf16_weights_hash

    return bf16_weights_hash(bf16_state_dict(model)).hex()


def stop_token_ids(model, tokenizer) -> set[int]:
    """Every token id that ends a completion: the tokenizer's EOS and the generation config's."""
    ids: set[int] = set()
    if tokenizer.eos_token_id is not None:
        ids.add(int(tokenizer.eos_token_id))
    gen_eos = getattr(getattr(model, "generation_config", None), "eos_token_id", None)
    if isinstance(gen_eos, int):
        ids.add(gen_eos)
    elif gen_eos:
        ids.update(int(i) for i in gen_eos)
    return ids
