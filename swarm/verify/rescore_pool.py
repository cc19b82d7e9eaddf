"""Re-scoring peers' groups within bounds: the parent side of the verification worker.

`RescoreWorker` runs `swarm.verify.rescore.rescore_group` in a long-lived child process
(`swarm.verify.rescore_worker`; its process is `swarm.verify.worker_process`'s), started
once and reused: one group at a time, each within a deadline, the process within an
address-space limit. A group past its deadline is
rejected (`verify_timeout`); a worker that does not answer within the deadline plus a grace
period (stuck in C code) is killed. A group that exhausts the memory limit is rejected
(`verify_memory`), and one on which the worker died without a word (`verify_crashed`). In
each of these cases a fresh worker is started at once, in the background; the next group
waits until it is ready, outside its own deadline.

What a worker answers is read as untrusted (it was fed a peer's bytes): typed msgpack, its
scores checked for count and range.

`InProcess` is the unbounded path (`verify.worker = false`, offline tools, unit tests):
the same re-scoring in the calling thread. Both return an `Attempt`: the result or the
rejection, and its cost in seconds, which the verifier charges to the peer's share
(`swarm.verify.budget`).

Deliberately not here: what to do with the outcome (`swarm.verify.gate`).
"""

from __future__ import annotations

import math
import sys
import threading
import time
from dataclasses import dataclass
from typing import Protocol

from swarm.config import VerifySection
from swarm.core.errors import RejectedMessage
from swarm.core.reasons import Reason
from swarm.tasks import Task
from swarm.verify import rescore_worker as protocol
from swarm.verify.rescore import Rescored, rescore_group
from swarm.verify.worker_process import TIMED_OUT, WorkerProcess
from swarm.wire import RolloutGroup, encode_group


@dataclass(frozen=True)
class Attempt:
    """One group re-scored, or why not, and what it cost (seconds, charged to its peer)."""

    rescored: Rescored | None
    error: RejectedMessage | None
    seconds: float

    def result(self) -> Rescored:
        """The re-scored group; raises the rejection if there is one."""
        if self.error is not None:
            raise self.error
        assert self.rescored is not None
        return self.rescored


class InProcess:
    """Re-scoring in the calling thread, with no bound (nothing to start or stop)."""

    def __call__(self, group: RolloutGroup) -> Attempt:
        started = time.perf_counter()
        try:
            rescored = rescore_group(group)
        except RejectedMessage as e:
            return Attempt(None, e, time.perf_counter() - started)
        return Attempt(rescored, None, time.perf_counter() - started)

    def start(self) -> None:
        pass

    def close(self) -> None:
        pass


class Rescorer(Protocol):
    """What the verifier re-scores with: `InProcess` or `RescoreWorker`."""

    def __call__(self, group: RolloutGroup) -> Attempt: ...

    def start(self) -> None: ...

    def close(self) -> None: ...


@dataclass(frozen=True)
class WorkerSettings:
    """The worker's bounds (`verify.group_deadline_s`, `worker_memory_mb`, `task_cache_mb`;
    the defaults are the config's) and how long it is waited for."""

    deadline_s: float = VerifySection().group_deadline_s
    memory_mb: int = VerifySection().worker_memory_mb
    cache_mb: int = VerifySection().task_cache_mb
    grace_s: float = 1.0  # past the deadline before a silent worker is killed
    startup_s: float = 120.0  # longest wait for a (re)started worker to be ready

    @classmethod
    def from_config(cls, config) -> WorkerSettings:
        v = config.verify
        return cls(v.group_deadline_s, v.worker_memory_mb, v.task_cache_mb)


@dataclass
class WorkerStats:
    """What the worker did in this process's lifetime."""

    groups: int = 0
    rejected: int = 0  # failed a check (bad task, question mismatch)
    timeouts: int = 0
    memory: int = 0
    crashes: int = 0
    restarts: int = 0
    round_trip_s: float = 0.0  # summed over answered groups, request sent to reply read
    worker_s: float = 0.0  # of which the worker's own time on the groups
    peak_rss_mb: float = 0.0  # the most resident memory a worker reported on one group

    @property
    def overhead_ms(self) -> float:
        """Mean cost of the round trip itself per answered group (encoding, pipes, decoding)."""
        answered = self.groups - self.timeouts - self.crashes
        return 1000 * (self.round_trip_s - self.worker_s) / answered if answered > 0 else 0.0


