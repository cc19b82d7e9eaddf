"""Every rejection reason and ledger status, as enums: the one list of these codes.

A `Reason` is why a peer's message (a rollout group, a delta manifest or its payload) was
refused. Its value is the short stable code the ledger stores and the reports count, and
each member carries what the verifier needs to know about it:

- `weight`: how surely the rejection means bad faith, as a reputation penalty per group
  (`swarm.verify.reputation`). 1.0 is a hard failure that can lead to a ban; below 1 a
  soft signal that only throttles (honest nodes produce some: a stale group over a slow
  network, a spot check under weights that drifted); 0 counts nothing (collateral
  rejections, duplicates the network delivered twice).
- `unsigned`: the rejection comes before the signature is known to be good, so the claimed
  sender proves nothing and only the transport-authenticated source is blamed.
- `proof`: the rejection proves bad faith by itself (no honest peer, however slow or
  misconfigured, produces it): one bans the peer at once (`swarm.verify.reputation`).

`Status` is the outcome column of the ledger's `groups` and `deltas` tables and `Direction`
their direction column. All three are `StrEnum`s: a member is its string value, so the
ledger stores exactly the codes it always stored, and rows read back compare equal.

Deliberately not here: deciding to reject (`swarm.verify.rules`, `swarm.wire`, ...) or
scoring peers (`swarm.verify.reputation`).
"""

from __future__ import annotations

import enum


