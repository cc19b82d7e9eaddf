"""`swarm-node replay` re-scores stored groups within the verifier's deadline: a stored peer's
group naming a costly task is rejected with `verify_timeout`, and the replay goes on."""

from __future__ import annotations

import json
import subprocess
import sys
import time

import msgspec

from swarm.core.reasons import Direction, Reason, Status
from swarm.ledger import GroupRow, Ledger
from swarm.tasks import TaskSpec, build_task
from swarm.verify.rescore import rescore
from swarm.wire import RolloutGroup
from swarm.wire.signing import sign_group
from tests.unit.wire.test_wire import KEY, make_group


def _costly() -> RolloutGroup:
    """A peer's group naming a task whose scoring never ends: sympy computes 9**43046721."""
    spec = TaskSpec.make("countdown", {}, seed=1, index=2)
    return make_group(
        task=spec,
        question=build_task(spec).question,
        completions=("<answer>9**9**8</answer>",),
        rewards=(0.0,),
        finished=(True,),
        token_ids=(),
    )


def _honest() -> RolloutGroup:
    """A group as an honest peer sends it: the spec's question, rewards as scored here."""
    group = make_group()
    group = msgspec.structs.replace(group, question=build_task(group.task).question)
    return msgspec.structs.replace(group, rewards=rescore(group, group.format_bonus)[1])


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
    url = f"sqlite:///{tmp_path / 'ledger.db'}"
    _store(url, [_costly(), _honest()])
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
