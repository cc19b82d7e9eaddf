"""Does sharing pay? The SAPO experiment: arms of 8 nodes, tuned, run over paired seeds, judged.

Every unit is one swarm of `--nodes` real `Node`s (generator, verifier, GRPO trainer, ledger)
running one arm (`I/J`: I own groups and up to J peers' groups per update; a node generates I
questions a round, as in the paper's code) for `--rounds` rounds under one seed and learning
rate. The nodes run in ONE process over the in-memory transport, round-robin (a node sees its
peers' groups of the same or the previous round); `scripts/sapo_libp2p_check.py` runs one
arm as separate processes over libp2p for comparison. Arms, protocols, testbeds and the acceptance
rule live in `swarm.bench.experiment`; docs/SAPO.md explains them.

Each unit writes results/sapo/<protocol>-<testbed>/units/<arm>_s<seed>_lr<lr>.json when it
ends, so a stopped run loses at most the unit in progress; finished units are skipped.

    python scripts/sapo_experiment.py quick                  # smoke test: 2 arms, 3 rounds
    python scripts/sapo_experiment.py tune [--shard 0/2]     # every arm x lr on the tuning seed
    python scripts/sapo_experiment.py verdict [--shard 0/2]  # every arm at its best lr, 6 seeds
    python scripts/sapo_experiment.py control [--shard 0/2]  # the negative control, 6 seeds
    python scripts/sapo_experiment.py report                 # tables, verdict, JSON and PNG
    python scripts/sapo_experiment.py run --arms 8/0,4/4 --seeds 0 --lr 1e-4 --rounds 20

Per node and round it logs the mean reward of the node's own fresh rollouts (the learning
metric; summed over nodes and rounds it is the cumulative reward) and of its training batch
(what the paper's public code logs; the zero-advantage filter raises it without learning),
the share of its completions that tag their answer, and the shared groups it trained on per
task family. Held-out greedy accuracy per family is measured at the start and the end.

GPU (the paper's setting, one command): `--study sharing --testbed sapo --model Qwen/Qwen2.5-0.5B-Instruct
--device cuda --backend vllm --checkpoint-every 25` (nodes resume from their checkpoints).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import time
from collections import Counter
from dataclasses import replace
from pathlib import Path

from rich.console import Console

from swarm.bench.experiment import (
    STUDIES,
    TUNING_SEED,
    VERDICT_SEEDS,
    Arm,
    Protocol,
    RunShape,
    Study,
    Testbed,
    best_channel,
    node_config,
    parse_arm,
    rates_below,
)
from swarm.core.errors import ConfigError

console = Console(highlight=False)


def parse_args(argv=None):
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "command",
        choices=("quick", "run", "tune", "verdict", "control", "report"),
        help="what to do (see above)",
    )
    parser.add_argument(
        "--study",
        default="channels",
        choices=list(STUDIES),
        help="which pre-registered study: channels (sharing channels, gap testbed by default) "
        "or sharing (the first verdict: plain SAPO on the skills testbed)",
    )
    parser.add_argument(
        "--protocol",
        default="paper",
        choices=[p.value for p in Protocol],
        help="training rules: the paper's or this project's defaults",
    )
    parser.add_argument(
        "--testbed",
        default="",
        choices=["", *[t.value for t in Testbed]],
        help="gap: 8 models of one shape, each weak on two families (the channels study's "
        "default); skills: 8 heterogeneous skill models (the sharing study's default); tiny: "
        "8 copies of swarm-tiny; sapo: --model on the paper's 9 datasets",
    )
    parser.add_argument(
        "--arms",
        default="",
        help="arms, comma-separated, I/J[-option+option] with options need, joint, recv, "
        "shape, parts, shuf (default: the study's arms; the channels study on a testbed other "
        "than gap: 8/0, 4/0 and the best channel of the gap verdict; quick: 4/0,4/4)",
    )
    parser.add_argument(
        "--seeds", default="", help="seeds, comma-separated (run; default: the verdict seeds)"
    )
    parser.add_argument("--lr", type=float, default=1e-4, help="learning rate (run)")
    parser.add_argument(
        "--rounds", type=int, default=0, help="rounds per unit (default: the study's: 300 or 150)"
    )
    parser.add_argument(
        "--nodes", type=int, default=8, help="nodes per swarm (the skills testbed has 8 models)"
    )
    parser.add_argument("--completions", type=int, default=8, help="G: completions per question")
    parser.add_argument(
        "--max-new-tokens", type=int, default=32, help="longest completion, in tokens"
    )
    parser.add_argument(
        "--eval-size",
        type=int,
        default=100,
        help="held-out questions per node (split over the families)",
    )
    parser.add_argument(
        "--shard",
        default="0/1",
        help="K/N: run every N-th unit starting at K (N processes share the work)",
    )
    parser.add_argument("--threads", type=int, default=1, help="torch CPU threads of this process")
    parser.add_argument("--results", default="results/sapo", help="results folder")
    parser.add_argument(
        "--model", default="", help="testbed sapo: the model every node runs (HF name or path)"
    )
    parser.add_argument("--device", default="cpu", help="cpu, cuda or auto")
    parser.add_argument(
        "--backend",
        default="transformers",
        choices=("transformers", "vllm"),
        help="generation backend",
    )
    parser.add_argument(
        "--checkpoint-every",
        type=int,
        default=0,
        help="checkpoint nodes every N rounds and resume a stopped unit from them (0: a stopped unit restarts)",
    )
    parser.add_argument(
        "--allow-dirty",
        action="store_true",
        help="tune/verdict/control from a checkout whose tracked files differ from its commit "
        "(refused by default: the unit could not be re-run from the commit it records)",
    )
    args = parser.parse_args(argv)
    study = STUDIES[args.study]
    args.testbed = args.testbed or ("skills" if study.name == "sharing" else "gap")
    args.rounds = args.rounds or study.rounds
    return args


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
    logs = {"rounds": [], "start_eval": None}
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


def study_arms(args) -> str:
    """The arms to run: --arms, else the study's; the channels study off its gap testbed runs
    8/0, 4/0 and the best channel of the finished gap verdict (pre-registered)."""
    study = study_of(args)
    if args.arms:
        return args.arms
    if study.name == "channels" and args.testbed != Testbed.GAP:
        from sapo_report import verdict_cumulative

        gap = Path(args.results) / study.folder(args.protocol, Testbed.GAP)
        try:
            best = best_channel(verdict_cumulative(gap))
        except ConfigError as exc:
            raise SystemExit(f"error: {exc} in {gap}: run the gap verdict first") from None
        return f"8/0,4/0,{best}"
    return ",".join(study.arms)


def units_for(args) -> list[tuple[Arm, int, float]]:
    study = study_of(args)
    if args.command == "control":
        if not study.controls:
            raise SystemExit(f"error: the {study.name} study has no negative control")
        from sapo_report import chosen_lrs

        control = parse_arm(study.controls[0][0])
        mirrored = replace(control, channels=())  # 4/4-shuf runs at plain 4/4's tuned rate
        lr = chosen_lrs(unit_folder(args), [mirrored], study.learning_rates)[mirrored.name]
        return [(control, seed, lr) for seed in study.seeds]
    arms = [parse_arm(a) for a in study_arms(args).split(",") if a.strip()]
    if args.command == "tune":
        grid = [(arm, TUNING_SEED, lr) for arm in arms for lr in study.learning_rates]
        if study.name != "default":
            return grid
        from sapo_report import load_units  # the grid's smallest rate won: one step below

        tuned = [u for u in load_units(unit_folder(args)) if u["seed"] == TUNING_SEED]
        lower = rates_below(tuned, [a.name for a in arms], study.learning_rates)
        return grid + [(parse_arm(name), TUNING_SEED, lr) for name, lr in lower.items()]
    if args.command == "verdict":
        from sapo_report import chosen_lrs

        lrs = chosen_lrs(unit_folder(args), arms, study.learning_rates)
        return [(arm, seed, lrs[arm.name]) for seed in study.seeds for arm in arms]
    seeds = [int(s) for s in args.seeds.split(",") if s.strip()] or list(VERDICT_SEEDS)
    return [(arm, seed, args.lr) for seed in seeds for arm in arms]


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.command == "quick":
        args.arms, args.rounds, args.eval_size = args.arms or "4/0,4/4", min(args.rounds, 3), 8
        args.seeds, args.command = args.seeds or "0", "run"
        args.results = args.results if args.results != "results/sapo" else "runs/sapo-quick"
    if args.command == "report" and args.study == "default":
        from sapo_report import report_default

        return report_default(Path(args.results), console, args.protocol)
    if args.command == "report":
        from sapo_report import report

        return report(unit_folder(args), console, study_of(args))
    commit = code_commit()
    if args.command in ("tune", "verdict", "control") and not args.allow_dirty:
        if commit.endswith("+dirty") or commit == "unknown":
            raise SystemExit(
                "error: the code differs from its commit, so a unit could not be re-run from "
                "the commit it records: run from a clean checkout (git worktree add DIR HEAD; "
                "then run this script there with --results pointing here), or pass --allow-dirty"
            )
    console.print(f"code: {commit}")
    import torch

    torch.set_num_threads(args.threads)
    if args.backend == "vllm":  # eight engines in this process: each core in its own process
        from swarm.policy.vllm_generator import isolate_engines

        isolate_engines()
    k, _, n = args.shard.partition("/")
    units = units_for(args)[int(k) :: int(n)]
    for number, (arm, seed, lr) in enumerate(units, 1):
        path = unit_path(args, arm, seed, lr)
        if path.exists():
            continue
        console.print(
            f"[bold]unit {number}/{len(units)}[/bold]: arm {arm.name}, seed {seed}, lr {lr:g}, {args.rounds} rounds ({args.protocol}, {args.testbed})"
        )
        write_json(path, run_unit(args, arm, seed, lr))
        console.print(f"  wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
