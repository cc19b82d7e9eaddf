"""Signing and checking the signed messages of `swarm.wire`: Ed25519 over a domain tag and the body.

    signature = Ed25519(SIGNING_DOMAIN + body)           for a rollout group, by `body.sender`
    signature = Ed25519(MANIFEST_SIGNING_DOMAIN + body)  for a delta manifest, by `body.provider`
    signature = Ed25519(ANNOUNCEMENT_SIGNING_DOMAIN + body)  for a group announcement, by `body.sender`

The signature covers the exact canonical body bytes. The signer's peer ID embeds its
Ed25519 public key, so a receiver checks the signature against the peer ID named in the
body, with no key exchange: a valid signature binds the message to that peer. The domain
tags keep a signature over one kind of message from ever passing for another.

Deliberately not here: the message types and their encoding (`swarm.wire.messages`,
`swarm.wire.codec`), or whether to trust a correctly signed message (`swarm.verify`,
`swarm.sync.rules`).
"""

from __future__ import annotations

from swarm.core.errors import RejectedMessage
from swarm.core.reasons import Reason
from swarm.wire.codec import (
    decode_announcement,
    decode_group,
    decode_manifest,
    encode_announcement,
    encode_group,
    encode_manifest,
)
from swarm.wire.messages import (
    DeltaManifest,
    GroupAnnouncement,
    RolloutGroup,
    SignedAnnouncement,
    SignedGroup,
    SignedManifest,
)

SIGNING_DOMAIN = b"swarm-node/rollout-group/v1\x00"
MANIFEST_SIGNING_DOMAIN = b"swarm-node/delta-manifest/v1\x00"
ANNOUNCEMENT_SIGNING_DOMAIN = b"swarm-node/group-announcement/v1\x00"

# swarm.core.identity is imported in the functions: it pulls in libp2p (about a second to
# import), which a process that only decodes messages does not need.


def sign_group(group: RolloutGroup, key_pair) -> SignedGroup:
    """Encode and sign `group` with the node's libp2p key pair (its peer ID must be the sender)."""
    from swarm.core.identity import peer_id_of, sign

    if peer_id_of(key_pair) != group.sender:
        raise ValueError("a group must be signed by the key of its sender")
    body = encode_group(group)
    return SignedGroup(body=body, signature=sign(key_pair, SIGNING_DOMAIN + body))


def _check_signature(signer: str, domain: bytes, body: bytes, signature: bytes, what: str) -> None:
    """Raise `RejectedMessage(bad_signature)` unless `signature` is `signer`'s over domain + body."""
    from swarm.core.identity import verify

    if not verify(signer, domain + body, signature):
        raise RejectedMessage(
            Reason.BAD_SIGNATURE, f"{what} signature does not verify for {signer[:16]}..."
        )


def check_group_signature(signed: SignedGroup, sender: str) -> None:
    """Raise `RejectedMessage(bad_signature)` unless `signed` is signed by `sender`."""
    _check_signature(sender, SIGNING_DOMAIN, signed.body, signed.signature, "group")


def verify_signed(signed: SignedGroup) -> RolloutGroup:
    """Decode a signed group and check its signature against the sender's peer ID."""
    group = decode_group(signed.body)
    check_group_signature(signed, group.sender)
    return group


def sign_manifest(manifest: DeltaManifest, key_pair) -> SignedManifest:
    """Encode and sign `manifest` with the provider's libp2p key pair."""
    from swarm.core.identity import peer_id_of, sign

    if peer_id_of(key_pair) != manifest.provider:
        raise ValueError("a manifest must be signed by the key of its provider")
    body = encode_manifest(manifest)
    decode_manifest(body)  # refuse to sign what receivers would reject
    return SignedManifest(body=body, signature=sign(key_pair, MANIFEST_SIGNING_DOMAIN + body))


def verify_manifest(signed: SignedManifest) -> DeltaManifest:
    """Decode a signed manifest and check its signature against the provider's peer ID."""
    manifest = decode_manifest(signed.body)
    _check_signature(
        manifest.provider, MANIFEST_SIGNING_DOMAIN, signed.body, signed.signature, "manifest"
    )
    return manifest


def sign_announcement(announcement: GroupAnnouncement, key_pair) -> SignedAnnouncement:
    """Encode and sign `announcement` with the sender's libp2p key pair."""
    from swarm.core.identity import peer_id_of, sign

    if peer_id_of(key_pair) != announcement.sender:
        raise ValueError("an announcement must be signed by the key of its sender")
    body = encode_announcement(announcement)
    return SignedAnnouncement(
        body=body, signature=sign(key_pair, ANNOUNCEMENT_SIGNING_DOMAIN + body)
    )


def verify_announcement(signed: SignedAnnouncement) -> GroupAnnouncement:
    """Decode a signed announcement and check its signature against the sender's peer ID."""
    announcement = decode_announcement(signed.body)
    _check_signature(
        announcement.sender,
        ANNOUNCEMENT_SIGNING_DOMAIN,
        signed.body,
        signed.signature,
        "announcement",
    )
    return announcement
