"""The py-libp2p version every change in this package was written for, and its check.

The package imports this module before any of py-libp2p's internals, so importing it with
any other version installed raises `Libp2pVersionError` before they load.
"""

from __future__ import annotations

import importlib.metadata

from swarm.core.errors import Libp2pVersionError

PATCHED_VERSION = "0.8.1"


def check_libp2p_version() -> None:
    """Raise `Libp2pVersionError` unless the installed py-libp2p is the one patched here."""
    try:
        installed = importlib.metadata.version("libp2p")
    except importlib.metadata.PackageNotFoundError:
        raise Libp2pVersionError(
            f"py-libp2p is not installed; swarm-node needs libp2p=={PATCHED_VERSION}"
        ) from None
    if installed != PATCHED_VERSION:
        raise Libp2pVersionError(
            f"py-libp2p {installed} is installed, but swarm-node's changes to its internals "
            f"were written for {PATCHED_VERSION}: install libp2p=={PATCHED_VERSION}"
        )


check_libp2p_version()  # before importing any of the internals below
