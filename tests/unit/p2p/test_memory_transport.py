"""The in-memory transport keeps the Transport contract: delivery, validation, counting, blobs."""

import pytest

from swarm.core.errors import TransportError
from swarm.p2p import MemoryHub, MemoryTransport
from swarm.p2p.transport import ServedBlobLog


def _pair(**kw):
    hub = MemoryHub()
    a, b = MemoryTransport("A", hub, **kw), MemoryTransport("B", hub, **kw)
    a.start()
    b.start()
    return a, b


def test_publish_reaches_subscribers_but_not_the_sender():
    a, b = _pair()
    a.subscribe("t")
    b.subscribe("t")
    a.publish("t", b"hello")
    (msg,) = b.receive()
    assert (msg.topic, msg.data, msg.source) == ("t", b"hello", "A")
    assert a.receive() == []
    assert [p.peer_id for p in a.peers()] == ["B"]


def test_validator_rejections_and_errors_are_counted_not_raised():
    a, b = _pair()

    def validator(message):
        if message.data == b"boom":
            raise ValueError("validator bug")
        return "too_short" if len(message.data) < 3 else None

    b.subscribe("t", validator)
    for data in (b"ok!", b"x", b"boom", b"fine"):
        a.publish("t", data)
    assert [m.data for m in b.receive()] == [b"ok!", b"fine"]
    assert b.stats().rejected == {"too_short": 1, "validator_error": 1}


def test_full_inbox_drops_oldest_and_counts():
    a, b = _pair(inbox_capacity=3)
    b.subscribe("t")
    for i in range(5):
        a.publish("t", bytes([i]))
    assert [m.data for m in b.receive()] == [b"\x02", b"\x03", b"\x04"]
    assert b.stats().inbox_dropped == 2


def test_blobs_and_errors():
    a, b = _pair()
    a.serve_blob("k", b"x" * 1000)
    assert b.fetch_blob("A", "k") == b"x" * 1000
    with pytest.raises(TransportError):
        b.fetch_blob("A", "missing")
    with pytest.raises(TransportError):
        b.fetch_blob("Z", "k")
    a.close()
    with pytest.raises(TransportError):
        a.publish("t", b"x")


def test_solo_transport_has_no_peers():
    solo = MemoryTransport("solo")
    with solo:
        solo.subscribe("t")
        solo.publish("t", b"x")
        assert solo.peers() == [] and solo.receive() == []


def test_served_blobs_are_recorded_once_and_the_record_is_bounded():
    hub = MemoryHub()
    a, b = MemoryTransport("a", hub), MemoryTransport("b", hub)
    a.start(), b.start()
    a.serve_blob("k", b"12345")
    assert b.fetch_blob("a", "k") == b"12345"
    with pytest.raises(TransportError):
        b.fetch_blob("a", "missing")  # a failed fetch serves nothing
    assert [(s.peer_id, s.key, s.nbytes) for s in a.served_blobs()] == [("b", "k", 5)]
    assert a.served_blobs() == [] and b.served_blobs() == []

    log = ServedBlobLog(capacity=2)
    for i in range(5):
        log.note("p", f"k{i}", i)
    assert [s.key for s in log.drain()] == ["k3", "k4"] and log.dropped == 3
