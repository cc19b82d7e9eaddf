"""Re-scoring peers' groups within bounds: the parent side of the verification worker.

`RescoreWorker` runs `swarm.verify.rescore.rescore_group` in a long-lived child process
(`swarm.verify.rescore_worker`), started once and reused: one group at a time, each within a
deadline, the process within an address-space limit. A group past its deadline is
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

import functools
import math
import os
import select
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Protocol

from swarm.config import VerifySection
from swarm.core.errors import RejectedMessage, VerifyWorkerError
from swarm.core.reasons import Reason
from swarm.tasks import Task
from swarm.verify import rescore_worker as protocol
from swarm.verify.rescore import Rescored, rescore_group
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


_TIMED_OUT = object()


class RescoreWorker:
    """A verification worker process and the calls to it (thread-safe, one group at a time)."""

    def __init__(self, settings: WorkerSettings = WorkerSettings(), python: str = sys.executable):
        self.settings = settings
        self.python = python
        self.stats = WorkerStats()
        self._lock = threading.Lock()
        self._proc: subprocess.Popen | None = None
        self._stderr: IO[bytes] | None = None
        self._buffer = bytearray()
        self._ready = False
        self._closed = False
        self._spawner = ThreadPoolExecutor(max_workers=1, thread_name_prefix="verify-worker")

    # -- the process -----------------------------------------------------------------------------

    def start(self) -> None:
        """Start the worker if none runs (returns at once; it gets ready in the background)."""
        with self._lock:
            if self._proc is None and not self._closed:
                self._spawn()

    def _spawn(self) -> None:
        s = self.settings
        root = str(Path(__file__).resolve().parents[2])  # the folder holding the swarm package
        env = dict(
            os.environ,
            PYTHONPATH=os.pathsep.join(filter(None, [root, os.environ.get("PYTHONPATH")])),
        )
        self._stderr = tempfile.TemporaryFile()
        command = [
            self.python,
            "-m",
            "swarm.verify.rescore_worker",
            "--memory-mb",
            str(s.memory_mb),
            "--cache-mb",
            str(s.cache_mb),
            "--deadline-s",
            repr(s.deadline_s),
        ]
        popen = functools.partial(
            subprocess.Popen,
            command,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._stderr,
            env=env,
            start_new_session=True,  # a Ctrl-C for the node is not its
        )
        try:
            # Started from a thread of its own that lives until `close`: Linux kills the worker
            # when the thread that started it ends (PR_SET_PDEATHSIG), not only the process.
            self._proc = self._spawner.submit(popen).result()
        except OSError as e:
            raise VerifyWorkerError(f"cannot start the verification worker: {e}") from None
        self._buffer.clear()
        self._ready = False

    def _stop(self) -> None:
        proc, self._proc = self._proc, None
        self._ready = False
        if proc is None:
            return
        for pipe in (proc.stdin, proc.stdout):
            try:
                if pipe is not None:
                    pipe.close()
            except OSError:
                pass
        try:
            proc.wait(timeout=2.0)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        if self._stderr is not None:
            self._stderr.close()
            self._stderr = None

    def _kill(self) -> None:
        if self._proc is not None:
            self._proc.kill()
        self._stop()

    def _restart(self) -> None:
        self._kill()
        self.stats.restarts += 1
        if not self._closed:
            self._spawn()

    def _stderr_tail(self) -> str:
        if self._stderr is None:
            return ""
        self._stderr.seek(0, os.SEEK_END)
        size = self._stderr.tell()
        self._stderr.seek(max(0, size - 2000))
        return self._stderr.read().decode("utf-8", "replace").strip()

    def close(self) -> None:
        """Stop the worker (it exits when its stdin closes); later calls start none."""
        with self._lock:
            self._closed = True
            self._stop()
        self._spawner.shutdown(wait=True)

    @property
    def pid(self) -> int | None:
        proc = self._proc
        return None if proc is None else proc.pid

    # -- frames ------------------------------------------------------------------------------------

    def _read(self, timeout: float):
        """The next frame's body; `_TIMED_OUT` after `timeout` s; None if the worker exited."""
        assert self._proc is not None and self._proc.stdout is not None
        fd = self._proc.stdout.fileno()
        deadline = time.monotonic() + timeout
        head = protocol.FRAME.size
        while True:
            if len(self._buffer) >= head:
                (size,) = protocol.FRAME.unpack_from(self._buffer)
                if size > protocol.MAX_FRAME:
                    return None  # a worker that says this much is not a sane one
                if len(self._buffer) >= head + size:
                    body = bytes(self._buffer[head : head + size])
                    del self._buffer[: head + size]
                    return body
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return _TIMED_OUT
            readable, _, _ = select.select([fd], [], [], remaining)
            if readable:
                chunk = os.read(fd, 1 << 16)
                if not chunk:
                    return None
                self._buffer += chunk

    def _ensure_ready(self) -> None:
        if self._proc is not None and self._proc.poll() is not None:
            self._restart()  # it died between two groups: no group of a peer's to blame
        if self._proc is None:
            if self._closed:
                raise VerifyWorkerError("the verification worker is closed")
            self._spawn()
        if self._ready:
            return
        body = self._read(self.settings.startup_s)
        message = None if body is None or body is _TIMED_OUT else protocol.decode(body)
        if not isinstance(message, protocol.Ready) or message.protocol != protocol.PROTOCOL:
            why = "did not start in time" if body is _TIMED_OUT else "exited while starting"
            tail = self._stderr_tail()
            self._kill()
            raise VerifyWorkerError(
                f"the verification worker {why}" + (f": {tail[-500:]}" if tail else "")
            )
        self._ready = True

    # -- one group ---------------------------------------------------------------------------------

    def __call__(self, group: RolloutGroup) -> Attempt:
        """Re-score `group` in the worker. A group that fails a check or a bound comes back
        with its rejection; raises `VerifyWorkerError` only if no worker can start."""
        request = protocol.encode(protocol.Request(encode_group(group)))
        with self._lock:
            self._ensure_ready()
            started = time.perf_counter()
            reply = self._exchange(request)
            seconds = time.perf_counter() - started
            self.stats.groups += 1
            try:
                return Attempt(self._result(group, reply, seconds), None, seconds)
            except RejectedMessage as e:
                return Attempt(None, e, seconds)

    def _exchange(self, request: bytes):
        """Send one request, read its reply; restart the worker if it fails to answer."""
        taken = self._hand_over(request)
        if taken is not True:
            return taken
        body = self._read(self.settings.deadline_s + self.settings.grace_s)
        if body is _TIMED_OUT:
            self._restart()
            return _TIMED_OUT
        if body is None:
            self._restart()
            return None
        try:
            reply = protocol.decode(body)
        except ValueError:  # msgspec.DecodeError and ValidationError are ValueErrors
            reply = None
        if not isinstance(reply, protocol.Reply):
            self._restart()
            return None
        if reply.status == protocol.Outcome.MEMORY:
            self._restart()  # it exits after saying so; a fresh one starts with nothing held
        return reply

    def _hand_over(self, request: bytes):
        """Send the request until a worker says it has it (True). A worker that died before
        reading it died between two groups: not the group's doing, so the group goes to a
        fresh worker, once. Else `_TIMED_OUT`, or None if even the fresh one died."""
        wait = self.settings.deadline_s + self.settings.grace_s
        for attempt in range(2):
            if attempt:
                self._restart()
                self._ensure_ready()
            assert self._proc is not None and self._proc.stdin is not None
            try:
                self._proc.stdin.write(request)
                self._proc.stdin.flush()
            except (BrokenPipeError, OSError):
                continue
            body = self._read(wait)
            if body is _TIMED_OUT:
                self._restart()
                return _TIMED_OUT
            if body is None:
                continue
            try:
                said = protocol.decode(body)
            except ValueError:  # msgspec.DecodeError and ValidationError are ValueErrors
                said = None
            if isinstance(said, protocol.Received):
                return True
            self._restart()
            return None
        self._restart()
        return None

    def _result(self, group: RolloutGroup, reply, seconds: float) -> Rescored:
        s = self.settings
        if reply is _TIMED_OUT:
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
            self._restart()
            raise RejectedMessage(
                Reason.VERIFY_CRASHED, "the verification worker answered nonsense"
            )
        # The node needs the rebuilt question (for prompts), never the raw entry: not sent back.
        task = Task(spec=group.task, question=reply.question, answer=reply.answer, entry={})
        return Rescored(task, reply.correctness, reply.tagged, reply.formatted)
