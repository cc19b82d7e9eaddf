"""What peers that vanish, stall or lie about others cost a real node's rounds: the bench.

`scripts/bench_unresponsive.py` is its command line (cases, rounds before and after the event,
the JSON it writes); `run` runs the cases and writes their results after each one.
"""

from __future__ import annotations

import collections
import dataclasses
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from lab.join_process import start_join
from lab.unresponsive_report import (
    CRITERION,
    FULL_PULL,
    WARMUP_ROUNDS,
    Marks,
    Round,
    summarize,
    table,
)

ROOT = Path(__file__).resolve().parents[1]  # the checkout (its results/, on PYTHONPATH)
MAX_REFUSALS_KEPT = 20  # refused groups (round, reason, detail) kept in a result
CASES = ("none", "vanish-1", "vanish-4", "vanish-16", "dead-view", "silent-view", "stall")


# Every process's math on one thread: two OpenMP threads on a 2-core machine shared with
# other work wait on each other, and rounds then swung 10-40x with that work, not the attack.
ENV = {"PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}


def spawn(args: list[str], **kw) -> subprocess.Popen:
    return subprocess.Popen(args, env={**os.environ, **ENV}, text=True, **kw)


@dataclasses.dataclass(frozen=True)
class Honest:
    """The honest peer's rounds: `groups` made and announced every `period_s` (its list names
    its last 2 rounds'). The node pulls `FULL_PULL` a round (about 0.12 s), 16 a second:
    32 a second lets every round pull as many (with 8 a second, about half of them did)."""

    period_s: float = 0.5
    groups: int = 16


class Node:
    """`swarm-node join` with the pull exchange and 4 shared groups a round."""

    def __init__(self, run_dir: Path):
        self.run_dir = run_dir
        sets = [
            "policy.device=cpu",
            "tasks.eval_size=0",
            "node.checkpoint_every=1000",
            "sharing.shared_groups=4",
            f"sharing.per_peer_cap={FULL_PULL}",
            # light rounds, so that a run holds many of them on a shared 2-core machine
            "generation.questions_per_round=4",
            "generation.completions_per_question=4",
            "generation.max_new_tokens=8",
            "training.own_groups=4",
        ]
        self.proc, self.log, self.addr = start_join(
            run_dir, sets, run_dir.parent / "node.out", env={**os.environ, **ENV}
        )

    def rounds(self) -> list[Round]:
        """Every live round so far (`Round`), with the groups it pulled."""
        from swarm.ledger import Ledger, RoundRow

        ledger = Ledger(f"sqlite:///{self.run_dir / 'ledger.sqlite'}", create=False)
        try:
            pulled = self.pulled_by_round()
            with ledger.reader() as s:
                rows = s.query(RoundRow).order_by(RoundRow.round)
                return [
                    Round(r.round, r.started_at, r.total_s, r.other_s, pulled.get(r.round, 0))
                    for r in rows
                    if not r.superseded
                ]
        except Exception:  # noqa: BLE001 - the ledger may not exist yet
            return []
        finally:
            ledger.close()

    def outcomes(self) -> list[tuple[int, str, str]]:
        """(the node's round, outcome, detail) of every group it received: the outcome is
        "accepted", or the reason it was refused (a pull that failed is "pull_failed")."""
        from swarm.ledger import GroupRow, Ledger

        try:
            ledger = Ledger(f"sqlite:///{self.run_dir / 'ledger.sqlite'}", create=False)
        except Exception:  # noqa: BLE001 - the ledger may not exist yet
            return []
        try:
            with ledger.reader() as s:
                rows = s.query(GroupRow).filter(GroupRow.direction == "received")
                return [(r.local_round, r.reason or r.status, r.detail) for r in rows]
        finally:
            ledger.close()

    def counted(self) -> dict[str, int]:
        """Refusals the node counted without a row each (the transport's among them), by
        reason."""
        from swarm.ledger import Ledger, RejectionCountRow

        ledger = Ledger(f"sqlite:///{self.run_dir / 'ledger.sqlite'}", create=False)
        try:
            with ledger.reader() as s:
                out: collections.Counter[str] = collections.Counter()
                for row in s.query(RejectionCountRow):
                    out[row.reason] += row.count
                return dict(out)
        finally:
            ledger.close()

    def received(self) -> dict[str, int]:
        """The node's received groups by outcome (`outcomes`)."""
        return dict(collections.Counter(key for _, key, _ in self.outcomes()))

    def pulled_by_round(self) -> dict[int, int]:
        """Groups pulled and accepted, by the node's round."""
        pulled = (r for r, key, _ in self.outcomes() if key == "accepted")
        return dict(collections.Counter(pulled))

    def wait_pulled(self, timeout: float = 600.0) -> None:
        """Wait until the node has accepted a group pulled from a peer (the honest one)."""
        deadline = time.monotonic() + timeout
        while not self.received().get("accepted"):
            if time.monotonic() > deadline or self.proc.poll() is not None:
                raise SystemExit("the node pulled no group from the honest peer")
            time.sleep(0.2)

    def wait_rounds(self, n: int, timeout: float = 600.0) -> None:
        target = len(self.rounds()) + n
        deadline = time.monotonic() + timeout
        while len(self.rounds()) < target:
            if time.monotonic() > deadline or self.proc.poll() is not None:
                raise SystemExit(f"the node stopped short of round {target}")
            time.sleep(0.5)

    def stop(self) -> None:
        self.proc.send_signal(signal.SIGINT)
        try:
            self.proc.wait(timeout=120)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.log.close()


def attack(case: str, addr: str, tmp: Path) -> subprocess.Popen:
    mode, count = case, ""
    if case.startswith("vanish-"):
        mode, count = "vanish", case.split("-")[1]
    mode = {"stall": "stall-groups"}.get(mode, mode)
    args = [sys.executable, "-m", "lab.unresponsive_peer", "--mode", mode]
    args += ["--bootstrap", addr, "--max-lifetime", "1800"]
    if count:
        args += ["--count", count]
    log = open(tmp / case / "attack.err", "w")  # noqa: SIM115 - the process's own
    proc = spawn(args, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=log)
    assert proc.stdout is not None
    if not proc.stdout.readline():
        raise SystemExit(
            f"the {case} attack did not start: {(tmp / case / 'attack.err').read_text()[-2000:]}"
        )
    return proc


def end(proc: subprocess.Popen) -> None:
    proc.send_signal(signal.SIGCONT)
    assert proc.stdin is not None
    proc.stdin.close()
    try:
        proc.wait(timeout=60)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def cpu_s(proc: subprocess.Popen, thread: int | None = None) -> float:
    """CPU seconds (user and system) a process has used so far, all its threads or the one
    `thread` (its main thread: the process's own ID), from /proc (Linux); NaN where that
    cannot be read (gone, or another system)."""
    path = f"/proc/{proc.pid}" + (f"/task/{thread}" if thread is not None else "")
    try:
        fields = Path(f"{path}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return float("nan")
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def machine_busy_s() -> float:
    """CPU seconds all the machine's cores have been busy (not idle nor waiting on I/O), from
    /proc/stat (Linux); NaN where that cannot be read."""
    try:
        fields = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    except (OSError, ValueError):
        return float("nan")
    return (sum(fields[:8]) - fields[3] - fields[4]) / os.sysconf("SC_CLK_TCK")


class CpuClock:
    """CPU seconds of the node, the honest peer and the attacker between the marks."""

    def __init__(self, node: subprocess.Popen, honest: subprocess.Popen):
        self.procs = {"node": node, "honest": honest}
        self.at: dict[str, dict[str, float]] = {}

    def mark(self, name: str, attacker: subprocess.Popen | None = None) -> None:
        procs = self.procs | ({"attacker": attacker} if attacker is not None else {})
        self.at[name] = {k: cpu_s(p) for k, p in procs.items()}
        node = self.procs["node"]
        self.at[name] |= {
            "node_main_thread": cpu_s(node, node.pid),  # its rounds; the rest: network, fetches
            "machine": machine_busy_s(),
            "wall": time.time(),
        }

    def between(self, a: str, b: str) -> dict[str, float]:
        return {
            k: round(self.at[b][k] - self.at[a].get(k, 0.0), 2)
            for k in self.at[b]
            if k in self.at[a] or k == "attacker"
        }


def run_case(case: str, before: int, after: int, tmp: Path, honest_peer: Honest) -> dict:
    node = Node(tmp / case / "node")
    honest_args = [sys.executable, "-m", "lab.network_node", "--exchange", "pull"]
    honest_args += ["--rounds", "100000", "--period", str(honest_peer.period_s)]
    honest_args += ["--groups", str(honest_peer.groups), "--shared", "4"]
    honest_args += ["--bootstrap", node.addr]
    honest_out = open(tmp / case / "honest.out", "w")  # noqa: SIM115 - closed with the process
    honest = spawn(honest_args, stdout=honest_out, stderr=subprocess.STDOUT)
    proc = None
    marks, clock = Marks(), CpuClock(node.proc, honest)
    try:
        node.wait_pulled()
        marks.warm = time.time()
        clock.mark("warm")
        node.wait_rounds(before + WARMUP_ROUNDS)
        marks.spawned = time.time()
        clock.mark("spawned")
        if case != "none":
            proc = attack(case, node.addr, tmp)
        if case.startswith("vanish") and proc is not None:
            proc.send_signal(signal.SIGSTOP)
        marks.event = time.time()
        clock.mark("event", proc)
        node.wait_rounds(after // 2)
        if case == "dead-view" and proc is not None and proc.stdin is not None:
            proc.stdin.write("honest\n")
            proc.stdin.flush()
            marks.honest = time.time()
            clock.mark("honest", proc)
        node.wait_rounds(after - after // 2)
        rounds = node.rounds()
        marks.done = time.time()
        clock.mark("done", proc)
    finally:
        if proc is not None:
            end(proc)
        honest.terminate()
        honest.wait(timeout=60)
        honest_out.close()
        node.stop()
    cpu = {
        "baseline": clock.between("warm", "spawned"),
        "attacker_start": clock.between("spawned", "event"),
        "after": clock.between("event", "done"),
    }
    if marks.honest is not None:  # the attack's half, and the half once it turned honest
        cpu |= {
            "attack": clock.between("event", "honest"),
            "honest": clock.between("honest", "done"),
        }
    # refusals in the rounds measured (not those once the honest peer had stopped)
    last = rounds[-1].number
    refused = [o for o in node.outcomes() if o[1] != "accepted" and o[0] <= last]
    return summarize(case, rounds, marks, cpu) | {
        "marks": dataclasses.asdict(marks),
        "received": node.received(),
        "counted": node.counted(),
        "refused_first": [list(o) for o in refused[:MAX_REFUSALS_KEPT]],
    }


def uptime() -> str:
    try:
        return subprocess.run(["uptime"], capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return f"load average {os.getloadavg()}"


def run(
    cases: list[str],
    before: int,
    after: int,
    out: Path,
    command: str,
    honest_peer: Honest | None = None,
) -> list[dict]:
    """Run each case in turn on a fresh node; write every result so far to `out` after each."""
    honest_peer = honest_peer or Honest()
    results: list[dict] = []
    doc: dict[str, object] = {
        "command": command,
        "criterion": CRITERION,
        "honest_peer": dataclasses.asdict(honest_peer),
        "uptime_at_start": uptime(),
    }
    with tempfile.TemporaryDirectory(prefix="unresponsive-") as tmp:
        for i, case in enumerate(cases):  # a case may come more than once (repeats)
            (Path(tmp) / str(i) / case).mkdir(parents=True)
            results.append(run_case(case, before, after, Path(tmp) / str(i), honest_peer))
            brief = {k: v for k, v in results[-1].items() if not k.endswith("rounds_s")}
            print(json.dumps(brief))
            out.parent.mkdir(parents=True, exist_ok=True)  # a later failure loses nothing
            doc |= {"uptime_at_end": uptime(), "results": results}
            out.write_text(json.dumps(doc, indent=1))
    print(table(results))
    print(f"wrote {out}")
    return results
