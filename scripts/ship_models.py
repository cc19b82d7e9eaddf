"""Ship built-in testbed models with the project, so every machine runs the same bytes.

    python scripts/ship_models.py                     # every skill and gap model
    python scripts/ship_models.py swarm-gap-0 swarm-gap-1
    python scripts/ship_models.py --check             # rebuild each shipped model and compare

A warm start is deterministic for a recipe on one machine, but its bytes depend on the CPU's
kernels and thread count, so experiments that pair seeds across machines need the models
themselves. This builds each named model (into the cache, one thread), copies its files into
`models/<name>/` and records its recipe key and content digest in `models/MANIFEST.json`;
`swarm.policy.tiny.ensure_tiny_model` then returns the shipped copy. `--check` rebuilds each
shipped model afresh in a temporary folder and prints whether this machine reproduces it.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
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


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("names", nargs="*", help="built-in model names (default: skill and gap)")
    parser.add_argument("--check", action="store_true", help="rebuild and compare, ship nothing")
    args = parser.parse_args(argv)
    import torch

    torch.set_num_threads(1)
    names = args.names or [p.name for p in SKILL_SWARM + GAP_SWARM]
    unknown = [n for n in names if n not in TINY_MODELS]
    if unknown:
        print(f"error: not built-in models: {', '.join(unknown)}", file=sys.stderr)
        return 2
    if args.check:
        results = {}
        for name in names:
            t = time.perf_counter()
            results[name] = check(name)
            print(
                f"{name}: {'same bytes' if results[name] else 'DIFFERENT bytes'} ({time.perf_counter() - t:.0f} s)"
            )
        return 0 if all(results.values()) else 1
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


if __name__ == "__main__":
    sys.exit(main())
