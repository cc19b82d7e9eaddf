"""A trainer and a generator-role node as separate processes over real libp2p on 127.0.0.1.

The trainer publishes a sparse delta after every update; the generator follows it, with
no optimizer, and must end with bf16 weights bit-identical to the trainer's checkpoint of
the same policy version. Every process started here ends by itself (rounds, SIGINT, kill
in `finally`).
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
from swarm.core.identity import create_identity, peer_id_of, save_identity
from swarm.ledger import DeltaRow, Ledger
from swarm.ops.demo import free_ports
from swarm.policy.checkpoint import list_checkpoints, load_checkpoint, read_state
from swarm.policy.delta import bf16_state_dict, weights_hash
from swarm.policy.model import load_policy

SMALL = [
    "generation.questions_per_round=4",
    "generation.completions_per_question=4",
    "tasks.eval_size=4",
    "tasks.eval_every=50",
    "policy.device='cpu'",
    "node.checkpoint_every=1",
    "node.keep_checkpoints=50",
]


def _join(run_dir: Path, rounds: int, port: int, sets: list[str]) -> subprocess.Popen:
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
    ]
    for item in [*SMALL, f"p2p.listen='/ip4/127.0.0.1/tcp/{port}'", *sets]:
        cmd += ["--set", item]
    log = open(run_dir / "log.txt", "w")  # noqa: SIM115 - the child owns it until it exits
    return subprocess.Popen(
        cmd,
        stdout=log,
        stderr=subprocess.STDOUT,
        env={**os.environ, "PYTHONUNBUFFERED": "1", "OMP_NUM_THREADS": "1"},
    )


def _deltas(run_dir: Path) -> list[DeltaRow]:
    ledger = Ledger(f"sqlite:///{run_dir / 'ledger.sqlite'}", create=False)
    try:
        with ledger.reader() as s:
            return s.query(DeltaRow).order_by(DeltaRow.id).all()
    except LedgerError:
        return []
    finally:
        ledger.close()


def _bf16_hash_at(checkpoints: Path, version: int, model_path) -> bytes:
    """weights_hash of the bf16 view of the newest checkpoint at `version`."""
    path = [p for p in list_checkpoints(checkpoints) if read_state(p).policy_version == version][-1]
    policy = load_policy(str(model_path), device="cpu", dtype="float32")
    load_checkpoint(path, policy.model, restore_rng=False)
    return weights_hash(bf16_state_dict(policy.model))


def _log(run_dir: Path) -> str:
    return (run_dir / "log.txt").read_text()[-3000:]


@pytest.mark.slow  # ~40 s on 2 cores: a trainer and a generator process
def test_generator_process_follows_trainer_process_bit_for_bit(tmp_path, tiny_model_path):
    trainer_dir, gen_dir = tmp_path / "trainer", tmp_path / "generator"
    keys = {trainer_dir: create_identity(), gen_dir: create_identity()}
    for folder, key in keys.items():
        folder.mkdir()
        save_identity(key, folder / "identity.key")
    trainer_id = peer_id_of(keys[trainer_dir])
    t_port, g_port = free_ports(2)
    rounds = 5
    trainer = _join(
        trainer_dir,
        rounds,
        t_port,
        ["sync.publish_deltas=true", "sync.anchor_every=2", "sync.keep_deltas=4"],
    )
    generator = _join(
        gen_dir,
        0,
        g_port,
        [
            "node.role='generator'",
            f"sync.follow='{trainer_id}'",
            f"p2p.bootstrap=['/ip4/127.0.0.1/tcp/{t_port}/p2p/{trainer_id}']",
        ],
    )
    try:
        assert trainer.wait(timeout=150) == 0, _log(trainer_dir)
        published = [r for r in _deltas(trainer_dir) if r.status == "published"]
        final = max(r.to_version for r in published)
        assert final >= 3, _log(trainer_dir)
        assert {r.kind for r in published} == {"delta", "anchor"}
        # The generator usually applied the last delta during the trainer's final drain.
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and generator.poll() is None:
            if any(r.status == "applied" and r.to_version == final for r in _deltas(gen_dir)):
                break
            time.sleep(0.5)
        assert generator.poll() is None, _log(gen_dir)
        generator.send_signal(signal.SIGINT)  # stops at the round boundary with a checkpoint
        assert generator.wait(timeout=60) == 0, _log(gen_dir)
    finally:
        for proc in (trainer, generator):
            if proc.poll() is None:
                proc.kill()
                proc.wait()

    rows = _deltas(gen_dir)
    # A trainer that exits right after announcing its last delta may be gone before a loaded
    # follower fetches it (the follower then records fetch_failed for that version only and
    # catches up when the trainer returns); nothing else may be refused.
    refused = [(r.reason, r.to_version) for r in rows if r.status == "rejected"]
    assert all(reason == "fetch_failed" and version == final for reason, version in refused), (
        refused
    )
    applied = [r for r in rows if r.status == "applied"]
    assert applied and all(r.peer == trainer_id and r.bytes > 0 for r in applied)
    # Every delta and anchor the generator applied, the trainer recorded as served to it.
    served = {
        (r.peer, r.kind, r.to_version, r.bytes)
        for r in _deltas(trainer_dir)
        if r.status == "served"
    }
    assert served >= {(peer_id_of(keys[gen_dir]), r.kind, r.to_version, r.bytes) for r in applied}
    followed = read_state(list_checkpoints(gen_dir / "checkpoints")[-1]).policy_version
    assert followed == applied[-1].to_version >= 3  # several trainer updates were followed
    assert _bf16_hash_at(gen_dir / "checkpoints", followed, tiny_model_path) == _bf16_hash_at(
        trainer_dir / "checkpoints", followed, tiny_model_path
    )
    print(
        f"trainer reached v{final}, generator followed to v{followed} via {[(r.kind, r.to_version, r.bytes) for r in applied]}"
    )
