"""The GPU check's wheelhouse: what `scripts/gpu_check.sh` installs, with no network, on a
GPU machine that has Python, torch and transformers.

`download` (on a machine with PyPI) fills .whl/ with the pinned wheels of everything the
check imports beyond torch, transformers and their own requirements, built for the GPU
machine's Python (3.12 on x86-64 Linux unless told otherwise): swarm's msgspec, and for
TRL's arm TRL, datasets, accelerate, dill, multiprocess, xxhash, psutil and fsspec (about
3.3 MB). pandas and pyarrow (67 MB together with their own requirements, so that the
checkout with its wheelhouse stays under 64 MiB beside the project's ~55 MB) come only with
`--all`; without them the machine's own are used where their versions fit.

`install` (on the GPU machine) installs every wheel of .whl/ into a folder of its own
(`--site`, put first on PYTHONPATH by gpu_check.sh) with `pip --no-index --no-deps`, then
checks that everything the check needs is there at a version that fits: each requirement,
from the check's roots down through every package listed here, met by the folder or by the
machine. What is missing or too old is one line each, and the command exits 2 before the
bench starts: a missing import is never found mid-run.

    python3 scripts/gpu_wheels.py download [--all] [--python-version 3.12] [--dest .whl]
    python3 scripts/gpu_wheels.py install [--site DIR/site-packages] [--dest .whl] [--no-trl]
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

# Pinned: the versions the CPU dry run in the test suite runs. Each is a requirement of the
# check's roots that torch and transformers do not bring.
WHEELS = {
    "msgspec": "0.23.0",  # swarm's messages (swarm/wire/codec.py)
    "trl": "1.16.0",
    "datasets": "5.2.0",  # TRL's trainer imports it; 5.2 needs pyarrow>=24
    "accelerate": "1.16.0",  # TRL's trainer imports it at module level
    "dill": "0.4.1",  # datasets
    "multiprocess": "0.70.19",  # datasets
    "xxhash": "4.1.0",  # datasets
    "fsspec": "2026.9.0",  # datasets wants <=2026.9.0 (torch brings one with no bound)
    "psutil": "7.2.2",  # accelerate, TRL
}
# Large: only with `download --all`; otherwise the machine's own, if their versions fit.
LARGE = {
    "pandas": "3.1.2",  # TRL's trainer imports it at module level (12.0 MB)
    "pyarrow": "26.0.1",  # datasets (55.0 MB)
    "python-dateutil": "4.0.0",  # pandas
    "tzdata": "2026.6",  # python-dateutil 4
}
# What the check imports itself; TRL's arm only without --no-trl.
ROOTS = ["msgspec>=0.18", "rich>=13"]
TRL_ROOTS = [f"trl=={WHEELS['trl']}", f"datasets=={WHEELS['datasets']}"]
PLATFORMS = ["manylinux_2_28_x86_64", "manylinux_2_17_x86_64", "manylinux2014_x86_64"]


def pins(everything: bool) -> list[str]:
    """`name==version` of each wheel to download."""
    chosen = {**WHEELS, **(LARGE if everything else {})}
    return [f"{name}=={version}" for name, version in chosen.items()]


def download(dest: Path, python_version: str, everything: bool) -> int:
    """Each pinned wheel for the GPU machine's Python and platform, without dependencies."""
    dest.mkdir(parents=True, exist_ok=True)
    platforms = [arg for p in PLATFORMS for arg in ("--platform", p)]
    for pin in pins(everything):
        command = [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps"]
        command += ["--only-binary=:all:", "--implementation", "cp"]
        command += ["--python-version", python_version, *platforms, "--dest", str(dest), pin]
        if subprocess.run(command).returncode != 0:
            print(f"error: could not download {pin} for Python {python_version}")
            return 1
    wheels = sorted(dest.glob("*.whl"))
    total = sum(w.stat().st_size for w in wheels)
    print(f"{dest}: {len(wheels)} wheels, {total / 1e6:.1f} MB")
    return 0


def _distributions(path: list[str]) -> dict:
    """The first distribution of each name on `path`, as import would find it."""
    from importlib.metadata import distributions

    from packaging.utils import canonicalize_name

    found: dict = {}
    for dist in distributions(path=path):
        name = dist.metadata["Name"]
        if name:
            found.setdefault(canonicalize_name(name), dist)
    return found


def unmet(roots: list[str], path: list[str]) -> list[str]:
    """One line per requirement not met on `path`: from `roots` down through every package
    this file lists (the machine's torch and transformers are taken as they are)."""
    from packaging.requirements import Requirement
    from packaging.utils import canonicalize_name

    found = _distributions(path)
    listed = {canonicalize_name(n) for n in (*WHEELS, *LARGE)}
    problems: list[str] = []
    seen: set[str] = set()
    queue = [(Requirement(r), "the GPU check") for r in roots]
    while queue:
        requirement, wanted_by = queue.pop(0)
        if requirement.marker and not requirement.marker.evaluate({"extra": ""}):
            continue
        name = canonicalize_name(requirement.name)
        dist = found.get(name)
        if dist is None:
            problems.append(f"{wanted_by} needs {requirement}: not installed")
            continue
        version = dist.version
        if not requirement.specifier.contains(version, prereleases=True):
            problems.append(f"{wanted_by} needs {requirement}: {version} is installed")
            continue
        if name in seen or name not in listed:
            continue
        seen.add(name)
        for line in dist.requires or []:
            queue.append((Requirement(line), f"{dist.metadata['Name']} {version}"))
    return problems


def install(site: Path, dest: Path, trl: bool, path: list[str] | None = None) -> int:
    """The wheelhouse into `site` (pip, no index, no dependencies), then the check of what
    `site` and `path` (this interpreter's sys.path) hold together."""
    wheels = sorted(dest.glob("*.whl"))
    if wheels:
        command = [sys.executable, "-m", "pip", "install", "--quiet", "--no-index", "--no-deps"]
        command += ["--no-compile", "--no-cache-dir", "--upgrade", "--disable-pip-version-check"]
        command += ["--target", str(site), *map(str, wheels)]
        if subprocess.run(command).returncode != 0:
            print(f"error: pip could not install the wheels of {dest}")
            return 2
        print(f"installed {len(wheels)} wheels from {dest} into {site}")
    problems = unmet(ROOTS + (TRL_ROOTS if trl else []), [str(site), *(path or sys.path)])
    for problem in problems:
        print(f"error: {problem}")
    if problems:
        print(
            "bring them as wheels: `scripts/gpu_check.sh --wheels` (add --all for pandas and "
            "pyarrow) on a machine with PyPI, then copy .whl/ here; or leave TRL's arm out "
            "with --no-trl"
        )
        return 2
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="gpu_wheels.py", description=__doc__.split("\n\n")[0] if __doc__ else None
    )
    commands = parser.add_subparsers(dest="command", required=True)
    get = commands.add_parser("download", help="fill the wheelhouse (needs PyPI)")
    get.add_argument("--all", action="store_true", help="pandas and pyarrow too (67 MB more)")
    get.add_argument("--python-version", default="3.12", help="the GPU machine's (3.12)")
    get.add_argument("--dest", type=Path, default=ROOT / ".whl")
    put = commands.add_parser("install", help="install the wheelhouse and check (no network)")
    put.add_argument("--site", type=Path, default=Path("/tmp/gpu-check/site-packages"))
    put.add_argument("--dest", type=Path, default=ROOT / ".whl")
    put.add_argument("--no-trl", action="store_true", help="check without TRL's arm")
    args = parser.parse_args(argv)
    if args.command == "download":
        return download(args.dest, args.python_version, args.all)
    return install(args.site, args.dest, not args.no_trl)


if __name__ == "__main__":
    sys.exit(main())
