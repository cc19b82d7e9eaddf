"""The command line as a user meets it: instant help, one-line errors, status from a ledger."""

from __future__ import annotations

import json
import subprocess
import sys
import time

import pytest

from swarm.node import Node
from tests.conftest import small_config


def _cli(*args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "swarm.cli", *args], capture_output=True, text=True, timeout=timeout
    )


@pytest.mark.parametrize("command", [[], ["join"], ["status"], ["config"]])
def test_help_is_instant_and_does_not_import_torch(command):
    start = time.perf_counter()
    code = (
        "import sys; from swarm.cli import app; from typer.testing import CliRunner; "
        f"r = CliRunner().invoke(app, {command + ['--help']!r}); "
        "assert r.exit_code == 0, r.output; assert 'Usage' in r.output, r.output; "
        "assert 'torch' not in sys.modules and 'transformers' not in sys.modules; print('ok')"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0 and "ok" in result.stdout, result.stderr
    assert time.perf_counter() - start < 5.0


@pytest.mark.parametrize(
    "args, message",
    [
        (["join", "--config", "no/such/file.toml"], "no/such/file.toml: config file not found"),
        (
            ["join", "--set", "training.lrr=1"],
            "--set: unknown key training.lrr (did you mean 'lr'?)",
        ),
        (
            ["join", "--set", "generation.temperature=hot"],
            "generation.temperature: expected a number, got 'hot'",
        ),
        (["join", "--display", "fancy"], "--display must be auto, live, lines or none"),
        (
            ["status", "--ledger", "no/such/ledger.sqlite"],
            "ledger file no/such/ledger.sqlite does not exist",
        ),
    ],
)
def test_user_mistakes_are_one_line_errors(args, message):
    result = _cli(*args)
    assert result.returncode == 2, result.stderr
    assert message in result.stderr
    assert "Traceback" not in result.stderr and len(result.stderr.strip().splitlines()) == 1


def test_bad_key_in_a_config_file_names_the_file(tmp_path):
    path = tmp_path / "bad.toml"
    path.write_text("[training]\nlr = 'fast'\n")
    result = _cli("join", "--config", str(path))
    assert result.returncode == 2
    assert result.stderr.strip() == f"error: {path}: training.lr: expected a number, got 'fast'"


def test_config_keys_documents_everything():
    result = _cli("config", "--keys")
    assert result.returncode == 0
    assert "training.clip_high = 0.28" in result.stdout and "generation.backend" in result.stdout


def test_status_reads_a_nodes_ledger(tmp_path, tiny_model_path):
    config = small_config(tmp_path / "n", node={"rounds": 2})
    node = Node(config)
    try:
        node.run()
    finally:
        node.close()
    result = _cli("status", "--run-dir", str(tmp_path / "n"), "--json")
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    assert data["last_round"] == 1 and [r["round"] for r in data["rounds"]] == [1, 0]
    assert data["model"] == "swarm-tiny" and len(data["evals"]) >= 1
    table = _cli("status", "--ledger", str(tmp_path / "n" / "ledger.sqlite"))
    assert table.returncode == 0 and "latest rounds" in table.stdout


def test_init_creates_a_private_identity_once(tmp_path):
    first = _cli("init", "--run-dir", str(tmp_path / "me"))
    assert first.returncode == 0, first.stderr
    key = tmp_path / "me" / "identity.key"
    assert key.stat().st_mode & 0o777 == 0o600
    peer_id = next(
        line.split()[-1] for line in first.stdout.splitlines() if line.startswith("peer ID:")
    )
    assert peer_id.startswith("12D3KooW") and "new identity" in first.stdout
    again = _cli("init", "--run-dir", str(tmp_path / "me"))
    assert "existing identity" in again.stdout and f"peer ID: {peer_id}" in again.stdout
    fixed = _cli(
        "init", "--run-dir", str(tmp_path / "me"), "--set", 'p2p.listen="/ip4/127.0.0.1/tcp/4001"'
    )
    assert f"listen address: /ip4/127.0.0.1/tcp/4001/p2p/{peer_id}" in fixed.stdout


def test_bootstrap_flag_is_checked(tmp_path):
    result = _cli("join", "--run-dir", str(tmp_path / "n"), "--bootstrap", "/ip4/127.0.0.1/tcp/1")
    assert result.returncode == 2
    assert "p2p.bootstrap[0] must be a multiaddr ending in /p2p/<peer id>" in result.stderr
