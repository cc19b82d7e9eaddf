"""The wheel a volunteer installs holds the product only: `swarm/`, never the lab (`lab/`,
a distribution of its own) nor any other top-level package beside it."""

from __future__ import annotations

import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
SOURCES = ("pyproject.toml", "README.md", "swarm", "lab")


def build_wheel(src: Path, out: Path) -> Path:
    """`pip wheel` of the project in src, offline (the venv's setuptools builds it)."""
    cmd = [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation"]
    cmd += ["--disable-pip-version-check", "-q", "-w", str(out), str(src)]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    (wheel,) = out.glob("*.whl")
    return wheel


def top_level(wheel: Path) -> set[str]:
    """The first path part of every file in the wheel."""
    return {name.split("/")[0] for name in zipfile.ZipFile(wheel).namelist()}


def test_the_wheel_holds_only_swarm(tmp_path):
    src = tmp_path / "src"
    src.mkdir()
    ignore = shutil.ignore_patterns("__pycache__", "*.egg-info")
    for name in SOURCES:
        path = ROOT / name
        if path.is_dir():
            shutil.copytree(path, src / name, ignore=ignore)
        else:
            shutil.copy2(path, src / name)
    # a package whose name starts with "swarm" is not the product either
    (src / "swarm_lab").mkdir()
    (src / "swarm_lab" / "__init__.py").write_text("")
    names = top_level(build_wheel(src, tmp_path / "out"))
    assert "swarm" in names
    assert {n for n in names if n != "swarm" and not n.endswith(".dist-info")} == set()
