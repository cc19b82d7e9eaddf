"""Running one unit of the SAPO experiment: a swarm of real nodes in one process, round-robin.

A unit is one arm, seed and learning rate on one testbed (`lab.experiment`): its
nodes run over the in-memory transport, its per-round log is appended as it goes (a stopped
unit resumes from its nodes' checkpoints with `--checkpoint-every`), and its JSON records the
code it ran (`code_commit`) and each node's exchange faults. `lab.sapo_cli` plans
which units to run; docs/studies/ explains the studies.
"""

from __future__ import annotations

import json
import os
import shutil
import time
from collections import Counter
from pathlib import Path
from typing import Any

from rich.console import Console

from lab.experiment import (
    STUDIES,
    Arm,
    Protocol,
    RunShape,
    Study,
    Testbed,
    node_config,
)

console = Console(highlight=False)


def study_of(args) -> Study:
    return STUDIES[args.study]


def testbed_parts(args, index: int) -> tuple[str, dict]:
    """(model, tasks table) of node `index` in the chosen testbed."""
    if args.testbed == Testbed.SKILLS:
        from swarm.policy.skills import SKILL_SWARM, mix_table

        return SKILL_SWARM[index % len(SKILL_SWARM)].name, {"preset": "custom", "mix": mix_table()}
    if args.testbed == Testbed.GAP:
        from swarm.policy.skills import GAP_SWARM, mix_table

        return GAP_SWARM[index % len(GAP_SWARM)].name, {"preset": "custom", "mix": mix_table()}
    if args.testbed == Testbed.TINY:
        return "swarm-tiny", {"preset": "easy"}
    if not args.model:
        raise SystemExit("error: --testbed sapo needs --model NAME_OR_PATH")
    return args.model, {"preset": "sapo"}


def unit_folder(args) -> Path:
    return Path(args.results) / study_of(args).folder(args.protocol, args.testbed)


def unit_path(args, arm: Arm, seed: int, lr: float) -> Path:
    return unit_folder(args) / "units" / f"{arm.slug}_s{seed}_lr{lr:g}.json"


def build_swarm(args, arm: Arm, seed: int, lr: float, work: Path):
    from swarm.config import build_config
    from swarm.core.identity import create_identity, peer_id_of
    from swarm.node import Node
    from swarm.p2p import MemoryHub, MemoryTransport

    hub, nodes = MemoryHub(), []
    shape = RunShape(args.completions, args.max_new_tokens, args.eval_size, args.rounds)
    policy = {"device": args.device}
    if args.device != "cpu":
        policy["dtype"] = "auto"
    extra = {
        "generation": {
            "backend": args.backend,
            "gpu_memory_utilization": round(0.9 / args.nodes, 3),
        }
    }
    for i in range(args.nodes):
        model, tasks = testbed_parts(args, i)
        table = node_config(
            arm,
            Protocol(args.protocol),
            tasks,
            model,
            index=i,
            seed=seed,
            lr=lr,
            run_dir=str(work / f"node-{i}"),
            shape=shape,
            policy=policy,
            extra=extra,
        )
        key = create_identity(bytes([(seed * 8 + i + 1) % 256]) * 32)
        node = Node(
            build_config(table, f"sapo {arm.name} node {i}"),
            transport=MemoryTransport(peer_id_of(key), hub),
            key_pair=key,
        )
        node.rounds.shuffle_shared_rewards = arm.shuffles_rewards
        nodes.append(node)
    for node in nodes:
        node.start()
    return nodes


def run_unit(args, arm: Arm, seed: int, lr: float) -> dict:
    """Run one swarm; return its per-node, per-round log and held-out accuracy."""
    work = unit_folder(args) / "work" / f"{arm.slug}_s{seed}_lr{lr:g}"
    if not args.checkpoint_every:
        shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True, exist_ok=True)
    log_path = work / "rounds.jsonl"
    nodes = build_swarm(args, arm, seed, lr, work)
    logs = _read_log(log_path, nodes[0].state.round)
    if {node.state.round for node in nodes} != {len(logs["rounds"])}:  # stopped mid-save
        for node in nodes:
            node.close()
        shutil.rmtree(work)
        work.mkdir(parents=True)
        nodes, logs = build_swarm(args, arm, seed, lr, work), _read_log(log_path, 0)
    start_eval = logs.get("start_eval") or [_eval(node) for node in nodes]
    _rewrite_log(log_path, logs["rounds"], start_eval)
    t0 = time.perf_counter()
    try:
        _run_rounds(args, nodes, f"{arm.name} seed {seed} lr {lr:g}", logs["rounds"], log_path)
        end_eval = [_eval(node) for node in nodes]
    except BaseException:  # a stopped unit frees its run folders (their locks) for the rerun
        for node in nodes:
            node.close()
        raise
    models = [node.config.policy.model for node in nodes]
    digests = [model_digest_of(name) for name in models]
    faults = [exchange_faults(node) for node in nodes]
    for node in nodes:
        node.close()
    rounds = logs["rounds"]
    result = {
        "arm": arm.name,
        "seed": seed,
        "lr": lr,
        "protocol": args.protocol,
        "testbed": args.testbed,
        "rounds": len(rounds),
        "nodes": len(nodes),
        "study": args.study,
        "models": models,
        "model_digests": digests,
        "generated_questions": arm.generated_questions,
        "completions": args.completions,
        "max_new_tokens": args.max_new_tokens,
        "cumulative_own_reward": sum(x["own"] for row in rounds for x in row),
        "cumulative_batch_reward": sum(x["batch"] for row in rounds for x in row),
        "own_reward": [[row[k]["own"] for row in rounds] for k in range(len(nodes))],
        "batch_reward": [[row[k]["batch"] for row in rounds] for k in range(len(nodes))],
        "tagged": [[row[k]["tagged"] for row in rounds] for k in range(len(nodes))],
        "local_groups": [sum(row[k]["local"] for row in rounds) for k in range(len(nodes))],
        "shared_groups": [sum(row[k]["shared"] for row in rounds) for k in range(len(nodes))],
        "skipped_updates": [sum(row[k]["skipped"] for row in rounds) for k in range(len(nodes))],
        # peers' groups refused (honest in-process peers: any refusal is a fault of the run)
        "rejected": [sum(row[k].get("rejected", 0) for row in rounds) for k in range(len(nodes))],
        "shared_by_family": [
            dict(sum((Counter(row[k]["shared_by_family"]) for row in rounds), Counter()))
            for k in range(len(nodes))
        ],
        # own-signal control (study 4's gate): per node, rounds each family was one the node
        # was learning by itself, its peers' groups there at sharing.own_signal_weight
        "learning_rounds": [
            dict(sum((Counter(row[k].get("learning", ())) for row in rounds), Counter()))
            for k in range(len(nodes))
        ],
        "commit": code_commit(),
        # per node: what the exchange failed to fetch and the groups it refused, by reason (an
        # honest in-process swarm has none: any is a fault of the run, e.g. a missed deadline)
        "exchange_faults": faults,
        "held_out_start": start_eval,
        "held_out_end": end_eval,
        "seconds": time.perf_counter() - t0,
    }
    shutil.rmtree(work, ignore_errors=True)
    return result


