"""Where a policy model comes from, checked without loading it.

`policy.model` is a built-in tiny model's name (`swarm-tiny`), a local folder, or a Hugging
Face model name (`Qwen/Qwen2.5-0.5B-Instruct`). `model_problem` says in one line what is
wrong with one before any weights are read: a path that does not exist (rather than the
hub's complaint about a malformed repo id), a folder without config, weights or tokenizer,
a name that cannot be a hub name, or a hub model missing from the cache while the hub is
offline. `context_source` gives what the context-length check needs: a tokenizer and the
number of positions, for built-in models, local folders and hub models already cached.
`model_identity` is how a node names its model to peers: by content, never by a local path.

No torch here unless a built-in model is named (its recipes live in `swarm.policy.tiny`).
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

TINY_PREFIX = "swarm-tiny"  # every built-in model's name starts so
TOKENIZER_FILES = ("tokenizer.json", "tokenizer.model", "vocab.json", "vocab.txt", "spiece.model")
WEIGHT_FILES = (
    "model.safetensors",
    "model.safetensors.index.json",
    "pytorch_model.bin",
    "pytorch_model.bin.index.json",
)
IDENTITY_HASH_CHARS = 12  # hex characters of a local model's content hash in its identity
# config.json keys that say where or with what a folder was written, not what the model is
_UNSTABLE_CONFIG_KEYS = ("transformers_version",)
_POSITION_KEYS = ("max_position_embeddings", "n_positions", "max_seq_len", "seq_length", "n_ctx")


def looks_like_path(name: str) -> bool:
    """A name only a file system path can be: absolute, ./ or ../ or ~, or more than one /."""
    return name.startswith(("/", "./", "../", "~")) or name in (".", "..") or name.count("/") > 1


def local_folder(name: str) -> Path | None:
    """The folder `name` names on this machine, if it names one that exists."""
    path = Path(os.path.expanduser(name))
    return path if path.exists() else None


def model_problem(name: str) -> str | None:
    """What is wrong with `name` as a model source, in one line; None if nothing is seen."""
    folder = local_folder(name)
    if folder is not None:
        return folder_problem(folder)
    if looks_like_path(name):
        return (
            "no such folder: give a local model folder, a Hugging Face model name "
            "(e.g. Qwen/Qwen2.5-0.5B-Instruct) or swarm-tiny"
        )
    if name.startswith(TINY_PREFIX):
        from swarm.policy.tiny import TINY_MODELS

        if name in TINY_MODELS:
            return None
        return f"no built-in model of that name; built-in models: {', '.join(TINY_MODELS)}"
    return hub_problem(name)


def folder_problem(folder: Path) -> str | None:
    """A model folder must hold config.json, weights and tokenizer files."""
    if not folder.is_dir():
        return f"{folder} is a file, not a model folder"
    present = {p.name for p in folder.iterdir()}
    if "config.json" not in present:
        return f"{folder} has no config.json: not a Hugging Face model folder"
    if not present & set(WEIGHT_FILES) and not any(n.endswith(".safetensors") for n in present):
        return f"{folder} has no weights ({', '.join(WEIGHT_FILES[::2])})"
    if not present & set(TOKENIZER_FILES):
        return (
            f"{folder} has no tokenizer ({', '.join(TOKENIZER_FILES)}): save the model's "
            "tokenizer into the folder too (tokenizer.save_pretrained)"
        )
    return None


def hub_problem(name: str) -> str | None:
    """A hub name must be well formed; with the hub offline, it must be in the cache."""
    from huggingface_hub.utils import HFValidationError, validate_repo_id

    try:
        validate_repo_id(name)
    except HFValidationError:
        return (
            "not a local folder, and not a Hugging Face model name (org/name: letters, digits, "
            "'-', '_', '.'); built-in: swarm-tiny"
        )
    offline = any(
        os.environ.get(v, "").lower() in ("1", "true", "yes", "on")
        for v in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")
    )
    if offline and cached_folder(name) is None:
        return (
            "not in the Hugging Face cache, and the hub is offline (HF_HUB_OFFLINE): "
            "download it first"
        )
    return None


def cached_folder(name: str) -> Path | None:
    """The snapshot folder of a hub model already in the Hugging Face cache, if it is."""
    from huggingface_hub import try_to_load_from_cache

    found = try_to_load_from_cache(name, "config.json")
    return Path(found).parent if isinstance(found, str) else None


def max_positions(folder: Path) -> int | None:
    """The context length a model folder's config.json declares, if any."""
    try:
        data = json.loads((folder / "config.json").read_text())
    except (OSError, ValueError):
        return None
    for config in (data, data.get("text_config") or {}):
        for key in _POSITION_KEYS:
            if isinstance(config.get(key), int) and config[key] > 0:
                return config[key]
    return None


@dataclass(frozen=True)
class ContextSource:
    """How to get a model's tokenizer (built on demand) and its number of positions."""

    tokenizer: Callable[[], object]
    max_positions: int | None


def context_source(name: str) -> ContextSource | None:
    """The tokenizer and context length of `name`; None for a hub model not on this machine."""
    folder = local_folder(name)
    if folder is None and name.startswith(TINY_PREFIX):
        from swarm.policy.tiny import TINY_MODELS, build_tokenizer

        recipe = TINY_MODELS[name]
        return ContextSource(lambda: build_tokenizer(recipe), recipe.max_positions)
    if folder is None and not looks_like_path(name):
        folder = cached_folder(name)
    if folder is None or not folder.is_dir():
        return None

    def tokenizer():
        from transformers import AutoTokenizer

        return AutoTokenizer.from_pretrained(folder)

    return ContextSource(tokenizer, max_positions(folder))


def model_identity(name: str, base_hash: str) -> str:
    """The name a node gives its model on the wire (groups, delta manifests): never a path.

    A built-in model keeps its name (its recipe fixes its weights); a hub model is
    `org/name@<revision>`, the commit of its snapshot in the Hugging Face cache; a local
    folder is `<folder name>@<hash>`, a short hash of its config and of `base_hash` (its
    version-0 weights), so two copies of one model agree wherever they are stored. Peers
    compare these strings (with `base_hash`) to decide whether a group is of their model.
    """
    folder = local_folder(name)
    if folder is None and name.startswith(TINY_PREFIX):
        return name
    if folder is not None:
        return f"{folder.resolve().name}@{content_digest(folder, base_hash)}"
    snapshot = cached_folder(name)
    revision = snapshot.name if snapshot is not None else base_hash[:IDENTITY_HASH_CHARS]
    return f"{name}@{revision}"


def content_digest(folder: Path, base_hash: str) -> str:
    """Short hex hash of a model folder's config (what it is, not who saved it) and weights."""
    try:
        config = json.loads((folder / "config.json").read_text())
    except (OSError, ValueError):
        config = {}
    if isinstance(config, dict):
        config = {
            k: v
            for k, v in config.items()
            if not k.startswith("_") and k not in _UNSTABLE_CONFIG_KEYS
        }
    canonical = json.dumps(config, sort_keys=True, separators=(",", ":"))
    digest = hashlib.sha256(canonical.encode() + b"\0" + base_hash.encode())
    return digest.hexdigest()[:IDENTITY_HASH_CHARS]