class RescoreWorker:
    """A verification worker process and the calls to it (thread-safe, one group at a time):
    the process is a `WorkerProcess`; this judges its replies and counts them."""

    def __init__(self, settings: WorkerSettings = WorkerSettings(), python: str = sys.executable):
        self.settings = settings
        self.python = python
        self.stats = WorkerStats()
        self._lock = threading.Lock()
        self._process = WorkerProcess(settings, python, self.stats)

    def start(self) -> None:
        """Start the worker if none runs (returns at once; it gets ready in the background)."""
        with self._lock:
            self._process.start()

    def close(self) -> None:
        """Stop the worker (it exits when its stdin closes); later calls start none."""
        with self._lock:
            self._process.close()
        self._process.shutdown()

    @property
    def pid(self) -> int | None:
        return self._process.pid

    # -- one group ---------------------------------------------------------------------------------

    def __call__(self, group: RolloutGroup) -> Attempt:
        """Re-score `group` in the worker. A group that fails a check or a bound comes back
        with its rejection; raises `VerifyWorkerError` only if no worker can start."""
        request = protocol.encode(protocol.Request(encode_group(group)))
        with self._lock:
            self._process.ensure_ready()
            started = time.perf_counter()
            reply = self._process.exchange(request)
            seconds = time.perf_counter() - started
            self.stats.groups += 1
            try:
                return Attempt(self._result(group, reply, seconds), None, seconds)
            except RejectedMessage as e:
                return Attempt(None, e, seconds)

    def _result(self, group: RolloutGroup, reply, seconds: float) -> Rescored:
        s = self.settings
        if reply is TIMED_OUT:
            self.stats.timeouts += 1
            raise RejectedMessage(
                Reason.VERIFY_TIMEOUT,
                f"no answer within {s.deadline_s + s.grace_s:g} s (worker killed)",
            )
        if reply is None:
            self.stats.crashes += 1
            raise RejectedMessage(
                Reason.VERIFY_CRASHED, "the verification worker died on this group"
            )
        self.stats.round_trip_s += seconds
        self.stats.worker_s += reply.seconds
        self.stats.peak_rss_mb = max(self.stats.peak_rss_mb, reply.peak_rss_mb)
        if reply.status == protocol.Outcome.TIMEOUT:
            self.stats.timeouts += 1
            raise RejectedMessage(Reason.VERIFY_TIMEOUT, reply.detail)
        if reply.status == protocol.Outcome.MEMORY:
            self.stats.memory += 1
            raise RejectedMessage(Reason.VERIFY_MEMORY, reply.detail)
        if reply.status == protocol.Outcome.REJECTED:
            self.stats.rejected += 1
            raise RejectedMessage(Reason.from_stored(reply.reason), reply.detail)
        return self._rescored(group, reply)

    def _rescored(self, group: RolloutGroup, reply: protocol.Reply) -> Rescored:
        n = len(group.completions)
        sane = (
            reply.status == protocol.Outcome.OK
            and len(reply.correctness) == len(reply.tagged) == len(reply.formatted) == n
            and all(math.isfinite(c) and 0.0 <= c <= 1.0 for c in reply.correctness)
            and reply.question == group.question
        )
        if not sane:
            self.stats.crashes += 1
            self._process.restart()
            raise RejectedMessage(
                Reason.VERIFY_CRASHED, "the verification worker answered nonsense"
            )
        # The node needs the rebuilt question (for prompts), never the raw entry: not sent back.
        task = Task(spec=group.task, question=reply.question, answer=reply.answer, entry={})
        return Rescored(task, reply.correctness, reply.tagged, reply.formatted)
