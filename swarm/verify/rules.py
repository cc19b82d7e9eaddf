"""Verification rules: pure checks over a decoded rollout group and plain values.

Each `check_*` raises `RejectedMessage` with a `Reason` (stored in the ledger) or
returns None. They take everything they need as arguments (the time, the sender's newest
policy version, the ban set), so they are unit-tested without network, clock or disk.

Deliberately not here: wire decoding and signatures (`swarm.wire`, `swarm.verify.message`),
the state these checks consult (`swarm.verify.tracking`), or rebuilding tasks (`swarm.verify.rescore`).
"""

from __future__ import annotations

import collections
import hashlib
import math
from collections.abc import Collection, Sequence
from typing import TYPE_CHECKING

from swarm.core.errors import RejectedMessage
from swarm.core.reasons import Reason

if TYPE_CHECKING:
    from swarm.tasks import TaskSpec


def check_allowed(sender: str, allow_list: Collection[str]) -> None:
    """With a non-empty allow-list, only its peers may send groups."""
    if allow_list and sender not in allow_list:
        raise RejectedMessage(
            Reason.NOT_ALLOWED, f"sender {sender[:16]}... is not on p2p.allow_list"
        )


def check_task_listed(spec: TaskSpec, catalogue: Collection[tuple[str, str]] | None) -> None:
    """With a catalogue, a group's task (dataset, exact config) must be on it: checked before
    the task is rebuilt, so a peer cannot choose what this node computes."""
    if catalogue is not None and (spec.dataset, spec.config_json) not in catalogue:
        raise RejectedMessage(
            Reason.UNLISTED_TASK,
            f"task {spec.dataset} {spec.config_json[:200]} is not in this node's mix or verify.task_catalogue",
        )


def check_not_banned(sender: str, banned: Collection[str]) -> None:
    if sender in banned:
        raise RejectedMessage(Reason.BANNED, f"sender {sender[:16]}... is banned")


def check_age(created_at: float, now: float, max_age_s: float, max_future_s: float) -> None:
    """A group must not be older than `max_age_s` nor dated more than `max_future_s` ahead."""
    if created_at > now + max_future_s:
        raise RejectedMessage(
            Reason.FROM_FUTURE,
            f"created {created_at - now:.0f} s in the future (allowed skew {max_future_s:.0f} s)",
        )
    if max_age_s > 0 and created_at < now - max_age_s:
        raise RejectedMessage(
            Reason.STALE, f"created {now - created_at:.0f} s ago (limit {max_age_s:.0f} s)"
        )


def check_version(policy_version: int, newest_from_sender: int | None, max_lag: int) -> None:
    """A group far behind the newest policy version its own sender has shown us is stale.

    Compared with the sender's own history, not with our version: peers run other models
    and join late, so their version numbers say nothing about ours.
    """
    if (
        max_lag >= 0
        and newest_from_sender is not None
        and policy_version + max_lag < newest_from_sender
    ):
        raise RejectedMessage(
            Reason.STALE_VERSION,
            f"policy version {policy_version} is more than {max_lag} behind the sender's v{newest_from_sender}",
        )


def check_rewards(claimed: Sequence[float], recomputed: Sequence[float], tolerance: float) -> None:
    """Every claimed reward must equal the locally recomputed one (within float tolerance)."""
    for i, (c, r) in enumerate(zip(claimed, recomputed, strict=True)):
        if not (math.isfinite(c) and abs(c - r) <= tolerance):
            raise RejectedMessage(
                Reason.REWARD_MISMATCH, f"completion {i}: claimed reward {c!r}, recomputed {r!r}"
            )


def check_rewards_any(
    claimed: Sequence[float], options: Sequence[Sequence[float]], tolerance: float
) -> None:
    """The claimed rewards must all match one of `options` (each a full recomputation)."""
    first_error: RejectedMessage | None = None
    for recomputed in options:
        try:
            check_rewards(claimed, recomputed, tolerance)
            return
        except RejectedMessage as e:
            first_error = first_error or e
    if first_error is not None:
        raise first_error


def fingerprint(completions: Sequence[str]) -> tuple[bytes, ...]:
    """Short digests of a group's completions (surrounding whitespace ignored), for copy checks.

    Digests, not texts, are what the verifier remembers: a peer's long completions must not
    grow its memory.
    """
    return tuple(
        hashlib.blake2b(c.strip().encode("utf-8", "surrogatepass"), digest_size=8).digest()
        for c in completions
    )


def overlap(a: Sequence[bytes], b: Sequence[bytes]) -> float:
    """Share of completions two groups have in common, as multisets: |a & b| / max(|a|, |b|)."""
    if not a or not b:
        return 0.0
    common = collections.Counter(a) & collections.Counter(b)
    return sum(common.values()) / max(len(a), len(b))


def check_not_copy(sender: str, fingerprints: Sequence[bytes], earlier, threshold: float) -> None:
    """Reject a group whose completions near-copy an earlier group of *another* sender for the same spec.

    `earlier` holds (sender, fingerprints) of groups seen for the same (dataset, config, seed,
    index): honest nodes draw specs from their own task seeds, so two of them meet on one
    spec only by sharing a seed, while short identical answers (``<answer>7</answer>``)
    across different specs are normal and never compared; nor are groups of one repeated
    answer. `threshold` <= 0 turns this off.
    """
    if threshold <= 0 or len(set(fingerprints)) < 2:
        return  # a group of one repeated answer carries no learning signal: copying it gains nothing
    for other, theirs in earlier:
        share = overlap(fingerprints, theirs)
        if other != sender and share >= threshold:
            raise RejectedMessage(
                Reason.COPYCAT,
                f"{share:.0%} of the completions copy {other[:16]}...'s group for the same task",
            )
