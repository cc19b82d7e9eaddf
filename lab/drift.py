"""How off-policy are a peer's completions for the node that trains on them?

SAPO trains a node on its peers' completions as if they were its own (ratio 1). That is
only sound while the peers' policies stay close to the receiver's. Two tiny-model nodes share
rollouts (4 own + 4 shared groups an update, in one process over the in-memory transport)
and, every few rounds, node B samples fresh groups and each completion is measured:

- the largest gap between B's own sampling log-probs and the log-probs B's shared-group
  path (re-tokenize, score under the policy) gives the same text: ~1e-6 means the path
  that trains on peers' groups is exact;
- log(mu_B / pi_A) over the whole completion: how much likelier B (which sampled it) found
  it than A (which trains on it). Near 0: as good as A's own sample.

`run` takes the options of `scripts/sapo_drift.py` (rounds, measure_every, lr, questions,
max_new_tokens, out). Not a training benchmark: rewards are not compared here.
"""

from __future__ import annotations

import json
import statistics
import tempfile
from pathlib import Path

from rich.console import Console
from rich.table import Table


def make_nodes(args, tmp: str):
    """Two tiny-model nodes sharing 4/4 over one in-memory hub, in run folders under `tmp`."""
    from swarm.config import build_config
    from swarm.core.identity import create_identity, peer_id_of
    from swarm.node import Node
    from swarm.p2p import MemoryHub, MemoryTransport

    hub = MemoryHub()
    nodes = []
    for i in range(2):
        key = create_identity(bytes([i + 1]) * 32)
        config = build_config(
            {
                "node": {
                    "name": f"node-{i}",
                    "seed": i,
                    "run_dir": f"{tmp}/node-{i}",
                    "checkpoint_every": 10_000,
                },
                "policy": {"device": "cpu", "dtype": "float32"},
                "generation": {
                    "questions_per_round": args.questions,
                    "completions_per_question": 8,
                    "max_new_tokens": args.max_new_tokens,
                },
                "training": {"lr": args.lr, "own_groups": 4, "micro_batch_size": 256},
                "sharing": {"shared_groups": 4},
                "tasks": {"eval_size": 0},
            },
            "sapo drift",
        )
        node = Node(config, transport=MemoryTransport(peer_id_of(key), hub), key_pair=key)
        node.start()
        nodes.append(node)
    return nodes


def completion_logprobs(node, prompt: str, completions) -> list[list[float]]:
    """Per-token log-probs under `node`'s policy, through the same path its shared groups take."""
    from swarm.policy.trainer import retokenized_samples

    texts = [c.text for c in completions]
    samples = retokenized_samples(
        node.policy.tokenizer,
        prompt,
        texts,
        [c.finished for c in completions],
        [1.0] * len(texts),
        64,
    )
    logprobs, mask = node.trainer.logprobs(samples)
    return [logprobs[i, : int(mask[i].sum())].tolist() for i in range(len(samples))]


def measure(receiver, sender) -> dict:
    """Sample fresh groups at the sender and compare log-probs as described in the module docstring."""
    from swarm.policy.prompts import build_prompt

    path_gaps, log_ratios = [], []
    for group in sender.generate_groups():
        completions = [c for c in group.completions if c.token_ids]
        if not completions:
            continue
        prompt = build_prompt(
            sender.policy.tokenizer, group.task.question, sender.config.policy.prompt_format()
        )
        own = completion_logprobs(sender, prompt, completions)
        other = completion_logprobs(receiver, prompt, completions)
        for c, mine, theirs in zip(completions, own, other, strict=True):
            n = len(
                c.logprobs
            )  # the sampled tokens; the stop token appended for training is not in them
            path_gaps.append(max(abs(a - b) for a, b in zip(c.logprobs, mine[:n], strict=True)))
            log_ratios.append(sum(a - b for a, b in zip(c.logprobs, theirs[:n], strict=True)))
    ordered = sorted(log_ratios)
    return {
        "completions": len(log_ratios),
        "shared_path_max_gap": max(path_gaps),
        "log_ratio_mean": statistics.fmean(log_ratios),
        "log_ratio_p90": ordered[int(0.9 * (len(ordered) - 1))],
    }


def show(rows: list[dict], lr: float, console: Console) -> None:
    """The measurements as a table."""
    table = Table(
        title=f"Peer completions under the receiver's policy (2 tiny-model nodes, 4/4, lr {lr:g})"
    )
    for column in (
        "round",
        "completions",
        "shared path max |Δ log p|",
        "mean log(μ_B/π_A)",
        "p90 log(μ_B/π_A)",
    ):
        table.add_column(column, justify="right")
    for row in rows:
        table.add_row(
            str(row["round"]),
            str(row["completions"]),
            f"{row['shared_path_max_gap']:.1e}",
            f"{row['log_ratio_mean']:.3f}",
            f"{row['log_ratio_p90']:.3f}",
        )
    console.print(table)


def run(args) -> int:
    """Run both nodes, measure every `measure_every` rounds, print the table, write the JSON."""
    console = Console()
    from swarm.policy.tiny import ensure_tiny_model

    ensure_tiny_model()
    rows = []
    with tempfile.TemporaryDirectory(prefix="sapo-drift-") as tmp:
        nodes = make_nodes(args, tmp)
        for r in range(args.rounds + 1):
            if r % args.measure_every == 0:
                rows.append({"round": r, **measure(nodes[0], nodes[1])})
                console.print(
                    f"  round {r}: mean log(mu_B/pi_A) {rows[-1]['log_ratio_mean']:.3f}",
                    highlight=False,
                )
            if r < args.rounds:
                for node in nodes:
                    node.run_round()
        for node in nodes:
            node.close()
    show(rows, args.lr, console)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"setup": vars(args), "rows": rows}, indent=2))
    console.print(f"wrote {out}")
    return 0
