"""Whole nodes over real libp2p on 127.0.0.1: the local-swarm demo, and a hostile peer.

Every process started here ends by itself (node rounds, timeouts, kill in `finally`).
"""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
import time
from pathlib import Path

from swarm.errors import LedgerError
from swarm.ledger import GroupRow, Ledger, RoundRow
from swarm.p2p.identity import create_identity, peer_id_of
from swarm.rollout import SignedGroup, decode_group, encode_group, pack_messages, sign_group


def test_demo_runs_a_local_swarm_of_processes(tmp_path, tiny_model_path):
    out = tmp_path / "demo"
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "swarm.cli",
            "demo",
            "--nodes",
            "3",
            "--rounds",
            "3",
            "--out",
            str(out),
            "--set",
            "generation.questions_per_round=8",
            "--set",
            "tasks.eval_size=16",
            "--timeout",
            "240",
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    summary = json.loads((out / "summary.json").read_text())
    assert (out / "reward.png").stat().st_size > 10_000
    assert summary["nodes"] == 3 and "separate" in summary["processes"]
    peers = {n["peer_id"] for n in summary["per_node"]}
    for node in summary["per_node"]:
        assert node["exit_code"] == 0 and node["round"] == 2 and len(node["rewards"]) == 3
        assert node["sent"] == 3 * 8 and node["rejected"] == 0
        assert node["accepted"] > 0
        ledger = Ledger(f"sqlite:///{out / node['name'] / 'ledger.sqlite'}")
        with ledger.reader() as s:
            senders = {r.sender for r in s.query(GroupRow).filter(GroupRow.status == "accepted")}
        assert senders and senders <= peers - {node["peer_id"]}
        assert (out / node["name"] / "identity.key").stat().st_mode & 0o777 == 0o600


def _start_node(tmp_path: Path, rounds: int) -> tuple[subprocess.Popen, Path]:
    run_dir = tmp_path / "honest"
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
        "tasks.eval_size=8",
        "--set",
        "policy.device='cpu'",
    ]
    proc = subprocess.Popen(
        cmd,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1", "OMP_NUM_THREADS": "1"},
    )
    return proc, run_dir


def _wait_for(predicate, timeout: float, proc: subprocess.Popen):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        assert proc.poll() is None, proc.stdout.read()
        time.sleep(0.2)
    raise AssertionError("timed out")


def _rows(run_dir: Path, model=GroupRow):
    """Rows of a running node's ledger, read without touching its schema ([] until it has one)."""
    ledger = Ledger(f"sqlite:///{run_dir / 'ledger.sqlite'}", create=False)
    try:
        with ledger.reader() as s:
            return s.query(model).all()
    except LedgerError:
        return []
    finally:
        ledger.close()


def test_hostile_peer_is_rejected_and_recorded_and_the_node_keeps_training(
    tmp_path, tiny_model_path
):
    from swarm.p2p.libp2p_transport import Libp2pTransport

    proc, run_dir = _start_node(tmp_path, rounds=60)
    mallory_key = create_identity(b"\x07" * 32)
    mallory = None
    try:
        info = _wait_for(
            lambda: (
                (run_dir / "node.json").exists() and json.loads((run_dir / "node.json").read_text())
            ),
            180,
            proc,
        )
        sent = _wait_for(
            lambda: (
                (run_dir / "ledger.sqlite").exists()
                and [r for r in _rows(run_dir) if r.direction == "sent"]
            ),
            180,
            proc,
        )
        honest = decode_group(sent[0].body)
        mallory = Libp2pTransport(key_pair=mallory_key, bootstrap=info["addrs"])
        mallory.start()
        topic = "swarm/swarm-local/rollouts/v1"
        _wait_for(lambda: mallory.peers(), 60, proc)
        time.sleep(2.0)  # let gossipsub graft the mesh
        me = peer_id_of(mallory_key)
        inflated = sign_group(dataclasses.replace(honest, sender=me, nonce=b"a" * 16), mallory_key)
        forged_sig = SignedGroup(
            encode_group(dataclasses.replace(honest, sender=me, nonce=b"b" * 16)), b"\x01" * 64
        )
        impersonating = sign_group(
            dataclasses.replace(honest, sender=me, nonce=b"c" * 16), mallory_key
        )
        impersonating = SignedGroup(
            encode_group(dataclasses.replace(honest, nonce=b"c" * 16)), impersonating.signature
        )
        body = bytearray(
            sign_group(dataclasses.replace(honest, sender=me, nonce=b"d" * 16), mallory_key).body
        )
        body[body.index(b"arithmetic")] ^= 0x01
        tampered = SignedGroup(
            bytes(body),
            sign_group(
                dataclasses.replace(honest, sender=me, nonce=b"d" * 16), mallory_key
            ).signature,
        )
        victim_key = create_identity(
            b"\x08" * 32
        )  # validly signed by someone else, published by mallory
        relayed = sign_group(
            dataclasses.replace(honest, sender=peer_id_of(victim_key), nonce=b"f" * 16), victim_key
        )
        other_swarm = sign_group(
            dataclasses.replace(honest, sender=me, swarm_id="elsewhere", nonce=b"e" * 16),
            mallory_key,
        )
        for message in [
            *pack_messages([forged_sig]),
            *pack_messages([impersonating]),
            *pack_messages([tampered]),
            *pack_messages([other_swarm]),
            *pack_messages([relayed]),
            b"\x93garbage",
            *pack_messages([inflated]),
        ]:
            mallory.publish(topic, message)
        expected = {"bad_signature": 3, "wrong_swarm": 1, "sender_mismatch": 1, "undecodable": 1}
        rejected = _wait_for(
            lambda: (
                (r := [x for x in _rows(run_dir) if x.status == "rejected"])
                and len(r) >= sum(expected.values())
                and r
            ),
            120,
            proc,
        )
        reasons = {}
        for row in rejected:
            reasons[row.reason] = reasons.get(row.reason, 0) + 1
        assert reasons == expected
        # the validly signed group from mallory passed the cheap checks (reward checks come later)
        accepted = _wait_for(
            lambda: [x for x in _rows(run_dir) if x.status == "accepted"], 60, proc
        )
        assert {r.sender for r in accepted} == {me}
        rounds_before = len(_rows(run_dir, RoundRow))
        output, _ = proc.communicate(timeout=240)
    finally:
        if mallory is not None:
            mallory.close()
        proc.kill()
    assert proc.returncode == 0, output
    assert (
        len(_rows(run_dir, RoundRow)) == 60 > rounds_before
    )  # the attack came mid-run; it trained on to the end
