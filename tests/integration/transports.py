"""Libp2p transports started for a test and closed after it, whatever happens."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator

from swarm.p2p.libp2p import Libp2pTransport


@contextlib.contextmanager
def started_transports(**defaults: object) -> Iterator[Callable[..., Libp2pTransport]]:
    """A `start(**kwargs)` that builds and starts a transport (`defaults`, then `kwargs`);
    every transport it started is closed on leaving."""
    transports: list[Libp2pTransport] = []

    def start(**kwargs: object) -> Libp2pTransport:
        transport = Libp2pTransport(**{**defaults, **kwargs})  # type: ignore[arg-type]
        transports.append(transport)
        transport.start()
        return transport

    try:
        yield start
    finally:
        for transport in transports:
            transport.close()
