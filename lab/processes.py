"""A lab program started as a child process on this machine, with the checkout on its path."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]  # the checkout: `lab` and `swarm` import from it


def spawn(module: str, args: list[str]) -> subprocess.Popen:
    """`python -m module args...`, its stdin and stdout pipes of text, its stderr dropped."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.Popen(
        [sys.executable, "-m", module, *args],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        env=env,
    )
