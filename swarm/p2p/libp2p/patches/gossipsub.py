"""GossipSub's changes: `SwarmGossipSub` bounds its control messages and drops the equivocation
record; `BlameScorer` holds an invalid relayed message against its signer.
"""

from __future__ import annotations

import contextvars
from collections.abc import Callable

from libp2p.custom_types import MessageID
from libp2p.peer.envelope import consume_envelope
from libp2p.peer.id import ID
from libp2p.peer.peerstore import env_to_send_in_RPC
from libp2p.pubsub.gossipsub import GossipSub
from libp2p.pubsub.pb import rpc_pb2
from libp2p.pubsub.score import PeerScorer
from libp2p.pubsub.utils import safe_bytes_from_hex

from swarm.p2p.libp2p.control_budget import MAX_CONTROL_PER_RPC, ControlBudget
from swarm.p2p.libp2p.pulse import Pulse
from swarm.p2p.transport import RefusalReason

# The signer (`from`) of the message whose validation runs now, when another peer relayed it
# (set by `SwarmPubsub.push_msg`, read by `BlameScorer`).
RELAYED_FROM: contextvars.ContextVar[ID | None] = contextvars.ContextVar(
    "relayed_from", default=None
)
# Called with (peer, reason, detail, message or None) for everything refused from a peer.
Refuse = Callable[[ID, RefusalReason, str, "rpc_pb2.Message | None"], None]


class BlameScorer(PeerScorer):
    """The library's scorer, with an invalid message held against the peer that signed it.

    The library counts a message our validator refuses against the peer that forwarded it
    (P4). A relay validates what it forwards as far as it can, but it cannot know our state
    (which trainer we follow, which nonces we saw, our rate limits): a trainer relaying
    forged manifests to its follower lost its score there and then had its own messages
    refused. The signature was checked before validation, so the signer is known for sure;
    it is penalised instead, if it is one of our peers (a stranger has no score to lower;
    the relay still pays the handling through its cost budget, `peer_costs`).
    """

    is_peer: Callable[[ID], bool] = staticmethod(lambda peer: False)

    def on_invalid_message(self, peer: ID, topic: str) -> None:
        signer = RELAYED_FROM.get()
        if signer is None or signer == peer:
            super().on_invalid_message(peer, topic)
        elif self.is_peer(signer):
            super().on_invalid_message(signer, topic)


