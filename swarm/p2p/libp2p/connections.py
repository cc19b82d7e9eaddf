"""Staying connected: our own dial loop, with a capped backoff per peer (on the trio thread).

The library's own bootstrap gives a peer up for good after 3 failures, and its
auto-connector dials around the allow-list; both are left unused (see patches/network.py).
Here every bootstrap peer is retried with capped exponential backoff for as long as the
node is connected to fewer than `trimming.SETTLED_PEERS` others (then it is a peer like
any other: not redialled, trimmed when idle; a joiner does not hold it forever), a peer
learned by peer exchange is forgotten after FORGET_AFTER_FAILURES failed dials, and the
node keeps running with none reachable.
"""

from __future__ import annotations

import logging
import random
from collections.abc import Callable
from dataclasses import dataclass

import multiaddr
import trio
from libp2p.abc import IHost
from libp2p.peer.id import ID
from libp2p.peer.peerinfo import PeerInfo as Libp2pPeerInfo

from swarm.p2p.libp2p.framing import NET_ERRORS
from swarm.p2p.libp2p.host import AccessPolicy, connected_peers, is_connected, is_dialable_tcp
from swarm.p2p.libp2p.patches import lift_dial_block
from swarm.p2p.libp2p.stats import Counters
from swarm.p2p.libp2p.trimming import ConnectionTrimmer, bootstrap_kept

logger = logging.getLogger(__name__)

DEFAULT_MAX_PEERS = 32
MAINTAIN_INTERVAL_S = 0.5
BACKOFF_MIN_S, BACKOFF_MAX_S = 0.5, 30.0
FORGET_AFTER_FAILURES = 8  # a peer learned by peer exchange (never a bootstrap peer)
MAX_LEARNED = 256  # peers learned by peer exchange and not yet dialled or forgotten


@dataclass
class KnownPeer:
    """A peer we try to stay connected to: a bootstrap peer (forever) or one learned by exchange."""

    addrs: list[multiaddr.Multiaddr]
    bootstrap: bool
    failures: int = 0
    next_attempt: float = 0.0
    dialing: bool = False


class Dialer:
    """Keeps dialing known peers that are not connected; failures are counted, never raised."""

    def __init__(
        self,
        host: IHost,
        policy: AccessPolicy,
        counters: Counters,
        *,
        dial_timeout: float,
        max_peers: int,
        trimmer: ConnectionTrimmer | None = None,
        busy: Callable[[ID], bool] = lambda peer_id: False,
    ) -> None:
        self._host = host
        self._policy = policy
        self._counters = counters
        self._dial_timeout = dial_timeout
        self._max_peers = max_peers
        self._trimmer = trimmer
        self._busy = busy
        self._known: dict[ID, KnownPeer] = {}

    def add_bootstrap(self, infos: list[Libp2pPeerInfo]) -> None:
        """Bootstrap peers, to be dialed at once and redialed forever."""
        now = trio.current_time()
        for info in infos:
            self._known[info.peer_id] = KnownPeer(
                addrs=list(info.addrs), bootstrap=True, next_attempt=now
            )

    def learn(self, peer_id: ID, addrs: list[multiaddr.Multiaddr]) -> None:
        """A peer heard of through peer exchange: dial it soon, unless it is known or connected."""
        if peer_id == self._policy.my_id or peer_id in self._known:
            return
        if is_connected(self._host, peer_id) or not self._policy.allows(peer_id):
            return
        if sum(not known.bootstrap for known in self._known.values()) >= MAX_LEARNED:
            return  # a hint list, not a queue: a peer flooding us with addresses fills nothing
        addrs = [addr for addr in addrs if is_dialable_tcp(addr)][:4]
        if not addrs:
            return
        self._known[peer_id] = KnownPeer(
            addrs=addrs, bootstrap=False, next_attempt=trio.current_time()
        )

    async def maintain(self, nursery: trio.Nursery) -> None:
        """Forever: start a dial to each known peer that is due and not connected."""
        while True:
            now = trio.current_time()
            peers = connected_peers(self._host)
            connected = len(peers)
            bootstrap = {p for p, known in self._known.items() if known.bootstrap}
            lonely = bootstrap_kept(peers, bootstrap)  # else bootstrap peers are not redialled
            for peer_id, known in list(self._known.items()):
                if known.dialing or now < known.next_attempt or is_connected(self._host, peer_id):
                    continue
                if known.bootstrap and not lonely:
                    continue
                if not known.bootstrap and connected >= self._max_peers:
                    continue
                known.dialing = True
                nursery.start_soon(self._dial_known, peer_id, known)
            if self._trimmer is not None:
                await self._trimmer.trim(self._host, bootstrap if lonely else (), self._busy)
            await trio.sleep(MAINTAIN_INTERVAL_S)

    async def _dial_known(self, peer_id: ID, known: KnownPeer) -> None:
        try:
            connected = await self._dial(peer_id, known.addrs)
        finally:
            known.dialing = False
        if connected:
            known.failures = 0
            return
        known.failures += 1
        if not known.bootstrap and known.failures >= FORGET_AFTER_FAILURES:
            self._known.pop(peer_id, None)
            return
        backoff = min(BACKOFF_MIN_S * 2 ** (known.failures - 1), BACKOFF_MAX_S)
        known.next_attempt = trio.current_time() + backoff * random.uniform(0.8, 1.2)

    async def _dial(self, peer_id: ID, addrs: list[multiaddr.Multiaddr]) -> bool:
        """One bounded dial. True if connected; failures are counted, never raised."""
        if peer_id == self._policy.my_id or not self._policy.allows(peer_id):
            return False
        lift_dial_block(self._host.get_network(), peer_id)
        with trio.move_on_after(self._dial_timeout):
            try:
                await self._host.connect(Libp2pPeerInfo(peer_id, addrs))
                return True
            except NET_ERRORS as exc:
                logger.debug("dial %s failed: %s", peer_id, exc)
            except Exception as exc:  # noqa: BLE001 - library boundary: dial errors vary; counted
                self._counters.handler_error("dial", exc)
        with self._counters.locked() as stats:
            stats.dial_failures += 1
        return False
