"""Does the in-memory experiment tell the truth about real nodes? One arm over libp2p, compared.

`lab.experiment` runs a swarm's 8 nodes in one process over the in-memory transport,
round-robin. This runs the same arm (same models, seeds, settings) as 8 separate
`swarm-node join` processes of a private cluster on 127.0.0.1 (real libp2p, signing, gossip
and verification, no round-robin: each node runs at its own pace), reads each node's
own-rollout reward per round from its ledger, and compares the swarm's cumulative reward with
the in-memory units of the same arm and learning rate over the same rounds: the same seed,
and the spread over all seeds found. `run` takes the options of `scripts/sapo_libp2p_check.py`.
Every process it starts ends by itself; on Ctrl-C it stops them by PID.
"""

from __future__ import annotations

import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import tomllib
from pathlib import Path

import tomli_w

from lab.experiment import Protocol, RunShape, node_config, parse_arm
from swarm.core.errors import ConfigError


def free_base_port(count: int) -> int:
    """A port p such that p .. p + count - 1 are free on 127.0.0.1 now."""
    for base in range(20_000, 60_000, 97):
        try:
            socks = []
            for i in range(count):
                s = socket.socket()
                s.bind(("127.0.0.1", base + i))
                socks.append(s)
            return base
        except OSError:
            continue
        finally:
            for s in socks:
                s.close()
    raise SystemExit("error: no free range of ports on 127.0.0.1")


def write_configs(folder: Path, args) -> list[Path]:
    """A private cluster of 8 members whose configs carry the arm's settings."""
    from swarm.policy.skills import SKILL_SWARM, mix_table

    arm = parse_arm(args.arm)
    if arm.shuffles_rewards:
        raise ConfigError(
            f"arm {arm.name}: the negative control (shuf) is no config key, so it runs in "
            "memory only (scripts/sapo_experiment.py)"
        )
    subprocess.run(
        [
            sys.executable,
            "-m",
            "swarm.cli",
            "cluster",
            "init",
            "--nodes",
            str(len(SKILL_SWARM)),
            "--out",
            str(folder),
            "--base-port",
            str(free_base_port(len(SKILL_SWARM))),
            "--swarm-id",
            "sapo-libp2p-check",
        ],
        check=True,
        stdout=subprocess.DEVNULL,
    )
    paths = sorted(
        folder.glob("member-*/config.toml"), key=lambda p: int(p.parent.name.split("-")[1])
    )
    for i, path in enumerate(paths):
        table = tomllib.loads(path.read_text())
        ours = node_config(
            arm,
            Protocol(args.protocol),
            {"preset": "custom", "mix": mix_table()},
            SKILL_SWARM[i].name,
            index=i,
            seed=args.seed,
            lr=args.lr,
            run_dir=table["node"]["run_dir"],
            shape=RunShape(),
        )
        ours["node"].update(rounds=args.rounds, checkpoint_every=args.rounds)
        ours["tasks"]["eval_size"] = 0
        for section, values in ours.items():
            table.setdefault(section, {}).update(values)
        path.write_text(tomli_w.dumps(table))
    return paths


def run_nodes(paths: list[Path], timeout: float) -> float:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    procs = []
    start = time.perf_counter()
    try:
        for path in paths:
            log = (path.parent / "join.log").open("w")
            procs.append(
                subprocess.Popen(
                    [sys.executable, "-m", "swarm.cli", "join", "--config", str(path)],
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    env=env,
                )
            )
        deadline = time.monotonic() + timeout
        for p in procs:
            p.wait(timeout=max(1.0, deadline - time.monotonic()))
    finally:
        for p in procs:
            if p.poll() is None:
                p.terminate()
                p.wait(timeout=30)
    failed = [str(path) for path, p in zip(paths, procs, strict=True) if p.returncode != 0]
    if failed:
        raise SystemExit(f"error: nodes failed: {failed} (see join.log beside each config)")
    return time.perf_counter() - start


