"""An honest node under attack by a hostile libp2p peer in another process.

The honest node is a real `Node` on `Libp2pTransport` (in this process, in a thread); the
hostile one is `hostile_peer.py`, a separate process with its own identity that publishes
on the swarm's gossip topic. Every attack must be refused with its own reason, recorded in
the ledger once per bad group, and none may reach the pool or training, while the honest
node keeps running rounds and updating its policy.
"""

from __future__ import annotations

import collections
import json
import subprocess
import sys
import threading
import time
from pathlib import Path

import msgpack
import msgspec

from swarm.core.identity import create_identity, peer_id_of, save_identity, sign
from swarm.ledger import GroupRow, GroupUseRow, Ledger, counted_rejections
from swarm.node import Node
from swarm.tasks import EASY_MIX, TaskSpec, build_task
from swarm.verify.bans import ban
from swarm.verify.rescore import rescore
from swarm.wire import (
    MAX_MESSAGE_BYTES,
    RolloutGroup,
    Sampling,
    SignedGroup,
    encode_group,
    pack_messages,
    rollout_topic,
    unpack_message,
)
from swarm.wire.signing import SIGNING_DOMAIN, sign_group, verify_signed
from tests.conftest import small_config
from tests.waiting import wait_for, wait_node_info

ROOT = Path(__file__).resolve().parents[2]
MALLORY = create_identity(b"\x07" * 32)
VICTIM = create_identity(b"\x08" * 32)
ME = peer_id_of(MALLORY)
FLOOD = 10
START = time.time()  # mallory's groups are dated from here, so rebuilding one gives the same bytes
FLOOD_ALLOWED = 3  # rate-limit tokens left for the flood after the earlier attacks


class Hostile:
    """Drives hostile_peer.py over its stdin/stdout."""

    def __init__(self, identity: Path, bootstrap: list[str], topic: str):
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "tests.adversary.hostile_peer",
                "--identity",
                str(identity),
                "--topic",
                topic,
                *[a for addr in bootstrap for a in ("--bootstrap", addr)],
            ],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            cwd=ROOT,
        )
        assert json.loads(self.proc.stdout.readline())["event"] == "ready"

    def call(self, **cmd) -> dict:
        self.proc.stdin.write(json.dumps(cmd) + "\n")
        self.proc.stdin.flush()
        reply = json.loads(self.proc.stdout.readline())
        assert reply["ok"], reply
        return reply

    def publish(self, messages: list[bytes]) -> None:
        self.call(cmd="publish", hex=[m.hex() for m in messages])

    def close(self) -> None:
        try:
            self.proc.stdin.close()
            self.proc.wait(timeout=20)
        finally:
            self.proc.kill()


def mallory_group(index: int, **changes) -> RolloutGroup:
    """A group mallory could honestly send: its own task, completions, correct claims."""
    spec = TaskSpec.make("chain_sum", dict(EASY_MIX[0].config), seed=77, index=index)
    task = build_task(spec)
    group = RolloutGroup(
        swarm_id="swarm-local",
        sender=ME,
        task=spec,
        question=task.question,
        completions=(f"<answer>{task.answer}</answer>", "<answer>0</answer>", task.answer, "?"),
        rewards=(0.0,) * 4,
        finished=(True,) * 4,
        model="swarm-tiny",
        base_hash="00" * 16,
        policy_version=0,
        sampling=Sampling(temperature=1.0, top_p=1.0, top_k=0, max_new_tokens=8),
        round=index,
        created_at=START + index,
        nonce=index.to_bytes(16, "big"),
        format_bonus=0.1,
    )
    group = msgspec.structs.replace(group, rewards=rescore(group, 0.1)[1])
    return msgspec.structs.replace(group, **changes)


def signed_body(group: RolloutGroup, mutate) -> bytes:
    """A message whose single group body was edited after encoding and then properly signed."""
    raw = msgpack.unpackb(encode_group(group), raw=False)
    mutate(raw)
    body = msgpack.packb(raw, use_bin_type=True)
    return pack_messages([SignedGroup(body, sign(MALLORY, SIGNING_DOMAIN + body))])[0]


def one(group: RolloutGroup, key=MALLORY) -> bytes:
    return pack_messages([sign_group(group, key)])[0]


