"""The flood benchmark's run: per attack class, the victim's windows (`lab.flood_victim`),
and the holder-hints flood measured at a follower; a table and JSON. `run` takes the options
of `scripts/bench_flood.py` (classes, seconds, repeats, model, out).
What it measures, on what and how, is said once: in `scripts/bench_flood.py`'s help.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from lab.flood_attacker import CLASSES, HINTS_BASE
from lab.flood_victim import ROOT, bench


def hints_window(tmp: Path, seconds: float, lie: bool) -> dict:
    """A trainer (tests/adversary/hostile_trainer.py, at nice 19) serving honest hints of
    3 KB, or announcing 1 GiB as its hints; a follower process reading them."""
    from swarm.sync.holders import encode_hints
    from swarm.wire import HolderHint, holders_key

    honest = tmp / "hints.bin"
    honest.write_bytes(
        encode_hints(
            [
                HolderHint(f"{i:064x}", "12D3KooW" + "x" * 44, ("/ip4/10.0.0.1/tcp/4001",))
                for i in range(24)
            ]
        )
    )
    how = {"mode": "lie", "announce": 1 << 30} if lie else {"mode": "serve", "file": str(honest)}
    plan = tmp / "plan.json"
    plan.write_text(json.dumps({holders_key(HINTS_BASE): how}))
    trainer_cmd = ["nice", "-n", "19", sys.executable, "-m", "tests.adversary.hostile_trainer"]
    trainer_cmd += ["--seed", os.urandom(32).hex(), "--plan", str(plan)]
    trainer_cmd += ["--max-lifetime", str(int(seconds + 60))]
    trainer = subprocess.Popen(
        trainer_cmd, cwd=ROOT, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    assert trainer.stdin is not None and trainer.stdout is not None
    try:
        ready = json.loads(trainer.stdout.readline())
        cmd = [sys.executable, "-m", "lab.flood_attacker", "follow-hints"]
        cmd += [ready["addrs"][0], str(seconds)]
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=seconds + 120)
        lines = [line for line in out.stdout.splitlines() if line.startswith("{")]
        result = json.loads(lines[-1]) if lines else {"error": out.stderr[-500:]}
        assert trainer.stdin is not None and trainer.stdout is not None
        trainer.stdin.write(json.dumps({"cmd": "sent"}) + "\n")
        trainer.stdin.flush()
        result["trainer_sent_bytes"] = sum(json.loads(trainer.stdout.readline())["sent"].values())
    finally:
        trainer.stdin.close()
        trainer.wait(timeout=30)
    return result


def bench_hints(seconds: float, repeats: int) -> dict:
    """Honest and lying hints windows in turn, `repeats` times."""
    runs = []
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(repeats):
            base = hints_window(Path(tmp), seconds, lie=False)
            hit = hints_window(Path(tmp), seconds, lie=True)
            runs.append({"baseline": base, "attack": hit})
            print(f"hints {r + 1}/{repeats}: {json.dumps(hit)}", flush=True)
    return {"runs": runs}


def table(results: dict) -> str:
    """One line per window pair: baseline and attack round times, growth, whether the goal held."""
    lines = [
        f"{'class':<11} {'baseline s':>10} {'attack s':>9} {'ratio':>6} {'RSS MB':>7} "
        f"{'ledger MB':>9} {'sent':>7}  goal"
    ]
    for kind, r in results["classes"].items():
        for run in r["runs"]:
            b, a = run["baseline"], run["attack"]
            ratio = (
                a["median_round_s"] / b["median_round_s"]
                if a["median_round_s"] and b["median_round_s"]
                else float("nan")
            )
            lines.append(
                f"{kind:<11} {b['median_round_s'] or 0:>10.2f} {a['median_round_s'] or 0:>9.2f} "
                f"{ratio:>6.2f} {a['rss_growth_mb']:>7.1f} {a['ledger_growth_mb']:>9.2f} "
                f"{a['sent'].get('sent', 0):>7}  {'met' if r['meets_goal'] else 'MISSED'}"
            )
    for run in results.get("hints", {}).get("runs", []):
        b, a = run["baseline"], run["attack"]
        lines.append(
            f"{'hints':<11} {b['median_s'] or 0:>10.3f} {a['median_s'] or 0:>9.3f} "
            f"{(a['median_s'] or 0) / (b['median_s'] or 1):>6.2f} {a['rss_growth_mb']:>7.1f} "
            f"{'-':>9} {a['reads']:>7}  (one hints read, s; trainer sent {a.get('trainer_sent_bytes', 0):,} B)"
        )
    return "\n".join(lines)


def run(args) -> int:
    """The classes asked for, then the table and the JSON; 2 for an unknown class."""
    classes = [c for c in args.classes.split(",") if c]
    unknown = sorted(set(classes) - {*CLASSES, "hints"})
    if unknown:
        print(f"unknown classes {unknown}; known: {', '.join(CLASSES)}, hints", file=sys.stderr)
        return 2
    node_classes = [c for c in classes if c != "hints"]
    results = (
        bench(node_classes, args.seconds, args.repeats, args.model)
        if node_classes
        else {"classes": {}}
    )
    if "hints" in classes:
        results["hints"] = bench_hints(args.seconds, args.repeats)
    print(table(results))
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(results, indent=2) + "\n")
    print(f"wrote {out}")
    return 0
