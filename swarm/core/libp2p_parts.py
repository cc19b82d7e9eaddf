"""Parts of py-libp2p 0.8.1 that swarm-node never uses, kept from being imported.

`import libp2p` imports modules for features a node turns off: AutoTLS certificates (its
ACME and broker clients pull in httpx, requests and rich), mDNS discovery (zeroconf), and
the resource manager's Prometheus exporter (prometheus_client). Together about 16 MB of
resident memory and 0.2-0.5 s of import time in every process that signs or sends.

`skip_unused_parts()` puts a placeholder module under each of those names before libp2p is
first imported. A placeholder hands out a class for any name asked of it, so libp2p's
`from ... import X` lines still work; making an instance of one raises `TransportError`,
which is what a node would see if a future change turned one of these features on. It
does nothing once libp2p is imported (the real modules are then already loaded).

Called at the top of every swarm module that imports libp2p first (`swarm.core.identity`,
`swarm.p2p.libp2p`); `docs/LIBP2P.md` lists it with the other changes to py-libp2p.
"""

from __future__ import annotations

import sys
import types

from swarm.core.errors import TransportError

UNUSED_MODULES = (
    "libp2p.security.tls.autotls.acme",  # AutoTLS: off (host.build_host)
    "libp2p.security.tls.autotls.broker",
    "libp2p.discovery.mdns",  # mDNS: enable_mDNS=False (docs/LIBP2P.md, pitfall 11)
    "libp2p.discovery.mdns.mdns",
    "libp2p.rcmgr.prometheus_exporter",  # the resource manager's default has no exporter
)


class UnusedPart(types.ModuleType):
    """A placeholder module: any name is a class that refuses to be instantiated."""

    def __getattr__(self, name: str):
        if name.startswith("__"):
            raise AttributeError(name)
        module = self.__name__

        def refuse(*args, **kwargs):
            raise TransportError(f"{module}.{name} is not loaded: swarm-node does not use it")

        return type(name, (), {"__new__": refuse})


def skip_unused_parts() -> None:
    """Install the placeholders, unless libp2p is already imported (then nothing changes)."""
    if "libp2p" in sys.modules:
        return
    for name in UNUSED_MODULES:
        sys.modules.setdefault(name, UnusedPart(name))


def skipped() -> list[str]:
    """The unused parts currently replaced by placeholders in this process."""
    return [name for name in UNUSED_MODULES if isinstance(sys.modules.get(name), UnusedPart)]
