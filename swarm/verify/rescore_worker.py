"""The verification worker: a process that rebuilds peers' tasks and scores their completions.

A peer's group names a task spec and carries completions of its choosing; rebuilding the
task and running the dataset's scorer on them is the one check whose cost the peer decides.
The node runs it here, in a child process of its own with an address-space limit
(`RLIMIT_AS`), a deadline per group (an interval timer that interrupts Python code; the
parent kills the process when C code does not return in time) and the byte-bounded dataset
cache (`swarm.tasks.cache`). The parent side is `swarm.verify.rescore_pool.RescoreWorker`.

Protocol, on stdin and stdout: frames of a 4-byte big-endian length and a msgpack body.
The worker first writes `Ready`; then, for each `Request` (a group's encoded body), a
`Received` as soon as it has read the request, and one `Reply`: the rebuilt question and
answer and the per-completion scores, or why not. The `Received` tells the parent whether a
worker that died had taken the group (the group's doing: `verify_crashed`) or died before
(between groups: nobody's doing; the group goes to a fresh worker). Plain
typed data both ways, nothing pickled: a worker is fed a peer's bytes, so the parent reads
what it says as untrusted. It exits when its stdin closes (or its parent dies).

Start:  python -m swarm.verify.rescore_worker --memory-mb 1024 --cache-mb 128 --deadline-s 2
"""

from __future__ import annotations

import argparse
import ctypes
import os
import resource
import signal
import struct
import sys
import time
import warnings
from typing import BinaryIO

import msgspec

from swarm.core.errors import RejectedMessage
from swarm.verify.rescore import rescore_group
from swarm.wire import decode_group

FRAME = struct.Struct(">I")
MAX_FRAME = 4 << 20  # a request holds one group (<= 256 KB on the wire); replies are smaller
PROTOCOL = 2


class Ready(msgspec.Struct, frozen=True, tag=True):
    pid: int
    protocol: int = PROTOCOL


class Request(msgspec.Struct, frozen=True, tag=True):
    body: bytes  # `swarm.wire.encode_group` of the group


class Received(msgspec.Struct, frozen=True, tag=True):
    """The request was read whole; its `Reply` follows."""


class Reply(msgspec.Struct, frozen=True, tag=True):
    status: str  # a `Outcome` value
    reason: str = ""  # a `Reason` code, with status "rejected"
    detail: str = ""
    question: str = ""
    answer: str | None = None
    correctness: tuple[float, ...] = ()
    tagged: tuple[bool, ...] = ()
    formatted: tuple[bool, ...] = ()
    seconds: float = 0.0  # the worker's own time on the group
    peak_rss_mb: float = 0.0


class Outcome:
    OK = "ok"
    REJECTED = "rejected"  # the group failed a check (its reason says which)
    TIMEOUT = "timeout"  # interrupted at the deadline
    MEMORY = "memory"  # ran out of its memory limit; the worker exits after replying


MESSAGES = Ready | Request | Received | Reply
_decoder = msgspec.msgpack.Decoder(MESSAGES)
_encoder = msgspec.msgpack.Encoder()


def encode(message: Ready | Request | Received | Reply) -> bytes:
    data = _encoder.encode(message)
    return FRAME.pack(len(data)) + data


def decode(data: bytes) -> Ready | Request | Received | Reply:
    return _decoder.decode(data)


def read_frame(stream: BinaryIO) -> bytes | None:
    """One frame's body from a blocking stream; None at its end."""
    head = stream.read(FRAME.size)
    if len(head) < FRAME.size:
        return None
    (size,) = FRAME.unpack(head)
    if size > MAX_FRAME:
        raise ValueError(f"frame of {size} bytes")
    body = stream.read(size)
    return body if len(body) == size else None


class Deadline(BaseException):
    """Raised in the worker at a group's deadline. A `BaseException`, so that the scorers'
    `except Exception` (which counts an error as a wrong answer) does not swallow it."""


