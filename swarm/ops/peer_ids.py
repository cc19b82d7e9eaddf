"""Naming a peer on the command line by less than its whole ID.

Tables shorten peer IDs (`swarm-node peers` shows `…` and the last ten characters); `ban`
and `unban` take the full ID, a unique prefix of one (`12D3KooWAbC`), or the shortened form
as printed, with or without its mark (`…XyZ1234567`, `...XyZ1234567` or `XyZ1234567`: a
unique suffix), matched against every peer the ledger knows (heard from, sender of a stored
group, banned). Without a mark, the text may be a prefix or a suffix; it must name one peer
either way. An ambiguous or unknown short form is one line naming the candidates. A prefix
must go at least `MIN_CHARS` characters beyond `12D3KooW`, which every Ed25519 peer ID
starts with (`12D3` names every peer, however few the ledger knows); a suffix must be
`MIN_CHARS` long. A full peer ID is taken as it is, known or not, so a peer can be banned
before it is ever heard from.
"""

from __future__ import annotations

from sqlalchemy import select

from swarm.core.errors import SwarmError
from swarm.ledger import BanRow, GroupRow, Ledger, PeerRow
from swarm.p2p.addresses import PEER_ID_PATTERN

SUFFIX_MARKS = ("…", "...")
COMMON_PREFIX = "12D3KooW"  # every Ed25519 peer ID (identity multihash, base58btc) starts so
MIN_CHARS = 3  # characters of a short form beyond what every peer ID shares


def resolve_peer(text: str, known: set[str]) -> str:
    """The one peer ID in `known` that `text` names (pure; see the module's rules)."""
    text = text.strip()
    if PEER_ID_PATTERN.match(text):
        return text
    marked = text.startswith(SUFFIX_MARKS)
    core = text.lstrip(".…")
    if not core:
        raise SwarmError(
            "give a peer ID, a unique prefix of one, or its short form from 'swarm-node peers'"
        )
    as_prefix = not marked and _prefix_usable(core)
    if len(core) < MIN_CHARS or not (marked or as_prefix or not _looks_like_prefix(core)):
        raise SwarmError(
            f"{text!r} is too short to name one peer ({COMMON_PREFIX} starts every peer ID): "
            f"give {MIN_CHARS} or more characters beyond it, or the short form "
            "'swarm-node peers' prints"
        )
    matches = sorted(p for p in known if p.endswith(core) or (as_prefix and p.startswith(core)))
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


def _looks_like_prefix(core: str) -> bool:
    """Whether `core` begins as every peer ID does (all of `12D3KooW`, or a start of it)."""
    return core.startswith(COMMON_PREFIX) or COMMON_PREFIX.startswith(core)


def _prefix_usable(core: str) -> bool:
    """A prefix names a peer only if it goes `MIN_CHARS` characters beyond `12D3KooW`."""
    return core.startswith(COMMON_PREFIX) and len(core) >= len(COMMON_PREFIX) + MIN_CHARS


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
