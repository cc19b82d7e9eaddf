"""Which announced groups a node pulls, and the state of one pull (pure, no I/O).

`choose_pulls` is the trainer's sampler (`swarm.batch_choice.choose_batch`: uniform, only
groups whose claimed rewards carry signal, at most `per_peer_cap` per sender) over the
announcements young enough for the verifier, less those the batch would skip as too many
versions behind this node's own (`sharing.max_version_lag`: the sampler's own staleness
rule, against the node's version when it pulls), then `balanced`: one group per sender in
turn, so a sender that announces more groups gains nothing. `Attempt` is one chosen group
while its sources are tried, and until the fetches a round stopped waiting on have ended
(`swarm.exchange.pull_groups`).
"""

from __future__ import annotations

import random
from concurrent.futures import Future
from dataclasses import dataclass, field

from swarm.batch_choice import Candidate, Staleness, choose_batch
from swarm.policy.source import same_weights
from swarm.verify.message import Accepted, Rejection
from swarm.wire import GroupAnnouncement, RolloutGroup


@dataclass(frozen=True)
class OwnVersion:
    """This node's model, base weights and policy version, as its own groups state them: what
    the batch measures a shared group's version lag against (`swarm.batch_choice.is_stale`)."""

    model: str
    base_hash: str
    version: int

    @classmethod
    def of(cls, group: RolloutGroup) -> OwnVersion:
        return cls(group.model, group.base_hash, group.policy_version)


def is_ours(announcement: GroupAnnouncement, own: OwnVersion) -> bool:
    """Whether the announced group is of this node's model and base weights, as the pool's
    `same_model` says of a pulled one: only then does its version lag count."""
    return same_weights(announcement.model, announcement.base_hash, own.model, own.base_hash)


def choose_pulls(
    announcements: list[GroupAnnouncement],
    k: int,
    *,
    seed: str,
    now: float,
    max_age_s: float,
    per_peer_cap: int,
    every_group: bool = False,
    own: OwnVersion | None = None,
    max_version_lag: int | None = None,
) -> list[GroupAnnouncement]:
    """`k` announcements to pull: those created at most `max_age_s` ago (`verify.max_age_s`,
    by the sender's clock; 0: any age), then the trainer's draw (which skips, as at batch
    time, groups of this node's model more than `max_version_lag` versions behind `own`, its
    version now; None for either: no bound), then one per sender in turn. With
    `every_group` (an observer, which records rather than trains), any of them of any
    version in a uniform order, signal or not.

    How long this node has held a group (`sharing.max_held_s`) counts from when it pulls
    it, so it bounds nothing here: the pool applies it at batch time."""
    fresh = [a for a in announcements if max_age_s <= 0 or now - a.created_at <= max_age_s]
    if every_group:
        random.Random(seed).shuffle(fresh)
        return balanced(fresh, k)
    offered = [
        Candidate(
            a,
            a.rewards,
            sender=a.sender,
            same_model=own is not None and is_ours(a, own),
            policy_version=a.policy_version,
            round=a.round,
            family=a.task.dataset,
        )
        for a in fresh
    ]
    shuffled = choose_batch(
        [],
        offered,
        0,
        len(offered),
        seed=seed,
        local_version=own.version if own is not None else 0,
        now=now,
        staleness=Staleness(max_version_lag, max_held_s=None),  # held: from the pull on
        per_peer_cap=per_peer_cap or None,
    ).shared
    return balanced(shuffled, k)


def balanced(shuffled: list[GroupAnnouncement], k: int) -> list[GroupAnnouncement]:
    """`k` of `shuffled` (a uniform order), one per sender in turn: every sender asked counts
    the same, however many groups it announced (a loud sender gains nothing)."""
    by_sender: dict[str, list[GroupAnnouncement]] = {}
    for announcement in shuffled:
        by_sender.setdefault(announcement.sender, []).append(announcement)
    queues = list(by_sender.values())
    chosen: list[GroupAnnouncement] = []
    while len(chosen) < k and queues:
        for queue in queues:
            if len(chosen) < k:
                chosen.append(queue.pop(0))
        queues = [q for q in queues if q]
    return chosen


@dataclass
class Attempt:
    """One chosen group being pulled: the sources left to try and what came of it."""

    announcement: GroupAnnouncement
    sources: list[str]
    done: bool = False  # the announced bytes arrived (admitted or refused)
    sender_missed: bool = False  # the sender was asked and did not serve them
    stalled: bool = False  # the sender took the fetch and sent nothing (refused hard)
    error: str = ""  # why the last source tried did not serve them
    accepted: list[Accepted] = field(default_factory=list)
    refused: list[Rejection] = field(default_factory=list)
    # fetches a round stopped waiting on, still running: (source, its `Outcome` to come)
    running: list[tuple[str, Future]] = field(default_factory=list)
    settled: bool = False  # its outcome is counted and its accepted groups handed on
    told: int = 0  # of `refused`, those handed on already