def node_log(config_path: Path) -> tuple[list[float], int]:
    """A node's own-rollout mean reward per round, and the shared groups it trained on."""
    from swarm.config.load import load_config
    from swarm.ledger import Ledger, RoundRow, UpdateRow

    config = load_config(config_path)
    with Ledger(config.ledger_url).reader() as session:
        rows = (
            session.query(RoundRow)
            .filter(RoundRow.superseded.is_(False))
            .order_by(RoundRow.round)
            .all()
        )
        shared = sum(
            u.shared_groups
            for u in session.query(UpdateRow).filter(UpdateRow.superseded.is_(False))
        )
    return [r.mean_reward for r in rows], shared


def memory_units(args, rounds: int) -> dict[int, float]:
    """Cumulative own reward over the first `rounds` rounds of each in-memory unit of the arm."""
    folder = Path(args.results) / f"{args.protocol}-skills" / "units"
    slug = parse_arm(args.arm).slug
    out = {}
    for path in folder.glob(f"{slug}_s*_lr{args.lr:g}.json"):
        unit = json.loads(path.read_text())
        if unit["rounds"] >= rounds:
            out[unit["seed"]] = sum(sum(curve[:rounds]) for curve in unit["own_reward"])
    return out


def build_models() -> None:
    """Build (or find cached) every node's model before any node starts: built on start, the
    models take minutes apart, and the first nodes finish before the last join."""
    from swarm.policy.model import resolve_model_path
    from swarm.policy.skills import SKILL_SWARM

    for profile in SKILL_SWARM:
        print(f"model {profile.name}: {resolve_model_path(profile.name)}", flush=True)


def summary(
    args, rounds: int, curves: list, shared: list[int], seconds: float, memory: dict
) -> dict:
    """The comparison as the JSON records it: the libp2p swarm's reward beside the in-memory
    units' (their range, and whether the swarm's lies within it)."""
    libp2p = sum(sum(c[:rounds]) for c in curves)
    result = {
        "arm": args.arm,
        "seed": args.seed,
        "lr": args.lr,
        "rounds": rounds,
        "protocol": args.protocol,
        "libp2p_cumulative_own_reward": libp2p,
        "libp2p_own_reward": curves,
        "seconds": seconds,
        "libp2p_shared_groups_used": shared,
        "memory_cumulative_own_reward_by_seed": memory,
    }
    if memory:
        values = list(memory.values())
        result["memory_min"], result["memory_max"] = min(values), max(values)
        result["memory_mean"] = statistics.fmean(values)
        result["within_seed_range"] = min(values) <= libp2p <= max(values)
    return result


def run(args) -> int:
    """Build the models, run the cluster, compare, write the JSON and print one line."""
    build_models()
    with tempfile.TemporaryDirectory(prefix="sapo-libp2p-") as tmp:
        paths = write_configs(Path(tmp) / "cluster", args)
        seconds = run_nodes(paths, args.timeout)
        logs = [node_log(p) for p in paths]
    curves = [curve for curve, _ in logs]
    rounds = min(len(c) for c in curves)
    libp2p = sum(sum(c[:rounds]) for c in curves)
    memory = memory_units(args, rounds)
    result = summary(args, rounds, curves, [shared for _, shared in logs], seconds, memory)
    out = Path(args.results) / f"{args.protocol}-skills" / "libp2p_check.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=1))
    same = memory.get(args.seed)
    print(
        f"{args.arm}, seed {args.seed}, lr {args.lr:g}, {rounds} rounds: libp2p (8 processes) {libp2p:.2f}; "
        f"in-memory same seed {'-' if same is None else f'{same:.2f}'}; "
        + f"shared groups trained on per node {[shared for _, shared in logs]}; "
        + (
            f"in-memory over {len(memory)} seeds {result['memory_min']:.2f} .. {result['memory_max']:.2f}"
            if memory
            else "no in-memory unit to compare"
        )
    )
    print(f"wrote {out}")
    return 0
