"""One node per run folder: an exclusive lock file held for the node's lifetime.

Two nodes on one run folder would interleave their rounds in one ledger and overwrite each
other's checkpoints. A node takes an `fcntl.flock` on `<run dir>/node.lock` before it loads
anything and holds it until it closes; a second node (or `swarm-node join`) on the same
folder is refused at once with the PID of the holder, which the holder writes into the
file. The kernel drops the lock when its process ends in any way (SIGKILL included), so a
crashed node never leaves a stale lock behind; the file itself stays, harmless.

Deliberately not here: locking against readers. `status`, `doctor`, `peers` and `ban` work on
a running node's folder; they read (or, `ban`, write one row) through SQLite's own locking.
"""

from __future__ import annotations

import fcntl
import os
from pathlib import Path

from swarm.core.errors import RunFolderBusy, SwarmError

LOCK_FILE = "node.lock"


class RunLock:
    """The held lock of one run folder; `release` (or the process's end) lets it go."""

    def __init__(self, folder: Path, fd: int):
        self.folder = folder
        self._fd: int | None = fd

    @classmethod
    def acquire(cls, folder: str | os.PathLike) -> RunLock:
        """Take the folder's lock (the folder must exist); `RunFolderBusy` if another holds it."""
        folder = Path(folder)
        fd = _open(folder)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = _read_pid(fd)
            os.close(fd)
            raise RunFolderBusy(busy_message(folder, holder)) from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        return cls(folder, fd)

    def release(self) -> None:
        """Let the lock go (a second call does nothing)."""
        if self._fd is None:
            return
        fd, self._fd = self._fd, None
        fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)


def check_free(folder: str | os.PathLike) -> None:
    """Refuse (`RunFolderBusy`) if a node holds `folder` now; a missing folder is free."""
    if Path(folder).is_dir():
        RunLock.acquire(folder).release()


def busy_message(folder: Path, pid: int | None) -> str:
    who = f"process {pid}" if pid else "another process"
    return (
        f"run folder {folder} is in use by {who} (a running swarm-node join?): stop it first, "
        "or give this node its own run folder (--run-dir)"
    )


def _open(folder: Path) -> int:
    try:
        return os.open(folder / LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o644)
    except OSError as e:
        raise SwarmError(f"cannot lock run folder {folder}: {e.strerror or e}") from None


def _read_pid(fd: int) -> int | None:
    try:
        text = os.pread(fd, 32, 0).decode("ascii", "replace").strip()
    except OSError:
        return None
    return int(text) if text.isdigit() else None
