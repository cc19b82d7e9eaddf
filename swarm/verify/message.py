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

from swarm.errors import RejectedMessage
from swarm.rollout import RolloutGroup, SignedGroup, decode_group, unpack_message, verify_signed


@dataclass(frozen=True)
class Rejection:
    """One rejected group (or a whole undecodable message), with what is known of it."""

    reason: str
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


def check_message(
    data: bytes, source: str, swarm_id: str, verify_signatures: bool = True
) -> tuple[list[Accepted], list[Rejection]]:
    """Split and check a gossip message. Never raises: every problem becomes a `Rejection`.

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
            group = check_group(signed, source, swarm_id, verify_signatures)
        except RejectedMessage as e:
            rejected.append(Rejection(e.reason, e.detail, source, signed.content_hash, _claimed_sender(signed), signed))
        else:
            accepted.append(Accepted(signed, group, source))
    if rejected and accepted:
        rejected += [
            Rejection("in_rejected_message", "another group of the same message was rejected", source,
                      a.signed.content_hash, a.group.sender, a.signed, a.group)
            for a in accepted
        ]
        accepted = []
    return accepted, rejected


def check_group(signed: SignedGroup, source: str, swarm_id: str, verify_signatures: bool = True) -> RolloutGroup:
    """The cheap checks on one signed group; raises `RejectedMessage` with a reason code."""
    group = verify_signed(signed) if verify_signatures else decode_group(signed.body)
    if group.swarm_id != swarm_id:
        raise RejectedMessage("wrong_swarm", f"group is for swarm {group.swarm_id!r}, not {swarm_id!r}")
    if source and group.sender != source:
        raise RejectedMessage("sender_mismatch", f"signed by {group.sender[:16]}... but published by {source[:16]}...")
    return group


def _claimed_sender(signed: SignedGroup) -> str:
    """The sender field of a group that failed later checks, if its body decodes at all."""
    try:
        return decode_group(signed.body).sender
    except RejectedMessage:
        return ""
