"""Naming a peer on the command line by less than its whole ID.

Tables shorten peer IDs (`swarm-node peers` shows `…` and the last ten characters); `ban`
and `unban` take the full ID, a unique prefix of one (`12D3KooWAbC`), or the shortened form
as printed (`…XyZ1234567`, a unique suffix), matched against every peer the ledger knows
(heard from, sender of a stored group, banned). An ambiguous or unknown short form is one
line naming the candidates. A full peer ID is taken as it is, known or not, so a peer can
be banned before it is ever heard from.
"""

from __future__ import annotations

from sqlalchemy import select

from swarm.config import PEER_ID_PATTERN
from swarm.errors import SwarmError
from swarm.ledger import BanRow, GroupRow, Ledger, PeerRow

SUFFIX_MARKS = ("…", "...")


def resolve_peer(text: str, known: set[str]) -> str:
    """The one peer ID in `known` that `text` names (pure; see the module's rules)."""
    text = text.strip()
    if PEER_ID_PATTERN.match(text):
        return text
    suffix = text.startswith(SUFFIX_MARKS)
    core = text.lstrip(".…")
    if not core:
        raise SwarmError(
            "give a peer ID, a unique prefix of one, or its short form from 'swarm-node peers'"
        )
    matches = sorted(p for p in known if (p.endswith(core) if suffix else p.startswith(core)))
    if not matches:
        raise SwarmError(
            f"no peer this ledger knows matches {text!r}: give the full peer ID "
            "('swarm-node peers --json' lists them)"
        )
    if len(matches) > 1:
        shown = ", ".join(matches[:3]) + (
            f" ... ({len(matches)} in all)" if len(matches) > 3 else ""
        )
        raise SwarmError(f"{text!r} matches {len(matches)} peers ({shown}): give more characters")
    return matches[0]


def known_peers(url: str) -> set[str]:
    """Every peer ID the ledger at `url` mentions."""
    ledger = Ledger(url, create=False)
    try:
        with ledger.reader() as session:
            found = set(session.scalars(select(PeerRow.peer_id)))
            found |= set(session.scalars(select(BanRow.peer_id)))
            found |= set(session.scalars(select(GroupRow.sender).distinct()))
    finally:
        ledger.close()
    return {p for p in found if p}
