"""The state behind the verifier's cheap checks, and those checks over a message's groups.

`first_problem` runs every per-group rule a group must pass before it is accepted (allow-
list, bans, the task catalogue, duplicates and replayed nonces, age and clock skew, the
sender's version rewind), then each sender's group and byte rates for the whole message;
`commit` makes an accepted message's groups count (nonces, newest versions). A message
is accepted or rejected whole, so nothing is committed before every group passed.
Bounded (nonces by age, versions by sender count, rates by the tracking buckets); plain
data, not thread-safe on its own: the verifier serialises access.
"""

from __future__ import annotations

import collections
from collections.abc import Collection

from swarm.core.errors import RejectedMessage
from swarm.core.reasons import Reason
from swarm.verify import rules
from swarm.verify.message import Accepted
from swarm.verify.reputation import Reputation
from swarm.verify.settings import VerifySettings
from swarm.verify.tracking import NonceCache, RateLimits

MAX_SENDERS = 100_000  # senders whose newest policy version is remembered


class Admission:
    """Nonces, newest versions and rate buckets per sender (see the module docstring)."""

    def __init__(self, settings: VerifySettings, reputation: Reputation):
        self.settings = settings
        self.reputation = reputation  # scales a throttled peer's rates
        self.nonces = NonceCache(ttl_s=settings.max_age_s)
        self.rates = RateLimits(settings.rate_groups_per_s, settings.rate_burst)
        self.byte_rates = RateLimits(settings.rate_bytes_per_s, settings.rate_bytes_burst)
        self.versions: collections.OrderedDict[str, int] = collections.OrderedDict()

    def first_problem(
        self, accepted: list[Accepted], now: float, banned: Collection[str]
    ) -> tuple[Accepted, RejectedMessage] | None:
        """The first group of a message that fails a check, with why; None if all pass."""
        s = self.settings
        nonces: dict[tuple[str, bytes], str] = {}
        wanted: collections.Counter[str] = collections.Counter()
        wanted_bytes: collections.Counter[str] = collections.Counter()
        for item in accepted:
            group, digest = item.group, item.signed.content_hash
            try:
                rules.check_allowed(group.sender, s.allow_list)
                rules.check_not_banned(group.sender, banned)
                rules.check_task_listed(group.task, s.task_catalogue)
                key = (group.sender, bytes(group.nonce))
                first = nonces.get(key) or self.nonces.lookup(*key)
                if first == digest:
                    raise RejectedMessage(Reason.DUPLICATE, "already received")
                if first is not None:
                    raise RejectedMessage(
                        Reason.REPLAYED_NONCE,
                        "the sender already used this nonce for another group",
                    )
                rules.check_age(group.created_at, now, s.max_age_s, s.max_future_s)
                rules.check_version(
                    group.policy_version, self.versions.get(group.sender), s.max_version_rewind
                )
            except RejectedMessage as e:
                return item, e
            nonces[key] = digest
            wanted[group.sender] += 1
            wanted_bytes[group.sender] += len(item.signed.body)
        return self._over_rate(accepted, wanted, wanted_bytes, now)

    def _over_rate(self, accepted, wanted, wanted_bytes, now: float):
        for sender, n in wanted.items():
            factor = self.reputation.rate_factor(sender)
            if not self.rates.allows(sender, n, now, factor):
                what = "groups"
            elif not self.byte_rates.allows(sender, wanted_bytes[sender], now, factor):
                what = "bytes"
            else:
                continue
            item = next(a for a in accepted if a.group.sender == sender)
            return item, RejectedMessage(
                Reason.RATE_LIMITED, f"{sender[:16]}... sent more {what} than its rate limit allows"
            )
        return None

    def commit(self, accepted: list[Accepted], now: float) -> None:
        """The groups of an accepted message count: their nonces and senders' versions."""
        for item in accepted:
            group = item.group
            self.remember(
                group.sender,
                bytes(group.nonce),
                item.signed.content_hash,
                group.policy_version,
                now,
            )

    def remember(
        self, sender: str, nonce: bytes, content_hash: str, policy_version: int, seen_at: float
    ) -> None:
        """What one accepted group teaches the checks: its nonce, its sender's newest version."""
        self.nonces.add(sender, bytes(nonce), content_hash, seen_at)
        self.versions[sender] = max(self.versions.get(sender, -1), policy_version)
        self.versions.move_to_end(sender)
        while len(self.versions) > MAX_SENDERS:
            self.versions.popitem(last=False)
