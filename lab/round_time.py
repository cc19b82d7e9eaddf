"""Where a round's time goes: generate, score, train and everything else, plus token rates.

Runs a real solo node (the same `Node` as `swarm-node join`) for a few rounds in a fresh
temporary run folder, reads the per-round timings back from its ledger, and reports medians,
tokens generated and trained per second, and the process's peak memory.
`scripts/bench_round.py` runs it.
"""

from __future__ import annotations

import json
import resource
import statistics
import tempfile
import time
from pathlib import Path

from rich.console import Console
from rich.table import Table


def measure(config_path: str, rounds: int, sets: list[str]) -> dict:
    """Run a solo node for one warm-up round and `rounds` timed ones; the figures as a dict."""
    import torch

    from swarm.config.load import load_config
    from swarm.ledger import RoundRow, UpdateRow
    from swarm.node import Node

    with tempfile.TemporaryDirectory(prefix="bench-round-") as tmp:
        overrides = [
            *sets,
            f'node.run_dir="{tmp}"',
            f"node.rounds={rounds + 1}",
            "tasks.eval_size=0",
        ]
        config = load_config(config_path, overrides)
        node = Node(config)
        started = time.perf_counter()
        try:
            node.run()
        finally:
            node.close()
        wall = time.perf_counter() - started
        with node.ledger.reader() as session:
            timed = session.query(RoundRow).order_by(RoundRow.round).all()[1:]  # drop the warm-up
            updates = session.query(UpdateRow).order_by(UpdateRow.round).all()[1:]
    peak_rss_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    phases = {
        "generate": [r.generate_s for r in timed],
        "score": [r.score_s for r in timed],
        "train": [r.train_s for r in timed],
        "other": [r.other_s for r in timed],
        "round": [r.total_s for r in timed],
    }
    tokens_generated = sum(r.tokens_generated for r in timed)
    tokens_trained = sum(u.tokens for u in updates)
    return {
        "config": config_path,
        "overrides": sets,
        "model": config.policy.model,
        "device": str(node.policy.device),
        "torch_threads": torch.get_num_threads(),
        "rounds_timed": len(timed),
        "questions_per_round": config.generation.questions_per_round,
        "completions_per_question": config.generation.completions_per_question,
        "median_s": {k: statistics.median(v) for k, v in phases.items()},
        "share_of_round": {
            k: sum(v) / max(sum(phases["round"]), 1e-9) for k, v in phases.items() if k != "round"
        },
        "generated_tokens_per_s": tokens_generated / max(sum(phases["generate"]), 1e-9),
        "trained_tokens_per_s": tokens_trained / max(sum(phases["train"]), 1e-9),
        "completions_per_s": sum(r.completions for r in timed) / max(sum(phases["round"]), 1e-9),
        "peak_rss_mb": peak_rss_mb,
        "wall_s_including_startup": wall,
    }


def show(result: dict, console: Console) -> None:
    """The time split as a table and the rates on one line."""
    table = Table(
        title=f"round time split: {result['model']} on {result['device']}, "
        f"{result['questions_per_round']}x{result['completions_per_question']} completions per round"
    )
    for column in ("phase", "median s", "share of round"):
        table.add_column(column, justify="right")
    for phase in ("generate", "score", "train", "other"):
        table.add_row(
            phase, f"{result['median_s'][phase]:.3f}", f"{result['share_of_round'][phase]:.1%}"
        )
    table.add_row("round", f"{result['median_s']['round']:.3f}", "100%")
    console.print(table)
    console.print(
        f"generated {result['generated_tokens_per_s']:.0f} tokens/s · trained {result['trained_tokens_per_s']:.0f} tokens/s · "
        f"{result['completions_per_s']:.0f} completions/s · peak RSS {result['peak_rss_mb']:.0f} MB · "
        f"{result['rounds_timed']} rounds timed"
    )


def run(config_path: str, rounds: int, sets: list[str], out: Path) -> int:
    """Measure, print and write the JSON to `out`: 0, or 2 with one line for a bad config."""
    from swarm.core.errors import SwarmError

    console = Console()
    try:
        result = measure(config_path, rounds, sets)
    except SwarmError as e:
        console.print(f"error: {e}")
        return 2
    show(result, console)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2))
    console.print(f"wrote {out}")
    return 0
