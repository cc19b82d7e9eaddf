"""What peers that vanish, stall or lie about others cost a real node's rounds: the bench.

`scripts/bench_unresponsive.py` is its command line (cases, rounds before and after the event,
the JSON it writes); `run` runs the cases and writes their results after each one.
"""

from __future__ import annotations

import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from swarm.bench.join_process import start_join

ROOT = Path(__file__).resolve().parents[2]  # the checkout (its results/, on PYTHONPATH)
CASES = ("vanish-1", "vanish-4", "vanish-16", "dead-view", "silent-view", "stall")


def spawn(args: list[str], **kw) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.Popen(args, env=env, text=True, **kw)


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
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        self.proc, self.log, self.addr = start_join(
            run_dir, sets, run_dir.parent / "node.out", env=env
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

        ledger = Ledger(f"sqlite:///{self.run_dir / 'ledger.sqlite'}", create=False)
        try:
            with ledger.reader() as s:
                out: dict[str, int] = {}
                for row in s.query(GroupRow).filter(GroupRow.direction == "received"):
                    key = row.reason or row.status
                    out[key] = out.get(key, 0) + 1
                return out
        finally:
            ledger.close()

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


def run_case(case: str, before: int, after: int, tmp: Path) -> dict:
    node = Node(tmp / case / "node")
    honest_args = [sys.executable, "-m", "swarm.bench.network_node", "--exchange", "pull"]
    honest_args += ["--rounds", "100000", "--period", "1", "--groups", "8", "--shared", "4"]
    honest_args += ["--bootstrap", node.addr]
    honest = spawn(honest_args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    proc = None
    try:
        node.wait_rounds(before)
        proc = attack(case, node.addr, tmp)
        if case.startswith("vanish"):
            proc.send_signal(signal.SIGSTOP)
        event = time.time()
        node.wait_rounds(after // 2)
        honest_at = None
        if case == "dead-view":
            assert proc.stdin is not None
            proc.stdin.write("honest\n")
            proc.stdin.flush()
            honest_at = time.time()
        node.wait_rounds(after - after // 2)
        rounds = node.rounds()
    finally:
        if proc is not None:
            end(proc)
        honest.terminate()
        honest.wait(timeout=60)
        node.stop()
    base = statistics.median(t for s, t, _ in rounds[3:] if s < event)
    later = [t for s, t, _ in rounds if s >= event]
    settled = later[2:]
    base_other = statistics.median(o for s, _, o in rounds[3:] if s < event)
    other = [o for s, _, o in rounds if s >= event]
    out = {
        "case": case,
        "baseline_s": round(base, 3),
        "rounds_before": sum(s < event for s, _, _ in rounds[3:]),
        "rounds_after": len(later),
        "first_two_after_s": [round(t, 3) for t in later[:2]],
        "max_ratio_from_third": round(max(settled) / base, 2),
        "p90_ratio_from_third": round(sorted(settled)[int(0.9 * (len(settled) - 1))] / base, 2),
        "within_1_2x_from_third": round(sum(t <= 1.2 * base for t in settled) / len(settled), 3),
        "median_ratio_after": round(statistics.median(later) / base, 3),
        "received": node.received(),
        "rounds_after_s": [round(t, 3) for t in later],
        # the round less generation, scoring and training: where waiting on peers shows,
        # apart from what other work on the machine does to the model's part
        "other_baseline_s": round(base_other, 3),
        "other_first_two_after_s": [round(o, 3) for o in other[:2]],
        "other_max_from_third_s": round(max(other[2:]), 3),
        "other_median_after_s": round(statistics.median(other), 3),
    }
    if honest_at is not None:
        honest_rounds = [t for s, t, _ in rounds if s >= honest_at]
        out["median_ratio_after_honest"] = round(statistics.median(honest_rounds) / base, 3)
    return out


def table(results: list[dict]) -> str:
    head = (
        "| case | baseline | first two after | max / p90 from the 3rd | within 1.2x | median after"
        " | rest of the round: baseline, first two after, max from the 3rd, median after |"
    )
    lines = [head, "| --- | --- | --- | --- | --- | --- | --- |"]
    for r in results:
        first = ", ".join(f"{t:.2f}" for t in r["first_two_after_s"])
        lines.append(
            f"| {r['case']} | {r['baseline_s']:.3f} s | {first} s | {r['max_ratio_from_third']}x"
            f" / {r['p90_ratio_from_third']}x | {100 * r['within_1_2x_from_third']:.0f} % |"
            f" {r['median_ratio_after']}x | {r['other_baseline_s']:.2f}; "
            + ", ".join(f"{o:.2f}" for o in r["other_first_two_after_s"])
            + f"; {r['other_max_from_third_s']:.2f}; {r['other_median_after_s']:.2f} s |"
        )
    return "\n".join(lines)


def run(cases: list[str], before: int, after: int, out: Path, command: str) -> list[dict]:
    """Run each case in turn on a fresh node; write every result so far to `out` after each."""
    results: list[dict] = []
    with tempfile.TemporaryDirectory(prefix="unresponsive-") as tmp:
        for case in cases:
            (Path(tmp) / case).mkdir()
            results.append(run_case(case, before, after, Path(tmp)))
            print(json.dumps({k: v for k, v in results[-1].items() if k != "rounds_after_s"}))
            out.parent.mkdir(parents=True, exist_ok=True)  # a later failure loses nothing
            out.write_text(json.dumps({"command": command, "results": results}, indent=1))
    print(table(results))
    print(f"wrote {out}")
    return results
