"""The ledger: a local SQL record of everything a node did and received.

SQLAlchemy models over SQLite in WAL mode by default (any SQLAlchemy URL works). The node
writes one transaction per round, so a kill at any moment leaves every committed round
intact and no half-written one. Queries are plain functions that take a `Session`.

Resuming from a checkpoint older than the ledger's last round does not delete history: the
rounds after the checkpoint are marked `superseded` (they happened, but their model state was
lost) and the round is run again as a new row.

The modules: `schema` (the tables), `database` (`Ledger`, an open ledger), `queries` (a
node's own history), `peer_history` (bans, counted rejections, received outcomes),
`retention` (size and pruning) and `simulate` (a synthetic ledger pruned as a node would).

Deliberately not here: deciding what to record (the node does) or presenting it (the CLI).
"""

from __future__ import annotations

from swarm.ledger.database import Ledger
from swarm.ledger.peer_history import (
    add_ban,
    add_rejection_counts,
    banned_peers,
    counted_rejections,
    received_outcomes,
    remove_ban,
    unbanned_at,
)
from swarm.ledger.queries import (
    get_meta,
    group_counts,
    group_known,
    last_round,
    latest_evals,
    latest_rounds,
    recent_accepted,
    rejected_rows_since,
    set_meta,
    supersede_after,
    touch_peer,
    update_totals,
)
from swarm.ledger.schema import (
    SCHEMA_VERSION,
    BanRow,
    Base,
    DeltaRow,
    EvalRow,
    GroupRow,
    GroupUseRow,
    Meta,
    PeerRow,
    RejectionCountRow,
    RoundRow,
    UpdateRow,
)

__all__ = [
    "SCHEMA_VERSION",
    "BanRow",
    "Base",
    "DeltaRow",
    "EvalRow",
    "GroupRow",
    "GroupUseRow",
    "Ledger",
    "Meta",
    "PeerRow",
    "RejectionCountRow",
    "RoundRow",
    "UpdateRow",
    "add_ban",
    "add_rejection_counts",
    "banned_peers",
    "counted_rejections",
    "get_meta",
    "group_counts",
    "group_known",
    "last_round",
    "latest_evals",
    "latest_rounds",
    "received_outcomes",
    "recent_accepted",
    "rejected_rows_since",
    "remove_ban",
    "set_meta",
    "supersede_after",
    "touch_peer",
    "unbanned_at",
    "update_totals",
]
