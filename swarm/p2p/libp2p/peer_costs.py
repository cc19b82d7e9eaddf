"""What each peer makes this node handle, charged to it; past its budget it is graylisted,
then disconnected and banned for a while. Pure apart from the clock, which is injected.

Every RPC read from a peer, every gossip message in it, every control entry, every stream
it opens (blobs, peer exchange), every connection, and every refusal at any layer (the
transport's own, and the gossip validator's, which covers the node's checks) costs the peer
`UNITS[cost]`. The costs leak away at `rate` units a second (a leaky bucket per peer), so
what an honest peer sends, even in bursts, never adds up. A peer whose level passes
`graylist_at` has its RPCs dropped before they are parsed (each costs it all the more);
one that passes `ban_at` is banned for `ban_s`: disconnected, its connections closed as soon
as they open, its streams and messages refused, and the reason (its level and what it
spent it on) recorded. A message refused by the validator costs its signer the refusal and
the relay that forwarded it only the handling (`RELAYED_REFUSAL`): an honest relay
validated it as far as it could.

Deliberately not here: the GossipSub score (`peer_scores.py`), whose graylist is the spec's;
this budget works beside it, counts what the score does not (duplicates, bytes, streams,
graylisted RPCs themselves) and ends in a ban rather than a score that decays back.
"""

from __future__ import annotations

import collections
import enum
import time
from collections.abc import Callable
from dataclasses import dataclass, field


class Cost(enum.StrEnum):
    """What a peer made us do."""

    RPC = "rpc"  # an RPC read (and parsed, unless the peer is graylisted)
    RPC_MIB = "rpc_mib"  # per MiB of RPCs read
    MESSAGE = "message"  # a gossip message handled, accepted or not
    CONTROL = "control"  # a GossipSub control entry (IHAVE, IWANT, GRAFT, PRUNE)
    STREAM = "stream"  # a blob or peer-exchange stream it opened to us
    CONNECTION = "connection"  # a connection it opened or we accepted
    REFUSAL = "refusal"  # anything refused from it, at any layer
    RELAYED_REFUSAL = "relayed_refusal"  # a refused message it relayed for another signer
    SKIPPED_RPC = "skipped_rpc"  # an RPC sent while graylisted (besides its refusal)


UNITS: dict[Cost, float] = {
    Cost.RPC: 1.0,
    Cost.RPC_MIB: 16.0,
    Cost.MESSAGE: 1.0,
    Cost.CONTROL: 0.1,
    Cost.STREAM: 2.0,
    Cost.CONNECTION: 10.0,
    Cost.REFUSAL: 10.0,
    Cost.RELAYED_REFUSAL: 1.0,
    # A graylisted peer that keeps sending is on its way to a ban: a few RPCs a second (an
    # honest peer's heartbeat gossip) still leak away, a flood does not.
    Cost.SKIPPED_RPC: 20.0,
}
MAX_TRACKED = 4096  # peers remembered; the quietest are forgotten first


def honest_peer_cost(message_bytes: int) -> float:
    """What one honest peer costs at once: a connection, a stream, and one RPC carrying one
    gossip message of `message_bytes`. A graylist or ban level at or below it would punish
    any peer; `swarm.config.validate` refuses such a config (it mirrors this sum, without
    importing libp2p; a test checks the two agree)."""
    rpc = UNITS[Cost.RPC] + UNITS[Cost.RPC_MIB] * message_bytes / 2**20 + UNITS[Cost.MESSAGE]
    return UNITS[Cost.CONNECTION] + UNITS[Cost.STREAM] + rpc


class Verdict(enum.Enum):
    OK = "ok"
    GRAYLISTED = "graylisted"  # over graylist_at: drop its RPCs unparsed
    BANNED = "banned"  # crossed ban_at just now: disconnect it


