"""A node re-scoring peers' groups holds no ledger write lock: `swarm-node ban` (another
process, another connection to the same SQLite ledger) goes through at once.

The node's sharing part over the in-memory transport, with a verifier whose re-scoring
blocks on the second group of a batch until released (or HOLD_S passes): while it is
blocked, a ban is written the way `swarm-node ban` writes it (`swarm.verify.bans.ban`).
If received groups were verified inside the write transaction, the first group's row
would already hold SQLite's write lock and the ban would wait the whole HOLD_S.
"""

from __future__ import annotations

import threading
import time

import msgspec

from swarm.core.identity import create_identity, peer_id_of
from swarm.experience import ExperiencePool
from swarm.ledger import GroupRow, Ledger, banned_peers
from swarm.monitor.display import Reporter
from swarm.node.intake import Intake
from swarm.node.records import Records
from swarm.node.sharing import Sharing
from swarm.node.state import NodeState
from swarm.p2p import MemoryHub, MemoryTransport
from swarm.tasks import EASY_MIX, TaskSpec, build_task
from swarm.verify.bans import ban
from swarm.verify.gate import Verifier, VerifySettings
from swarm.verify.rescore import rescore
from swarm.verify.rescore_pool import InProcess
from swarm.wire import RolloutGroup, Sampling, pack_messages, rollout_topic
from swarm.wire.signing import sign_group
from tests.conftest import small_config

NODE_KEY = create_identity(b"\x41" * 32)
PEER_KEY = create_identity(b"\x42" * 32)
BANNED_KEY = create_identity(b"\x43" * 32)
HOLD_S = 5.0  # longest the re-scoring blocks (below the ledger's 10 s busy timeout)
GROUPS = 3


class BlockingRescorer:
    """Re-scores in process; from the second group on, first waits until released."""

    def __init__(self):
        self.inner = InProcess()
        self.calls = 0
        self.blocked = threading.Event()  # set once a call is waiting
        self.release = threading.Event()

    def __call__(self, group):
        self.calls += 1
        if self.calls >= 2:
            self.blocked.set()
            self.release.wait(HOLD_S)
        return self.inner(group)

    def start(self):
        pass

    def close(self):
        pass


def peer_group(index: int) -> RolloutGroup:
    """A group the peer could honestly send (its claimed rewards recomputed here)."""
    spec = TaskSpec.make("chain_sum", dict(EASY_MIX[0].config), seed=7, index=index)
    task = build_task(spec)
    group = RolloutGroup(
        swarm_id="swarm-local",
        sender=peer_id_of(PEER_KEY),
        task=spec,
        question=task.question,
        completions=(f"<answer>{task.answer}</answer>", "<answer>0</answer>"),
        rewards=(0.0, 0.0),
        finished=(True, True),
        model="swarm-tiny",
        base_hash="00" * 16,
        policy_version=0,
        sampling=Sampling(temperature=1.0, top_p=1.0, top_k=0, max_new_tokens=8),
        round=index,
        created_at=time.time(),
        nonce=index.to_bytes(16, "big"),
        format_bonus=0.1,
    )
    return msgspec.structs.replace(group, rewards=rescore(group, 0.1)[1])


def _sharing(config, transport, rescorer, ledger) -> Sharing:
    verifier = Verifier(
        VerifySettings.from_config(config), own_peer_id=transport.peer_id, rescorer=rescorer
    )
    return Sharing(
        config=config,
        transport=transport,
        verifier=verifier,
        intake=Intake(config, verifier),
        pool=ExperiencePool(16),
        ledger=ledger,
        records=Records(ledger, NodeState(), Reporter()),
        reporter=Reporter(),
    )


def test_a_ban_is_written_at_once_while_received_groups_are_verified(tmp_path):
    config = small_config(tmp_path / "node")
    config.run_dir.mkdir(parents=True, exist_ok=True)
    hub = MemoryHub()
    transport = MemoryTransport(peer_id_of(NODE_KEY), hub)
    peer = MemoryTransport(peer_id_of(PEER_KEY), hub)
    rescorer = BlockingRescorer()
    ledger = Ledger(config.ledger_url)
    sharing = _sharing(config, transport, rescorer, ledger)
    topic = rollout_topic(config.p2p.swarm_id)
    transport.start()
    peer.start()
    transport.subscribe(topic, sharing.validate)
    for i in range(GROUPS):
        peer.publish(topic, pack_messages([sign_group(peer_group(i), PEER_KEY)])[0])

    receiving = threading.Thread(target=sharing.receive)
    receiving.start()
    try:
        assert rescorer.blocked.wait(30), "the intake never reached the second group"
        started = time.monotonic()
        said = ban(config.ledger_url, peer_id_of(BANNED_KEY), "by hand, during intake")
        took = time.monotonic() - started
    finally:
        rescorer.release.set()
        receiving.join(60)
    try:
        assert not receiving.is_alive()
        assert said.startswith("banned")
        assert took < 1.0, f"the ban waited {took:.1f} s on the node's verification"
        assert sharing.stats.accepted_groups == GROUPS
        with ledger.reader() as session:
            assert peer_id_of(BANNED_KEY) in banned_peers(session)
            assert session.query(GroupRow).filter_by(status="accepted").count() == GROUPS
    finally:
        transport.close()
        peer.close()
        ledger.close()
