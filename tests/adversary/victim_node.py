"""The victim of the cost attacks: a real `Node` on libp2p, running rounds in a thread.

Default settings (the built-in tiny model on the CPU, no evaluation, no checkpoint but the
last); what the attacks cost it is read from its ledger (each round's time), its process
(RSS), its verifier (reputations, the worker) and its transport (GossipSub scores).
"""

from __future__ import annotations

import statistics
import threading
from pathlib import Path

from swarm.config import build_config
from swarm.ledger import BanRow, GroupRow, Ledger, RoundRow, counted_rejections
from swarm.ledger.retention import used_bytes
from swarm.node import Node
from swarm.node.heap import release_free_memory
from tests.waiting import wait_for, wait_node_info


def rss_mb(pid: int | str = "self") -> float:
    """Resident memory of a process, in MB (0 if it is gone)."""
    try:
        with open(f"/proc/{pid}/status") as status:
            for line in status:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


def retained_rss_mb() -> float:
    """This process's resident memory once its free heap is returned to the OS: what it
    holds, not what it freed and has not handed back yet (the node trims every few rounds,
    `swarm.node.heap`)."""
    release_free_memory()
    return rss_mb()


class VictimNode:
    def __init__(self, run_dir: Path, **sections):
        raw = {
            "node": {"name": "victim", "run_dir": str(run_dir), "checkpoint_every": 1000},
            "policy": {"device": "cpu", "dtype": "float32"},
            "tasks": {"eval_size": 0},
            "p2p": {"exchange": "gossip"},  # the floods here are gossip floods
        }
        for section, values in sections.items():
            raw.setdefault(section, {}).update(values)
        self.config = build_config(raw, "victim")
        self.node = Node(self.config)
        self.errors: list[BaseException] = []
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()
        info = wait_node_info(self.config.run_dir, 120, "the victim to listen")
        self.addrs: list[str] = info["addrs"]
        self.peer_id: str = info["peer_id"]

    def _run(self) -> None:
        try:
            self.node.run()
        except BaseException as e:  # noqa: BLE001 - reported by `close`
            self.errors.append(e)

    @property
    def round(self) -> int:
        return self.node.state.round

    def wait_rounds(self, n: int, timeout: float = 120.0) -> int:
        """Wait for `n` more rounds; the round reached."""
        target = self.round + n
        wait_for(lambda: self.round >= target, timeout, f"round {target}")
        return self.round

    def _read(self, fn):
        ledger = Ledger(self.config.ledger_url, create=False)
        try:
            with ledger.reader() as s:
                return fn(s)
        finally:
            ledger.close()

    def round_seconds(self, first: int, last: int) -> list[float]:
        """Time of each live round in [first, last)."""
        return self._read(
            lambda s: [
                r.total_s
                for r in s.query(RoundRow).filter(RoundRow.round >= first, RoundRow.round < last)
                if not r.superseded
            ]
        )

    def median_round(self, first: int, last: int) -> float:
        return statistics.median(self.round_seconds(first, last))

    def rows_from(self, peer: str) -> list[tuple[str, str]]:
        """(status, reason) of every group row the ledger holds from `peer`."""
        return self._read(
            lambda s: [
                (r.status, r.reason) for r in s.query(GroupRow).filter(GroupRow.source == peer)
            ]
        )

    def banned(self) -> set[str]:
        return self._read(lambda s: {b.peer_id for b in s.query(BanRow)})

    def counted_from(self, peer: str) -> dict[str, int]:
        return self._read(lambda s: counted_rejections(s, peer))

    def ledger_bytes(self) -> int:
        """Bytes of the ledger's pages in use (its files on disk grow and shrink in steps)."""
        ledger = Ledger(self.config.ledger_url, create=False)
        try:
            return used_bytes(ledger) or 0
        finally:
            ledger.close()

    def close(self) -> None:
        self.node.request_stop()
        self.thread.join(timeout=120)
        assert not self.thread.is_alive(), "the victim did not stop"
        self.node.close()
        assert self.errors == [], self.errors
