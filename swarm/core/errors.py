"""The one exception tree of swarm-node.

Library exceptions (torch, transformers, SQLAlchemy, libp2p, msgpack) are translated into
these at the boundary where they occur, so callers and the CLI handle one family. The CLI
prints a `SwarmError` as a one-line message, never as a traceback: these are the errors a
user can act on. Anything else escaping is a bug and keeps its traceback.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from swarm.core.reasons import Reason


class SwarmError(Exception):
    """Base of every error swarm-node raises on purpose."""


class ConfigError(SwarmError):
    """A config file, key, type or value is wrong. The message names the key and the file."""


class SwarmKeyError(ConfigError):
    """A private-network key (swarm.key) file is unreadable or not a 32-byte key."""


class TaskError(SwarmError):
    """A task spec cannot be rebuilt (unknown dataset, bad dataset config, bad index)."""


class ModelError(SwarmError):
    """A model or tokenizer cannot be loaded or built."""


class GeneratorError(SwarmError):
    """A generator backend is unavailable (vLLM or CUDA missing) or failed."""


class CheckpointError(SwarmError):
    """A checkpoint is missing, corrupt or does not match the running model."""


class LedgerError(SwarmError):
    """The ledger database cannot be opened, migrated or written."""


class TransportError(SwarmError):
    """The peer-to-peer transport failed (listen, dial, publish, stream)."""


class FetchTooSlow(TransportError):
    """A blob fetch ran past its deadline or fell below its minimum transfer rate."""


class NoFetchSlot(FetchTooSlow):
    """A blob fetch waited its whole time for one of this node's own slots for the peer
    (its other fetches to that peer held them): the wait was this node's, not the peer's."""


class Libp2pVersionError(TransportError):
    """The installed py-libp2p is not the version whose internals the transport patches."""


class RejectedMessage(SwarmError):
    """A message from a peer was rejected. `reason` is a stable code, stored in the ledger."""

    def __init__(self, reason: Reason, detail: str = "") -> None:
        super().__init__(f"{reason}: {detail}" if detail else reason)
        self.reason = reason
        self.detail = detail


class VerifyWorkerError(SwarmError):
    """The verification worker (`swarm.verify.rescore_worker`) cannot start or run at all."""


class RunFolderBusy(SwarmError):
    """Another process holds a node's run folder (two nodes on one folder corrupt its rounds)."""
