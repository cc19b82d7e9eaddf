"""Where a policy model comes from, checked without loading it.

`policy.model` is a built-in tiny model's name (`swarm-tiny`), a local folder, a GGUF file
or packaged GGUF model (`smollm2-135m`, converted once: `swarm.policy.gguf`), or a Hugging
Face model name (`Qwen/Qwen2.5-0.5B-Instruct`). `model_problem` says in one line what is
wrong with one before any weights are read: a path that does not exist (rather than the
hub's complaint about a malformed repo id), a folder without config, weights or tokenizer,
a name that cannot be a hub name, or a hub model missing from the cache while the hub is
offline or unreachable (a short connection attempt, not the hub client's retries).
`context_source` gives what the context-length check needs: a tokenizer and the
number of positions, for built-in models, local folders and hub models already cached.
`model_identity` is how a node names its model to peers: a name the operator chooses (or one
derived from the model, never its folder) and a hash of its content; `same_model` compares
two identities by content alone. `family_digest` names what a model's completions are
written in (its architecture and tokenizer), so a node can tell before pulling whether a
peer's completions are of its own model family (`sharing.shared_from`).

No torch or transformers here unless a local or hub model's tokenizer is built (a built-in
model's recipes live in `swarm.policy.tiny`, its prompts are counted by `tiny_context`).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

TINY_PREFIX = "swarm-tiny"  # the built-in tiny models; testbed models: is_builtin
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
HUB_TIMEOUT_S = 3.0  # how long `hub_reachable` waits for a connection to the hub
MAX_MODEL_NAME_CHARS = 96
_MODEL_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._/-]*")
_POSITION_KEYS = ("max_position_embeddings", "n_positions", "max_seq_len", "seq_length", "n_ctx")


def is_builtin(name: str) -> bool:
    """Whether `name` is a built-in model's (swarm-tiny..., or a skill or gap testbed model)."""
    from swarm.policy.skills import GAP_SWARM, SKILL_SWARM  # pure data, no torch

    return name.startswith(TINY_PREFIX) or name in {p.name for p in SKILL_SWARM + GAP_SWARM}


def looks_like_path(name: str) -> bool:
    """A name only a file system path can be: absolute, ./ or ../ or ~, or more than one /."""
    return name.startswith(("/", "./", "../", "~")) or name in (".", "..") or name.count("/") > 1


def local_folder(name: str) -> Path | None:
    """The folder `name` names on this machine, if it names one that exists."""
    path = Path(os.path.expanduser(name))
    return path if path.exists() else None


def model_problem(name: str) -> str | None:
    """What is wrong with `name` as a model source, in one line; None if nothing is seen."""
    from swarm.policy.gguf import gguf_problem, is_gguf_source

    if is_gguf_source(name):
        return gguf_problem(name)
    folder = local_folder(name)
    if folder is not None:
        return folder_problem(folder)
    if looks_like_path(name):
        return (
            "no such folder: give a local model folder, a .gguf file, a Hugging Face model "
            "name (e.g. Qwen/Qwen2.5-0.5B-Instruct), smollm2-135m or swarm-tiny"
        )
    if is_builtin(name):
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
    """A hub name must be well formed, and cached unless the hub can be reached now."""
    from huggingface_hub.utils import HFValidationError, validate_repo_id

    try:
        validate_repo_id(name)
    except HFValidationError:
        return (
            "not a local folder, and not a Hugging Face model name (org/name: letters, digits, "
            "'-', '_', '.'); built-in: swarm-tiny"
        )
    if cached_folder(name) is not None:
        return None
    if hub_offline():
        return (
            "not in the Hugging Face cache, and the hub is offline (HF_HUB_OFFLINE): "
            "download it first, or set policy.model to a local model folder"
        )
    endpoint = hub_endpoint()
    if not hub_reachable(endpoint):
        return (
            f"not a local folder nor in the Hugging Face cache, and the hub ({endpoint}) is "
            f"unreachable: download it first (hf download {name}), or set policy.model to a "
            "local model folder; with no network, HF_HUB_OFFLINE=1 uses the cache alone"
        )
    return None