def attacks(honest: RolloutGroup) -> tuple[list[bytes], collections.Counter, int]:
    """(messages, expected rejection reasons, rate-limit tokens they use) for the first wave.

    Gossip validates messages concurrently, so their order is not kept: the replays of the
    accepted control group come in a second wave (`replays`).
    """
    control = mallory_group(1)
    wrong = mallory_group(2)
    wrong_answer = f"<answer>{int(build_task(wrong.task).answer) + 1}</answer>"
    tampered = bytearray(one(mallory_group(3)))
    tampered[bytes(tampered).index(b"chain_sum")] ^= (
        0x01  # still canonical: only the signature catches it
    )
    copy = msgspec.structs.replace(honest, sender=ME, nonce=b"c" * 16, created_at=time.time())
    plan = [
        (b"\x93garbage", "undecodable", 0),
        (one(mallory_group(4))[:200], "undecodable", 0),  # truncated
        (b"\x00" * (MAX_MESSAGE_BYTES + 1024), "oversize", 0),
        (
            signed_body(mallory_group(5), lambda r: r.update(policy_version="7")),
            "malformed",
            0,
        ),  # wrong type
        (
            signed_body(mallory_group(6), lambda r: r.update(rewards=[float("nan")] * 4)),
            "bad_reward",
            0,
        ),
        (signed_body(mallory_group(7), lambda r: r.update(rewards=[1e12] * 4)), "bad_reward", 0),
        (
            pack_messages([SignedGroup(encode_group(mallory_group(8)), b"\x01" * 64)])[0],
            "bad_signature",
            0,
        ),  # forged
        (
            pack_messages(
                [
                    SignedGroup(
                        encode_group(mallory_group(9, sender=peer_id_of(VICTIM))),
                        sign(
                            MALLORY,
                            SIGNING_DOMAIN
                            + encode_group(mallory_group(9, sender=peer_id_of(VICTIM))),
                        ),
                    )
                ]
            )[0],
            "bad_signature",
            0,
        ),  # signed by mallory, claiming the victim sent it
        (bytes(tampered), "bad_signature", 0),  # valid signature over a tampered body
        (
            one(mallory_group(10, sender=peer_id_of(VICTIM)), VICTIM),
            "sender_mismatch",
            0,
        ),  # relayed
        (one(mallory_group(11, swarm_id="elsewhere")), "wrong_swarm", 0),
        (one(mallory_group(12, created_at=time.time() + 3600)), "from_future", 0),
        (one(mallory_group(13, created_at=time.time() - 7200)), "stale", 0),
        (one(control), None, 1),  # accepted: the pipeline does accept mallory's honest work
        (one(mallory_group(14, rewards=(1.1,) * 4)), "reward_mismatch", 1),  # inflated
        (
            one(
                msgspec.structs.replace(
                    wrong,
                    completions=(wrong_answer,) * 2 + ("a", "b"),
                    rewards=(1.1, 1.1, 0.0, 0.0),
                )
            ),
            "reward_mismatch",
            1,
        ),  # claims a wrong answer is right
        (one(mallory_group(15, question="What is 1 + 1?")), "question_mismatch", 1),
        # refused on its spec alone, before any rebuild and before the rate limit
        (
            one(mallory_group(16, task=TaskSpec.make("no_such_dataset", {}, 0, 0))),
            "unlisted_task",
            0,
        ),
        (one(copy), "copycat", 1),  # the honest node's own group, re-signed as mallory's
    ]
    expected = collections.Counter(reason for _, reason, _ in plan if reason)
    return [m for m, _, _ in plan], expected, sum(t for _, _, t in plan)


def replays() -> tuple[list[bytes], collections.Counter]:
    """The accepted control group sent again, and its nonce reused for another group."""
    return [one(mallory_group(1)), one(mallory_group(1, round=999))], collections.Counter(
        {"duplicate": 1, "replayed_nonce": 1}
    )


def rows(url: str, model=GroupRow) -> list:
    ledger = Ledger(url, create=False)
    try:
        with ledger.reader() as s:
            return s.query(model).all()
    finally:
        ledger.close()


def _summary(url: str) -> dict:
    return dict(collections.Counter((r.status, r.reason, r.source[-6:]) for r in rows(url)))


def from_mallory(url: str) -> collections.Counter:
    """Mallory's rejected groups by reason: stored as rows, or counted (duplicates, bans)."""
    out = collections.Counter(
        r.reason for r in rows(url) if r.source == ME and r.status == "rejected"
    )
    ledger = Ledger(url, create=False)
    try:
        with ledger.reader() as s:
            out.update(counted_rejections(s, ME))
    finally:
        ledger.close()
    return out


