"""What a process costs: resident memory now and at its peak, per stage, and where it lives;
and the TCP bytes it has moved.

Linux only (reads /proc/self). A stage's peak is the highest resident set size reached
while it ran: the kernel's high-water mark (VmHWM) is reset to the current size when a
stage starts (writing 5 to /proc/self/clear_refs), so stages do not hide behind an earlier
peak. Where the kernel refuses the reset, the process-wide peak is reported instead and
`Stage.peak_is_stage` is False.

Deliberately not here: what the stages are (the benchmarks decide) or any output format.
"""

from __future__ import annotations

import collections
import os
import socket
import struct
import sys
import time
from dataclasses import asdict, dataclass

_MB = 1024 * 1024


def _status_kb(field: str) -> int:
    with open("/proc/self/status", encoding="ascii") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    return 0


def rss_mb() -> float:
    """Resident set size of this process now, in MB."""
    return _status_kb("VmRSS") / 1024


def peak_mb() -> float:
    """The highest resident set size since the process started or the last `reset_peak`."""
    return _status_kb("VmHWM") / 1024


def reset_peak() -> bool:
    """Reset the high-water mark to the current RSS; False where the kernel does not allow it."""
    try:
        with open("/proc/self/clear_refs", "w", encoding="ascii") as f:
            f.write("5")
    except OSError:
        return False
    return True


def memory_map() -> dict[str, float]:
    """Resident MB by kind of mapping: heap, anonymous, stack, and each file mapped (top 8)."""
    kinds: collections.Counter[str] = collections.Counter()
    name = "[anon]"
    with open("/proc/self/smaps", encoding="utf-8", errors="replace") as f:
        for line in f:
            head = line.split(None, 1)[0]
            if not head.endswith(":"):  # a mapping's header: address perms offset dev inode [path]
                parts = line.split()
                name = parts[5] if len(parts) >= 6 else "[anon]"
            elif head == "Rss:":
                kinds[name] += int(line.split()[1])
    files = collections.Counter({k: v for k, v in kinds.items() if not k.startswith("[")})
    out = {k: v / 1024 for k, v in kinds.items() if k.startswith("[")}
    for path, kb in files.most_common(8):
        out[os.path.basename(path)] = kb / 1024
    out["other files"] = sum(files.values()) / 1024 - sum(
        kb / 1024 for _, kb in files.most_common(8)
    )
    return {k: round(v, 1) for k, v in sorted(out.items(), key=lambda kv: -kv[1])}


@dataclass
class Stage:
    """One stage of a process: its wall and CPU seconds, RSS after it and peak RSS during it."""

    name: str
    wall_s: float = 0.0
    cpu_s: float = 0.0
    rss_mb: float = 0.0
    peak_mb: float = 0.0
    peak_is_stage: bool = True
    modules: int = 0  # modules imported in the process once the stage ended

    def as_dict(self) -> dict:
        return asdict(self)


class Stages:
    """Measures consecutive stages: `with stages.measure("load"): ...`."""

    def __init__(self) -> None:
        self.stages: list[Stage] = []

    def measure(self, name: str) -> _Measuring:
        return _Measuring(self, name)

    @property
    def peak_mb(self) -> float:
        """The highest peak of any stage so far."""
        return max((s.peak_mb for s in self.stages), default=peak_mb())


class _Measuring:
    def __init__(self, stages: Stages, name: str) -> None:
        self.stages, self.stage = stages, Stage(name)

    def __enter__(self) -> Stage:
        self.stage.peak_is_stage = reset_peak()
        self._wall, self._cpu = time.perf_counter(), time.process_time()
        return self.stage

    def __exit__(self, *exc_info: object) -> None:
        s = self.stage
        s.wall_s = round(time.perf_counter() - self._wall, 4)
        s.cpu_s = round(time.process_time() - self._cpu, 4)
        s.rss_mb, s.peak_mb = round(rss_mb(), 1), round(peak_mb(), 1)
        s.modules = len(sys.modules)
        self.stages.stages.append(s)


_TCP_BYTES_ACKED, _TCP_BYTES_RECEIVED = 120, 128  # offsets of the u64s in Linux's tcp_info


class TcpMeter:
    """TCP payload bytes this process sent and received over all its sockets, cumulative.

    Read from each open TCP socket's TCP_INFO (bytes acknowledged by the peer, bytes
    received), remembered per socket, so a connection that closes keeps what it moved up
    to the last reading. Counts exactly what went on the wire above TCP (Noise, Yamux and
    every protocol included); not what the kernel added (headers, retransmissions).
    """

    def __init__(self) -> None:
        self._last: dict[str, tuple[int, int]] = {}  # socket inode -> (received, sent)
        self.received = 0
        self.sent = 0

    def read(self) -> tuple[int, int]:
        """(bytes received, bytes sent) since this meter was made."""
        for inode, fd in _tcp_sockets():
            counts = _tcp_counts(fd)
            if counts is None:
                continue
            before = self._last.get(inode, (0, 0))
            self.received += max(0, counts[0] - before[0])
            self.sent += max(0, counts[1] - before[1])
            self._last[inode] = counts
        return self.received, self.sent


def _tcp_sockets():
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        if target.startswith("socket:"):
            yield target, int(fd)


def _tcp_counts(fd: int) -> tuple[int, int] | None:
    try:
        sock = socket.socket(fileno=os.dup(fd))
    except OSError:
        return None
    try:
        if sock.family not in (socket.AF_INET, socket.AF_INET6) or sock.type != socket.SOCK_STREAM:
            return None
        info = sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, 256)
        if len(info) < _TCP_BYTES_RECEIVED + 8:
            return None
        sent = struct.unpack_from("Q", info, _TCP_BYTES_ACKED)[0]
        received = struct.unpack_from("Q", info, _TCP_BYTES_RECEIVED)[0]
        return received, sent
    except OSError:
        return None
    finally:
        sock.close()
