"""The host's changes: Identify's observed addresses kept but never advertised, the relay's
stream handlers guarded, and "protocol not supported" left to the caller.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

import trio
from libp2p.abc import IHost, INetStream
from libp2p.peer.id import ID

from swarm.p2p.libp2p.framing import (
    NET_ERRORS,
)

logger = logging.getLogger(__name__)


def keep_observed_ips(host: object, recorder: object) -> None:
    """Record Identify's observed addresses into `recorder` (`holepunch.ObservedIps`)
    without advertising them.

    The host has an observed-address manager only with Identify's address discovery on,
    and then adds its confirmed addresses to those it advertises: the observed port of an
    outbound connection is an ephemeral one nobody listens on (pitfall 13). Hole punching
    needs only the outside IP. The host calls the manager's `record_observation`,
    `remove_conn`, `addrs` and `get_nat_type`; the recorder's `addrs()` is always empty.
    """
    host._observed_addr_manager = recorder  # type: ignore[attr-defined]  # a patch


def guard_relay_streams(
    host: IHost, protocol: object, *, hop: bool, admit: Callable[[ID], bool]
) -> None:
    """Put `admit(peer)` (bill the stream, check the allow-list and bans) in front of the
    circuit relay's stream handlers: hop (a relay's, only with `hop`) and stop.

    Fixes: `CircuitV2Protocol.run` registers its own handlers, so a peer's reservation and
    circuit requests cost it nothing in its budget (`peer_costs`), and a peer banned while
    its connection lives still reached them. A stream `admit` refuses is reset unread.
    """
    from libp2p.relay.circuit_v2.protocol import PROTOCOL_ID, STOP_PROTOCOL_ID

    def guarded(handler: Callable) -> Callable:
        async def handle(stream: INetStream) -> None:
            if admit(stream.muxed_conn.peer_id):
                await handler(stream)
                return
            with trio.CancelScope(shield=True), trio.move_on_after(1.0):
                try:
                    await stream.reset()
                except (*NET_ERRORS, trio.ClosedResourceError):
                    pass

        return handle

    if hop:
        host.set_stream_handler(PROTOCOL_ID, guarded(protocol._handle_hop_stream))  # type: ignore[attr-defined]
    host.set_stream_handler(STOP_PROTOCOL_ID, guarded(protocol._handle_stop_stream))  # type: ignore[attr-defined]


class _ProtocolNotSupportedFilter(logging.Filter):
    """Drops basic_host's error report of a stream refused with "protocol not supported"."""

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        return not (message.startswith("Failed to open stream") and "not supported" in message)


def quiet_protocol_not_supported() -> None:
    """Stop logging a peer's "protocol not supported" answer as a 7-line error.

    Fixes: `BasicHost.new_stream` logs every failed negotiation at ERROR level over seven
    lines, then raises. A peer that does not speak one of our protocols (any other libp2p
    implementation and our own peer exchange, say) is normal; the caller that asked
    decides what to say. Other failures to open a stream are still logged.
    """
    host_logger = logging.getLogger("libp2p.host.basic_host")
    if not any(isinstance(f, _ProtocolNotSupportedFilter) for f in host_logger.filters):
        host_logger.addFilter(_ProtocolNotSupportedFilter())


def is_protocol_not_supported(exc: BaseException) -> bool:
    """Whether a failed stream open means "the peer does not speak that protocol"."""
    seen: BaseException | None = exc
    while seen is not None:
        if "not supported" in str(seen):
            return True
        seen = seen.__cause__ or seen.__context__
    return False
