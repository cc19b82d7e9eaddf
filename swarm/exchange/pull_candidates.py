"""The announcements a pull node may pull, and each round's choice among them (no I/O).

Announcements that passed the cheap checks stay candidates for `candidate_rounds` rounds
from the round their list was taken; a round chooses `pull_groups` of them with the
trainer's sampler (`swarm.exchange.pull_choice.choose_pulls`), against this node's version
as its latest published groups state it (`own`). A blob hash once chosen is never a
candidate again, whoever announces it (the last `HINT_MEMORY` of them are remembered).
`swarm.exchange.pull` documents the exchange.
"""

from __future__ import annotations

import collections
from collections.abc import Callable, Iterable

from swarm.exchange.pull_choice import OwnVersion, choose_pulls
from swarm.exchange.pull_settings import HINT_MEMORY, PullSettings
from swarm.wire import GroupAnnouncement


class Candidates:
    """The candidates of one pull node (see the module docstring)."""

    def __init__(
        self, settings: PullSettings, own_id: str, max_age_s: float, clock: Callable[[], float]
    ):
        self.settings = settings
        self.own_id = own_id
        self.max_age_s = max_age_s  # older would be rejected (stale): never pulled
        self.clock = clock
        # blob hash -> (announcement, round it was learned)
        self._by_hash: collections.OrderedDict[str, tuple[GroupAnnouncement, int]] = (
            collections.OrderedDict()
        )
        # blob hashes this node chose to pull (never candidates again, whoever announces them)
        self._chosen: collections.OrderedDict[str, None] = collections.OrderedDict()
        # this node's model and version, as its latest published groups state them (a round
        # publishes, then collects); None until it publishes (an observer never does)
        self.own: OwnVersion | None = None

    def __contains__(self, blob_hash: str) -> bool:
        return blob_hash in self._by_hash

    def __len__(self) -> int:
        return len(self._by_hash)

    def learn(self, announcements: Iterable[GroupAnnouncement], round_: int) -> None:
        """A list's announcements, taken in round `round_`, become candidates (but those
        chosen already)."""
        for announcement in announcements:
            if announcement.blob_hash not in self._chosen:
                self._by_hash[announcement.blob_hash] = (announcement, round_)

    def expire(self, round_: int) -> None:
        """Forget the candidates too old for round `round_` (`candidate_rounds`)."""
        for digest, (_, learned) in list(self._by_hash.items()):
            if learned <= round_ - self.settings.candidate_rounds:
                del self._by_hash[digest]

    def choose(self, round_: int) -> list[GroupAnnouncement]:
        """Round `round_`'s pulls: the trainer's uniform, per-sender-capped draw over the
        candidates; each chosen one is never a candidate again."""
        self.expire(round_)
        announcements = [a for a, _ in self._by_hash.values()]
        chosen = self.pullable(announcements, self.settings.pull_groups, round_)
        for announcement in chosen:
            self._by_hash.pop(announcement.blob_hash, None)
            self._chosen[announcement.blob_hash] = None
        while len(self._chosen) > HINT_MEMORY:
            self._chosen.popitem(last=False)
        return chosen

    def offers(self, announcements: Iterable[GroupAnnouncement], round_: int) -> bool:
        """Whether any of `announcements` is one this node would pull now (not pulled yet)."""
        fresh = [a for a in announcements if a.blob_hash not in self._chosen]
        return bool(self.pullable(fresh, 1, round_))

    def pullable(
        self, announcements: list[GroupAnnouncement], k: int, round_: int
    ) -> list[GroupAnnouncement]:
        """Up to `k` of `announcements` this node would pull in round `round_`
        (`choose_pulls`)."""
        s = self.settings
        return choose_pulls(
            announcements,
            k,
            seed=f"{self.own_id}:pull:{round_}",
            now=self.clock(),
            max_age_s=self.max_age_s,
            per_peer_cap=s.per_peer_cap,
            every_group=s.every_group,
            own=self.own,
            max_version_lag=s.max_version_lag,
        )

    def drop_senders(self, senders: set[str]) -> None:
        """Senders that stalled a group fetch: their other announcements are not pulled (the
        round waits on them no more)."""
        for key, (a, _) in list(self._by_hash.items()):
            if a.sender in senders:
                del self._by_hash[key]