class SwarmGossipSub(GossipSub):
    """GossipSub with its control messages bounded as GossipSub v1.1 intends, and no
    equivocation record.

    What it changes, and the failure each change fixes:

    - `_check_equivocation`: the library keeps the full body of every recent message
      (trimmed from over 1000 to 500 only at a heartbeat) to spot a reused sequence number:
      up to a gigabyte at 1 MiB per message. The seen-cache already drops a second message
      with a reused number (message IDs are sender + sequence number).
    - `handle_iwant`: the library answers every ID of every IWANT, the same ID as often as
      asked (10 IWANT entries a second, any number of IDs each): one small IWANT repeating
      a cached ID made us send that message thousands of times. Now each ID is answered at
      most 3 times per peer, within a per-peer budget per heartbeat (control_budget.py).
    - `handle_ihave`: the library asks for every unknown ID offered and logs a warning for
      each IHAVE over its rate limit. Now at most 10 IHAVEs and 5000 IDs per peer and
      heartbeat are looked at; the rest is counted and refused without a log line.
    - `handle_graft` / `handle_prune`: GRAFT and PRUNE for topics we are not in are ignored
      (the library answered every such GRAFT with a PRUNE and kept a backoff entry for
      every PRUNEd topic name, unbounded); a GRAFT during backoff is penalised (spec P7)
      and answered with at most one PRUNE per heartbeat.
    - PRUNE peer exchange: the library dialled PX peers at once, inside the read loop of
      the peer that sent them, from any peer (its accept threshold was -inf), and without a
      signed record from the peerstore. Now PX is taken only from peers scoring at least
      peer_scores.ACCEPT_PX_THRESHOLD, only with a valid signed peer record, at most PX_MAX
      per PRUNE, and handed to our dialer (allow-list, peer limit, backoff), never dialled
      here.
    - Peers below the gossip threshold get no answer to IHAVE or IWANT (spec).
    """

    PX_MAX = 8

    budget: ControlBudget
    scorer: PeerScorer  # GossipSub always builds one (default parameters if none given)
    refuse: Refuse | None = None  # set by gossip.Gossip
    learn_peer: Callable[[ID, list], None] | None = None  # set by the transport (Dialer.learn)
    count: Callable[[str, int], None] | None = None  # set by gossip.Gossip

    def __init__(self, *args, **kwargs) -> None:  # noqa: ANN002, ANN003 - GossipSub's own
        super().__init__(*args, **kwargs)
        self.budget = ControlBudget()
        self.mesh_grew = Pulse()  # fires whenever a peer joins a topic's mesh
        self.scorer = BlameScorer(self.scorer.params)
        self.scorer.is_peer = lambda peer: self.pubsub is not None and peer in self.pubsub.peers

    def _check_equivocation(self, msg: rpc_pb2.Message) -> bool:
        return True

    def _notify_mesh_peer_added(self, peer_id: ID, topic: str) -> None:
        # Every path that adds a mesh peer (join, GRAFT, heartbeat, opportunistic graft) calls this.
        super()._notify_mesh_peer_added(peer_id, topic)
        self.mesh_grew.fire()

    def gossip_heartbeat(self):  # noqa: ANN201 - the library's own return type
        self.budget.new_heartbeat()  # once per heartbeat, before IHAVEs go out
        return super().gossip_heartbeat()

    def _note(self, peer_id: ID, reason: RefusalReason, detail: str) -> None:
        if self.refuse is not None:
            self.refuse(peer_id, reason, detail, None)

    def _counted(self, name: str, amount: int) -> None:
        if self.count is not None and amount:
            self.count(name, amount)

    def _below(self, peer_id: ID, threshold: float) -> bool:
        return self.scorer.score(peer_id, list(self.mesh)) < threshold

    async def handle_rpc(self, rpc: rpc_pb2.RPC, sender_peer_id: ID) -> None:
        """The control part of an RPC, bounded as a whole before any entry is looked at.

        The library's own version checks the sender's signed record a second time (Pubsub
        did) and hands every entry to its handler, however many there are.
        """
        control = rpc.control
        kinds = (control.ihave, control.iwant, control.graft, control.prune, control.idontwant)
        entries = sum(len(kind) for kind in kinds)
        ids = 0
        if entries <= MAX_CONTROL_PER_RPC:
            ids = sum(len(e.messageIDs) for e in control.ihave)
            ids += sum(len(e.messageIDs) for e in control.iwant)
        refused = self.budget.admit_control(sender_peer_id, entries, ids)
        if refused is not None:
            self._counted("control_refused", entries)
            self._counted(
                "ihave_ignored", sum(len(e.messageIDs) for e in control.ihave[:MAX_CONTROL_PER_RPC])
            )
            self._note(sender_peer_id, RefusalReason.CONTROL_FLOOD, refused)
            return
        for ihave in control.ihave:
            await self.handle_ihave(ihave, sender_peer_id)
        for iwant in control.iwant:
            await self.handle_iwant(iwant, sender_peer_id)
        for graft in control.graft:
            await self.handle_graft(graft, sender_peer_id)
        for prune in control.prune:
            await self.handle_prune(prune, sender_peer_id)
        # IDONTWANT is GossipSub v1.2, which we do not speak: counted above, otherwise ignored.

    async def handle_ihave(self, ihave_msg: rpc_pb2.ControlIHave, sender_peer_id: ID) -> None:
        ids = ihave_msg.messageIDs
        if ihave_msg.topicID not in self.mesh:
            self._counted("ihave_ignored", len(ids))
            self._note(
                sender_peer_id, RefusalReason.CONTROL_FLOOD, "IHAVE for a topic we are not in"
            )
            return
        if self._below(sender_peer_id, self.scorer.params.gossip_threshold):
            self._counted("ihave_ignored", len(ids))
            return
        allowed = self.budget.admit_ihave(sender_peer_id, len(ids))
        if allowed < len(ids):
            self._counted("ihave_ignored", len(ids) - allowed)
            self._note(
                sender_peer_id,
                RefusalReason.CONTROL_FLOOD,
                f"IHAVE over budget: {len(ids) - allowed} of {len(ids)} IDs ignored",
            )
        if self.pubsub is None:  # not attached yet: nothing to ask for
            return
        seen = self.pubsub.seen_messages
        wanted = [
            MessageID(mid)
            for mid in (safe_bytes_from_hex(raw) for raw in ids[:allowed])
            if mid is not None and not seen.has(mid)
        ]
        if wanted:
            await self.emit_iwant(wanted, sender_peer_id)

    async def handle_iwant(self, iwant_msg: rpc_pb2.ControlIWant, sender_peer_id: ID) -> None:
        ids = list(dict.fromkeys(iwant_msg.messageIDs))  # each ID once per request
        refused = len(iwant_msg.messageIDs) - len(ids)
        if self._below(sender_peer_id, self.scorer.params.gossip_threshold):
            refused, ids = refused + len(ids), []
        answers, nbytes = [], 0
        for raw in ids:
            mid = safe_bytes_from_hex(raw)
            msg = self.mcache.get(mid) if mid is not None else None
            if mid is None or msg is None:
                continue
            size = msg.ByteSize()
            if self.budget.admit_iwant(sender_peer_id, mid, size):
                answers.append(msg)
                nbytes += size
            else:
                refused += 1
        if refused:
            self._counted("iwant_refused", refused)
            self._note(
                sender_peer_id,
                RefusalReason.CONTROL_FLOOD,
                f"IWANT over budget: {refused} IDs not answered",
            )
        if answers and self.pubsub is not None:
            packet = rpc_pb2.RPC(publish=answers)
            packet.senderRecord, _ = env_to_send_in_RPC(self.pubsub.host)
            self.send_rpc(sender_peer_id, packet)
            self._counted("iwant_served_bytes", nbytes)

    async def handle_graft(self, graft_msg: rpc_pb2.ControlGraft, sender_peer_id: ID) -> None:
        topic = graft_msg.topicID
        if topic not in self.mesh:
            self._note(
                sender_peer_id, RefusalReason.CONTROL_FLOOD, "GRAFT for a topic we are not in"
            )
            return
        if sender_peer_id in self.direct_peers or self.scorer.is_graylisted(
            sender_peer_id, [topic]
        ):
            if self.budget.admit_prune_reply(sender_peer_id, topic):
                await self.emit_prune(topic, sender_peer_id, False, False)
            return
        if self._check_back_off(sender_peer_id, topic):
            self._note(sender_peer_id, RefusalReason.BACKOFF_VIOLATION, f"GRAFT on {topic!r}")
            self._add_back_off(sender_peer_id, topic, False)
            if self.budget.admit_prune_reply(sender_peer_id, topic):
                await self.emit_prune(topic, sender_peer_id, False, False)
            return
        if sender_peer_id not in self.mesh[topic]:
            self.mesh[topic].add(sender_peer_id)
            self._notify_mesh_peer_added(sender_peer_id, topic)
            self.scorer.on_join_mesh(sender_peer_id, topic)

    async def handle_prune(self, prune_msg: rpc_pb2.ControlPrune, sender_peer_id: ID) -> None:
        topic = prune_msg.topicID
        if topic not in self.mesh:
            self._note(
                sender_peer_id, RefusalReason.CONTROL_FLOOD, "PRUNE for a topic we are not in"
            )
            return
        self._add_back_off(sender_peer_id, topic, False, max(0, prune_msg.backoff))
        self.mesh[topic].discard(sender_peer_id)
        self.scorer.on_leave_mesh(sender_peer_id, topic)
        if prune_msg.peers:
            self._accept_px(sender_peer_id, topic, list(prune_msg.peers))

    def _accept_px(self, sender_peer_id: ID, topic: str, entries: list) -> None:
        if not self.scorer.allow_px_from(sender_peer_id, [topic]) or self.learn_peer is None:
            self._counted("px_ignored", len(entries))
            return
        ignored = max(0, len(entries) - self.PX_MAX)
        for entry in entries[: self.PX_MAX]:
            try:
                _, record = consume_envelope(entry.signedPeerRecord, "libp2p-peer-record")
                if not entry.signedPeerRecord or record.peer_id != ID(entry.peerID):
                    raise ValueError("PX entry without a matching signed peer record")
            except Exception:  # noqa: BLE001 - a peer's bad record is skipped and counted
                ignored += 1
                continue
            self.learn_peer(record.peer_id, list(record.addrs))
        self._counted("px_ignored", ignored)

    async def _do_px(self, px_peers: list[rpc_pb2.PeerInfo]) -> None:
        """Never dial PX peers from here (see `_accept_px`)."""
        self._counted("px_ignored", len(px_peers))
