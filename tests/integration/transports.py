"""Libp2p transports started for a test and closed after it, whatever happens."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator

from swarm.p2p.libp2p import Libp2pTransport, TransportSettings


@contextlib.contextmanager
def started_transports(**defaults: object) -> Iterator[Callable[..., Libp2pTransport]]:
    """A `start(**kwargs)` that builds and starts a transport (`defaults`, then `kwargs`:
    `key_pair`, or fields of `TransportSettings`); every transport it started is closed on
    leaving."""
    transports: list[Libp2pTransport] = []

    def start(**kwargs: object) -> Libp2pTransport:
        options = {**defaults, **kwargs}
        key_pair = options.pop("key_pair", None)
        settings = TransportSettings(**options)  # type: ignore[arg-type]
        transport = Libp2pTransport(settings, key_pair=key_pair)
        transports.append(transport)
        transport.start()
        return transport

    try:
        yield start
    finally:
        for transport in transports:
            transport.close()
