"""The ledger's tables: SQLAlchemy models of what a node did (rounds, updates, evaluations)
and what it sent and received (rollout groups and their uses, deltas, peers, bans, rejection
counters), plus the schema version stamped into each ledger."""

from __future__ import annotations

from sqlalchemy import Boolean, Float, Integer, LargeBinary, String
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

SCHEMA_VERSION = 3


class Base(DeclarativeBase):
    pass


class Meta(Base):
    """Key-value facts about this ledger (schema version, node id, model)."""

    __tablename__ = "meta"
    key: Mapped[str] = mapped_column(String, primary_key=True)
    value: Mapped[str] = mapped_column(String)


class RoundRow(Base):
    """One round of the node: what it generated, how well, and where the time went."""

    __tablename__ = "rounds"
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    round: Mapped[int] = mapped_column(Integer, index=True)
    policy_version: Mapped[int] = mapped_column(Integer)  # version after this round's update
    started_at: Mapped[float] = mapped_column(Float)
    questions: Mapped[int] = mapped_column(Integer)
    completions: Mapped[int] = mapped_column(Integer)
    mean_reward: Mapped[float] = mapped_column(Float)
    accuracy: Mapped[float] = mapped_column(Float)  # share of sampled completions fully correct
    tokens_generated: Mapped[int] = mapped_column(Integer)
    generate_s: Mapped[float] = mapped_column(Float)
    score_s: Mapped[float] = mapped_column(Float)
    train_s: Mapped[float] = mapped_column(Float)
    other_s: Mapped[float] = mapped_column(Float)
    total_s: Mapped[float] = mapped_column(Float)
    superseded: Mapped[bool] = mapped_column(Boolean, default=False)


class UpdateRow(Base):
    """One attempted GRPO update, including skipped ones and why."""

    __tablename__ = "updates"
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    round: Mapped[int] = mapped_column(Integer, index=True)
    version_before: Mapped[int] = mapped_column(Integer)
    version_after: Mapped[int] = mapped_column(Integer)
    skipped: Mapped[bool] = mapped_column(Boolean)
    skip_reason: Mapped[str] = mapped_column(String, default="")
    local_groups: Mapped[int] = mapped_column(Integer)
    shared_groups: Mapped[int] = mapped_column(Integer)
    samples: Mapped[int] = mapped_column(Integer)
    tokens: Mapped[int] = mapped_column(Integer)
    mean_reward: Mapped[float] = mapped_column(Float)
    loss: Mapped[float] = mapped_column(Float)
    grad_norm: Mapped[float] = mapped_column(Float)
    clip_fraction: Mapped[float] = mapped_column(Float)
    kl: Mapped[float] = mapped_column(Float)
    seconds: Mapped[float] = mapped_column(Float)
    created_at: Mapped[float] = mapped_column(Float)
    superseded: Mapped[bool] = mapped_column(Boolean, default=False)


class EvalRow(Base):
    """Held-out accuracy of the policy at a version (greedy decoding, fixed question set)."""

    __tablename__ = "evals"
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    round: Mapped[int] = mapped_column(Integer, index=True)  # rounds completed when evaluated
    policy_version: Mapped[int] = mapped_column(Integer)
    questions: Mapped[int] = mapped_column(Integer)
    accuracy: Mapped[float] = mapped_column(Float)
    mean_reward: Mapped[float] = mapped_column(Float)
    created_at: Mapped[float] = mapped_column(Float)
    superseded: Mapped[bool] = mapped_column(Boolean, default=False)


class PeerRow(Base):
    """A peer this node has heard from (or been told about)."""

    __tablename__ = "peers"
    peer_id: Mapped[str] = mapped_column(String, primary_key=True)
    first_seen: Mapped[float] = mapped_column(Float)
    last_seen: Mapped[float] = mapped_column(Float)
    model: Mapped[str] = mapped_column(String, default="")  # model named in its latest group
    addrs: Mapped[str] = mapped_column(String, default="[]")  # JSON list of multiaddrs


