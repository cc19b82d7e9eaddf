"""The code base stays lint-clean and type-checks: ruff and mypy run as part of the suite.

The tools are the dev extras `scripts/setup.sh` installs; their settings live in
pyproject.toml ([tool.ruff], [tool.mypy]).
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
BIN = Path(sys.executable).parent


def tool(name: str) -> str:
    found = BIN / name
    if found.exists():
        return str(found)
    path = shutil.which(name)
    if path is None:
        pytest.fail(f"{name} is not installed: run scripts/setup.sh (it installs the dev tools)")
    return path


def run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(args, cwd=ROOT, capture_output=True, text=True, timeout=600)


def test_ruff_finds_nothing() -> None:
    done = run(tool("ruff"), "check", "--no-cache", ".")
    assert done.returncode == 0, done.stdout + done.stderr


def test_mypy_finds_nothing() -> None:
    done = run(tool("mypy"))  # its cache (.mypy_cache) makes a second run quick
    assert done.returncode == 0, done.stdout + done.stderr


def test_the_code_is_formatted() -> None:
    done = run(tool("ruff"), "format", "--check", "--no-cache", ".")
    assert done.returncode == 0, done.stdout + done.stderr