def hub_offline() -> bool:
    """Whether the Hugging Face hub client is told to stay offline (by env or by this process)."""
    from huggingface_hub import constants

    return constants.is_offline_mode() or any(
        os.environ.get(v, "").lower() in ("1", "true", "yes", "on")
        for v in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")
    )


def hub_endpoint() -> str:
    """The hub the Hugging Face client would ask (HF_ENDPOINT, else huggingface.co)."""
    from huggingface_hub import constants

    return constants.ENDPOINT


def hub_reachable(endpoint: str, timeout: float = HUB_TIMEOUT_S) -> bool:
    """Whether a TCP connection to the hub's host opens within `timeout` seconds."""
    from urllib.parse import urlsplit

    parts = urlsplit(endpoint)
    if not parts.hostname:
        return False
    port = parts.port or (443 if parts.scheme == "https" else 80)
    started = time.monotonic()
    found: list = []

    def resolve() -> None:  # getaddrinfo has no timeout of its own: a dead resolver can hang
        with contextlib.suppress(OSError):
            found.extend(socket.getaddrinfo(parts.hostname, port, type=socket.SOCK_STREAM))

    lookup = threading.Thread(target=resolve, name="hub-lookup", daemon=True)
    lookup.start()
    lookup.join(timeout)
    for family, kind, proto, _, address in list(found)[:4]:
        left = timeout - (time.monotonic() - started)
        if left <= 0:
            break
        try:
            with socket.socket(family, kind, proto) as sock:
                sock.settimeout(left)
                sock.connect(address)
                return True
        except OSError:  # refused, unreachable, timed out
            continue
    return False


def use_cache_offline(name: str) -> bool:
    """For a hub model already cached while the hub is unreachable: load it offline.

    Without this the hub client retries each file for most of a minute before falling back
    to the cache. Returns whether offline mode was switched on."""
    from swarm.policy.gguf import is_gguf_source

    if local_folder(name) is not None or is_builtin(name) or looks_like_path(name):
        return False
    if is_gguf_source(name):
        return False
    if hub_offline() or cached_folder(name) is None or hub_reachable(hub_endpoint()):
        return False
    from huggingface_hub import constants

    os.environ["HF_HUB_OFFLINE"] = "1"
    constants.HF_HUB_OFFLINE = True  # what transformers and the hub client read at each call
    return True


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
    """The tokenizer and context length of `name`; None for a hub model not on this machine.

    A GGUF source is converted first (once: `swarm.policy.gguf`)."""
    from swarm.policy.gguf import ensure_gguf_model, is_gguf_source

    folder = ensure_gguf_model(name) if is_gguf_source(name) else local_folder(name)
    if folder is None and is_builtin(name):
        from swarm.policy.tiny import TINY_MODELS
        from swarm.policy.tiny_context import light_tokenizer

        recipe = TINY_MODELS[name]
        return ContextSource(lambda: light_tokenizer(recipe), recipe.max_positions)
    if folder is None and not looks_like_path(name):
        folder = cached_folder(name)
    if folder is None or not folder.is_dir():
        return None

    def tokenizer():
        from transformers import AutoTokenizer

        return AutoTokenizer.from_pretrained(folder)

    return ContextSource(tokenizer, max_positions(folder))


