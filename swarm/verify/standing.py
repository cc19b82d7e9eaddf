"""Each peer's standing with this node: its reputation and whether it is banned.

`record` feeds checked groups' outcomes to the reputation and names the peers to ban now
(their groups are refused from then on); `restore` rebuilds reputations from the ledger's
counts, `set_bans` takes the ban set the ledger holds. Never this node itself, never a peer
of the allow-list. Plain data, not thread-safe on its own: the verifier serialises access
(the ban set is swapped whole, so reading it needs no lock).
"""

from __future__ import annotations

import collections
from collections.abc import Collection, Iterable, Mapping

from swarm.core.reasons import Reason, Status
from swarm.verify.message import Accepted, Rejection
from swarm.verify.reputation import PeerRecord, Reputation, ReputationSettings


def blamed_peer(source: str, sender: str, reason: Reason | None = None) -> str:
    """Whom a group counts for: the publishing peer, else a claimed sender its signature proved.

    A rejection before the signature was known to be good (`Reason.unsigned`) proves nothing
    about the claimed sender, so only the (transport-authenticated) source is blamed.
    """
    return source or ("" if reason is not None and reason.unsigned else sender)


def ban_reason(rec: PeerRecord) -> str:
    """Why a peer is banned automatically, for the ledger's ban row."""
    if rec.proven:
        return "proof of bad faith: " + ", ".join(rec.proven)
    return f"score {rec.score:.3f} after {sum(rec.rejected.values())} rejected groups"


class PeerStanding:
    """Reputations and bans (see the module docstring)."""

    def __init__(
        self, settings: ReputationSettings, own_peer_id: str = "", allow_list: Collection[str] = ()
    ):
        self.reputation = Reputation(settings)
        self.own_peer_id = own_peer_id
        self.allow_list = frozenset(allow_list)
        self.banned: frozenset[str] = frozenset()

    def record(
        self,
        accepted: Iterable[Accepted],
        rejected: Iterable[Rejection],
        counted: Mapping[tuple[str, Reason], int] | None = None,
    ) -> list[tuple[str, str]]:
        """Feed outcomes to the reputation: accepted and rejected groups, and rejections
        `counted` by (blamed peer, reason). Return (peer, reason) of peers to ban now (already
        in `banned`)."""
        to_ban: dict[str, str] = {}
        penalties = collections.Counter(
            (blamed_peer(r.source, r.sender, r.reason), r.reason) for r in rejected
        )
        penalties.update(counted or {})
        for item in accepted:
            self.reputation.accepted(
                blamed_peer(item.source, item.group.sender), item.group.finished
            )
        for (peer, reason), n in penalties.items():
            if not peer or peer == self.own_peer_id:
                continue
            self.reputation.rejected(peer, reason, n)
            if (
                peer not in self.banned
                and peer not in self.allow_list
                and self.reputation.should_ban(peer)
            ):
                to_ban[peer] = ban_reason(self.reputation.record(peer))
        if to_ban:
            self.banned = self.banned | frozenset(to_ban)
        return list(to_ban.items())

    def restore(self, outcomes: Iterable[tuple[str, str, str, str, int]]) -> None:
        """Rebuild reputations from (source, sender, status, reason, count) rows of the ledger.

        Restores counts only: whether accepted groups' completions terminated is not kept
        apart in the ledger, and bans come back from the ledger's own table.
        """
        for source, sender, status, code, n in outcomes:
            reason = Reason.from_stored(code) if status == Status.REJECTED else None
            peer = blamed_peer(source, sender, reason)
            if not peer or peer == self.own_peer_id:
                continue
            if status == Status.ACCEPTED:
                self.reputation.record(peer).accepted += n
            elif reason is not None:
                self.reputation.record(peer).rejected[reason] += n

    def set_bans(self, peers: Iterable[str]) -> None:
        """Replace the ban set (as read from the ledger); a peer whose ban was lifted starts afresh."""
        new = frozenset(peers)
        for peer in self.banned - new:
            self.reputation.forget(peer)
        self.banned = new
