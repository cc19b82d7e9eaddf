"""Cheap checks on an inbound gossip message, for the transport's validator.

`check_message` is pure: bytes and their libp2p source in, accepted groups and rejections
out. It does what can be done in microseconds per group, before a message is queued or
forwarded: size, msgpack envelope, schema and field bounds, swarm id, the Ed25519
signature by the claimed sender, and that the claimed sender is the libp2p source of the
message. A message with any bad group is rejected whole (an honest node never signs a
bad group); its other groups are recorded as `in_rejected_message` so nothing disappears
silently.

Deliberately not here: checks that need state (duplicates, replayed nonces, rate limits,
bans) or compute (rebuilding tasks, re-scoring): `swarm.verify.gate.Verifier` runs these
after this, the stateful ones in the validator and the expensive ones in the round loop.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

from swarm.core.errors import RejectedMessage
from swarm.core.reasons import Reason
from swarm.wire import RolloutGroup, SignedGroup, decode_group, unpack_message
from swarm.wire.signing import check_group_signature


@dataclass(frozen=True)
class Rejection:
    """One rejected group (or a whole undecodable message), with what is known of it."""

    reason: Reason
    detail: str
    source: str  # libp2p source peer of the message
    content_hash: str  # of the group body, or of the whole message if it never decoded
    sender: str = ""  # claimed sender, once known
    signed: SignedGroup | None = None
    group: RolloutGroup | None = None


@dataclass(frozen=True)
class Accepted:
    """A group that passed the cheap checks."""

    signed: SignedGroup
    group: RolloutGroup
    source: str

    def rejected(self, reason: Reason, detail: str) -> Rejection:
        """This group refused by a later check, with all that is known of it."""
        return Rejection(
            reason,
            detail,
            self.source,
            self.signed.content_hash,
            self.group.sender,
            self.signed,
            self.group,
        )


def check_message(
    data: bytes, source: str, swarm_id: str, verify_signatures: bool = True
) -> tuple[list[Accepted], list[Rejection]]:
    """Split and check a gossip message, decoding each group once. Never raises: every
    problem becomes a `Rejection`.

    `verify_signatures=False` only for bytes this process already checked (the inbox holds
    messages the gossip validator passed); it skips the Ed25519 check, nothing else.
    """
    try:
        signed_groups = unpack_message(data)
    except RejectedMessage as e:
        return [], [Rejection(e.reason, e.detail, source, hashlib.sha256(data).hexdigest())]
    accepted: list[Accepted] = []
    rejected: list[Rejection] = []
    for signed in signed_groups:
        try:
            group = decode_group(signed.body)
        except RejectedMessage as e:
            rejected.append(Rejection(e.reason, e.detail, source, signed.content_hash, "", signed))
            continue
        try:
            check_group(signed, group, source, swarm_id, verify_signatures)
        except RejectedMessage as e:
            rejected.append(
                Rejection(e.reason, e.detail, source, signed.content_hash, group.sender, signed)
            )
        else:
            accepted.append(Accepted(signed, group, source))
    if rejected and accepted:
        rejected += collateral(accepted)
        accepted = []
    return accepted, rejected


def collateral(accepted: list[Accepted]) -> list[Rejection]:
    """The good groups of a message that is refused for another of its groups."""
    return [
        Rejection(
            Reason.IN_REJECTED_MESSAGE,
            "another group of the same message was rejected",
            a.source,
            a.signed.content_hash,
            a.group.sender,
            a.signed,
            a.group,
        )
        for a in accepted
    ]


def check_group(
    signed: SignedGroup,
    group: RolloutGroup,
    source: str,
    swarm_id: str,
    verify_signatures: bool = True,
) -> None:
    """The cheap checks on one decoded group; raises `RejectedMessage` with its reason."""
    if verify_signatures:
        check_group_signature(signed, group.sender)
    if group.swarm_id != swarm_id:
        raise RejectedMessage(
            Reason.WRONG_SWARM, f"group is for swarm {group.swarm_id!r}, not {swarm_id!r}"
        )
    if source and group.sender != source:
        raise RejectedMessage(
            Reason.SENDER_MISMATCH,
            f"signed by {group.sender[:16]}... but published by {source[:16]}...",
        )
