"""Where messages travel: the gossip topics of a swarm and the blob keys served over the
blob stream (the delta exchange's `sync/...`, the pull exchange's `pull/...`)."""

from __future__ import annotations

ANNOUNCEMENTS_KEY = "pull/announcements"  # blob key of a node's latest announcements


def rollout_topic(swarm_id: str) -> str:
    """The gossip topic of a swarm's rollout groups."""
    return f"swarm/{swarm_id}/rollouts/v1"


def delta_topic(swarm_id: str) -> str:
    """The gossip topic of a swarm's delta manifests."""
    return f"swarm/{swarm_id}/deltas/v1"


SYNC_KEY_PREFIX = "sync/"  # every blob key of the delta exchange starts so
PULL_KEY_PREFIX = "pull/"  # and every one of the pull exchange


def index_key(base_hash: str) -> str:
    """Blob key of a trainer's index of served manifests, per base model."""
    return f"sync/{base_hash[:16]}/index"


def payload_key(base_hash: str, kind: str, from_version: int, to_version: int) -> str:
    """Blob key of a delta (`from_version`-`to_version`) or an anchor (at `to_version`)."""
    if kind == "anchor":
        return f"sync/{base_hash[:16]}/anchor/{to_version}"
    return f"sync/{base_hash[:16]}/delta/{from_version}-{to_version}"


def held_key(payload_hash: str) -> str:
    """Blob key under which a follower holding a trainer's delta serves it (by its hash)."""
    return f"sync/held/{payload_hash}"


def have_key(payload_hash: str) -> str:
    """Blob key a trainer serves (one byte) for each payload, so that a follower fetching it
    tells the trainer it now holds that payload (`swarm.sync.holders`)."""
    return f"sync/have/{payload_hash}"


def holders_key(base_hash: str) -> str:
    """Blob key of a trainer's hints of which followers hold its payloads."""
    return f"sync/{base_hash[:16]}/holders"


def group_key(blob_hash: str) -> str:
    """Blob key under which a node serves a signed group: its announced `blob_hash`, the
    SHA-256 of the bytes served (`encode_signed_group`)."""
    return f"pull/group/{blob_hash}"
