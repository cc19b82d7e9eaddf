"""The network thread: trio in a daemon thread of its own, and the calls into it from other threads.

py-libp2p is trio-only and the node is a plain synchronous program, so the host runs
inside its own `trio.run` in a daemon thread. Other threads call in through
`trio.from_thread` with the run's token; every failure to do so is a `TransportError`.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Awaitable, Callable
from typing import Any

import trio

from swarm.core.errors import TransportError

logger = logging.getLogger(__name__)


class NetworkThread:
    """One `trio.run(main)` in a daemon thread: started once, stopped once, called in between.

    `main` runs inside a cancel scope; it calls `mark_ready()` once it serves, and returns
    after `wait_for_stop()` does. `stop()` asks it to, and cancels whatever is still
    running `grace` seconds later.
    """

    def __init__(self, name: str, label: str, grace: float) -> None:
        self._name = name  # the thread's
        self._label = label  # for logs
        self._grace = grace
        self._lifecycle_lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._ready = threading.Event()
        self._closed = False
        self.failure: BaseException | None = None
        self._token: trio.lowlevel.TrioToken | None = None
        # Set on the trio thread while it runs.
        self._stop_event: trio.Event | None = None
        self._root_scope: trio.CancelScope | None = None

    # ------------------------------------------------------------------ other threads

    def start(self, main: Callable[[], Awaitable[None]], timeout: float) -> None:
        """Run `main` in the thread and wait until it is ready; a second call does nothing."""
        with self._lifecycle_lock:
            if self._closed:
                raise TransportError("this transport was closed; create a new one")
            if self._thread is not None:
                return
            self._thread = threading.Thread(
                target=self._thread_main, args=(main,), name=self._name, daemon=True
            )
            self._thread.start()
        if not self._ready.wait(timeout):
            self.stop()
            raise TransportError(f"the libp2p host did not start within {timeout:.0f} s")
        if self.failure is not None:
            failure = self.failure
            self.stop()
            raise TransportError(
                f"the libp2p host failed to start: {describe(failure)}"
            ) from failure

    def stop(self) -> None:
        """Stop `main`: graceful for up to `grace` seconds, then cancelled; final."""
        with self._lifecycle_lock:
            thread, token = self._thread, self._token
            self._closed = True
        if thread is None or not thread.is_alive():
            return
        if threading.current_thread() is thread:
            raise TransportError("close() must not be called from the network thread")
        if token is not None:
            with contextlib.suppress(trio.RunFinishedError):
                trio.from_thread.run_sync(self._request_stop, trio_token=token)
        thread.join(self._grace + 2.0)
        if thread.is_alive():
            logger.warning("%s did not stop within %.0f s", self._label, self._grace + 2.0)

    @property
    def is_ready(self) -> bool:
        """Started and not failed."""
        return self._ready.is_set() and self.failure is None

    @property
    def has_stopped(self) -> bool:
        return self._closed or self.failure is not None

    def call(self, async_fn: Callable[..., Any], *args: Any) -> Any:
        """Run `async_fn(*args)` on the network thread and return its result."""
        token = self.running_token()
        try:
            return trio.from_thread.run(async_fn, *args, trio_token=token)
        except trio.RunFinishedError as exc:
            raise TransportError("the libp2p host has stopped") from exc

    def call_sync(self, fn: Callable[..., Any], *args: Any) -> Any:
        """Run `fn(*args)` on the network thread and return its result."""
        token = self.running_token()
        try:
            return trio.from_thread.run_sync(fn, *args, trio_token=token)
        except trio.RunFinishedError as exc:
            raise TransportError("the libp2p host has stopped") from exc

    def running_token(self) -> trio.lowlevel.TrioToken:
        """The run's token, if the thread is running and the caller is not that thread."""
        if self._closed:
            raise TransportError("the transport is closed")
        if self._thread is None or not self._ready.is_set() or self._token is None:
            raise TransportError("the transport is not started")
        if threading.current_thread() is self._thread:
            raise TransportError(
                "transport methods must not be called from the network thread (e.g. a validator)"
            )
        if self.failure is not None or not self._thread.is_alive():
            raise TransportError(f"the libp2p host has stopped: {self.failure}")
        return self._token

    # ------------------------------------------------------------------ the network thread

    def mark_ready(self) -> None:
        self._ready.set()

    async def wait_for_stop(self) -> None:
        if self._stop_event is not None:
            await self._stop_event.wait()

    def _thread_main(self, main: Callable[[], Awaitable[None]]) -> None:
        try:
            trio.run(self._run, main)
        except Exception as exc:  # noqa: BLE001 - thread boundary: record, report via start()/calls
            self.failure = exc
            if self._ready.is_set():
                logger.error("%s stopped with an error: %r", self._label, exc)
        finally:
            self._ready.set()

    async def _run(self, main: Callable[[], Awaitable[None]]) -> None:
        self._token = trio.lowlevel.current_trio_token()
        self._stop_event = trio.Event()
        with trio.CancelScope() as root_scope:
            self._root_scope = root_scope
            await main()

    def _request_stop(self) -> None:
        if self._stop_event is not None:
            self._stop_event.set()
        if self._root_scope is not None:
            # Graceful shutdown gets a bounded time; a library task that hangs is cancelled.
            self._root_scope.deadline = min(
                self._root_scope.deadline, trio.current_time() + self._grace
            )


def describe(failure: BaseException) -> str:
    """What failed, in one line: the innermost errors of trio's nested exception groups
    (their own message only says how many sub-exceptions there were)."""
    leaves: list[str] = []

    def walk(exc: BaseException) -> None:
        if isinstance(exc, BaseExceptionGroup):
            for inner in exc.exceptions:
                walk(inner)
        elif str(exc) not in leaves:
            leaves.append(str(exc) or exc.__class__.__name__)

    walk(failure)
    return "; ".join(leaves)
