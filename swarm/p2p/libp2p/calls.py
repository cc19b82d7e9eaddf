"""`NetworkCalls`: the network-thread halves of `Libp2pTransport`'s public calls.

Each runs on the network thread (the transport hands it to `NetworkThread.call` or
`call_sync`), on the parts `HostRuntime` built; before the transport has started each raises
`TransportError`. The outbound streams live here: blob fetches (within a fetch slot of the
peer) and the raw streams of adversary tests, each after making room for the connection and
dialling through a relay where the peer is reached only that way.
"""

from __future__ import annotations

import multiaddr
import trio
from libp2p.abc import INetStream
from libp2p.custom_types import TProtocol
from libp2p.peer.id import ID

from swarm.core.errors import FetchTooSlow, NoFetchSlot, TransportError
from swarm.p2p.libp2p import host as hosting
from swarm.p2p.libp2p.blobs import fetch_blob
from swarm.p2p.libp2p.dcutr import direct_connections, relayed_connections
from swarm.p2p.libp2p.framing import NET_ERRORS, STREAM_IO_TIMEOUT_S, close_quietly
from swarm.p2p.libp2p.runtime import HostRuntime, Network
from swarm.p2p.libp2p.transport_parts import Parts
from swarm.p2p.transport import FetchLimits, PeerInfo, Reachability, Validator

LEARNED_ADDR_TTL_S = 3600  # addresses learned from a peer's view (Transport.learn_peer)


class NetworkCalls:
    """What the public calls do on the network thread."""

    def __init__(self, parts: Parts, runtime: HostRuntime) -> None:
        self._parts = parts
        self._runtime = runtime

    async def subscribe(self, topic: str, validator: Validator | None) -> None:
        await self._runtime.running().gossip.subscribe(topic, validator)

    async def flush(self, timeout: float) -> bool:
        return await self._parts.outbox.flush(self._runtime.running().gossip, timeout)

    async def wait_for_topic_peers(self, topic: str, count: int, timeout: float) -> int:
        return await self._runtime.running().gossip.wait_for_topic_peers(topic, count, timeout)

    def peer_infos(self) -> list[PeerInfo]:
        host = self._runtime.running().host
        return [
            PeerInfo(
                peer_id=peer_id.to_base58(),
                addrs=tuple(str(a) for a in hosting.peer_addrs(host, peer_id)),
            )
            for peer_id in hosting.connected_peers(host)
        ]

    def peer_scores(self) -> dict[str, float]:
        net = self._runtime.running()
        return {
            peer_id.to_base58(): net.gossip.score(peer_id)
            for peer_id in hosting.connected_peers(net.host)
        }

    def connection_kinds(self, peer_id: ID) -> list[str]:
        host = self._runtime.running().host
        relayed = relayed_connections(host, peer_id)
        return ["relayed"] * len(relayed) + ["direct"] * len(direct_connections(host, peer_id))

    async def check_reachability(self, timeout: float) -> Reachability:
        autonat = self._runtime.running().autonat
        with trio.move_on_after(timeout):
            return await autonat.check()
        return autonat.status

    def add_addrs(self, peer_id: ID, addrs: list[multiaddr.Multiaddr]) -> None:
        peerstore = self._runtime.running().host.get_peerstore()
        peerstore.add_addrs(peer_id, addrs, LEARNED_ADDR_TTL_S)

    async def fetch_blob(
        self, peer_id: ID, key: str, timeout: float, limits: FetchLimits | None
    ) -> bytes:
        net = self._runtime.running()
        began = trio.current_time()
        slot_at: float | None = None  # when this fetch got its slot
        with trio.move_on_after(timeout):  # a slot below the peer's limit, within the timeout
            async with self._parts.fetch_slots.slot(peer_id):
                slot_at = trio.current_time()
                await self._reach(net, peer_id, timeout)
                left = max(timeout - (trio.current_time() - began), 0.0)
                return await self._fetch_now(net, peer_id, key, left, limits)
        waited = (slot_at if slot_at is not None else trio.current_time()) - began
        if waited < timeout / 2:  # the peer had most of the time: reaching it, or its answer
            raise FetchTooSlow(f"{peer_id} did not answer a fetch within {timeout} s")
        # most of the time went waiting on this node's own fetches to the peer
        raise NoFetchSlot(f"waited {waited:.1f} of {timeout} s for a fetch slot for {peer_id}")

    async def _fetch_now(
        self, net: Network, peer_id: ID, key: str, timeout: float, limits: FetchLimits | None
    ) -> bytes:
        trimmer = self._parts.trimmer
        if trimmer is not None:
            trimmer.touch(peer_id)
        max_size = self._parts.settings.max_blob_size
        data = await fetch_blob(net.host, peer_id, key, timeout, max_size, limits)
        if trimmer is not None:
            trimmer.touch(peer_id)
        with self._parts.counters.locked() as stats:
            stats.blob_bytes_in += len(data)
        return data

    async def write_raw(self, peer_id: ID, protocol: TProtocol, data: bytes) -> None:
        stream = await self.open_raw(peer_id, protocol)
        try:
            with trio.fail_after(STREAM_IO_TIMEOUT_S):
                await stream.write(data)
        except NET_ERRORS as exc:
            raise TransportError(f"writing to {peer_id} on {protocol} failed: {exc}") from exc
        finally:
            await close_quietly(stream)

    async def open_raw(self, peer_id: ID, protocol: TProtocol) -> INetStream:
        net = self._runtime.running()
        await self._reach(net, peer_id, STREAM_IO_TIMEOUT_S)
        try:
            with trio.fail_after(STREAM_IO_TIMEOUT_S):
                return await net.host.new_stream(peer_id, [protocol])
        except NET_ERRORS as exc:
            raise TransportError(f"opening {protocol} to {peer_id} failed: {exc}") from exc

    async def _reach(self, net: Network, peer_id: ID, within: float) -> None:
        """Before a stream to `peer_id`: at the bound on connections, make room for its dial;
        if it is reached only through a relay, dial it there (for at most `within` s)."""
        if self._parts.trimmer is not None:
            await self._parts.trimmer.make_room(net.host, peer_id, net.busy)
        await net.relaying.connect(peer_id, within)
