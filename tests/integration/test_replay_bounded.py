"""`swarm-node replay` re-scores stored groups within the verifier's deadline: a stored peer's
group naming a costly task is rejected with `verify_timeout`, and the replay goes on."""

from __future__ import annotations

import json
import subprocess
import sys
import time

from swarm.ledger import GroupRow, Ledger
from swarm.p2p.identity import create_identity, peer_id_of
from swarm.tasks import TaskSpec, build_task
from swarm.verify.reasons import Direction, Reason, Status
from swarm.wire import RolloutGroup, Sampling
from swarm.wire.signing import sign_group

KEY = create_identity(b"\x52" * 32)


def _group(dataset: str, completion: str, rewards: tuple[float, ...]) -> RolloutGroup:
    spec = TaskSpec.make(dataset, {}, seed=1, index=2)
    return RolloutGroup(
        swarm_id="swarm-local",
        sender=peer_id_of(KEY),
        task=spec,
        question=build_task(spec).question,
        completions=(completion,),
        rewards=rewards,
        finished=(True,),
        model="m",
        base_hash="00" * 16,
        policy_version=0,
        sampling=Sampling(temperature=1.0, top_p=1.0, top_k=0, max_new_tokens=8),
        round=0,
        created_at=0.0,
        nonce=bytes(range(16)),
    )


def _store(url: str, groups: list[RolloutGroup]) -> None:
    ledger = Ledger(url)
    try:
        with ledger.transaction() as session:
            for group in groups:
                signed = sign_group(group, KEY)
                session.add(
                    GroupRow(
                        content_hash=signed.content_hash,
                        direction=Direction.RECEIVED,
                        status=Status.ACCEPTED,
                        sender=group.sender,
                        recorded_at=time.time(),
                        body=signed.body,
                        signature=signed.signature,
                    )
                )
    finally:
        ledger.close()


def test_replay_bounds_a_stored_costly_group_and_goes_on(tmp_path):
    answer = build_task(TaskSpec.make("basic_arithmetic", {}, seed=1, index=2)).answer
    honest = _group("basic_arithmetic", f"<answer>{answer}</answer>", (1.0,))
    costly = _group("countdown", "<answer>9**9**8</answer>", (0.0,))  # sympy: 9**43046721
    url = f"sqlite:///{tmp_path / 'ledger.db'}"
    _store(url, [costly, honest])
    started = time.monotonic()
    out = subprocess.run(
        [sys.executable, "-m", "swarm.cli", "replay", "--ledger", url, "--json"],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
    )
    assert out.returncode == 0, out.stderr
    report = json.loads(out.stdout)["verify"]
    assert report["total"] == 2 and report["passed"] == 1, report
    assert report["failed_by_reason"] == {Reason.VERIFY_TIMEOUT.value: 1}, report
    assert time.monotonic() - started < 60
