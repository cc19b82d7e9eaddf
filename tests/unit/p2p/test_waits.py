"""Waits that end on the event they wait for, not on the next tick of a poll."""

from __future__ import annotations

import threading
import time

import pytest
import trio

from swarm.core.errors import TransportError
from swarm.p2p.libp2p.publish import OUTBOX_MESSAGES, Outbox
from swarm.p2p.libp2p.pulse import Pulse
from swarm.p2p.libp2p.stats import Counters


def test_a_pulse_wakes_its_waiters_at_once_and_times_out_otherwise():
    async def main() -> tuple[bool, float, bool]:
        pulse = Pulse()
        woke_at: list[float] = []

        async def waiter() -> None:
            assert await pulse.wait(5.0)
            woke_at.append(trio.current_time())

        async with trio.open_nursery() as nursery:
            nursery.start_soon(waiter)
            await trio.sleep(0.01)
            fired_at = trio.current_time()
            pulse.fire()
        late = await pulse.wait(0.01)  # nobody fires again
        return woke_at[0] - fired_at < 0.05, pulse.fired, late

    quick, fired, late = trio.run(main)
    assert quick and fired == 1 and late is False


def test_closing_the_outbox_ends_a_publish_waiting_for_room_at_once():
    """A full outbox and a network side that has ended: put() raises when close() is called,
    not at its 10 s bound (nor at a poll's next tick)."""
    outbox = Outbox(Counters(), publish_wait=10.0)
    tokens: list[trio.lowlevel.TrioToken] = []
    stop = threading.Event()

    async def network_side() -> None:  # takes the wake-ups, never drains: peers are stuck
        tokens.append(trio.lowlevel.current_trio_token())
        await trio.to_thread.run_sync(stop.wait)

    loop = threading.Thread(target=trio.run, args=(network_side,), name="test-trio")
    loop.start()
    try:
        while not tokens:
            time.sleep(0.001)
        for _ in range(OUTBOX_MESSAGES):
            outbox.put("t", b"x", tokens[0])
        raised: list[float] = []

        def blocked_put() -> None:
            with pytest.raises(TransportError, match="stopped"):
                outbox.put("t", b"x", tokens[0])
            raised.append(time.monotonic())

        putter = threading.Thread(target=blocked_put, name="test-put")
        putter.start()
        time.sleep(0.2)
        assert putter.is_alive()  # waiting for room
        closed_at = time.monotonic()
        outbox.close()
        putter.join(2.0)
        assert raised and raised[0] - closed_at < 0.1
    finally:
        stop.set()
        loop.join(5.0)