@dataclass(frozen=True)
class CostSettings:
    """The per-peer budget. An honest peer relaying a busy swarm's messages (one per node
    and round, each from up to D peers) costs a few tens of units a second."""

    rate: float = 300.0  # units a second that leak away: what a peer may cost, sustained
    graylist_at: float = 3000.0  # level past which its RPCs are dropped unparsed
    ban_at: float = 6000.0  # level past which it is disconnected and banned
    ban_s: float = 600.0  # how long a ban lasts


@dataclass
class _Account:
    level: float = 0.0
    updated: float = 0.0
    spent: collections.Counter[Cost] = field(default_factory=collections.Counter)  # units


@dataclass(frozen=True)
class Ban:
    peer: str
    until: float  # on the injected clock
    reason: str


class PeerCosts:
    """Leaky-bucket cost accounts per peer, and the bans they led to."""

    def __init__(
        self, settings: CostSettings | None = None, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.settings = settings or CostSettings()
        self._clock = clock
        self._accounts: collections.OrderedDict[str, _Account] = collections.OrderedDict()
        self._bans: dict[str, Ban] = {}
        self.bans_made = 0

    def charge(self, peer: str, cost: Cost, n: float = 1.0) -> Verdict:
        """Charge `peer` for `n` of `cost`; BANNED only when this charge crossed `ban_at`."""
        if peer in self._bans:
            return Verdict.GRAYLISTED if self.banned(peer) else self.charge(peer, cost, n)
        now = self._clock()
        account = self._account(peer, now)
        units = UNITS[cost] * n
        account.level += units
        account.spent[cost] += units  # type: ignore[assignment]  # float units
        s = self.settings
        if account.level > s.ban_at:
            if len(self._bans) >= MAX_TRACKED:  # forget the bans that ran out
                self._bans = {p: b for p, b in self._bans.items() if b.until > now}
            self._bans[peer] = Ban(peer, now + s.ban_s, _reason(account, s))
            self._accounts.pop(peer, None)
            self.bans_made += 1
            return Verdict.BANNED
        return Verdict.GRAYLISTED if account.level > s.graylist_at else Verdict.OK

    def graylisted(self, peer: str) -> bool:
        """Whether its RPCs are to be dropped before parsing (banned peers included)."""
        if self.banned(peer):
            return True
        account = self._accounts.get(peer)
        return account is not None and self._leaked(account, self._clock()) > (
            self.settings.graylist_at
        )

    def banned(self, peer: str) -> bool:
        ban = self._bans.get(peer)
        if ban is None:
            return False
        if self._clock() < ban.until:
            return True
        del self._bans[peer]  # served its time: starts afresh
        return False

    def ban(self, peer: str) -> Ban | None:
        return self._bans.get(peer) if self.banned(peer) else None

    def level(self, peer: str) -> float:
        account = self._accounts.get(peer)
        return 0.0 if account is None else self._leaked(account, self._clock())

    def snapshot(self) -> dict[str, dict]:
        """Each tracked peer's level and spending, and each ban, for stats and benches."""
        now = self._clock()
        out: dict[str, dict] = {
            peer: {"level": round(self._leaked(a, now), 1), "spent": dict(a.spent)}
            for peer, a in self._accounts.items()
        }
        for peer, ban in self._bans.items():
            out[peer] = {"banned_for_s": round(ban.until - now, 1), "reason": ban.reason}
        return out

    def _account(self, peer: str, now: float) -> _Account:
        account = self._accounts.get(peer)
        if account is None:
            account = self._accounts[peer] = _Account(updated=now)
            while len(self._accounts) > MAX_TRACKED:
                self._accounts.popitem(last=False)
        else:
            account.level = self._leaked(account, now)
            self._accounts.move_to_end(peer)
        account.updated = now
        return account

    def _leaked(self, account: _Account, now: float) -> float:
        return max(0.0, account.level - self.settings.rate * (now - account.updated))


def _reason(account: _Account, settings: CostSettings) -> str:
    top = ", ".join(f"{cost} {units:.0f}" for cost, units in account.spent.most_common(3))
    return (
        f"cost {account.level:.0f} units over its budget ({settings.rate:.0f}/s, ban at "
        f"{settings.ban_at:.0f}): {top}"
    )
