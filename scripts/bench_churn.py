"""Churn in a real swarm: 12 pull node processes, one leaving and one joining every 10 s,
against the same swarm without churn (`lab.churn_real`).

    python scripts/bench_churn.py [--processes 12] [--duration 300] [--every 10] [--period 5]
                                  [--out results/churn/bench.json]

Prints a table (per process and round: its round's own time, pulls delivered, groups
verified, bytes in), where slow rounds' time went and whether the churn run met its goal
(p95 within 1.5x of the run without churn, no round over 2 s, pulls delivered >= 99.5 %),
and writes JSON with the commit and the machine's load. Run it with the machine otherwise
quiet: 12 processes share its cores.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from lab.churn_real import ChurnSettings, goal, run_churn

ROOT = Path(__file__).resolve().parents[1]


def row(name: str, r: dict) -> str:
    w = r["round_s"]
    return (
        f"| {name} | {r['rounds']} | {w['median']:.3f} / {w['p95']:.3f} / {w['max']:.2f} s |"
        f" {w['over_1s']} / {w.get('over_2s', 0)} |"
        f" {100 * r['delivered']:.2f} % ({r['pulls']}) |"
        f" {r['verified_per_round']:.1f} | {r['bytes_in_per_round'] / 1000:.0f} kB |"
        f" {r['left']} / {r['joined']} |"
    )


def commit() -> str:
    """The checkout's commit, `+` if it has changes to tracked files."""

    def git(*args: str) -> str:
        return subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True).stdout

    return git("rev-parse", "--short", "HEAD").strip() + (
        "+" if git("status", "-uno", "--porcelain").strip() else ""
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--processes", type=int, default=12, help="pull node processes in the swarm"
    )
    parser.add_argument(
        "--duration", type=float, default=300.0, help="seconds each run (churn, none) lasts"
    )
    parser.add_argument("--every", type=float, default=10.0, help="seconds between leave+join")
    parser.add_argument("--period", type=float, default=5.0, help="a process's round period")
    parser.add_argument(
        "--nice", type=int, default=5, help="niceness of the node processes (0: as this one)"
    )
    parser.add_argument(
        "--out",
        default=str(ROOT / "results" / "churn" / "bench.json"),
        help="the JSON to write",
    )
    args = parser.parse_args(argv)
    results = {}
    machine = {"commit": commit(), "load_before": os.getloadavg(), "cpus": os.cpu_count()}
    for name, every in (("no churn", 0.0), ("churn", args.every)):
        s = ChurnSettings(
            processes=args.processes,
            duration_s=args.duration,
            every_s=every,
            period_s=args.period,
            nice=args.nice,
        )
        with tempfile.TemporaryDirectory(prefix="churn-") as tmp:
            results[name] = run_churn(s, Path(tmp), lambda m, n=name: print(f"  [{n}] {m}"))
        print(json.dumps({name: {k: v for k, v in results[name].items() if k != "settings"}}))
    machine["load_after"] = os.getloadavg()
    print(
        "| run | rounds | round median / p95 / max | rounds over 1 s / 2 s | pulls delivered |"
        " verified a round | bytes in a round | left / joined |"
    )
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    for name, r in results.items():
        print(row(name, r))
    for name, r in results.items():
        slow = r["slow_rounds"]
        print(
            f"{name}: {r['unwaited']} fetches not waited on ({r['late']} group fetches taken"
            f" late), {r['stalled']} stalls; {slow['rounds']} rounds over 1 s: lists"
            f" {slow['lists_s']:.1f} s, pulls {slow['pulls_s']:.1f} s, the rest {slow['rest_s']:.1f} s"
        )
    verdict = goal(results["no churn"], results["churn"])
    print(f"goal: p95 {verdict['p95_ratio']:.2f}x; met: {verdict['met']}")
    print(f"commit {machine['commit']}; load {machine['load_before']} -> {machine['load_after']}")
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    record = {"command": " ".join(sys.argv), **machine, "goal": verdict, "results": results}
    out.write_text(json.dumps(record, indent=1))
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
