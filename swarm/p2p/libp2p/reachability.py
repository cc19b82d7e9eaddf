"""Can peers dial this node? AutoNAT v1 (`/libp2p/autonat/1.0.0`), both sides.

A volunteer behind NAT listens on an address nobody outside can reach. Its peers learn
that address from its view entry, fail to dial it and drop it, and it never finds out.
AutoNAT lets it find out: it asks a few connected peers to dial it back.

- **Server** (every node): a peer sends its peer ID and addresses; the node dials them on
  a *new* connection (the library's own service reuses the connection the request came
  on, so it always answers "reachable"), only at the IP the request came from (so it
  cannot be aimed at a third party), never for a request that came through a relay, at
  most one dial-back per peer a minute and `MAX_DIAL_BACKS` at once (each request is
  billed to the peer's cost budget; a malformed one is refused and recorded). The new
  connection is closed at once.
- **Client**: every `interval` s it asks up to `SERVERS` connected peers (not its relays)
  to dial back its direct TCP addresses. `CONFIRMATIONS` agreeing answers decide
  (`verdict`): `PUBLIC` or `PRIVATE`. A peer that does not speak the protocol, or gives no
  answer, does not count.

A `PRIVATE` node stops handing out its direct addresses (`listen_addrs()` keeps its circuit
addresses, through `p2p.relays`), so peers neither dial in vain nor keep it in their
history samples without a way to reach it, and says once, in the log, that it can be
pulled from only through a relay.

Hole punching (DCUtR, `holepunch.py`) then moves a peer that reached such a node through a
relay onto a direct connection where both routers allow it (docs/LIBP2P.md).
"""

from __future__ import annotations

import ipaddress
import logging
import random
import time
from collections.abc import Callable, Mapping, Sequence

import multiaddr
import trio
from google.protobuf.message import DecodeError
from libp2p.abc import IHost, INetStream
from libp2p.custom_types import TProtocol
from libp2p.host.autonat.pb.autonat_pb2 import Message
from libp2p.peer.id import ID
from libp2p.utils.varint import encode_varint_prefixed

from swarm.p2p.libp2p.framing import (
    NET_ERRORS,
    StreamProtocolError,
    close_quietly,
    read_exactly,
    read_uvarint,
)
from swarm.p2p.libp2p.host import AccessPolicy, connected_peers, is_dialable_tcp
from swarm.p2p.libp2p.peer_costs import Cost
from swarm.p2p.libp2p.stats import Counters
from swarm.p2p.transport import Reachability, RefusalReason

logger = logging.getLogger(__name__)

AUTONAT_PROTOCOL = TProtocol("/libp2p/autonat/1.0.0")
MAX_MESSAGE = 4096  # a peer ID and a few addresses
MAX_ADDRS = 8  # addresses of one request dialled back at most
CONFIRMATIONS = 3  # agreeing answers that decide
SERVERS = 4  # peers asked per check
DIAL_BACK_TIMEOUT_S = 5.0
PER_PEER_INTERVAL_S = 60.0  # one dial-back per peer this often
MAX_DIAL_BACKS = 4  # dial-backs running at once
CHECK_INTERVAL_S = 300.0
FIRST_CHECK_S = 30.0

Refuse = Callable[[ID, RefusalReason, str, None], None]


# ------------------------------------------------------------------ pure rules


def verdict(answers: Mapping[str, bool], needed: int = CONFIRMATIONS) -> Reachability:
    """From each server's latest answer (True: it dialled us back): `needed` agreeing
    answers decide; with both sides there, the larger one does; otherwise unknown."""
    reached = sum(1 for ok in answers.values() if ok)
    failed = len(answers) - reached
    if reached >= needed and reached > failed:
        return Reachability.PUBLIC
    if failed >= needed and failed > reached:
        return Reachability.PRIVATE
    return Reachability.UNKNOWN


def normal_ip(ip: str) -> str | None:
    try:
        address = ipaddress.ip_address(ip)
    except ValueError:
        return None
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        address = address.ipv4_mapped
    return str(address)


