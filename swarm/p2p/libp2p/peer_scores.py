"""GossipSub v1.1 peer scoring, as py-libp2p 0.8.1's `pubsub/score.py` can give it.

What the library's scorer does (read from its source; docs/LIBP2P.md has the evaluation):
every weight is 0 and every threshold -inf by default, so scoring is off. Its counters
are per peer and topic and decay once per heartbeat: P2 first deliveries, P4 invalid
messages (fed by validator rejections), and a behaviour penalty (the spec's P7, here
"p5", applied linearly above a threshold rather than squared). Its P1 counts mesh joins,
not time in mesh, and P3 (mesh delivery deficit) is never fed, so both stay at weight 0.
The gates it applies: below `gossip_threshold` a peer gets neither our gossip nor our
mesh publishes; below `publish_threshold` its messages are dropped before validation;
below `graylist_threshold` its GRAFTs are refused (and, with patches.SwarmPubsub, its
whole RPCs ignored); PX is taken only from peers at or above `accept_px_threshold`.

The figures below make a single mistake cheap and sustained abuse expensive: an honest
peer that delivers messages first climbs to at most +10; each refusal by the transport
costs its PENALTY (behaviour) or 2 (an invalid message); everything decays by 5 % a
second, so a penalty halves in about 14 s.
"""

from __future__ import annotations

from libp2p.pubsub.score import ScoreParams, TopicScoreParams

from swarm.p2p.transport import RefusalReason

DECAY_PER_HEARTBEAT = 0.95  # the heartbeat is 1 s

GOSSIP_THRESHOLD = -50.0
PUBLISH_THRESHOLD = -100.0
GRAYLIST_THRESHOLD = -200.0
ACCEPT_PX_THRESHOLD = 5.0  # PX only from peers that earned it by delivering messages

# Behaviour penalty per refusal, by reason (unsigned and badly signed messages count as
# invalid messages instead, P4). A GRAFT during backoff costs 1, as in the spec.
PENALTY: dict[RefusalReason, float] = {
    RefusalReason.OVERSIZE: 2.0,
    RefusalReason.UNSIGNED: 0.0,
    RefusalReason.BAD_SIGNATURE: 0.0,
    RefusalReason.CONTROL_FLOOD: 1.0,
    RefusalReason.BACKOFF_VIOLATION: 1.0,
    RefusalReason.BLOB_FETCH_LIMIT: 1.0,
    RefusalReason.FLOW_CONTROL: 10.0,
    RefusalReason.INBOUND_BUDGET: 1.0,
    RefusalReason.LOW_SCORE: 0.0,  # the penalties that put it there are enough
    RefusalReason.OVER_BUDGET: 1.0,
    RefusalReason.BAD_AUTONAT_REQUEST: 1.0,
    RefusalReason.BAD_HOLE_PUNCH: 1.0,
}


def build_score_params() -> ScoreParams:
    return ScoreParams(
        p2_first_message_deliveries=TopicScoreParams(
            weight=1.0, cap=10.0, decay=DECAY_PER_HEARTBEAT
        ),
        p4_invalid_messages=TopicScoreParams(weight=2.0, cap=200.0, decay=DECAY_PER_HEARTBEAT),
        p5_behavior_penalty_weight=1.0,
        p5_behavior_penalty_decay=DECAY_PER_HEARTBEAT,
        p5_behavior_penalty_threshold=0.0,
        publish_threshold=PUBLISH_THRESHOLD,
        gossip_threshold=GOSSIP_THRESHOLD,
        graylist_threshold=GRAYLIST_THRESHOLD,
        accept_px_threshold=ACCEPT_PX_THRESHOLD,
    )