class GroupRow(Base):
    """A rollout group this node sent, or received and accepted or rejected (with the reason).

    `body` and `signature` are the exact signed bytes, so a stored group can be re-verified
    and replayed offline. Rejected messages that never decoded keep what is known of them.
    """

    __tablename__ = "rollout_groups"
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    content_hash: Mapped[str] = mapped_column(String, index=True)
    direction: Mapped[str] = mapped_column(String)  # a `Direction`
    status: Mapped[str] = mapped_column(String, index=True)  # a `Status`: sent/accepted/rejected
    reason: Mapped[str] = mapped_column(String, default="")  # a `Reason` if rejected, else ""
    detail: Mapped[str] = mapped_column(String, default="")
    sender: Mapped[str] = mapped_column(
        String, index=True, default=""
    )  # claimed signer ("" if unknown)
    source: Mapped[str] = mapped_column(String, default="")  # libp2p origin of the message
    swarm_id: Mapped[str] = mapped_column(String, default="")
    dataset: Mapped[str] = mapped_column(String, default="")
    task: Mapped[str] = mapped_column(String, default="")  # JSON task spec
    model: Mapped[str] = mapped_column(String, default="")
    policy_version: Mapped[int] = mapped_column(Integer, default=-1)
    round: Mapped[int] = mapped_column(Integer, default=-1)  # the sender's round
    completions: Mapped[int] = mapped_column(Integer, default=0)
    mean_reward: Mapped[float] = mapped_column(Float, default=0.0)  # as claimed
    created_at: Mapped[float] = mapped_column(Float, default=0.0)  # as claimed
    recorded_at: Mapped[float] = mapped_column(Float)
    local_round: Mapped[int] = mapped_column(Integer, default=-1)  # our round when recorded
    body: Mapped[bytes | None] = mapped_column(LargeBinary, nullable=True)
    signature: Mapped[bytes | None] = mapped_column(LargeBinary, nullable=True)


class GroupUseRow(Base):
    """One use of a shared group in one of this node's updates, and the advantage it carried.

    This is what a peer's contribution means: how often its groups were learned from, and
    with how much signal (sum of absolute advantages of its completions).
    """

    __tablename__ = "group_uses"
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    group_id: Mapped[int] = mapped_column(Integer, index=True)  # rollout_groups.id
    content_hash: Mapped[str] = mapped_column(String)
    sender: Mapped[str] = mapped_column(String, index=True)
    round: Mapped[int] = mapped_column(Integer, index=True)
    version_after: Mapped[int] = mapped_column(Integer)
    skipped_update: Mapped[bool] = mapped_column(Boolean, default=False)
    advantages: Mapped[str] = mapped_column(String)  # JSON list, one per completion
    advantage_abs_sum: Mapped[float] = mapped_column(Float)
    mean_reward: Mapped[float] = mapped_column(Float)  # as re-scored locally
    superseded: Mapped[bool] = mapped_column(Boolean, default=False)


class DeltaRow(Base):
    """A sparse weight delta (or full anchor) this node published, served, fetched or refused."""

    __tablename__ = "deltas"
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    direction: Mapped[str] = mapped_column(String)  # a `Direction`
    peer: Mapped[str] = mapped_column(String, index=True, default="")  # the other side ("" if none)
    kind: Mapped[str] = mapped_column(String)  # "delta" | "anchor"
    from_version: Mapped[int] = mapped_column(Integer, default=-1)  # -1 for an anchor
    to_version: Mapped[int] = mapped_column(Integer)
    bytes: Mapped[int] = mapped_column(Integer)
    seconds: Mapped[float] = mapped_column(Float, default=0.0)  # encode/transfer/apply time
    status: Mapped[str] = mapped_column(String)  # a `Status`: published/served/applied/rejected
    reason: Mapped[str] = mapped_column(String, default="")  # a `Reason` if rejected, else ""
    recorded_at: Mapped[float] = mapped_column(Float)


class RejectionCountRow(Base):
    """Rejected messages counted instead of stored a row each: per peer, reason and window.

    Duplicates, a banned peer's messages, what the transport refused by itself, and a
    peer's rejected groups past its rows per window (`ledger.rejected_rows_per_peer`) are
    counted here, so what a peer can make a node write is bounded.
    """

    __tablename__ = "rejection_counts"
    peer: Mapped[str] = mapped_column(String, primary_key=True)  # the peer blamed ("" if none)
    reason: Mapped[str] = mapped_column(String, primary_key=True)  # a `Reason`
    window_start: Mapped[int] = mapped_column(Integer, primary_key=True)  # unix time, aligned
    count: Mapped[int] = mapped_column(Integer, default=0)
    last_at: Mapped[float] = mapped_column(Float, index=True)


class BanRow(Base):
    """A peer whose messages this node refuses: banned by its user or by its reputation score."""

    __tablename__ = "bans"
    peer_id: Mapped[str] = mapped_column(String, primary_key=True)
    source: Mapped[str] = mapped_column(String)  # "user" | "auto"
    reason: Mapped[str] = mapped_column(String, default="")
    banned_at: Mapped[float] = mapped_column(Float)
