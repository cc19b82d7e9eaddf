"""Per-peer reputation: what each peer sent us, a score, throttling and automatic bans.

A peer's record counts its accepted groups and its rejected ones by reason, plus soft
signals (copycat groups, groups none of whose completions terminated). The score is

    score = (accepted + 1) / (accepted + 1 + penalty)

where `penalty` weighs each rejection by how surely it means bad faith (`Reason.weight`): a bad
signature or an inflated reward counts fully, a stale group (clock skew, a slow network)
or a group over the rate limit only a little, and collateral rejections (a good group in a
message with a bad one, a duplicate the network delivered twice) not at all. Below
`throttle_below` a peer's rate limit refills at `score` times the normal rate. Only hard
failures ban: once the penalty from reasons of weight 1 reaches `ban_after` with a score
below `ban_below`, the peer is banned; a rejection that is proof of bad faith by itself
(`Reason.proof`: bytes served under a group's key that are not the group) bans it at once,
however few groups the node pulls from it a round (unless `ban_after` is 0: no automatic
bans). Soft signals (copycat, stale, over the rate limit,
never-terminating completions) throttle but never ban on their own, because honest nodes
can produce them: two nodes left at the same `node.seed` draw the same task specs and, with
the same model, near-identical completions.

Blame goes to the peer that *published* the message (the libp2p source, authenticated by
the transport): for an unsigned or badly signed group the claimed sender proves nothing.

Deliberately not here: storing bans (the ledger's `bans` table) or the checks themselves.
"""

from __future__ import annotations

import collections
from collections.abc import Iterable
from dataclasses import dataclass, field

from swarm.config import VerifySection
from swarm.core.reasons import Reason

UNTERMINATED_WEIGHT = 0.1  # an accepted group none of whose completions ended: soft


@dataclass
class PeerRecord:
    """What one peer sent: accepted groups, rejections by reason, soft signals."""

    accepted: int = 0
    rejected: collections.Counter[Reason] = field(default_factory=collections.Counter)
    unterminated: int = 0  # accepted groups with no finished completion

    @property
    def penalty(self) -> float:
        bad = sum(reason.weight * n for reason, n in self.rejected.items())
        return bad + UNTERMINATED_WEIGHT * self.unterminated

    @property
    def hard_penalty(self) -> float:
        """Rejections that only bad faith (or a broken node) produces: the ones that can ban."""
        return float(sum(n for reason, n in self.rejected.items() if reason.weight >= 1.0))

    @property
    def proven(self) -> list[Reason]:
        """The rejections that prove bad faith by themselves (`Reason.proof`)."""
        return [reason for reason, n in self.rejected.items() if reason.proof and n > 0]

    @property
    def score(self) -> float:
        """In (0, 1]: 1 for a peer with no penalty, towards 0 as penalties outweigh accepted groups."""
        return (self.accepted + 1) / (self.accepted + 1 + self.penalty)

    def as_dict(self) -> dict:
        return {
            "accepted": self.accepted,
            "rejected": dict(self.rejected),
            "unterminated": self.unterminated,
            "penalty": round(self.penalty, 3),
            "score": round(self.score, 4),
        }


@dataclass(frozen=True)
class ReputationSettings:
    """When a peer is throttled or banned (`verify.throttle_below`, `ban_after`, `ban_below`;
    the defaults are the config's)."""

    throttle_below: float = VerifySection().throttle_below
    # hard rejections before a ban is possible; 0: never ban automatically
    ban_after: float = VerifySection().ban_after
    ban_below: float = VerifySection().ban_below

    @classmethod
    def from_config(cls, config) -> ReputationSettings:
        v = config.verify
        return cls(v.throttle_below, v.ban_after, v.ban_below)


class Reputation:
    """Records per peer; decides throttling and automatic bans."""

    def __init__(self, settings: ReputationSettings, max_peers: int = 100_000):
        self.settings = settings
        self.max_peers = max_peers
        self._peers: collections.OrderedDict[str, PeerRecord] = collections.OrderedDict()

    def record(self, peer: str) -> PeerRecord:
        rec = self._peers.get(peer)
        if rec is None:
            rec = self._peers[peer] = PeerRecord()
            while len(self._peers) > self.max_peers:
                self._peers.popitem(last=False)
        self._peers.move_to_end(peer)
        return rec

    def accepted(self, peer: str, finished: Iterable[bool]) -> None:
        rec = self.record(peer)
        rec.accepted += 1
        if not any(finished):
            rec.unterminated += 1

    def rejected(self, peer: str, reason: Reason, n: int = 1) -> None:
        self.record(peer).rejected[reason] += n

    def rate_factor(self, peer: str) -> float:
        """Multiplier of a peer's rate-limit refill: 1, or its score once below `throttle_below`."""
        rec = self._peers.get(peer)
        if rec is None:
            return 1.0
        score = rec.score
        return 1.0 if score >= self.settings.throttle_below else score

    def should_ban(self, peer: str) -> bool:
        rec = self._peers.get(peer)
        s = self.settings
        if rec is None or s.ban_after <= 0:
            return False
        return bool(rec.proven) or (rec.hard_penalty >= s.ban_after and rec.score < s.ban_below)

    def forget(self, peer: str) -> None:
        """Start a peer afresh (after its user lifted a ban)."""
        self._peers.pop(peer, None)

    def snapshot(self) -> dict[str, dict]:
        return {peer: rec.as_dict() for peer, rec in self._peers.items()}
