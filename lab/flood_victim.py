"""What floods cost a real node: the victim node's process, and windows of its rounds, RSS
and ledger with and without an attacker (`lab.flood_attacker`) at nice 19.

The victim is `swarm-node join` in its own process (defaults but light rounds of 4 questions
of 4 completions of 8 tokens, the tiny model on the CPU, the gossip exchange so that every
group reaches it, no evaluation), alone in its swarm. For each class and repeat a baseline
window (no attacker) and an attack window alternate, so a machine whose load drifts affects
both alike. A window's round time is the median of the victim's rounds that started in it
(its ledger); RSS is the victim's peak in the window minus its RSS at the window's start;
ledger growth is its pages in use at the end minus the start.
"""

from __future__ import annotations

import json
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from lab.join_process import start_join

ROOT = Path(__file__).resolve().parents[1]
GOAL_RATIO = 1.5
GOAL_MB = 50.0


def rss_mb(pid: int) -> float:
    try:
        with open(f"/proc/{pid}/status") as status:
            for line in status:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


class Victim:
    """`swarm-node join` in its own process, alone in its swarm."""

    def __init__(self, run_dir: Path, model: str):
        self.run_dir = run_dir
        sets = [
            f"policy.model={model}",
            "p2p.exchange=gossip",
            "tasks.eval_size=0",
            "node.checkpoint_every=1000",
            "policy.device=cpu",
            # Light rounds, so that a window of seconds holds many of them on a busy machine
            # (and a flood's cost shows against a short round, not hidden in a long one).
            "generation.questions_per_round=4",
            "generation.completions_per_question=4",
            "generation.max_new_tokens=8",
            "training.own_groups=4",
        ]
        self.proc, self.log, self.addr = start_join(
            run_dir, sets, run_dir.parent / "victim.out", name="victim"
        )
        self.pid = self.proc.pid

    def rounds(self, since: float, until: float) -> list[float]:
        from swarm.ledger import Ledger, RoundRow

        ledger = Ledger(f"sqlite:///{self.run_dir / 'ledger.sqlite'}", create=False)
        try:
            with ledger.reader() as s:
                rows = s.query(RoundRow).filter(
                    RoundRow.started_at >= since, RoundRow.started_at < until
                )
                return [r.total_s for r in rows if not r.superseded]
        finally:
            ledger.close()

    def ledger_mb(self) -> float:
        from swarm.ledger import Ledger
        from swarm.ledger.retention import used_bytes

        ledger = Ledger(f"sqlite:///{self.run_dir / 'ledger.sqlite'}", create=False)
        try:
            return (used_bytes(ledger) or 0) / 1e6
        finally:
            ledger.close()

    def handled(self, peer: str) -> dict[str, int]:
        """What the victim's ledger holds of `peer`'s messages: rows by outcome, counts."""
        from swarm.ledger import GroupRow, Ledger, counted_rejections

        ledger = Ledger(f"sqlite:///{self.run_dir / 'ledger.sqlite'}", create=False)
        try:
            with ledger.reader() as s:
                out: dict[str, int] = dict(counted_rejections(s, peer))
                for row in s.query(GroupRow).filter(GroupRow.source == peer):
                    key = row.reason or row.status
                    out[key] = out.get(key, 0) + 1
                return out
        finally:
            ledger.close()

    def stop(self) -> None:
        self.proc.send_signal(signal.SIGINT)
        try:
            self.proc.wait(timeout=120)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.log.close()


def window(victim: Victim, seconds: float, kind: str | None) -> dict:
    """One window: the victim's rounds, RSS and ledger, with `kind` attacking or none. An
    attack window starts once the attacker (slow to start at nice 19) is meshed."""
    attacker = None
    if kind is not None:
        cmd = ["nice", "-n", "19", sys.executable, "-m", "lab.flood_attacker"]
        cmd += ["attack", kind, victim.addr, str(seconds)]
        attacker = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True)
        assert attacker.stdout is not None
        attacker.stdout.readline()  # {"event": "ready"}, or "" if it failed
    began = time.time()
    rss0, ledger0 = rss_mb(victim.pid), victim.ledger_mb()
    peak = [rss0]
    stop = threading.Event()

    def sample() -> None:
        while not stop.wait(0.5):
            peak[0] = max(peak[0], rss_mb(victim.pid))

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    sent: dict = {}
    if attacker is None:
        time.sleep(seconds)
    else:
        assert attacker.stdout is not None
        lines = [line for line in attacker.stdout if line.startswith("{")]
        attacker.wait(timeout=120)
        sent = json.loads(lines[-1]) if lines else {"error": f"exit {attacker.returncode}"}
    ended = time.time()
    time.sleep(1.0)  # the round running at the end is recorded once it finishes
    stop.set()
    sampler.join()
    rounds = victim.rounds(began, ended)
    return {
        "attack": kind,
        "seconds": round(ended - began, 1),
        "rounds": len(rounds),
        "median_round_s": round(statistics.median(rounds), 3) if rounds else None,
        "max_round_s": round(max(rounds), 3) if rounds else None,
        "rss_growth_mb": round(peak[0] - rss0, 1),
        "ledger_growth_mb": round(victim.ledger_mb() - ledger0, 2),
        "sent": sent,
        "victim_recorded": victim.handled(sent["peer_id"]) if "peer_id" in sent else {},
    }


def bench(classes: list[str], seconds: float, repeats: int, model: str) -> dict:
    results: dict = {"classes": {}, "seconds": seconds, "repeats": repeats, "model": model}
    with tempfile.TemporaryDirectory() as tmp:
        run_dir = Path(tmp) / "victim"
        run_dir.mkdir()
        victim = Victim(run_dir, model)
        try:
            window(victim, 15.0, None)  # warm-up: model, worker, first rounds
            for kind in classes:
                runs = []
                for r in range(repeats):
                    base = window(victim, seconds, None)
                    hit = window(victim, seconds, kind)
                    runs.append({"baseline": base, "attack": hit})
                    print(f"{kind} {r + 1}/{repeats}: {json.dumps(hit)}", flush=True)
                results["classes"][kind] = summarise(runs)
        finally:
            victim.stop()
    return results


def summarise(runs: list[dict]) -> dict:
    ratios = [
        run["attack"]["median_round_s"] / run["baseline"]["median_round_s"]
        for run in runs
        if run["attack"]["median_round_s"] and run["baseline"]["median_round_s"]
    ]
    worst = max(ratios) if ratios else None
    rss = max(run["attack"]["rss_growth_mb"] for run in runs)
    ledger = max(run["attack"]["ledger_growth_mb"] for run in runs)
    return {
        "runs": runs,
        "ratios": [round(x, 2) for x in ratios],
        "worst_ratio": round(worst, 2) if worst else None,
        "worst_rss_growth_mb": rss,
        "worst_ledger_growth_mb": ledger,
        "meets_goal": worst is not None
        and worst <= GOAL_RATIO
        and rss <= GOAL_MB
        and ledger <= GOAL_MB,
    }
