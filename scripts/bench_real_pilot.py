"""Study 4 at real size, a pilot beside the rule (not a verdict): the candidate G
(`4/4-gate+fam`: own and shared tokens normalised apart, peers' groups at 0.1 on a family the
node is learning by itself and 0.5 elsewhere, same-family peers only) against training alone
(4/0: the same 4 questions a round, `sharing.shared_groups = 0`), each a local swarm of the
real model (`swarm-node demo --model smollm2-135m`), the arms one after the other, never at
once. Per arm and node: held-out accuracy at the start and the end, cumulative own-rollout
reward, groups pulled / accepted / trained on, round time, peak memory; per arm its wall
clock and the CPU seconds of its processes. Prints a table, writes JSON.

    python scripts/bench_real_pilot.py --rounds 10
    python scripts/bench_real_pilot.py --rounds 1 --nodes 2 --eval-size 4 --out /tmp/p.json
    python scripts/bench_real_pilot.py --reread   # the figures again from the run folders

Only the CLI (`swarm-node demo`) runs the swarms; this script reads what the nodes wrote
(summary.json, each node's metrics.jsonl).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

from lab.experiment import Arm

ROOT = Path(__file__).resolve().parents[1]
CANDIDATE = Arm(4, 4, channels=("gate", "fam"))  # study 4's G, its [sharing] keys
ARMS: dict[str, list[str]] = {
    "4/0": ["sharing.shared_groups=0"],
    CANDIDATE.name: ["sharing.shared_groups=4"]
    + [f"sharing.{k}={json.dumps(v)}" for k, v in CANDIDATE.sharing().items()],
}
NEED_GB = 14.0  # four real-model nodes take 12 to 16 GB
NEED_WINDOW = 10  # sharing.need_window, the default G runs with


def available_gb() -> float:
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemAvailable:"):
            return int(line.split()[1]) / 2**20
    return 0.0


def wait_for_memory(need_gb: float, max_wait_s: float = 1800.0) -> float:
    """Block until `need_gb` is available (or give up after `max_wait_s`); return it."""
    start = time.monotonic()
    while (gb := available_gb()) < need_gb:
        if time.monotonic() - start > max_wait_s:
            sys.exit(f"only {gb:.1f} GB available after {max_wait_s:.0f} s; need {need_gb}")
        print(f"{gb:.1f} GB available, waiting for {need_gb} GB", flush=True)
        time.sleep(30)
    return gb


def commit() -> str:
    def git(*a):
        return subprocess.run(["git", *a], cwd=ROOT, capture_output=True, text=True).stdout

    head = git("rev-parse", "--short", "HEAD").strip()
    dirty = git("status", "--porcelain", "--untracked-files=no", "--", "swarm").strip()
    return head + ("+dirty" if dirty else "")


def metrics(folder: Path) -> tuple[list[dict], list[dict]]:
    rounds, evals = [], []
    path = folder / "metrics.jsonl"
    for line in path.read_text().splitlines() if path.exists() else []:
        rec = json.loads(line) if line.strip() else {}
        (
            rounds if rec.get("kind") == "round" else evals if rec.get("kind") == "eval" else []
        ).append(rec)
    return rounds, evals


def node_row(folder: Path, summary_node: dict) -> dict:
    rounds, evals = metrics(folder)
    return {
        "name": summary_node["name"],
        "exit_code": summary_node.get("exit_code"),
        "rounds": len(rounds),
        "eval_start": evals[0]["accuracy"] if evals else None,
        "eval_end": evals[-1]["accuracy"] if evals else None,
        "eval_rounds": [e["round"] for e in evals],
        "own_reward_cumulative": sum(r["mean_reward"] for r in rounds),
        "own_rewards": [r["mean_reward"] for r in rounds],
        "tagged_mean": statistics.mean(r.get("tagged", 0.0) for r in rounds) if rounds else None,
        # a round's received / accepted / rejected / refused are the node's running totals
        "pulled": rounds[-1].get("received", 0) if rounds else 0,
        "accepted": rounds[-1].get("accepted", 0) if rounds else 0,
        "rejected": rounds[-1].get("rejected", 0) if rounds else 0,
        "refused": rounds[-1].get("refused", 0) if rounds else 0,
        # own groups trained on (those with learning signal), and peers' groups beside them
        "trained_own": sum(r.get("trained_groups", 0) for r in rounds),
        "trained_shared": sum(r.get("shared_groups", 0) for r in rounds),
        # rounds with an own group carrying signal in that round or the NEED_WINDOW - 1 before:
        # under G's own-signal control its peers' groups weighed own_signal_weight (0.1) then
        "rounds_own_signal": sum(
            any(r.get("trained_groups", 0) > 0 for r in rounds[max(0, i - NEED_WINDOW + 1) : i + 1])
            for i in range(len(rounds))
        ),
        "generated_completions": sum(r.get("groups", 0) for r in rounds) * 8,
        "round_s_median": statistics.median(r["total_s"] for r in rounds) if rounds else None,
        "generate_s_median": statistics.median(r["generate_s"] for r in rounds) if rounds else None,
        "train_s_median": statistics.median(r["train_s"] for r in rounds) if rounds else None,
        "peak_rss_mb": summary_node.get("peak_rss_mb"),
    }


def run_arm(name: str, sets: list[str], args, folder: Path) -> dict:
    gb = wait_for_memory(args.need_gb)
    load_before = os.getloadavg()
    cmd = [
        str(Path(sys.executable).parent / "swarm-node"),
        "demo",
        "--model",
        args.model,
        "--nodes",
        str(args.nodes),
        "--rounds",
        str(args.rounds),
        "--out",
        str(folder),
        "--set",
        f"tasks.eval_size={args.eval_size}",
        "--set",
        f"tasks.eval_every={args.rounds}",
    ]
    for s in sets:
        cmd += ["--set", s]
    print(
        f"[{time.strftime('%H:%M:%S')}] arm {name}: {gb:.1f} GB available, load "
        f"{load_before[0]:.1f}; {' '.join(cmd)}",
        flush=True,
    )
    usage0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.monotonic()
    with open(folder.parent / f"{folder.name}.log", "w") as log:
        rc = subprocess.run(cmd, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT).returncode
    wall = time.monotonic() - start
    usage1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    summary = json.loads((folder / "summary.json").read_text())
    nodes = [node_row(folder / n["name"], n) for n in summary["per_node"]]
    return {
        "arm": name,
        "sets": sets,
        "exit_code": rc,
        "wall_s": wall,
        "cpu_s": (usage1.ru_utime - usage0.ru_utime) + (usage1.ru_stime - usage0.ru_stime),
        "load_before": load_before,
        "load_after": os.getloadavg(),
        "available_gb_before": gb,
        "run_folder": str(folder),
        "nodes": nodes,
    }


def mean(xs):
    xs = [x for x in xs if x is not None]
    return statistics.mean(xs) if xs else None


def table(result: dict) -> str:
    lines = [
        "| arm | node | held-out start → end | own reward, cumulative | pulled / accepted "
        "| trained own / shared | rounds own signal | round s (median) | peak RSS GB |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for arm in result["arms"]:
        for n in arm["nodes"]:
            lines.append(
                f"| {arm['arm']} | {n['name']} | {n['eval_start']:.0%} → {n['eval_end']:.0%} | "
                f"{n['own_reward_cumulative']:.2f} | {n['pulled']} / {n['accepted']} | "
                f"{n['trained_own']} / {n['trained_shared']} | {n['rounds_own_signal']} | "
                f"{n['round_s_median']:.0f} | "
                f"{(n['peak_rss_mb'] or 0) / 1024:.2f} |"
            )
    lines.append("")
    lines.append(
        "| arm | held-out start → end (mean) | own reward, cumulative (sum of nodes) "
        "| wall s | CPU s | load before / after |"
    )
    lines.append("| --- | --- | --- | --- | --- | --- |")
    for arm in result["arms"]:
        ns = arm["nodes"]
        lines.append(
            f"| {arm['arm']} | {mean(n['eval_start'] for n in ns):.1%} → "
            f"{mean(n['eval_end'] for n in ns):.1%} | "
            f"{sum(n['own_reward_cumulative'] for n in ns):.2f} | {arm['wall_s']:.0f} | "
            f"{arm['cpu_s']:.0f} | {arm['load_before'][0]:.1f} / {arm['load_after'][0]:.1f} |"
        )
    if "ratio" in result:
        r = result["ratio"]
        lines.append("")
        lines.append(
            f"G / 4-0, cumulative own reward: swarm {r['swarm']:.3f}; per node "
            + ", ".join(f"{x:.3f}" for x in r["per_node"])
        )
    return "\n".join(lines)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--model", default="smollm2-135m")
    p.add_argument("--nodes", type=int, default=4)
    p.add_argument("--rounds", type=int, default=10)
    p.add_argument("--eval-size", type=int, default=64, help="held-out questions a node")
    p.add_argument("--arms", default=",".join(ARMS), help="comma-separated, run in this order")
    p.add_argument("--need-gb", type=float, default=NEED_GB, help="memory to wait for per arm")
    p.add_argument("--runs", default=str(ROOT / "runs" / f"pilot-{time.strftime('%Y%m%d-%H%M%S')}"))
    p.add_argument("--out", default=str(ROOT / "results" / "real_model" / "pilot-g-vs-alone.json"))
    p.add_argument(
        "--reread",
        action="store_true",
        help="run nothing: read the arms of --out again from their run folders and rewrite it",
    )
    args = p.parse_args(argv)
    out = Path(args.out)
    if args.reread:
        result = json.loads(out.read_text())
        for arm in result["arms"]:
            folder = Path(arm["run_folder"])
            summary = json.loads((folder / "summary.json").read_text())
            arm["nodes"] = [node_row(folder / n["name"], n) for n in summary["per_node"]]
        result["reread_by"] = commit()
        return finish(result, out)
    runs = Path(args.runs)
    runs.mkdir(parents=True, exist_ok=True)
    result = {
        "what": "study 4 at real size, a pilot beside the rule: G (4/4-gate+fam) against "
        "training alone (4/0); decides nothing",
        "commit": commit(),
        "model": args.model,
        "nodes": args.nodes,
        "rounds": args.rounds,
        "eval_size": args.eval_size,
        "node_seeds": list(range(args.nodes)),
        "paired_identities": True,  # every arm's node i has the first arm's node i's peer ID
        "machine": f"{os.cpu_count()} cores",
        "arms": [],
    }
    out.parent.mkdir(parents=True, exist_ok=True)
    for name in args.arms.split(","):
        folder = runs / name.replace("/", "-")
        if result["arms"]:  # the first arm's identities: a node's task stream is bound to its
            first = Path(result["arms"][0]["run_folder"])  # peer ID, so the arms draw the same
            for i in range(args.nodes):  # questions (the demo keeps an identity it finds)
                (folder / f"node-{i}").mkdir(parents=True, exist_ok=True)
                shutil.copy2(first / f"node-{i}" / "identity.key", folder / f"node-{i}")
        result["arms"].append(run_arm(name, ARMS[name], args, folder))
        out.write_text(json.dumps(result, indent=2))  # each arm as soon as it ends
    return finish(result, out)


def finish(result: dict, out: Path) -> int:
    """Add G's ratio to 4/0 where both ran, write the JSON, print the tables."""
    by = {a["arm"]: a for a in result["arms"]}
    if "4/0" in by and CANDIDATE.name in by:
        base, cand = by["4/0"]["nodes"], by[CANDIDATE.name]["nodes"]
        result["ratio"] = {
            "swarm": sum(n["own_reward_cumulative"] for n in cand)
            / sum(n["own_reward_cumulative"] for n in base),
            "per_node": [
                c["own_reward_cumulative"] / b["own_reward_cumulative"]
                for b, c in zip(base, cand, strict=True)
            ],
        }
    out.write_text(json.dumps(result, indent=2))
    print(table(result))
    print(f"wrote {out}")
    return 0 if all(a["exit_code"] == 0 for a in result["arms"]) else 1


if __name__ == "__main__":
    sys.exit(main())