def _on_alarm(_signum, _frame) -> None:
    raise Deadline()


def limit_memory(megabytes: int) -> None:
    """Cap this process's address space: allocations past it fail (MemoryError)."""
    limit = megabytes << 20
    _, hard = resource.getrlimit(resource.RLIMIT_AS)
    if hard != resource.RLIM_INFINITY:
        limit = min(limit, hard)
    resource.setrlimit(resource.RLIMIT_AS, (limit, hard))


def die_with_parent() -> None:
    """Ask Linux to kill this process when its parent dies (best effort elsewhere)."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def reset_peak_rss() -> None:
    """Start this process's resident-memory peak afresh (Linux: VmHWM), if the system can."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
    except OSError:
        pass


def peak_rss_mb() -> float:
    """The resident-memory peak since the last reset (else since the process started)."""
    try:
        with open("/proc/self/status") as status:
            for line in status:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux


def handle(request: Request, deadline_s: float, memory_mb: int) -> Reply:
    """Rebuild and score one group within the deadline (see the module docstring).

    A group is `memory` if it ran out of the address-space limit where the worker sees it
    (a `MemoryError` the scorer did not swallow), or if the worker's resident memory went
    past half the limit while on it (scorers count most errors, MemoryError included, as a
    wrong answer, so the peak is what shows a group that needed too much).
    """
    started = time.perf_counter()
    reset_peak_rss()
    signal.setitimer(signal.ITIMER_REAL, deadline_s)
    try:
        rescored = rescore_group(decode_group(request.body))
        reply = Reply(
            Outcome.OK,
            question=rescored.task.question,
            answer=rescored.task.answer,
            correctness=rescored.correctness,
            tagged=rescored.tagged,
            formatted=rescored.well_formatted,
        )
    except RejectedMessage as e:
        reply = Reply(Outcome.REJECTED, reason=str(e.reason), detail=e.detail[:300])
    except Deadline:
        reply = Reply(Outcome.TIMEOUT, detail=f"past the {deadline_s:g} s deadline")
    except MemoryError:
        reply = Reply(Outcome.MEMORY, detail=f"past the {memory_mb} MB memory limit")
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
    peak = peak_rss_mb()
    if reply.status != Outcome.MEMORY and peak > memory_mb / 2:
        reply = Reply(
            Outcome.MEMORY, detail=f"resident memory reached {peak:.0f} MB of {memory_mb}"
        )
    return msgspec.structs.replace(reply, seconds=time.perf_counter() - started, peak_rss_mb=peak)


def serve(stdin: BinaryIO, stdout: BinaryIO, deadline_s: float, memory_mb: int) -> int:
    stdout.write(encode(Ready(os.getpid())))
    stdout.flush()
    while True:
        body = read_frame(stdin)
        if body is None:
            return 0
        stdout.write(encode(Received()))
        stdout.flush()
        request = decode(body)
        if not isinstance(request, Request):
            return 2
        reply = handle(request, deadline_s, memory_mb)
        stdout.write(encode(reply))
        stdout.flush()
        if reply.status == Outcome.MEMORY:
            return 3  # a fresh worker starts with nothing held


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--memory-mb", type=int, required=True)
    parser.add_argument("--cache-mb", type=int, required=True)
    parser.add_argument("--deadline-s", type=float, required=True)
    args = parser.parse_args(argv)
    die_with_parent()
    warnings.simplefilter("ignore")  # reasoning-gym's warnings would only fill the parent's stderr
    signal.signal(signal.SIGALRM, _on_alarm)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C stops the node; the node stops us
    limit_memory(args.memory_mb)
    from swarm.tasks import cache as task_cache

    task_cache.configure(args.cache_mb << 20)
    import reasoning_gym  # noqa: F401 - imported once, before the first group's deadline runs

    return serve(sys.stdin.buffer, sys.stdout.buffer, args.deadline_s, args.memory_mb)


if __name__ == "__main__":
    sys.exit(main())
