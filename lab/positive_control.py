"""The channels study's positive control: can a node's weak families move at all in the budget?

A gap-swarm receiver is fine-tuned, one optimizer step a round, on a strong peer's right
completions only (advantage 1 each) for its weak families, and its held-out weak-family
accuracy measured along the way (`run_one`). `run` takes the options of
`scripts/sapo_control.py` (pairs, lrs, rounds, questions, completions, eval_size, eval_every,
seed, threads, out): one JSON per (receiver, lr), skipped when present, and a table.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

from rich.console import Console
from rich.table import Table

from lab.experiment import Arm, Protocol, RunShape, node_config
from swarm.policy.skills import FAMILIES, GAP_SWARM, mix_table

console = Console(highlight=False)


def make_node(index: int, lr: float, work: Path, args, weak_only: bool):
    """A gap node as the experiment builds one (paper protocol), on its weak families or all."""
    from swarm.config import build_config
    from swarm.core.identity import create_identity, peer_id_of
    from swarm.node import Node
    from swarm.p2p import MemoryHub, MemoryTransport

    profile = GAP_SWARM[index]
    families = profile.weak if weak_only else tuple(FAMILIES)
    table = node_config(
        Arm(4, 0),
        Protocol.PAPER,
        {"preset": "custom", "mix": mix_table(families)},
        profile.name,
        index=index,
        seed=args.seed,
        lr=lr,
        run_dir=str(work / f"node-{index}"),
        shape=RunShape(args.completions, 32, args.eval_size, args.rounds),
    )
    key = create_identity(bytes([index + 1]) * 32)
    node = Node(
        build_config(table, f"control node {index}"),
        transport=MemoryTransport(peer_id_of(key), MemoryHub()),
        key_pair=key,
    )
    node.start()
    return node


def run_one(receiver_index: int, peer_index: int, lr: float, args) -> dict:
    """One receiver trained on its peer's right completions at `lr`: its accuracy curve."""
    from swarm.policy.prompts import build_prompt
    from swarm.policy.trainer import retokenized_samples
    from swarm.tasks import build_task, sample_specs

    weak = GAP_SWARM[receiver_index].weak
    if set(weak) & set(GAP_SWARM[peer_index].weak):
        raise SystemExit(f"error: node {peer_index} is weak on a weak family of {receiver_index}")
    work = Path(args.out) / "work" / f"r{receiver_index}_lr{lr:g}"
    receiver = make_node(receiver_index, lr, work, args, weak_only=True)
    peer = make_node(peer_index, lr, work, args, weak_only=True)
    mix = tuple(FAMILIES[f] for f in weak)
    scoring = receiver.config.tasks.scoring()
    curve, right_total, t0 = [], 0, time.perf_counter()
    for r in range(args.rounds + 1):
        if r % args.eval_every == 0 or r == args.rounds:
            report = receiver.evaluate()
            curve.append({"round": r, "by_family": report.by_family, "accuracy": report.accuracy})
            console.print(
                f"  receiver {receiver_index} lr {lr:g} round {r}: weak-family held-out "
                f"{report.accuracy:.1%} {report.by_family} ({time.perf_counter() - t0:.0f} s)"
            )
        if r == args.rounds:
            break
        tasks = [build_task(s) for s in sample_specs(mix, 7_000 + args.seed, r, args.questions)]
        system = receiver.config.policy.prompt_format()
        peer_prompts = [build_prompt(peer.policy.tokenizer, t.question, system) for t in tasks]
        groups = peer.generator.generate(peer_prompts, args.completions, peer.sampling)
        samples = []
        for task, group in zip(tasks, groups, strict=True):
            right = [c for c in group if scoring.reward(task, c.text) >= 1.0]
            right_total += len(right)
            prompt = build_prompt(receiver.policy.tokenizer, task.question, system)
            samples += retokenized_samples(
                receiver.policy.tokenizer,
                prompt,
                [c.text for c in right],
                [c.finished for c in right],
                [1.0] * len(right),
                128,
            )
        if not receiver.trainer.update(samples).skipped:
            receiver.generator.sync_weights(receiver.policy.model)
    for node in (receiver, peer):
        node.close()
    return {
        "receiver": GAP_SWARM[receiver_index].name,
        "peer": GAP_SWARM[peer_index].name,
        "weak": list(weak),
        "lr": lr,
        "rounds": args.rounds,
        "questions": args.questions,
        "completions": args.completions,
        "right_completions_trained": right_total,
        "curve": curve,
        "seconds": time.perf_counter() - t0,
    }


def run(args) -> int:
    """Every (receiver, peer) pair at every rate not already written; the table of all."""
    import torch

    torch.set_num_threads(args.threads)
    pairs = [tuple(int(x) for x in p.split(":")) for p in args.pairs.split(",") if p.strip()]
    lrs = [float(x) for x in args.lrs.split(",") if x.strip()]
    results = []
    for receiver, peer in pairs:
        for lr in lrs:
            path = Path(args.out) / f"positive_r{receiver}_p{peer}_lr{lr:g}_n{args.rounds}.json"
            if not path.exists():
                console.print(
                    f"[bold]positive control[/bold]: receiver {receiver}, peer {peer}, lr {lr:g}"
                )
                result = run_one(receiver, peer, lr, args)
                path.parent.mkdir(parents=True, exist_ok=True)
                tmp = path.with_suffix(".tmp")
                tmp.write_text(json.dumps(result, indent=1))
                os.replace(tmp, path)
            results.append(json.loads(path.read_text()))
    table = Table(title="positive control: weak-family held-out accuracy, start -> end")
    for col in ("receiver", "peer", "lr", "right completions trained", "start", "end"):
        table.add_column(col)
    for res in results:
        start, end = res["curve"][0]["accuracy"], res["curve"][-1]["accuracy"]
        table.add_row(
            res["receiver"],
            res["peer"],
            f"{res['lr']:g}",
            str(res["right_completions_trained"]),
            f"{start:.1%}",
            f"{end:.1%}",
        )
    console.print(table)
    return 0
