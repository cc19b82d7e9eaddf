"""A changed meaning is never silent: a `verify.rate_*` key set to 0 (now "off"; before, the
byte burst's "automatic", a budget that never refilled, or refused) is one WARNING line at
`swarm-node config` and `swarm-node join`, naming who set it, what 0 means now and what it
meant before. Other values say nothing."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
from pathlib import Path

import pytest

from swarm.config.load import load_with_origins
from swarm.config.preflight import warn_changed_meanings
from swarm.config.renames import CHANGED, changed_meanings

ROOT = Path(__file__).resolve().parents[3]
RATE_KEYS = ("rate_bytes_burst", "rate_bytes_per_s", "rate_groups_per_s", "rate_burst")


def test_every_rate_key_at_zero_is_a_changed_meaning_and_any_other_value_is_not():
    assert set(CHANGED) == {f"verify.{key}" for key in RATE_KEYS}
    zero = changed_meanings({f"verify.{key}": 0 for key in RATE_KEYS})
    assert set(zero) == set(CHANGED)
    assert all(" = 0 now means no " in line and "; before, " in line for line in zero.values())
    assert (
        "automatic" in zero["verify.rate_bytes_burst"] and "-1" in zero["verify.rate_bytes_burst"]
    )
    assert changed_meanings({"verify.rate_bytes_burst": -1, "verify.rate_burst": 4096}) == {}


def warnings(tmp_path: Path, verify: str, overrides=(), env=None) -> list[str]:
    path = tmp_path / "node.toml"
    path.write_text(f'[node]\nrun_dir = "run"\n[verify]\n{verify}\n')
    loaded = load_with_origins(path, overrides, env=env or {})
    logger = logging.getLogger("swarm.config.preflight")
    records: list[logging.LogRecord] = []
    handler = logging.Handler(logging.WARNING)
    handler.emit = records.append  # type: ignore[method-assign]
    logger.addHandler(handler)
    try:
        warn_changed_meanings(loaded.config, loaded.where)
    finally:
        logger.removeHandler(handler)
    assert all(r.levelno == logging.WARNING for r in records)
    return [r.getMessage() for r in records]


def test_each_warning_names_who_set_the_key(tmp_path):
    lines = warnings(
        tmp_path,
        "rate_bytes_burst = 0",
        ["verify.rate_bytes_per_s=0"],
        {"SWARM__VERIFY__RATE_GROUPS_PER_S": "0"},
    )
    assert len(lines) == 3
    assert lines[0].startswith(f"{tmp_path / 'node.toml'}: verify.rate_bytes_burst = 0 ")
    assert lines[1].startswith("--set: verify.rate_bytes_per_s = 0 ")
    assert lines[2].startswith(
        "environment variable SWARM__VERIFY__RATE_GROUPS_PER_S: verify.rate_groups_per_s = 0 "
    )


def test_the_defaults_and_explicit_automatic_say_nothing(tmp_path):
    assert warnings(tmp_path, "rate_bytes_burst = -1") == []
    assert warnings(tmp_path, "rate_burst = 1") == []


def _cli(tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    (tmp_path / "node.toml").write_text('[node]\nrun_dir = "run"\n[verify]\nrate_bytes_burst = 0\n')
    path = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p)
    return subprocess.run(
        [sys.executable, "-m", "swarm.cli", *args, "--config", str(tmp_path / "node.toml")],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PYTHONPATH": path},
    )


@pytest.mark.timeout(240)
def test_config_and_join_say_it_in_one_line(tmp_path):
    config = _cli(tmp_path, "config")
    assert config.returncode == 0, config.stderr[-2000:]
    (line,) = config.stderr.strip().splitlines()
    assert "verify.rate_bytes_burst = 0 now means no byte limit" in line
    assert "it meant automatic" in line and "now -1" in line
    # join warns before anything loads: here the model folder is missing, refused next
    join = _cli(tmp_path, "join", "--model", str(tmp_path / "no-model"))
    assert join.returncode == 2, join.stderr[-2000:]
    warned, refused = join.stderr.strip().splitlines()
    assert warned == line
    assert refused.startswith("error: --model:")
