"""A batch of fetches stops waiting on a peer that has not answered within its patience
(`Fetcher.fetch_all`'s `cut`); the fetch runs on and ends as it would have."""

from __future__ import annotations

import time

from swarm.core.errors import FetchTooSlow
from swarm.exchange.pull_fetch import Fetcher, Request
from swarm.p2p.transport import FetchLimits


class Peers:
    """A transport (threaded for the fetcher: not a `MemoryTransport`): `fast` answers at
    once, `gone` takes the fetch and never answers (its timeout is spent), `dripping`
    answers its header at once and the bytes `drip_s` later."""

    def __init__(self, drip_s: float = 0.6):
        self.drip_s = drip_s

    def fetch_blob(self, peer_id: str, key: str, timeout: float, limits: FetchLimits) -> bytes:
        assert limits.check is not None
        if peer_id.startswith("gone"):
            time.sleep(timeout)
            raise FetchTooSlow(f"{key} from {peer_id}: nothing in {timeout} s")
        limits.check.size(4)
        if peer_id.startswith("dripping"):
            time.sleep(self.drip_s)
        return b"data"


def measured(fetcher: Fetcher, *peers: str) -> None:
    for peer in peers:
        for _ in range(10):
            fetcher.answers.note(peer, 0.01)


def test_a_measured_peer_that_does_not_answer_is_waited_on_only_its_patience():
    fetcher = Fetcher(Peers(), parallel=4, fetch_timeout_s=6.0)  # type: ignore[arg-type]
    measured(fetcher, "fast", "gone")
    requests = [Request("fast", "k", 8), Request("gone", "k", 8)]
    try:
        began = time.monotonic()
        fast, gone = fetcher.fetch_all(requests, began + 10.0, cut=True)
        waited = time.monotonic() - began
        # its patience: the floor, 0.25 s (before: its 6 s timeout; slack for busy cores)
        assert waited < 3.0
        assert fast.data == b"data" and fast.late is None
        assert gone.late is not None and gone.data is None and gone.error is None
        # it ran on and ended as it would have: a stall (took the fetch, sent nothing)
        ended = gone.late.result(timeout=10.0)
        assert isinstance(ended.error, FetchTooSlow) and ended.stalled and ended.slow
    finally:
        fetcher.close()


def test_a_peer_that_does_not_answer_while_the_rest_of_its_batch_did_is_not_waited_on():
    """Nothing measured before (each fetch's own patience is its timeout): once the other
    three of the batch answered, the fourth is given up on at 3x their median (the floor)."""
    fetcher = Fetcher(Peers(), parallel=4, fetch_timeout_s=6.0)  # type: ignore[arg-type]
    requests = [Request(f"fast-{i}", "k", 8) for i in range(3)] + [Request("gone", "k", 8)]
    try:
        began = time.monotonic()
        outcomes = fetcher.fetch_all(requests, began + 10.0, cut=True)
        assert time.monotonic() - began < 3.0  # before: its 6 s timeout (slack for busy cores)
        assert [o.data for o in outcomes[:3]] == [b"data"] * 3
        assert outcomes[3].late is not None
        assert outcomes[3].late.result(timeout=10.0).stalled  # judged as ever, when it ends
    finally:
        fetcher.close()


def test_without_cut_or_without_a_measure_the_fetch_is_waited_on_to_its_timeout():
    fetcher = Fetcher(Peers(), parallel=4, fetch_timeout_s=0.8)  # type: ignore[arg-type]
    measured(fetcher)  # nothing measured: no patience shorter than the timeout
    try:
        for cut in (False, True):
            began = time.monotonic()
            (gone,) = fetcher.fetch_all([Request("gone", "k", 8)], began + 10.0, cut=cut)
            assert time.monotonic() - began >= 0.75
            assert isinstance(gone.error, FetchTooSlow) and gone.late is None
    finally:
        fetcher.close()


def test_a_peer_that_answered_is_waited_on_while_its_bytes_come():
    fetcher = Fetcher(Peers(drip_s=0.6), parallel=4)  # type: ignore[arg-type]
    measured(fetcher, "dripping")
    try:
        began = time.monotonic()
        (outcome,) = fetcher.fetch_all([Request("dripping", "k", 8)], began + 10.0, cut=True)
        assert outcome.data == b"data" and outcome.late is None  # past its 0.25 s patience
        assert time.monotonic() - began >= 0.55
    finally:
        fetcher.close()


def test_every_answer_is_a_sample_of_its_peer_unless_it_began_behind_another_fetch():
    fetcher = Fetcher(Peers(drip_s=0.3), parallel=4)  # type: ignore[arg-type]
    try:
        assert fetcher.answers.estimate("fast") is None
        for _ in range(3):
            fetcher.fetch_all([Request("fast", "k", 8)], time.monotonic() + 5.0)
        estimate = fetcher.answers.estimate("fast")
        assert estimate is not None and estimate.samples == 3 and estimate.srtt < 0.25
        assert fetcher.answers.estimate("gone") is None
        # two at once to one peer: the second may have waited behind the first (a slot)
        fetcher.fetch_all([Request("dripping", "k", 8)] * 2, time.monotonic() + 5.0)
        estimate = fetcher.answers.estimate("dripping")
        assert estimate is not None and estimate.samples == 1
    finally:
        fetcher.close()