def model_identity(name: str, base_hash: str, shown: str = "") -> str:
    """The name a node gives its model on the wire (groups, delta manifests): never a path.

    `<shown>@<content>`: `shown` is the name the operator chose (`policy.model_name`); when
    empty, a hub model's name, or for a local folder the model type its config.json declares
    (never the folder's name). `<content>` is a short hash of the model's config and of
    `base_hash` (its version-0 weights), so copies of one model agree wherever and under
    whatever name they are stored. A built-in model is its name alone (its recipe fixes its
    weights), or `<shown>@<name>` when a name is chosen. A GGUF source is its converted
    folder, named by its packaged name or the model type. Peers compare identities by
    `same_model` (content only), together with `base_hash`.
    """
    from swarm.policy.gguf import cached_conversion, is_gguf_source, is_packaged

    if is_gguf_source(name):
        converted = cached_conversion(name)
        content = (
            content_digest(converted, base_hash) if converted else base_hash[:IDENTITY_HASH_CHARS]
        )
        return f"{shown or (name if is_packaged(name) else declared_name(converted))}@{content}"
    folder = local_folder(name)
    if folder is None and is_builtin(name):
        return f"{shown}@{name}" if shown else name
    hub = folder is None
    if hub:
        folder = cached_folder(name)
    content = (
        content_digest(folder, base_hash)
        if folder is not None
        else base_hash[:IDENTITY_HASH_CHARS]  # a hub model not cached (cannot happen once loaded)
    )
    return f"{shown or (name if hub else declared_name(folder))}@{content}"


def declared_name(folder: Path | None) -> str:
    """A local model's default name: the model type its config.json declares, else 'model'."""
    try:
        config = json.loads((folder / "config.json").read_text()) if folder else {}
    except (OSError, ValueError):
        config = {}
    kind = config.get("model_type") if isinstance(config, dict) else None
    return kind if isinstance(kind, str) and _MODEL_NAME.fullmatch(kind) else "model"


def model_name_problem(shown: str) -> str | None:
    """What is wrong with `shown` as the name peers see for a model, in one line; None if fine."""
    if not shown:
        return None
    if len(shown) > MAX_MODEL_NAME_CHARS or not _MODEL_NAME.fullmatch(shown):
        return (
            f"a model's name is up to {MAX_MODEL_NAME_CHARS} letters, digits, '.', '_', '-' "
            "or '/', starting with a letter or digit (no '@'), e.g. 'qwen2.5-0.5b-math'"
        )
    if looks_like_path(shown):
        return "a model's name must not look like a path (peers see it): e.g. 'qwen2.5-0.5b-math'"
    return None


def content_key(identity: str) -> str:
    """What identifies a model's content in its identity: the part after the last '@'."""
    return identity.rpartition("@")[2]


def same_model(a: str, b: str) -> bool:
    """Whether two model identities name the same content, whatever names were chosen."""
    return content_key(a) == content_key(b)


def same_weights(model: str, base_hash: str, other_model: str, other_base_hash: str) -> bool:
    """Whether two models are the same content grown from the same base weights: only then
    do their policy versions count along one line (a version lag, a delta's base)."""
    return same_model(model, other_model) and base_hash == other_base_hash


FAMILY_CHARS = 12  # hex characters of a model family digest (announced with every group)
_FAMILY_IGNORED = ("transformers_version", "dtype", "torch_dtype", "use_cache")


def family_digest(config: dict, vocab: dict[str, int]) -> str:
    """Short hex hash of a model's family: its architecture (`config`, a transformers
    config as a dict, less names, paths and run-time settings) and its tokenizer's vocabulary.

    Models of one family read each other's completions as token sequences of their own kind:
    copies of one base model, and fine-tunes of it, agree; another architecture or tokenizer
    does not. Pure: no weights are read."""
    kept = {
        k: v
        for k, v in config.items()
        if not k.startswith("_") and k not in _FAMILY_IGNORED and k != "name_or_path"
    }
    canonical = json.dumps(kept, sort_keys=True, separators=(",", ":"), default=str)
    words = json.dumps(sorted(vocab.items()), separators=(",", ":"), ensure_ascii=False)
    digest = hashlib.sha256(canonical.encode() + b"\0" + words.encode())
    return digest.hexdigest()[:FAMILY_CHARS]


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