def dial_back_addrs(raw: Sequence[bytes], observed_ip: str | None) -> list[multiaddr.Multiaddr]:
    """The addresses of a request worth dialling: direct TCP, at the IP the request came
    from, at most `MAX_ADDRS` (anything else, or unparsable, is skipped). A node listening
    on all interfaces (0.0.0.0, ::) does not know its outside IP: its port is dialled at the
    IP the request came from."""
    if observed_ip is None:
        return []
    keep = []
    for data in raw[: 4 * MAX_ADDRS]:
        try:  # a multiaddr parses lazily: anything about it may raise
            addr = multiaddr.Multiaddr(bytes(data))
            names = [p.name for p in addr.protocols()]
            if not is_dialable_tcp(addr):
                continue
            ip = addr.value_for_protocol(names[0])
        except (ValueError, TypeError, multiaddr.exceptions.Error):
            continue
        if normal_ip(str(ip)) in ("0.0.0.0", "::"):  # "all interfaces": the one we saw
            port = addr.value_for_protocol("tcp")
            family = "ip6" if ":" in observed_ip else "ip4"
            addr = multiaddr.Multiaddr(f"/{family}/{observed_ip}/tcp/{port}")
            ip = observed_ip
        if normal_ip(str(ip)) == observed_ip:
            keep.append(addr)
    return keep[:MAX_ADDRS]


def response(status: int, text: str = "", addr: bytes | None = None) -> bytes:
    message = Message()
    message.type = Message.DIAL_RESPONSE
    message.dialResponse.status = status  # type: ignore[assignment]
    if text:
        message.dialResponse.statusText = text
    if addr is not None:
        message.dialResponse.addr = addr
    return encode_varint_prefixed(message.SerializeToString())


# ------------------------------------------------------------------ the service


