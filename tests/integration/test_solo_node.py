"""A solo node on the real tiny model: it learns, and it survives being killed.

These are the foundation's end-to-end checks: no mocked model, fixed seeds, the same
daemon and CLI a user runs.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from swarm.core.errors import LedgerError
from swarm.ledger import EvalRow, Ledger, RoundRow, UpdateRow
from swarm.node import Node
from swarm.policy.checkpoint import latest_checkpoint, read_state
from tests.conftest import small_config


@pytest.mark.slow  # ~45 s on 2 cores: enough rounds for held-out accuracy to rise
def test_solo_node_raises_held_out_accuracy(tmp_path, tiny_model_path):
    config = small_config(
        tmp_path / "solo",
        node={"rounds": 30, "checkpoint_every": 30},
        generation={"questions_per_round": 32, "completions_per_question": 8},
        training={"lr": 3e-4, "own_groups": 32, "micro_batch_size": 256},
        tasks={"eval_size": 200, "eval_every": 30},
    )
    node = Node(config)
    try:
        state = node.run()
    finally:
        node.close()
    assert state.round == 30
    ledger = Ledger(config.ledger_url)
    with ledger.reader() as s:
        evals = s.query(EvalRow).order_by(EvalRow.id).all()
        updates = s.query(UpdateRow).all()
    before, after = evals[0], evals[-1]
    assert (before.policy_version, after.policy_version) == (0, state.policy_version)
    print(f"held-out accuracy {before.accuracy:.3f} -> {after.accuracy:.3f}")
    assert after.accuracy >= before.accuracy + 0.10, (before.accuracy, after.accuracy)
    assert len(updates) == 30 and sum(not u.skipped for u in updates) == state.policy_version


def _join(run_dir: Path, rounds: int, *extra: str) -> subprocess.Popen:
    cmd = [
        sys.executable,
        "-m",
        "swarm.cli",
        "join",
        "--run-dir",
        str(run_dir),
        "--rounds",
        str(rounds),
        "--display",
        "lines",
        "--set",
        "generation.questions_per_round=4",
        "--set",
        "generation.completions_per_question=4",
        "--set",
        "generation.max_new_tokens=8",
        "--set",
        "tasks.eval_size=8",
        "--set",
        "node.checkpoint_every=2",
        "--set",
        "policy.device='cpu'",
        *extra,
    ]
    return subprocess.Popen(
        cmd,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )


def _wait_for_checkpoint(
    run_dir: Path, min_round: int, proc: subprocess.Popen, timeout: float = 240.0
) -> Path:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        path = latest_checkpoint(run_dir / "checkpoints")
        if path is not None and read_state(path).round >= min_round:
            return path
        assert proc.poll() is None, proc.stdout.read()
        time.sleep(0.05)
    raise AssertionError("no checkpoint appeared in time")


def _live_rounds(run_dir: Path) -> list[RoundRow]:
    """Live rounds of a (possibly running) node's ledger, read without touching its schema."""
    ledger = Ledger(f"sqlite:///{run_dir / 'ledger.sqlite'}", create=False)
    try:
        with ledger.reader() as s:
            return (
                s.query(RoundRow)
                .filter(RoundRow.superseded.is_(False))
                .order_by(RoundRow.round)
                .all()
            )
    except LedgerError:
        return []  # the node has not created its tables yet
    finally:
        ledger.close()


def test_killed_node_resumes_at_the_next_policy_version(tmp_path, tiny_model_path):
    run_dir = tmp_path / "node"
    proc = _join(run_dir, 1000)
    try:
        _wait_for_checkpoint(run_dir, 2, proc)
        time.sleep(0.5)  # let it get into the middle of a later round
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
    finally:
        proc.kill()
    checkpoint = read_state(latest_checkpoint(run_dir / "checkpoints"))
    before = _live_rounds(run_dir)
    assert len(before) >= checkpoint.round  # the ledger may be ahead of the checkpoint
    assert [r.round for r in before] == list(range(len(before)))  # no gap, no duplicate

    target = checkpoint.round + 3
    resumed = _join(run_dir, target)
    output, _ = resumed.communicate(timeout=300)
    assert resumed.returncode == 0, output
    assert f"resumed from round {checkpoint.round}, policy v{checkpoint.policy_version}" in output
    after = _live_rounds(run_dir)
    assert [r.round for r in after] == list(range(target))
    # rounds up to the checkpoint are the very same rows; later ones were redone
    kept = {r.round: r.id for r in before if r.round < checkpoint.round}
    assert {r.round: r.id for r in after if r.round < checkpoint.round} == kept
    first_new = after[checkpoint.round]
    assert first_new.policy_version in (checkpoint.policy_version, checkpoint.policy_version + 1)
    versions = [r.policy_version for r in after]
    assert versions == sorted(versions)
    assert read_state(latest_checkpoint(run_dir / "checkpoints")).round == target


def test_ctrl_c_stops_cleanly_with_ledger_and_checkpoint(tmp_path, tiny_model_path):
    run_dir = tmp_path / "node"
    proc = _join(run_dir, 1000, "--set", "node.checkpoint_every=1000")
    try:
        deadline = time.monotonic() + 240
        while (
            time.monotonic() < deadline
            and len(_live_rounds(run_dir) if (run_dir / "ledger.sqlite").exists() else []) < 2
        ):
            time.sleep(0.1)
        proc.send_signal(signal.SIGINT)
        output, _ = proc.communicate(timeout=120)
    finally:
        proc.kill()
    assert proc.returncode == 0, output
    assert "stopping after the current round" in output and "Traceback" not in output
    rounds = _live_rounds(run_dir)
    state = read_state(latest_checkpoint(run_dir / "checkpoints"))
    assert state.round == len(rounds) >= 2
    assert state.policy_version == rounds[-1].policy_version
