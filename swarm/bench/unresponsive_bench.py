"""What peers that vanish, stall or lie about others cost a real node's rounds: the bench.

`scripts/bench_unresponsive.py` is its command line (cases, rounds before and after the event,
the JSON it writes); `run` runs the cases and writes their results after each one.
"""

from __future__ import annotations

import json
import math
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from swarm.bench.join_process import start_join

ROOT = Path(__file__).resolve().parents[2]  # the checkout (its results/, on PYTHONPATH)
# rounds left out of the baseline after the node's first pulled group: on a quiet machine its
# rounds took 0.02-0.05 s for about 28 rounds after it, then settled near 0.09 s
WARMUP_ROUNDS = 30
CASES = ("none", "vanish-1", "vanish-4", "vanish-16", "dead-view", "silent-view", "stall")


# Every process's math on one thread: two OpenMP threads on a 2-core machine shared with
# other work wait on each other, and rounds then swung 10-40x with that work, not the attack.
ENV = {"PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}


def spawn(args: list[str], **kw) -> subprocess.Popen:
    return subprocess.Popen(args, env={**os.environ, **ENV}, text=True, **kw)


class Node:
    """`swarm-node join` with the pull exchange and 4 shared groups a round."""

    def __init__(self, run_dir: Path):
        self.run_dir = run_dir
        sets = [
            "policy.device=cpu",
            "tasks.eval_size=0",
            "node.checkpoint_every=1000",
            "sharing.shared_groups=4",
            # light rounds, so that a run holds many of them on a shared 2-core machine
            "generation.questions_per_round=4",
            "generation.completions_per_question=4",
            "generation.max_new_tokens=8",
            "training.own_groups=4",
        ]
        self.proc, self.log, self.addr = start_join(
            run_dir, sets, run_dir.parent / "node.out", env={**os.environ, **ENV}
        )

    def rounds(self) -> list[tuple[float, float, float]]:
        """(started_at, total_s, other_s) of every live round so far: other_s is the round
        less generation, scoring and training (the exchange's part is in it)."""
        from swarm.ledger import Ledger, RoundRow

        ledger = Ledger(f"sqlite:///{self.run_dir / 'ledger.sqlite'}", create=False)
        try:
            with ledger.reader() as s:
                rows = s.query(RoundRow).order_by(RoundRow.round)
                return [(r.started_at, r.total_s, r.other_s) for r in rows if not r.superseded]
        except Exception:  # noqa: BLE001 - the ledger may not exist yet
            return []
        finally:
            ledger.close()

    def received(self) -> dict[str, int]:
        """The node's received groups by outcome, and the transport's refusals it counted."""
        from swarm.ledger import GroupRow, Ledger

        try:
            ledger = Ledger(f"sqlite:///{self.run_dir / 'ledger.sqlite'}", create=False)
        except Exception:  # noqa: BLE001 - the ledger may not exist yet
            return {}
        try:
            with ledger.reader() as s:
                out: dict[str, int] = {}
                for row in s.query(GroupRow).filter(GroupRow.direction == "received"):
                    key = row.reason or row.status
                    out[key] = out.get(key, 0) + 1
                return out
        finally:
            ledger.close()

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
    args = [sys.executable, "-m", "swarm.bench.unresponsive_peer", "--mode", mode]
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


def cpu_s(proc: subprocess.Popen) -> float:
    """CPU seconds (user and system, all its threads) a process has used so far, from
    /proc (Linux); NaN where that cannot be read (gone, or another system)."""
    try:
        fields = Path(f"/proc/{proc.pid}/stat").read_text().rsplit(")", 1)[1].split()
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


def spread(times: list[float], base: float) -> dict:
    """The per-round statistics of `times` against the baseline median `base`."""
    return {
        "rounds": len(times),
        "median_ratio": round(statistics.median(times) / base, 3),
        "max_ratio": round(max(times) / base, 2),
        "p90_ratio": round(p90_max(times)[0] / base, 2),
        "within_1_2x": round(sum(t <= 1.2 * base for t in times) / len(times), 3),
    }


def p90_max(times: list[float]) -> tuple[float, float]:
    ordered = sorted(times)
    return ordered[int(0.9 * (len(ordered) - 1))], ordered[-1]


def verdict(before: dict, settled: dict, median_after: float) -> dict:
    """The goal, judged as `CRITERION` says."""
    p, n, m = before["within_1_2x"], before["rounds"], settled["rounds"]
    # two standard errors of the difference of two fractions (at the baseline's fraction)
    tolerance = 2 * math.sqrt(max(p * (1 - p), 1 / max(n, 1)) * (1 / n + 1 / m))
    return {
        "median_met": median_after <= 1.1,
        "every_round_met": settled["max_ratio"] <= 1.2,
        "as_baseline_met": settled["within_1_2x"] >= p - tolerance,
        "as_baseline_tolerance": round(tolerance, 3),
    }


CRITERION = (
    "baseline: the median of the rounds that started after the node first accepted a group"
    " from the honest peer (so that it pulls and verifies in the baseline as after the event),"
    f" the first {WARMUP_ROUNDS} of them left out (its rounds settle over them), up"
    " to the attacker's start (its process starting on the"
    " same 2 cores is not the node's cost; those rounds are counted apart). The rounds after"
    " the event: those that started once the attacker was ready (vanish: stopped). The goal:"
    " the median of the rounds after the event within 1.1x of the baseline (median_met);"
    " every round from the 3rd after the event within 1.2x (every_round_met: the goal as"
    " written; the baseline's own rounds judged the same way are in 'baseline_spread', the"
    " noise floor); and, against that noise floor, the fraction of rounds from the 3rd after"
    " the event within 1.2x no lower than the baseline rounds' own fraction less two standard"
    " errors of the difference (as_baseline_met). The case 'none' starts no attacker: its"
    " figures are what the same comparison gives when nothing happens."
)


@dataclass
class Marks:
    """When each part of a case began (wall clock): the node pulled its first group (the
    baseline starts), the attacker was started (the baseline ends), it was ready and, for
    the vanish cases, stopped (the event), it turned honest (dead-view), the run ended."""

    warm: float = 0.0
    spawned: float = 0.0
    event: float = 0.0
    honest: float | None = None
    done: float = 0.0


class CpuClock:
    """CPU seconds of the node, the honest peer and the attacker between the marks."""

    def __init__(self, node: subprocess.Popen, honest: subprocess.Popen):
        self.procs = {"node": node, "honest": honest}
        self.at: dict[str, dict[str, float]] = {}

    def mark(self, name: str, attacker: subprocess.Popen | None = None) -> None:
        procs = self.procs | ({"attacker": attacker} if attacker is not None else {})
        self.at[name] = {k: cpu_s(p) for k, p in procs.items()}
        self.at[name] |= {"machine": machine_busy_s(), "wall": time.time()}

    def between(self, a: str, b: str) -> dict[str, float]:
        return {
            k: round(self.at[b][k] - self.at[a].get(k, 0.0), 2)
            for k in self.at[b]
            if k in self.at[a] or k == "attacker"
        }


def run_case(case: str, before: int, after: int, tmp: Path) -> dict:
    node = Node(tmp / case / "node")
    honest_args = [sys.executable, "-m", "swarm.bench.network_node", "--exchange", "pull"]
    honest_args += ["--rounds", "100000", "--period", "1", "--groups", "8", "--shared", "4"]
    honest_args += ["--bootstrap", node.addr]
    honest = spawn(honest_args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
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
        node.wait_rounds(after - after // 2)
        rounds = node.rounds()
        marks.done = time.time()
        clock.mark("done", proc)
    finally:
        if proc is not None:
            end(proc)
        honest.terminate()
        honest.wait(timeout=60)
        node.stop()
    cpu = {
        "baseline": clock.between("warm", "spawned"),
        "attacker_start": clock.between("spawned", "event"),
        "after": clock.between("event", "done"),
    }
    return summarize(case, rounds, marks, cpu) | {"received": node.received()}


def summarize(case: str, rounds: list[tuple[float, float, float]], marks: Marks, cpu: dict) -> dict:
    """The case's figures: the baseline's rounds and the rounds after the event, each judged
    against the baseline median (`spread`), and the goal (`verdict`)."""
    base_rounds = [r for r in rounds if marks.warm <= r[0] < marks.spawned][WARMUP_ROUNDS:]
    base = statistics.median(t for _, t, _ in base_rounds)
    later = [t for s, t, _ in rounds if s >= marks.event]
    base_other = statistics.median(o for _, _, o in base_rounds)
    other = [o for s, _, o in rounds if s >= marks.event]
    settled = spread(later[2:], base)
    baseline_spread = spread([t for _, t, _ in base_rounds], base)
    median_after = statistics.median(later) / base
    out = {
        "case": case,
        "baseline_s": round(base, 3),
        "rounds_before": len(base_rounds),
        "rounds_while_the_attacker_started": sum(
            marks.spawned <= s < marks.event for s, _, _ in rounds
        ),
        "rounds_after": len(later),
        "first_two_after_s": [round(t, 3) for t in later[:2]],
        "max_ratio_from_third": settled["max_ratio"],
        "p90_ratio_from_third": settled["p90_ratio"],
        "within_1_2x_from_third": settled["within_1_2x"],
        "median_ratio_after": round(median_after, 3),
        # the baseline rounds judged as the rounds after the event are: the noise floor
        "baseline_spread": baseline_spread,
        "goal": verdict(baseline_spread, settled, median_after),
        # CPU seconds of each process (all its threads), of the whole machine ("machine": every
        # process and the kernel) and wall seconds, by part of the run
        "cpu_s": cpu,
        "baseline_rounds_s": [round(t, 3) for _, t, _ in base_rounds],
        "rounds_after_s": [round(t, 3) for t in later],
        # the round less generation, scoring and training: where waiting on peers shows,
        # apart from what other work on the machine does to the model's part
        "other_baseline_s": round(base_other, 3),
        "other_first_two_after_s": [round(o, 3) for o in other[:2]],
        "other_max_from_third_s": round(max(other[2:]), 3),
        "other_baseline_p90_max_s": [round(x, 3) for x in p90_max([o for _, _, o in base_rounds])],
        "other_p90_max_from_third_s": [round(x, 3) for x in p90_max(other[2:])],
        "other_median_after_s": round(statistics.median(other), 3),
        "load_average": [round(x, 2) for x in os.getloadavg()],
    }
    if marks.honest is not None:
        honest_rounds = [t for s, t, _ in rounds if s >= marks.honest]
        out["median_ratio_after_honest"] = round(statistics.median(honest_rounds) / base, 3)
    return out


def table(results: list[dict]) -> str:
    head = (
        "| case | baseline | baseline rounds within 1.2x | first two after | max / p90 from the 3rd"
        " | within 1.2x from the 3rd | median after | goal met: median, every round, as the"
        " baseline | CPU in the rounds after: node, attacker, whole machine |"
    )
    lines = [head, "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    yes = {True: "yes", False: "no"}
    for r in results:
        first = ", ".join(f"{t:.2f}" for t in r["first_two_after_s"])
        goal, cpu, floor = r["goal"], r["cpu_s"]["after"], r["baseline_spread"]
        lines.append(
            f"| {r['case']} | {r['baseline_s']:.3f} s | {100 * floor['within_1_2x']:.0f} % |"
            f" {first} s | {r['max_ratio_from_third']}x / {r['p90_ratio_from_third']}x |"
            f" {100 * r['within_1_2x_from_third']:.0f} % | {r['median_ratio_after']}x |"
            f" {yes[goal['median_met']]}, {yes[goal['every_round_met']]},"
            f" {yes[goal['as_baseline_met']]} | {cpu['node']:.1f},"
            f" {cpu.get('attacker', 0.0):.2f}, {cpu['machine']:.1f} s in {cpu['wall']:.1f} s |"
        )
    return "\n".join(lines)


def uptime() -> str:
    try:
        return subprocess.run(["uptime"], capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return f"load average {os.getloadavg()}"


def run(cases: list[str], before: int, after: int, out: Path, command: str) -> list[dict]:
    """Run each case in turn on a fresh node; write every result so far to `out` after each."""
    results: list[dict] = []
    doc: dict[str, object] = {
        "command": command,
        "criterion": CRITERION,
        "uptime_at_start": uptime(),
    }
    with tempfile.TemporaryDirectory(prefix="unresponsive-") as tmp:
        for i, case in enumerate(cases):  # a case may come more than once (repeats)
            (Path(tmp) / str(i) / case).mkdir(parents=True)
            results.append(run_case(case, before, after, Path(tmp) / str(i)))
            brief = {k: v for k, v in results[-1].items() if not k.endswith("rounds_s")}
            print(json.dumps(brief))
            out.parent.mkdir(parents=True, exist_ok=True)  # a later failure loses nothing
            doc |= {"uptime_at_end": uptime(), "results": results}
            out.write_text(json.dumps(doc, indent=1))
    print(table(results))
    print(f"wrote {out}")
    return results
