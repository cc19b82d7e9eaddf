"""Ship built-in testbed models with the project, so every machine runs the same bytes.

A warm start is deterministic for a recipe on one machine, but its bytes depend on the CPU's
kernels and thread count, so experiments that pair seeds across machines need the models
themselves. `ship` builds a named model (into the cache, one thread), copies its files into
`models/<name>/` and returns its recipe key and content digest for `models/MANIFEST.json`;
`check` rebuilds a shipped model afresh in a temporary folder and compares digests.
`scripts/ship_models.py` runs it.
"""

from __future__ import annotations

import json
import shutil
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

from swarm.policy.skills import GAP_SWARM, SKILL_SWARM
from swarm.policy.tiny import (
    TINY_MODELS,
    build_tiny_model,
    ensure_tiny_model,
    model_digest,
    shipped_manifest,
    shipped_root,
    tiny_model_key,
)

FILES = (
    "config.json",
    "generation_config.json",
    "model.safetensors",
    "special_tokens_map.json",
    "tokenizer.json",
    "tokenizer_config.json",
)


def ship(name: str) -> dict:
    """Build `name` (unless it ships already for its recipe) and copy it into models/."""
    built = ensure_tiny_model(name, quiet=True)
    target = shipped_root() / name
    if built.resolve() != target.resolve():
        target.mkdir(parents=True, exist_ok=True)
        for file in FILES:
            if (built / file).exists():
                shutil.copyfile(built / file, target / file)
    return {"key": tiny_model_key(TINY_MODELS[name]), "digest": model_digest(target)}


def check(name: str) -> bool:
    """Rebuild `name` from its recipe in a temporary folder: same digest as the shipped copy?"""
    with tempfile.TemporaryDirectory() as tmp:
        build_tiny_model(Path(tmp), TINY_MODELS[name], quiet=True, label=name)
        return model_digest(Path(tmp)) == shipped_manifest()[name]["digest"]


def check_all(names: Sequence[str]) -> int:
    """Rebuild and compare each model, print one line each: 0 when every one matches, else 1."""
    results = {}
    for name in names:
        t = time.perf_counter()
        results[name] = check(name)
        same = "same bytes" if results[name] else "DIFFERENT bytes"
        print(f"{name}: {same} ({time.perf_counter() - t:.0f} s)")
    return 0 if all(results.values()) else 1


def ship_all(names: Sequence[str]) -> int:
    """Ship each model and write models/MANIFEST.json."""
    manifest = shipped_manifest()
    for name in names:
        t = time.perf_counter()
        manifest[name] = ship(name)
        print(f"{name}: {manifest[name]['digest'][:16]} ({time.perf_counter() - t:.0f} s)")
    path = shipped_root() / "MANIFEST.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(dict(sorted(manifest.items())), indent=1) + "\n")
    print(f"wrote {path}")
    return 0


def run(names: Sequence[str], check_only: bool) -> int:
    """Ship (or, with `check_only`, rebuild and compare) the named models, one thread."""
    import torch

    torch.set_num_threads(1)
    names = list(names) or [p.name for p in SKILL_SWARM + GAP_SWARM]
    unknown = [n for n in names if n not in TINY_MODELS]
    if unknown:
        print(f"error: not built-in models: {', '.join(unknown)}", file=sys.stderr)
        return 2
    return check_all(names) if check_only else ship_all(names)