class Reason(enum.StrEnum):
    """Why a message was refused: a stable code, its reputation weight, whether it is
    unsigned, whether it is proof of bad faith."""

    weight: float
    unsigned: bool
    proof: bool

    def __new__(
        cls, code: str, weight: float = 1.0, unsigned: bool = False, proof: bool = False
    ) -> Reason:
        member = str.__new__(cls, code)
        member._value_ = code
        member.weight = weight
        member.unsigned = unsigned
        member.proof = proof
        return member

    # Wire decoding and the signature (`swarm.wire`, `swarm.wire.signing`): before the signature
    # is known to be good.
    OVERSIZE = "oversize", 1.0, True
    UNDECODABLE = "undecodable", 1.0, True
    UNKNOWN_SCHEMA = "unknown_schema", 1.0, True
    MALFORMED = "malformed", 1.0, True
    BAD_REWARD = "bad_reward", 1.0, True  # a claimed reward that is not a finite number in bounds
    NON_CANONICAL = "non_canonical", 1.0, True
    BAD_SIGNATURE = "bad_signature", 1.0, True
    # Cheap checks on a signed group (`swarm.verify.message`, `swarm.verify.gate`).
    WRONG_SWARM = "wrong_swarm"
    SENDER_MISMATCH = "sender_mismatch"
    IN_REJECTED_MESSAGE = "in_rejected_message", 0.0  # collateral: the bad group is counted
    NOT_ALLOWED = "not_allowed", 0.0
    BANNED = "banned", 0.0
    DUPLICATE = "duplicate", 0.0  # gossip may deliver twice; replays are also costless to us
    REPLAYED_NONCE = "replayed_nonce"
    STALE = "stale", 0.25
    FROM_FUTURE = "from_future", 0.25
    STALE_VERSION = "stale_version", 0.25
    RATE_LIMITED = "rate_limited", 0.2
    # Expensive checks (`swarm.verify.rescore`, `swarm.verify.rules`, `swarm.verify.spotcheck`).
    COPYCAT = "copycat", 0.5  # soft: two nodes sharing a task seed can meet honestly
    BAD_TASK = "bad_task"
    UNLISTED_TASK = "unlisted_task", 0.5  # soft: an honest peer may practise another mix
    QUESTION_MISMATCH = "question_mismatch"
    REWARD_MISMATCH = "reward_mismatch"
    IMPLAUSIBLE_TOKENS = "implausible_tokens", 0.5  # soft: weights at one version may differ
    # The pull exchange (`swarm.verify.announcements`, `swarm.exchange.pull`).
    FOREIGN_TASK = "foreign_task"  # an announced task from another sender's task stream
    ANNOUNCEMENT_MISMATCH = "announcement_mismatch"  # the pulled group is not the one announced
    PULL_FAILED = "pull_failed", 0.2  # soft: an announced group its sender did not serve
    NOT_SERVED = "not_served"  # the same, past `pull.unserved_ban_after` in a row: towards a ban
    # Served under a group's key, bytes of the announced size that do not hash to it, or the
    # sender's own group at another size than it signed: proof (an honest peer serves under a
    # content key only bytes it hashed), so the server is banned at once.
    WRONG_BYTES = "wrong_bytes", 1.0, False, True
    # Following a trainer's deltas (`swarm.sync.rules`); recorded in the ledger, not scored.
    NOT_FOLLOWED = "not_followed"
    WRONG_BASE = "wrong_base"
    FETCH_FAILED = "fetch_failed"
    BAD_SIZE = "bad_size"
    BAD_HASH = "bad_hash"
    MANIFEST_MISMATCH = "manifest_mismatch"
    APPLY_FAILED = "apply_failed"
    FETCH_TOO_SLOW = "fetch_too_slow"  # past its deadline, or below the minimum rate
    WRONG_TENSORS = "wrong_tensors"  # a payload for other tensor names, shapes or dtypes
    NON_FINITE = "non_finite"  # a payload that would write NaN or infinite weights
    BROKEN_MODEL = "broken_model"  # applied, the model's forward pass gave non-finite logits
    # Re-verifying stored groups offline (`swarm.ops.replay`): what the ledger itself got wrong.
    # Rows without bytes cannot be re-verified, and are not failures: replay counts them apart.
    BODY_PRUNED = "body_pruned"  # a sent or accepted group's bytes, dropped by ledger retention
    NEVER_STORED = "never_stored"  # refused before its bytes were fetched or decoded: none kept
    HASH_MISMATCH = "hash_mismatch"  # the stored body does not hash to its recorded content hash
    # A code this version does not know, read back from a ledger written by another one.
    UNKNOWN = "unknown"
    # Bounded verification (`swarm.verify.rescore_worker`): rebuilding a group's task and scoring it
    # ran past its deadline or memory limit, or past its peer's share of verification time.
    VERIFY_TIMEOUT = "verify_timeout"
    VERIFY_MEMORY = "verify_memory"
    VERIFY_CRASHED = "verify_crashed"  # the worker died on the group without a word
    VERIFY_BUDGET = "verify_budget", 0.2  # soft, like a rate limit
    # What the transport refused by itself, before any validator: the codes of
    # `swarm.p2p.transport.RefusalReason` (`swarm.node.refusals` maps one to the other).
    OVERSIZE_MESSAGE = "oversize_message", 1.0, True
    UNSIGNED_MESSAGE = "unsigned_message", 0.5, True  # soft: another implementation's policy
    BAD_MESSAGE_SIGNATURE = "bad_message_signature", 1.0, True
    GOSSIP_CONTROL_FLOOD = "gossip_control_flood", 0.5, True
    GOSSIP_BACKOFF_VIOLATION = "gossip_backoff_violation", 0.5, True
    BLOB_FETCH_LIMIT = "blob_fetch_limit", 0.5, True
    FLOW_CONTROL_VIOLATION = "flow_control_violation", 1.0, True
    INBOUND_BUDGET = "inbound_budget", 0.2, True
    BELOW_PUBLISH_SCORE = "below_publish_score", 0.2, True  # its GossipSub score fell that low
    OVER_COST_BUDGET = "over_cost_budget", 1.0, True  # made us handle more than its budget
    BAD_AUTONAT_REQUEST = "bad_autonat_request", 0.5, True  # a malformed dial-back request
    BAD_HOLE_PUNCH = "bad_hole_punch", 0.5, True  # a malformed DCUtR message

    @classmethod
    def from_stored(cls, code: str) -> Reason:
        """The member for a code read from the ledger (`UNKNOWN` for one this version lacks)."""
        try:
            return cls(code)
        except ValueError:
            return cls.UNKNOWN


class Status(enum.StrEnum):
    """The outcome of a ledger row: of a group (`groups` table) or of a delta (`deltas` table)."""

    SENT = "sent"  # a group this node published
    ACCEPTED = "accepted"  # a peer's group that passed every check
    REJECTED = "rejected"  # a peer's group, delta or manifest that failed one (see `Reason`)
    PUBLISHED = "published"  # a delta or anchor this node announced
    SERVED = "served"  # a delta or anchor a peer fetched from this node in full
    APPLIED = "applied"  # a peer's delta or anchor this node applied
    ANNOUNCED = "announced"  # a peer's delta or anchor manifest an observer recorded (not fetched)


class Direction(enum.StrEnum):
    """Whether a ledger row is about something this node sent or received."""

    SENT = "sent"
    RECEIVED = "received"