def exchange_faults(node) -> dict:
    """The node's failed list and group fetches, and its refused groups by reason, this run."""
    stats = node.sharing.stats
    out = {k: stats.exchange.get(k, 0) for k in ("lists_failed", "pulls_failed")}
    out.update({f"rejected_{reason}": n for reason, n in sorted(stats.rejected_by_reason.items())})
    return {k: v for k, v in out.items() if v}


def code_commit() -> str:
    """The commit of the code this process runs (`swarm`'s checkout), with "+dirty" when its
    tracked files differ from it: a unit re-run from that commit gives the same file."""
    import subprocess

    import swarm

    root = Path(swarm.__file__).resolve().parent.parent

    def git(*args: str) -> str:
        done = subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True)
        return done.stdout.strip() if done.returncode == 0 else ""

    head = git("rev-parse", "HEAD")
    if not head:
        return "unknown"
    return head + ("+dirty" if git("status", "--porcelain", "--untracked-files=no") else "")


def model_digest_of(name: str) -> str:
    """The content digest of a built-in or local model ('' for a hub name)."""
    from swarm.policy.tiny import TINY_MODELS, ensure_tiny_model, model_digest

    if name in TINY_MODELS:
        return model_digest(ensure_tiny_model(name, quiet=True))
    folder = Path(name)
    return model_digest(folder) if (folder / "model.safetensors").exists() else ""


def _eval(node) -> dict:
    report = node.evaluate()
    return {"accuracy": report.accuracy, "by_family": report.by_family}


def _run_rounds(args, nodes, label: str, rounds: list, log_path: Path) -> None:
    """Run the unit's remaining rounds, appending each round's per-node row to `rounds` and the
    log (and saving every node's checkpoint every `--checkpoint-every` rounds)."""
    start_round, t0 = len(rounds), time.perf_counter()
    for r in range(start_round, args.rounds):
        row = []
        for node in nodes:
            rep = node.run_round()
            used = Counter(rep.shared_families)
            row.append(
                {
                    "own": rep.mean_reward,
                    "batch": rep.batch_reward,
                    "tagged": rep.tagged,
                    "local": rep.trained_groups,
                    "shared": rep.shared_groups,
                    "skipped": rep.skipped,
                    "shared_by_family": dict(used),
                    "accepted": rep.accepted,
                    "rejected": rep.rejected,
                    "seconds": round(rep.total_s, 3),
                    # own-signal control: the families whose shared groups weighed less
                    **({"learning": sorted(node.rounds.learning)} if node.rounds.learning else {}),
                }
            )
        rounds.append(row)
        with log_path.open("a") as f:
            f.write(json.dumps({"round": r, "nodes": row}) + "\n")
        if args.checkpoint_every and (r + 1) % args.checkpoint_every == 0 and r + 1 < args.rounds:
            for node in nodes:  # the script drives rounds itself, so it saves them too
                node.checkpoint()
        if (r + 1) % 10 == 0 or r + 1 == args.rounds:
            done = r + 1 - start_round
            eta = (time.perf_counter() - t0) / done * (args.rounds - r - 1)
            own = sum(x["own"] for x in row) / len(row)
            console.print(
                f"  {label}: round {r + 1}/{args.rounds}, own reward {own:.3f}, ~{eta / 60:.1f} min left"
            )


def _read_log(path: Path, start_round: int) -> dict:
    """The rounds already logged before `start_round` (a resumed unit), and the start evaluation."""
    logs: dict[str, Any] = {"rounds": [], "start_eval": None}
    if start_round == 0 or not path.exists():
        return logs
    for line in path.read_text().splitlines():
        item = json.loads(line)
        if "start_eval" in item:
            logs["start_eval"] = item["start_eval"]
        elif item["round"] < start_round:
            logs["rounds"].append(item["nodes"])
    return logs


def _rewrite_log(path: Path, rounds: list, start_eval: list) -> None:
    lines = [json.dumps({"start_eval": start_eval})] + [
        json.dumps({"round": r, "nodes": row}) for r, row in enumerate(rounds)
    ]
    path.write_text("\n".join(lines) + "\n")


def write_json(path: Path, payload) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(payload, indent=1))
    os.replace(tmp, path)