def test_hostile_peer_is_refused_with_one_recorded_reason_per_bad_group(tmp_path, tiny_model_path):
    # tokens for the first wave's groups that pass the cheap checks, plus FLOOD_ALLOWED of the flood
    burst = 5 + FLOOD_ALLOWED
    config = small_config(
        tmp_path / "honest",
        node={"rounds": 0, "checkpoint_every": 1000},
        generation={"questions_per_round": 2, "completions_per_question": 4, "max_new_tokens": 8},
        training={"own_groups": 2},
        sharing={"shared_groups": 2, "max_version_lag": -1},
        tasks={"eval_size": 0},
        verify={"rate_burst": burst, "rate_groups_per_s": 0.001, "ban_after": 0},
    )
    node = Node(config)
    errors: list[BaseException] = []

    def run():
        try:
            node.run()
        except BaseException as e:  # noqa: BLE001 - reported by the test below
            errors.append(e)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    url = config.ledger_url
    identity = tmp_path / "mallory.key"
    save_identity(MALLORY, identity)
    hostile = None
    try:
        info = wait_node_info(config.run_dir, 60, "the honest node to listen")
        hostile = Hostile(identity, info["addrs"], rollout_topic("swarm-local"))
        assert hostile.call(cmd="wait_mesh", n=1, timeout=30)["mesh"]

        def copyable():  # an honest group gossiped to mallory, with something worth copying
            for data in hostile.call(cmd="received")["messages"]:
                for signed in unpack_message(bytes.fromhex(data)):
                    group = verify_signed(signed)
                    if len(set(c.strip() for c in group.completions)) >= 2:
                        return group
            return None

        honest = wait_for(copyable, 60, "an honest group to copy")
        messages, expected, used = attacks(honest)
        assert used == burst - FLOOD_ALLOWED
        hostile.publish(messages)
        wait_for(
            lambda: from_mallory(url) == expected,
            60,
            lambda: f"rejections {dict(expected)}; ledger {_summary(url)}",
        )
        round_at_attack = node.state.round
        again, more = replays()
        hostile.publish(again)
        expected += more
        wait_for(
            lambda: from_mallory(url) == expected,
            60,
            lambda: f"replays refused; ledger {_summary(url)}",
        )

        flood = [mallory_group(100 + i) for i in range(FLOOD)]
        hostile.publish([one(g) for g in flood])
        expected["rate_limited"] = FLOOD - FLOOD_ALLOWED
        wait_for(lambda: from_mallory(url) == expected, 60, "the flood to be rate-limited")

        ban(url, ME, "test")  # the user bans mallory; the running node reads it within a round
        time.sleep(1.0)
        banned_at_round = node.state.round
        wait_for(lambda: node.state.round >= banned_at_round + 2, 60, "two rounds after the ban")
        hostile.publish([one(mallory_group(200))])
        expected["banned"] = 1
        wait_for(lambda: from_mallory(url) == expected, 60, "the banned peer's group to be refused")
        wait_for(lambda: node.state.round >= round_at_attack + 3, 60, "the node to train on")
    finally:
        node.request_stop()
        thread.join(timeout=120)
        if hostile is not None:
            hostile.close()
    assert not thread.is_alive() and errors == []
    node.close()

    all_rows = rows(url)
    assert from_mallory(url) == expected  # exactly one record per bad group, nothing else
    stored = collections.Counter(
        r.reason for r in all_rows if r.source == ME and r.status == "rejected"
    )
    assert stored == expected - collections.Counter(
        {"duplicate": 1, "banned": 1}
    )  # those are counted
    accepted = {r.content_hash for r in all_rows if r.status == "accepted"}
    taken = {r.content_hash for r in all_rows if r.status == "accepted" and r.source == ME}
    control = sign_group(mallory_group(1), MALLORY).content_hash
    flooded = {sign_group(g, MALLORY).content_hash for g in flood}
    # the control group and as many flood groups as the rate limit allowed (gossip validates concurrently: any of them)
    assert control in taken and len(taken) == 1 + FLOOD_ALLOWED and taken - {control} <= flooded
    assert all(
        r.source == ME for r in all_rows if r.status == "rejected"
    )  # blamed on the real publisher
    uses = rows(url, GroupUseRow)
    assert {u.content_hash for u in uses} <= accepted  # nothing rejected was ever trained on
    assert node.state.round > round_at_attack and node.state.policy_version > 0
