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
import sys

from lab.ship_models import run


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("names", nargs="*", help="built-in model names (default: skill and gap)")
    parser.add_argument("--check", action="store_true", help="rebuild and compare, ship nothing")
    args = parser.parse_args(argv)
    return run(args.names, args.check)


if __name__ == "__main__":
    sys.exit(main())
