"""The SAPO experiment's command line: which units a study runs, and running or reporting them.

`scripts/sapo_experiment.py` is this module's `main`; see its help for the commands.
"""

from __future__ import annotations

import argparse
from dataclasses import replace
from pathlib import Path

from lab.experiment import (
    STUDIES,
    TUNING_SEED,
    VERDICT_SEEDS,
    Arm,
    Protocol,
    Testbed,
    best_channel,
    parse_arm,
)
from lab.sapo_units import (
    code_commit,
    console,
    run_unit,
    study_of,
    unit_folder,
    unit_path,
    write_json,
)
from lab.tuning import bracketing_rates, rates_below, unbracketed
from swarm.core.errors import ConfigError

DESCRIPTION = """Does sharing pay? The SAPO experiment: arms of 8 nodes, tuned, run over paired seeds, judged.

Every unit is one swarm of `--nodes` real `Node`s (generator, verifier, GRPO trainer, ledger)
running one arm (`I/J`: I own groups and up to J peers' groups per update; a node generates I
questions a round, as in the paper's code) for `--rounds` rounds under one seed and learning
rate. The nodes run in ONE process over the in-memory transport, round-robin (a node sees its
peers' groups of the same or the previous round); `scripts/sapo_libp2p_check.py` runs one
arm as separate processes over libp2p for comparison. Arms, protocols, testbeds and the acceptance
rule live in `lab.experiment`; docs/studies/ explains them.

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


def parse_args(argv=None):
    parser = argparse.ArgumentParser(
        description=DESCRIPTION, formatter_class=argparse.RawDescriptionHelpFormatter
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
        help="which pre-registered study (docs/studies/): sharing (the first verdict: plain SAPO "
        "on the skills testbed), channels (sharing channels, gap testbed by default), default "
        "(study 3: the default of a joining node) or protect (study 4: sharing that keeps a "
        "node's own learning; both testbeds, run each with --testbed)",
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
        "shape, parts, parts25, gate, shuf, fam (default: the study's arms; the channels "
        "study on a testbed other than gap: 8/0, 4/0 and the best channel of the gap verdict; "
        "quick: 4/0,4/4)",
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
        choices=("transformers", "continuous", "vllm"),
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


def study_arms(args) -> str:
    """The arms to run: --arms, else the study's; the channels study off its gap testbed runs
    8/0, 4/0 and the best channel of the finished gap verdict (pre-registered)."""
    study = study_of(args)
    if args.arms:
        return args.arms
    if study.name == "channels" and args.testbed != Testbed.GAP:
        from lab.sapo_report import verdict_cumulative

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
        from lab.sapo_report import chosen_lrs

        control = parse_arm(study.controls[0][0])
        mirrored = replace(control, channels=())  # 4/4-shuf runs at plain 4/4's tuned rate
        lr = chosen_lrs(unit_folder(args), [mirrored], study.learning_rates)[mirrored.name]
        return [(control, seed, lr) for seed in study.seeds]
    arms = [parse_arm(a) for a in study_arms(args).split(",") if a.strip()]
    if args.command == "tune":
        grid = [(arm, TUNING_SEED, lr) for arm in arms for lr in study.learning_rates]
        if not study.bracket:
            return grid
        from lab.sapo_report import load_units  # rates beyond the grid (tuning.py)

        tuned = [u for u in load_units(unit_folder(args)) if u["seed"] == TUNING_SEED]
        names = [a.name for a in arms]
        if study.bracket == "below":  # study 3: the grid's smallest rate won, one step below
            lower = rates_below(tuned, names, study.learning_rates)
            return grid + [(parse_arm(name), TUNING_SEED, lr) for name, lr in lower.items()]
        beyond = bracketing_rates(tuned, names, study.learning_rates)
        return grid + [
            (parse_arm(name), TUNING_SEED, lr) for name, rates in beyond.items() for lr in rates
        ]
    if args.command == "verdict":
        from lab.sapo_report import chosen_lrs, load_units

        if study.bracket == "both":
            tuned = [u for u in load_units(unit_folder(args)) if u["seed"] == TUNING_SEED]
            pending = unbracketed(tuned, [a.name for a in arms], study.learning_rates)
            if pending:
                raise SystemExit(
                    f"error: tuning is not bracketed yet ({', '.join(pending)} to run): run "
                    "the tune command again"
                )

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
    if args.command == "report" and args.study in ("default", "protect"):
        from lab.sapo_report import report_default

        return report_default(Path(args.results), console, args.protocol, args.study)
    if args.command == "report":
        from lab.sapo_report import report

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
