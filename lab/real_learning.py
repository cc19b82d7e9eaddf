"""Does a real pretrained model learn in a solo node? Held-out accuracy after R rounds
against before, over seeds, with a 95 % t-interval of the per-seed gain.

Each seed is one unit: `swarm-node join` with the given preset (`node_config/smollm2-cpu.toml`
by default) in its own run folder under the output folder, `node.seed` set to the seed. A
unit that reached its rounds is read back, not rerun; one that stopped early resumes from its
checkpoint (`join` on the same folder). Units run `--parallel` at a time, each with
`--threads` torch threads; every process stops by itself after its rounds, and on any error
the ones still running are stopped after their round (SIGINT), killed past a grace. Writes JSON (per seed: held-out by round, reward by
round, round times) and `reward.png` (mean sampled reward and held-out accuracy by round).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from lab.experiment import paired_ci

UNIT_TIMEOUT_S = 4 * 3600
STOP_GRACE_S = 300  # a real-model round on a busy CPU takes minutes


@dataclass(frozen=True)
class Plan:
    config: Path
    seeds: tuple[int, ...]
    rounds: int
    out: Path
    parallel: int = 3
    threads: int = 1
    sets: tuple[str, ...] = ()


def read_metrics(run_dir: Path) -> list[dict]:
    path = run_dir / "metrics.jsonl"
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def unit_done(run_dir: Path, rounds: int) -> bool:
    """A unit is done once it evaluated held-out accuracy at its last round."""
    return any(m["kind"] == "eval" and m["round"] == rounds for m in read_metrics(run_dir))


def unit_command(plan: Plan, seed: int) -> list[str]:
    node = str(Path(sys.executable).parent / "swarm-node")
    cmd = [node, "join", "--config", str(plan.config), "--run-dir", str(plan.out / f"seed-{seed}")]
    cmd += ["--rounds", str(plan.rounds), "--display", "lines", "--set", f"node.seed={seed}"]
    for s in plan.sets:
        cmd += ["--set", s]
    return cmd


def run_units(plan: Plan) -> None:
    """Run every unfinished seed, `plan.parallel` at a time; stop the rest on any failure."""
    todo = [s for s in plan.seeds if not unit_done(plan.out / f"seed-{s}", plan.rounds)]
    env = {**os.environ, "OMP_NUM_THREADS": str(plan.threads), "PYTHONUNBUFFERED": "1"}
    running: dict[int, tuple[subprocess.Popen, IO[bytes], float]] = {}
    plan.out.mkdir(parents=True, exist_ok=True)
    try:
        while todo or running:
            while todo and len(running) < plan.parallel:
                seed = todo.pop(0)
                log = open(plan.out / f"seed-{seed}.log", "ab")  # noqa: SIM115 - closed below
                proc = subprocess.Popen(
                    unit_command(plan, seed), stdout=log, stderr=subprocess.STDOUT, env=env
                )
                running[seed] = (proc, log, time.monotonic())
                print(f"seed {seed}: started (pid {proc.pid})", flush=True)
            time.sleep(2.0)
            for seed, (proc, handle, started) in list(running.items()):
                if proc.poll() is None and time.monotonic() - started < UNIT_TIMEOUT_S:
                    continue
                if proc.poll() is None:
                    proc.kill()
                proc.wait()
                handle.close()
                del running[seed]
                if proc.returncode != 0 or not unit_done(plan.out / f"seed-{seed}", plan.rounds):
                    raise SystemExit(f"seed {seed} failed (see {plan.out}/seed-{seed}.log)")
                print(f"seed {seed}: done", flush=True)
    finally:
        for proc, handle, _ in running.values():
            proc.send_signal(signal.SIGINT)  # a clean stop after the round, checkpoint written
            try:
                proc.wait(STOP_GRACE_S)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
            handle.close()


def unit_result(run_dir: Path, rounds: int) -> dict:
    """One seed's figures from its metrics.jsonl (the last value written for each round)."""
    evals: dict[int, float] = {}
    rewards: dict[int, float] = {}
    times: dict[int, tuple[float, float, float]] = {}
    for m in read_metrics(run_dir):
        if m["kind"] == "eval":
            evals[m["round"]] = m["accuracy"]
        elif m["kind"] == "round" and m["round"] < rounds:
            rewards[m["round"]] = m["mean_reward"]
            times[m["round"]] = (m["generate_s"], m["train_s"], m["total_s"])
    return {
        "held_out": {str(k): v for k, v in sorted(evals.items())},
        "before": evals.get(0),
        "after": evals.get(rounds),
        "reward": [rewards[r] for r in sorted(rewards)],
        "round_s": [times[r][2] for r in sorted(times)],
        "generate_s": [times[r][0] for r in sorted(times)],
        "train_s": [times[r][1] for r in sorted(times)],
    }


def report(plan: Plan) -> dict:
    units = {s: unit_result(plan.out / f"seed-{s}", plan.rounds) for s in plan.seeds}
    gains = [u["after"] - u["before"] for u in units.values()]
    mean, low, high = paired_ci(gains)
    result = {
        "config": str(plan.config),
        "rounds": plan.rounds,
        "seeds": list(plan.seeds),
        "sets": list(plan.sets),
        "threads": plan.threads,
        "parallel": plan.parallel,
        "gain_mean": mean,
        "gain_ci95": [low, high],
        "before_mean": sum(u["before"] for u in units.values()) / len(units),
        "after_mean": sum(u["after"] for u in units.values()) / len(units),
        "units": {str(s): u for s, u in units.items()},
    }
    print(
        f"{'seed':>5} {'before':>8} {'after':>8} {'gain':>8} {'reward r0':>10} {'reward last':>12}"
    )
    for s, u in units.items():
        print(
            f"{s:>5} {u['before']:>8.3f} {u['after']:>8.3f} {u['after'] - u['before']:>+8.3f} "
            f"{u['reward'][0]:>10.3f} {u['reward'][-1]:>12.3f}"
        )
    print(f"held-out gain over {len(gains)} seeds: {mean:+.3f} (95 % CI {low:+.3f} to {high:+.3f})")
    return result


def plot(result: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 4))
    for seed, unit in result["units"].items():
        left.plot(unit["reward"], alpha=0.7, label=f"seed {seed}")
        rounds = sorted(int(r) for r in unit["held_out"])
        right.plot(
            rounds, [unit["held_out"][str(r)] for r in rounds], marker="o", label=f"seed {seed}"
        )
    left.set(xlabel="round", ylabel="mean sampled reward", title="reward of own completions")
    right.set(xlabel="round", ylabel="held-out accuracy (greedy)", title="held-out accuracy")
    left.legend()
    right.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def main(plan: Plan, json_path: Path) -> int:
    run_units(plan)
    result = report(plan)
    json_path.parent.mkdir(parents=True, exist_ok=True)
    json_path.write_text(json.dumps(result, indent=1))
    plot(result, json_path.with_name("reward.png"))
    print(f"wrote {json_path} and {json_path.with_name('reward.png')}")
    return 0
