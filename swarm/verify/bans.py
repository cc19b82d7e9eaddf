"""Banning and unbanning peers by hand: what `swarm-node ban` and `unban` do.

A ban is a row in the node's ledger (`bans` table, source "user"); the running node
re-reads the table every round, so a ban or unban takes effect within one round without a
restart. Automatic bans (source "auto") come from the reputation score and are lifted the
same way.

Deliberately not here: deciding to ban (`swarm.verify.reputation`) or the CLI parsing.
"""

from __future__ import annotations

import time

from swarm.core.errors import SwarmError
from swarm.core.identity import IdentityError, public_key_from_peer_id
from swarm.ledger import Ledger, add_ban, remove_ban


def check_peer_id(peer_id: str) -> str:
    """`peer_id` if it is a canonical Ed25519 peer ID (12D3KooW...); else one clear error."""
    try:
        public_key_from_peer_id(peer_id)
    except IdentityError:
        raise SwarmError(
            f"{peer_id!r} is not a peer ID (expected 12D3KooW... as `swarm-node init` prints)"
        ) from None
    return peer_id


def ban(ledger_url: str, peer_id: str, reason: str = "", now: float | None = None) -> str:
    """Ban `peer_id` in the ledger at `ledger_url`; returns a one-line report."""
    check_peer_id(peer_id)
    ledger = Ledger(ledger_url)
    try:
        with ledger.transaction() as session:
            added = add_ban(
                session,
                peer_id,
                "user",
                reason or "banned by the user",
                time.time() if now is None else now,
            )
    finally:
        ledger.close()
    return f"banned {peer_id}" if added else f"{peer_id} was already banned"


def unban(ledger_url: str, peer_id: str) -> str:
    """Lift a ban (by the user or automatic); returns a one-line report."""
    check_peer_id(peer_id)
    ledger = Ledger(ledger_url)
    try:
        with ledger.transaction() as session:
            row = remove_ban(session, peer_id)
    finally:
        ledger.close()
    if row is None:
        return f"{peer_id} was not banned"
    return f"unbanned {peer_id} ({ban_origin(row.source, row.reason)})"


def ban_origin(source: str, reason: str) -> str:
    """How a ban came to be, in words: who set it, and the reason when it adds something."""
    who = "banned automatically" if source == "auto" else "banned by the user"
    return who if not reason or reason == who else f"{who}: {reason}"
