"""What a pull node serves: its groups, the list announcing them, and who holds each.

Each own group is served under `group_key(blob_hash)` (the SHA-256 of the signed group
exactly as served) for `keep_rounds` rounds, and a signed `GroupAnnouncement` of it goes
into the list served under `ANNOUNCEMENTS_KEY` for `announce_rounds` rounds, with hints of
the peers that fetched each group in full since (holders: they serve it too). Over libp2p a
peer may pull from a list it fetched up to `fresh_list_s` before, so a group stays served,
whatever the rounds' length, `linger_s` after the list stopped naming it: a node with short
rounds (0.1 s) otherwise stopped serving groups its peers had just read in its list, and
each such pull failed and was blamed on it (the peer left their view; past
`unserved_ban_after` in a row, a hard rejection). A group the
node pulled and admitted is served the same way (it is a holder now). Holder hints learned
from other peers' lists, for the node's candidates, are kept here too (`swarm.exchange.pull`
adds them; `swarm.exchange.pull_groups` tries them).
"""

from __future__ import annotations

import collections
import hashlib
import time
from collections.abc import Callable

from swarm.exchange.pull_settings import HINT_MEMORY, PullCounters, PullSettings
from swarm.p2p.transport import Transport
from swarm.wire import (
    ANNOUNCEMENTS_KEY,
    MAX_ANNOUNCEMENTS_PER_MESSAGE,
    MAX_HOLDER_HINTS,
    GroupAnnouncement,
    HolderHint,
    RolloutGroup,
    SignedAnnouncement,
    SignedGroup,
    encode_signed_group,
    group_key,
    pack_announcements,
)
from swarm.wire.signing import sign_announcement

GROUP_KEY_PREFIX = group_key("")


class PullServer:
    """The groups and the list one pull node serves, and the holder hints it knows."""

    def __init__(
        self,
        transport: Transport,
        key_pair,
        own_id: str,
        settings: PullSettings,
        counters: PullCounters,
        *,
        linger_s: float = 0.0,
        monotonic: Callable[[], float] = time.monotonic,
    ):
        self.transport = transport
        self.linger_s = linger_s  # a group stays served this long after it left the list
        self.monotonic = monotonic
        self.key_pair = key_pair
        self.own_id = own_id
        self.settings = settings
        self.counters = counters
        # blob hash -> {holder peer ID: addrs}, for own groups (who fetched them) and
        # for candidates (hints from their senders' lists)
        self.holders: collections.OrderedDict[str, dict[str, tuple[str, ...]]] = (
            collections.OrderedDict()
        )
        # (round, blob hash, signed) of the own groups announced, newest last
        self._announced: collections.deque[tuple[int, str, SignedAnnouncement]] = (
            collections.deque()
        )
        self._served: collections.deque[tuple[int, str]] = collections.deque()  # (round, key)
        # (round, when it began) of the rounds since the oldest group served, oldest first
        self._began: collections.deque[tuple[int, float]] = collections.deque()

    def start(self) -> None:
        self.transport.serve_blob(ANNOUNCEMENTS_KEY, pack_announcements([]))

    def announced(self) -> list[str]:
        """Blob hashes of the groups announced now (newest last)."""
        return [digest for _, digest, _ in self._announced]

    def announcement_of(
        self, signed: SignedGroup, group: RolloutGroup, served: bytes
    ) -> GroupAnnouncement:
        """What this node says of a group it serves as `served` (`encode_signed_group`)."""
        return GroupAnnouncement(
            base_hash=group.base_hash,
            blob_hash=hashlib.sha256(served).hexdigest(),
            created_at=group.created_at,
            family=self.settings.family,
            model=group.model,
            policy_version=group.policy_version,
            rewards=tuple(group.rewards),
            round=group.round,
            seed_salt=self.settings.seed_salt,
            sender=group.sender,
            size=len(served),
            swarm_id=group.swarm_id,
            task=group.task,
        )

    def publish(self, groups: list[tuple[SignedGroup, RolloutGroup]], round_: int) -> None:
        """Serve round `round_`'s groups and the list announcing them with those of the last
        `announce_rounds` - 1 rounds (still served), newest first past the list's bound."""
        self._note_round(round_)
        window = self._window()
        while self._announced and self._announced[0][0] <= round_ - window:
            self._announced.popleft()
        for signed, group in groups:
            served = encode_signed_group(signed)
            announcement = self.announcement_of(signed, group, served)
            self.serve(group_key(announcement.blob_hash), served, round_)
            signed_announcement = sign_announcement(announcement, self.key_pair)
            self._announced.append((round_, announcement.blob_hash, signed_announcement))
        while len(self._announced) > MAX_ANNOUNCEMENTS_PER_MESSAGE:
            self._announced.popleft()
        self.serve_list()

    def serve_list(self) -> None:
        """Serve the announcements with hints of who fetched each group since (holders)."""
        self._note_fetches()
        hints = [
            HolderHint(digest, peer, addrs)
            for _, digest, _ in self._announced  # oldest first: their holders are known by now
            for peer, addrs in self.holders.get(digest, {}).items()
        ]
        items = [signed for _, _, signed in self._announced]
        self.transport.serve_blob(
            ANNOUNCEMENTS_KEY, pack_announcements(items, hints[:MAX_HOLDER_HINTS])
        )

    def _note_fetches(self) -> None:
        fetches = self.transport.served_blobs(GROUP_KEY_PREFIX)
        if not fetches:
            return
        addrs = {p.peer_id: p.addrs for p in self.transport.peers()}
        for fetch in fetches:
            self.counters.served += 1
            digest = fetch.key[len(GROUP_KEY_PREFIX) :]
            self.hint(digest, fetch.peer_id, addrs.get(fetch.peer_id, ()))

    def hint(self, content_hash: str, peer: str, addrs: tuple[str, ...]) -> None:
        """`peer` holds the group `content_hash` (at most `max_holders` kept a group)."""
        if peer == self.own_id:
            return
        known = self.holders.setdefault(content_hash, {})
        self.holders.move_to_end(content_hash)
        if peer in known or len(known) < self.settings.max_holders:
            known[peer] = tuple(addrs)
        while len(self.holders) > HINT_MEMORY:
            self.holders.popitem(last=False)

    def serve(self, key: str, data: bytes, round_: int) -> None:
        """Serve `data` under `key` from round `round_` for `keep_rounds` rounds, and at
        least `linger_s` after the list stopped naming the groups of its round."""
        self._note_round(round_)
        self.transport.serve_blob(key, data)
        self._served.append((round_, key))
        while self._served and self._expired(self._served[0][0], round_):
            self.transport.unserve_blob(self._served.popleft()[1])
        oldest = self._served[0][0] if self._served else round_
        while len(self._began) > 1 and self._began[1][0] <= oldest:
            self._began.popleft()

    def _window(self) -> int:
        """Rounds a group stays in the list."""
        return max(1, min(self.settings.announce_rounds, self.settings.keep_rounds))

    def _note_round(self, round_: int) -> None:
        if not self._began or self._began[-1][0] < round_:
            self._began.append((round_, self.monotonic()))

    def _expired(self, served_round: int, round_: int) -> bool:
        """Whether a group served in `served_round` may stop being served in `round_`:
        `keep_rounds` have passed, and `linger_s` since the list last named it."""
        if served_round > round_ - self.settings.keep_rounds:
            return False
        if self.linger_s <= 0:
            return True
        unlisted = served_round + self._window()  # the first round whose list omits it
        began = next((t for r, t in self._began if r >= unlisted), None)
        return began is not None and self.monotonic() - began >= self.linger_s
