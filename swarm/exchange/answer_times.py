"""How long a round waits for a peer's first answer: a timeout from its measured answers.

A fetch's answer time is the time from its start to the serving peer's response header
(the fetch's dial, if any, and request included; not the transfer after the header). Each
answered fetch begun while no other fetch of the node to that peer ran is a sample of its
peer (`swarm.exchange.pull_fetch`); `AnswerTimes` keeps a smoothed estimate of each
peer's answer time and of its variation, as TCP keeps a round-trip time (RFC 6298:
srtt and rttvar, gains 1/8 and 1/4), and a peer's *patience* is `srtt + 4 * rttvar`, as
TCP's retransmission timeout is, within [`MIN_PATIENCE_S`, the fetch's own timeout].

A round that has waited a peer's patience for a fetch no header has come for stops waiting
on it (`swarm.exchange.pull_fetch.Fetcher.fetch_all`, `cut`): the peer has most likely left
(a machine that sleeps or loses its network leaves its connections open, and nothing
answers until the fetch times out). The fetch itself is not cut: it runs on to its own
timeout and its outcome is judged when it ends, as any other (`swarm.exchange.pull_groups`);
only the round stops waiting for it. A peer never measured gets the swarm's patience
(every peer's samples in one estimate) times `UNMEASURED_FACTOR`, as a first fetch may
dial it first; before any sample at all, the fetch's own timeout.

A batch of fetches started together (a round's lists asked again, a wave of group fetches)
gives a second, tighter bound (`batch_patience`): once at least half of its fetches have
answered, one that has not is given up on `SPREAD` times their median answer time after it
went out (never before the floor). Answers here are slow together, when every process is
busy with its own round on shared cores, and quick together; a peer's own history mixes
both (its rttvar, and so its patience, grows with the machine's load), while the batch says
how long answers take right now. The median is robust: a peer answering fast on purpose
moves it no more than one honest peer can (a sender has at most `per_peer_cap` fetches of a
wave). Giving up is cheap: the fetch runs on, and its group is taken if it comes.

Why the floor: answers here are served by Python processes that share cores with their own
rounds, so one in many is late by a scheduling delay, not by a network; the floor keeps a
peer whose answers have always come in a millisecond from being given up on at the first
such delay. A peer the round stopped waiting on costs nothing if it answers after all: its
group is taken when it comes (`Fetcher.fetch_all`'s `late` outcomes).

Pure but for one lock (`note` runs on the fetch workers); bounded: `capacity` peers.
"""

from __future__ import annotations

import collections
import statistics
import threading
from collections.abc import Sequence
from dataclasses import dataclass

ALPHA = 1 / 8  # RFC 6298's gains
BETA = 1 / 4
K = 4  # patience = srtt + K * rttvar
MIN_PATIENCE_S = 0.25  # never less (see the module docstring)
UNMEASURED_FACTOR = 2.0  # a peer never measured: the swarm's patience times this
CAPACITY = 4096  # peers whose estimate is kept (the least recently measured dropped)
QUORUM = 0.5  # a batch's bound holds once this share of its fetches have answered ...
SPREAD = 3.0  # ... at this many times their median answer time


@dataclass(frozen=True)
class Estimate:
    """A smoothed answer time and its variation (seconds), from `samples` samples."""

    srtt: float
    rttvar: float
    samples: int = 1

    @classmethod
    def first(cls, sample: float) -> Estimate:
        return cls(sample, sample / 2)


def updated(estimate: Estimate | None, sample: float) -> Estimate:
    """`estimate` with one more sample (RFC 6298, 2.2 and 2.3); the first sample starts one."""
    sample = max(sample, 0.0)
    if estimate is None:
        return Estimate.first(sample)
    rttvar = (1 - BETA) * estimate.rttvar + BETA * abs(estimate.srtt - sample)
    srtt = (1 - ALPHA) * estimate.srtt + ALPHA * sample
    return Estimate(srtt, rttvar, estimate.samples + 1)


def patience(estimate: Estimate, ceiling: float, floor: float = MIN_PATIENCE_S) -> float:
    """How long to wait for an answer: `srtt + K * rttvar`, within [`floor`, `ceiling`]
    (the fetch's own timeout wins over the floor)."""
    return min(ceiling, max(floor, estimate.srtt + K * estimate.rttvar))


def batch_patience(
    answered: Sequence[float], batch: int, floor: float = MIN_PATIENCE_S
) -> float | None:
    """How long a batch of `batch` fetches waits for the ones that have not answered, given
    the answer times of those that have (`answered`): `SPREAD` times their median, at least
    `floor`, once at least `QUORUM` of the batch (and at least 2) have answered; else None
    (no bound from the batch: each fetch's own patience)."""
    if len(answered) < max(2, QUORUM * batch):
        return None
    return max(floor, SPREAD * statistics.median(answered))


class AnswerTimes:
    """Each peer's answer-time estimate, and the swarm's (every sample), thread-safe."""

    def __init__(self, capacity: int = CAPACITY, floor: float = MIN_PATIENCE_S):
        self.capacity = capacity
        self.floor = floor
        self._lock = threading.Lock()
        self._peers: collections.OrderedDict[str, Estimate] = collections.OrderedDict()
        self._swarm: Estimate | None = None

    def note(self, peer: str, seconds: float) -> None:
        """One answer of `peer`, `seconds` after its fetch began."""
        with self._lock:
            self._peers[peer] = updated(self._peers.pop(peer, None), seconds)
            self._swarm = updated(self._swarm, seconds)
            while len(self._peers) > self.capacity:
                self._peers.popitem(last=False)

    def estimate(self, peer: str) -> Estimate | None:
        with self._lock:
            return self._peers.get(peer)

    def patience(self, peer: str, ceiling: float) -> float:
        """How long a round waits for `peer`'s first answer to a fetch whose own timeout is
        `ceiling` (see the module docstring): `ceiling` when nothing is measured yet."""
        with self._lock:
            own, swarm = self._peers.get(peer), self._swarm
        if own is not None:
            return patience(own, ceiling, self.floor)
        if swarm is not None:
            return min(ceiling, UNMEASURED_FACTOR * patience(swarm, ceiling, self.floor))
        return ceiling