class AutoNat:
    """Both sides of AutoNAT on one host (network thread); `status` may be read anywhere."""

    def __init__(
        self,
        host: IHost,
        policy: AccessPolicy,
        counters: Counters,
        *,
        own_addrs: Callable[[], list[str]],
        excluded: Callable[[ID], bool],
        dial_timeout: float = DIAL_BACK_TIMEOUT_S,
        interval: float = CHECK_INTERVAL_S,
        first_check: float = FIRST_CHECK_S,
    ) -> None:
        self._host = host
        self._policy = policy
        self._counters = counters
        self._own_addrs = own_addrs  # our direct TCP addresses (what peers would dial)
        self._excluded = excluded  # peers not to ask (our relays)
        self._dial_timeout = min(dial_timeout, DIAL_BACK_TIMEOUT_S)
        self._interval = interval
        self._first_check = first_check
        self._refuse: Refuse | None = None
        self._last_served: dict[ID, float] = {}
        self._running = 0
        self.answers: dict[str, bool] = {}
        self.status = Reachability.UNKNOWN

    def register(self, refuse: Refuse) -> None:
        self._refuse = refuse
        self._host.set_stream_handler(AUTONAT_PROTOCOL, self._handle)

    # -------------------------------------------------------------- server

    async def _handle(self, stream: INetStream) -> None:
        peer_id = stream.muxed_conn.peer_id
        self._policy.charge(peer_id, Cost.STREAM)
        try:
            if not self._policy.allows(peer_id):
                return
            with trio.fail_after(DIAL_BACK_TIMEOUT_S):
                request = await self._read_request(stream, peer_id)
            if request is None:
                return
            answer = await self._answer(stream, peer_id, request)
            with trio.fail_after(DIAL_BACK_TIMEOUT_S):
                await stream.write(answer)
        except NET_ERRORS as exc:
            logger.debug("AutoNAT request from %s ended: %s", peer_id, exc)
        finally:
            await close_quietly(stream)

    async def _read_request(self, stream: INetStream, peer_id: ID) -> Message | None:
        try:
            size = await read_uvarint(stream)
            if size is None or size > MAX_MESSAGE:
                raise StreamProtocolError(f"a request of {size} bytes")
            message = Message()
            message.ParseFromString(await read_exactly(stream, size))
            if message.type != Message.DIAL or message.dial.peer.id != peer_id.to_bytes():
                raise StreamProtocolError("not a dial request for the peer that sent it")
        except (StreamProtocolError, DecodeError) as exc:
            if self._refuse is not None:
                self._refuse(peer_id, RefusalReason.BAD_AUTONAT_REQUEST, str(exc)[:200], None)
            await stream.write(response(Message.E_BAD_REQUEST, "malformed request"))
            return None
        return message

    async def _answer(self, stream: INetStream, peer_id: ID, request: Message) -> bytes:
        now = time.monotonic()
        if _relayed(stream):
            return response(Message.E_DIAL_REFUSED, "request came through a relay")
        if now - self._last_served.get(peer_id, -PER_PEER_INTERVAL_S) < PER_PEER_INTERVAL_S:
            return response(Message.E_DIAL_REFUSED, "asked too often")
        if self._running >= MAX_DIAL_BACKS:
            return response(Message.E_DIAL_REFUSED, "busy")
        addrs = dial_back_addrs(list(request.dial.peer.addrs), _observed_ip(stream))
        if not addrs:
            return response(Message.E_DIAL_REFUSED, "no address at the IP the request came from")
        self._last_served[peer_id] = now
        if len(self._last_served) > 4096:
            self._last_served = {p: t for p, t in self._last_served.items() if now - t < 60}
        self._running += 1
        try:
            for addr in addrs:
                if await self._dial_back(peer_id, addr):
                    return response(Message.OK, addr=addr.to_bytes())
        finally:
            self._running -= 1
        return response(Message.E_DIAL_ERROR, "no address answered")

    async def _dial_back(self, peer_id: ID, addr: multiaddr.Multiaddr) -> bool:
        """A new connection to `peer_id` at `addr` (handshake included), closed at once."""
        with self._counters.locked() as stats:
            stats.dial_backs += 1
        with trio.move_on_after(self._dial_timeout):
            try:
                conn = await self._host.get_network().dial_addr(addr, peer_id)
            except NET_ERRORS as exc:
                logger.debug("dial-back to %s at %s failed: %s", peer_id, addr, exc)
                return False
            with trio.CancelScope(shield=True), trio.move_on_after(1.0):
                try:
                    await conn.close()
                except NET_ERRORS:
                    pass
            return True
        return False

    # -------------------------------------------------------------- client

    async def run(self) -> None:
        """Check our reachability now and then, forever."""
        await trio.sleep(self._first_check)
        while True:
            await self.check()
            await trio.sleep(self._interval * random.uniform(0.9, 1.1))

    async def check(self) -> Reachability:
        """Ask up to `SERVERS` connected peers to dial us back; update `status`."""
        addrs = [a.rsplit("/p2p/", 1)[0] for a in self._own_addrs()]
        raw = [multiaddr.Multiaddr(a).to_bytes() for a in addrs][:MAX_ADDRS]
        peers = [p for p in connected_peers(self._host) if not self._excluded(p)]
        if not peers:
            return self.status
        if not raw:  # nothing to dial: nobody can reach us directly
            self.answers = {p.to_base58(): False for p in peers[:SERVERS]}
        else:
            async with trio.open_nursery() as nursery:
                for peer in random.sample(peers, min(SERVERS, len(peers))):
                    nursery.start_soon(self._ask, peer, raw)
        if len(self.answers) > 4 * SERVERS:  # the latest answers count
            self.answers = dict(list(self.answers.items())[-4 * SERVERS :])
        status = verdict(self.answers)
        if status != self.status:
            self._announce(status)
        self.status = status
        return status

    async def _ask(self, peer: ID, raw: list[bytes]) -> None:
        request = Message()
        request.type = Message.DIAL
        request.dial.peer.id = self._host.get_id().to_bytes()
        request.dial.peer.addrs.extend(raw)
        stream = None
        try:
            with trio.fail_after(3 * DIAL_BACK_TIMEOUT_S):
                stream = await self._host.new_stream(peer, [AUTONAT_PROTOCOL])
                await stream.write(encode_varint_prefixed(request.SerializeToString()))
                size = await read_uvarint(stream)
                if size is None or size > MAX_MESSAGE:
                    return
                answer = Message()
                answer.ParseFromString(await read_exactly(stream, size))
        except (*NET_ERRORS, StreamProtocolError, DecodeError) as exc:
            logger.debug("AutoNAT: no answer from %s: %s", peer, exc)
            return
        finally:
            if stream is not None:
                await close_quietly(stream)
        status = answer.dialResponse.status
        if status in (Message.OK, Message.E_DIAL_ERROR):  # a refusal says nothing about us
            self.answers.pop(peer.to_base58(), None)
            self.answers[peer.to_base58()] = status == Message.OK

    def _announce(self, status: Reachability) -> None:
        failed = sum(1 for ok in self.answers.values() if not ok)
        if status == Reachability.PRIVATE:
            logger.warning(
                "peers cannot dial this node (%d of %d failed to dial it back): it still "
                "pulls, but is pulled from only through a relay (p2p.relays)",
                failed,
                len(self.answers),
            )
        else:
            logger.info("reachability: %s (%d answers)", status.value, len(self.answers))


def _observed_ip(stream: INetStream) -> str | None:
    try:
        remote = stream.get_remote_address()
    except NET_ERRORS:
        return None
    return normal_ip(str(remote[0])) if remote else None


def _relayed(stream: INetStream) -> bool:
    """Whether the stream's connection runs through a relay; when unknown, treated as
    relayed (no dial-back without an IP the request is known to come from)."""
    get_addrs = getattr(stream.muxed_conn, "get_transport_addresses", None)
    if not callable(get_addrs):
        return True
    try:
        addrs = get_addrs()
    except NET_ERRORS:
        return True
    return not addrs or any("p2p-circuit" in str(a) for a in addrs)
