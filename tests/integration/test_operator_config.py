"""`swarm-node config --run-dir`: the config a node folder runs with, checked against what
the folder holds, as `join --run-dir` would take it."""

from __future__ import annotations

import json
import subprocess
import sys

from typer.testing import CliRunner

from swarm.cli import app
from swarm.ledger import Ledger, set_meta


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "swarm.cli", *args], capture_output=True, text=True, timeout=120
    )


def test_help_explains_run_dir():
    result = CliRunner().invoke(app, ["config", "--help"], terminal_width=200)
    assert result.exit_code == 0
    assert "--run-dir" in result.output and "overrides node.run_dir" in result.output


def test_config_of_a_run_folder_checks_what_it_holds(tmp_path):
    folder = tmp_path / "node"
    assert _cli("init", "--run-dir", str(folder)).returncode == 0
    fresh = _cli("config", "--run-dir", str(folder))
    assert fresh.returncode == 0, fresh.stderr
    assert json.loads(fresh.stdout)["node"]["run_dir"] == str(folder)
    assert fresh.stderr.strip() == (
        f"run folder {folder} · peer (not started yet: 'swarm-node init --run-dir' names it) "
        "· no ledger yet"
    )
    dumped = _cli("config", "--run-dir", str(folder), "--dump")
    assert dumped.returncode == 0 and f'run_dir = "{folder}"' in dumped.stdout.splitlines()

    ledger = Ledger(f"sqlite:///{folder / 'ledger.sqlite'}")
    with ledger.transaction() as session:  # as a node of another model left it
        set_meta(session, "model", "other-model")
        set_meta(session, "model_identity", "other@0123456789ab")
        set_meta(session, "node_name", "elsewhere")
    ledger.close()
    other = _cli("config", "--run-dir", str(folder))
    assert other.returncode == 2 and other.stdout == ""
    assert other.stderr.strip() == (
        f"error: --run-dir: {folder} belongs to a node of model 'other-model', not "
        "'swarm-tiny': use another node.run_dir"
    )
    ledger = Ledger(f"sqlite:///{folder / 'ledger.sqlite'}")
    with ledger.transaction() as session:  # a node of this config's model
        set_meta(session, "model", "swarm-tiny")
        set_meta(session, "model_identity", "tiny-math@swarm-tiny")
    ledger.close()
    same = _cli("config", "--run-dir", str(folder))
    assert same.returncode == 0, same.stderr
    assert same.stderr.strip().endswith(
        "· ledger of node elsewhere, model tiny-math@swarm-tiny, no rounds yet"
    )

    elsewhere = tmp_path / "not-yet"
    result = _cli("config", "--run-dir", str(elsewhere))
    assert result.returncode == 0 and not elsewhere.exists()  # config reads only
    assert result.stderr.strip() == f"run folder {elsewhere} does not exist yet: join creates it"
