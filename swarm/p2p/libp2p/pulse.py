"""A trio signal that fires each time something changes, for waits that would otherwise poll.

`Pulse.fire()` wakes every task waiting in `wait()`; a task that starts waiting after a fire
waits for the next one. A waiter checks its condition, then waits for the pulse: the trio
thread runs one task at a time, so no change can slip in between the check and the wait.
Used for the publish back-pressure and flush (a peer's send loop wrote, the outbox moved)
and for the mesh wait (a peer joined a topic's mesh).
"""

from __future__ import annotations

import trio


class Pulse:
    """Fires on every change; `wait` returns at the next fire (or when `timeout` runs out)."""

    def __init__(self) -> None:
        self._event = trio.Event()
        self.fired = 0  # how many times it fired: what tests and counters read

    def fire(self) -> None:
        """Wake everyone waiting now (trio thread only)."""
        self.fired += 1
        self._event.set()
        self._event = trio.Event()

    async def wait(self, timeout: float = float("inf")) -> bool:
        """Until the next fire, at most `timeout` seconds; whether it fired."""
        event = self._event
        with trio.move_on_after(max(0.0, timeout)):
            await event.wait()
        return event.is_set()
