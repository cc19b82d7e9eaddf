"""Blob-stream attacks on a victim process: a fetcher that writes past the flow-control window,
and one that opens many fetches and reads none. Each is cut off or refused, counted and
recorded, while the victim's memory stays bounded and it keeps serving and delivering.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Iterator

import pytest

from swarm.core.errors import TransportError
from swarm.p2p.libp2p import BLOB_PROTOCOL
from swarm.p2p.libp2p.framing import frame
from tests.adversary.transport_attack import Scene, during, publish_paced, scene
from tests.waiting import wait_until

BLOB_SIZE = 8 * 1024 * 1024
LEGIT = 50


@pytest.fixture
def attacked() -> Iterator[Scene]:
    for s in scene():
        s.sha256 = s.victim.call(cmd="serve_blob", key="big", size=BLOB_SIZE, seed=1)["sha256"]
        yield s


def _honest_fetch_works(s: Scene) -> bool:
    data = s.honest.fetch_blob(s.victim.peer_id, "big", timeout=30)
    return hashlib.sha256(data).hexdigest() == s.sha256


@pytest.mark.timeout(120)
def test_a_fetcher_writing_past_the_window_is_cut_off(attacked: Scene) -> None:
    s = attacked
    rss_before = s.victim.stats()["rss_mb"]
    stream = s.attacker.open_raw_stream(s.victim.peer_id, str(BLOB_PROTOCOL))
    junk = b"j" * (1024 * 1024)

    def attack() -> None:
        try:
            stream.write(frame(b"big"))
            for _ in range(128):  # 128 MB the victim never asked for
                stream.write(junk, ignore_window=True)
        except TransportError:
            pass  # the victim closed the connection: what it should do

    attack_thread = during(attack)
    publish_paced(s.honest, "legit", LEGIT)
    attack_thread.join(60)
    assert wait_until(lambda: s.victim.delivered("legit") == LEGIT, 20)
    assert _honest_fetch_works(s)
    stats = s.victim.stats()
    grown = stats["rss_mb"] - rss_before
    print(f"flow-control attack: victim RSS +{grown:.0f} MB")
    assert grown < 48
    assert stats["stats"]["flow_control_violations"] >= 1
    recorded = [r for r in stats["refusals"] if r["reason"] == "flow_control_violation"]
    assert recorded and recorded[0]["peer"] == s.attacker.peer_id


@pytest.mark.timeout(120)
def test_many_unread_fetches_are_refused_beyond_the_per_peer_limit(attacked: Scene) -> None:
    s = attacked
    rss_before = s.victim.stats()["rss_mb"]
    streams = []
    for _ in range(40):
        try:
            stream = s.attacker.open_raw_stream(s.victim.peer_id, str(BLOB_PROTOCOL))
            stream.write(frame(b"big"))
            streams.append(stream)
        except TransportError:
            pass  # a refused stream may already be reset
    time.sleep(2.0)  # the victim's handlers are now blocked on fetchers that never read
    stats = s.victim.stats()
    grown = stats["rss_mb"] - rss_before
    print(f"40 unread fetches: victim RSS +{grown:.0f} MB")
    assert grown < 48
    assert _honest_fetch_works(s)  # the limit is per peer: others are served meanwhile
    publish_paced(s.honest, "legit", LEGIT)
    assert wait_until(lambda: s.victim.delivered("legit") == LEGIT, 20)
    stats = s.victim.stats()
    assert stats["stats"]["blob_streams_refused"] >= 30
    recorded = [r for r in stats["refusals"] if r["reason"] == "blob_fetch_limit"]
    assert recorded and recorded[0]["peer"] == s.attacker.peer_id
    assert stats["scores"][s.attacker.peer_id] < 0
