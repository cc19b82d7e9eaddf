"""The verification worker's process, seen from the node: started, restarted, stopped, and
spoken to in frames (`swarm.verify.rescore_worker` is the child's side and the protocol).

`WorkerProcess` starts the child from a thread of its own, reads its frames with a
timeout, waits for it to say it is ready, and hands it one request at a time (`exchange`):
a worker that does not answer in time, dies, or says nonsense is killed and a fresh one
started. Not thread-safe on its own: `swarm.verify.rescore_pool.RescoreWorker` holds the
lock and judges the replies.
"""

from __future__ import annotations

import functools
import os
import select
import subprocess
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import IO

from swarm.core.errors import VerifyWorkerError
from swarm.verify import rescore_worker as protocol

TIMED_OUT = object()  # what `read` and `exchange` return when the worker did not answer in time


class WorkerProcess:
    """One verification worker process at a time (see the module docstring)."""

    def __init__(self, settings, python: str, stats):
        """`settings`: a `WorkerSettings`; `stats`: its `WorkerStats`, whose restarts this counts."""
        self.settings = settings
        self.python = python
        self.stats = stats
        self.closed = False
        self._proc: subprocess.Popen | None = None
        self._stderr: IO[bytes] | None = None
        self._buffer = bytearray()
        self._ready = False
        self._spawner = ThreadPoolExecutor(max_workers=1, thread_name_prefix="verify-worker")

    # -- the process -----------------------------------------------------------------------------

    def start(self) -> None:
        """Start the worker if none runs (returns at once; it gets ready in the background)."""
        if self._proc is None and not self.closed:
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

    def restart(self) -> None:
        self._kill()
        self.stats.restarts += 1
        if not self.closed:
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
        self.closed = True
        self._stop()

    def shutdown(self) -> None:
        """End the thread that starts workers (after `close`)."""
        self._spawner.shutdown(wait=True)

    @property
    def pid(self) -> int | None:
        proc = self._proc
        return None if proc is None else proc.pid

    # -- frames ------------------------------------------------------------------------------------

    def _read(self, timeout: float):
        """The next frame's body; `TIMED_OUT` after `timeout` s; None if the worker exited."""
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
                return TIMED_OUT
            readable, _, _ = select.select([fd], [], [], remaining)
            if readable:
                chunk = os.read(fd, 1 << 16)
                if not chunk:
                    return None
                self._buffer += chunk

    def ensure_ready(self) -> None:
        if self._proc is not None and self._proc.poll() is not None:
            self.restart()  # it died between two groups: no group of a peer's to blame
        if self._proc is None:
            if self.closed:
                raise VerifyWorkerError("the verification worker is closed")
            self._spawn()
        if self._ready:
            return
        body = self._read(self.settings.startup_s)
        message = None if body is None or body is TIMED_OUT else protocol.decode(body)
        if not isinstance(message, protocol.Ready) or message.protocol != protocol.PROTOCOL:
            why = "did not start in time" if body is TIMED_OUT else "exited while starting"
            tail = self._stderr_tail()
            self._kill()
            raise VerifyWorkerError(
                f"the verification worker {why}" + (f": {tail[-500:]}" if tail else "")
            )
        self._ready = True

    def exchange(self, request: bytes):
        """Send one request, read its reply; restart the worker if it fails to answer."""
        taken = self._hand_over(request)
        if taken is not True:
            return taken
        body = self._read(self.settings.deadline_s + self.settings.grace_s)
        if body is TIMED_OUT:
            self.restart()
            return TIMED_OUT
        if body is None:
            self.restart()
            return None
        try:
            reply = protocol.decode(body)
        except ValueError:  # msgspec.DecodeError and ValidationError are ValueErrors
            reply = None
        if not isinstance(reply, protocol.Reply):
            self.restart()
            return None
        if reply.status == protocol.Outcome.MEMORY:
            self.restart()  # it exits after saying so; a fresh one starts with nothing held
        return reply

    def _hand_over(self, request: bytes):
        """Send the request until a worker says it has it (True). A worker that died before
        reading it died between two groups: not the group's doing, so the group goes to a
        fresh worker, once. Else `TIMED_OUT`, or None if even the fresh one died."""
        wait = self.settings.deadline_s + self.settings.grace_s
        for attempt in range(2):
            if attempt:
                self.restart()
                self.ensure_ready()
            assert self._proc is not None and self._proc.stdin is not None
            try:
                self._proc.stdin.write(request)
                self._proc.stdin.flush()
            except (BrokenPipeError, OSError):
                continue
            body = self._read(wait)
            if body is TIMED_OUT:
                self.restart()
                return TIMED_OUT
            if body is None:
                continue
            try:
                said = protocol.decode(body)
            except ValueError:  # msgspec.DecodeError and ValidationError are ValueErrors
                said = None
            if isinstance(said, protocol.Received):
                return True
            self.restart()
            return None
        self.restart()
        return None
