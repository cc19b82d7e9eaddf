"""The GPU bench's swarm: 4 `swarm-node join` processes of the bench's model on one card.

A private swarm (a fresh swarm key: peers without it fail the handshake), the pull
exchange, `sharing.shared_groups = 4`, groups of the real size (the shape's group), 5
rounds each, started and watched by the demo's launcher (`swarm.ops.demo`). What it
reports per node comes from the node's own ledger and metrics.jsonl: groups sent, pulls
made (`received`: a failed fetch is recorded as a rejection with reason pull_failed),
groups accepted (delivered and verified: task rebuilt, every reward recomputed), the
rejections by reason, and each round's seconds.
"""

from __future__ import annotations

import json
import statistics
from pathlib import Path

from lab.gpu_shapes import Shape, random_model, word_tokenizer


def save_model(shape: Shape, folder: Path) -> Path:
    """The bench's random model and tokenizer as a model folder a node loads (bf16 weights)."""
    import torch

    model = random_model(shape).to(torch.bfloat16)
    model.save_pretrained(folder)
    word_tokenizer(shape.vocab).save_pretrained(folder)
    return folder


def swarm_settings(shape: Shape, model: Path, device: str, key: Path) -> list[str]:
    """The `--set` overrides of every node (over the demo's defaults)."""
    return [
        f'policy.model="{model}"',
        f'policy.device="{device}"',
        f'policy.dtype="{"bfloat16" if device.startswith("cuda") else "float32"}"',
        f'p2p.psk_file="{key}"',
        'p2p.exchange="pull"',
        f"generation.questions_per_round={shape.swarm_questions}",
        f"generation.completions_per_question={shape.group}",
        f"generation.max_new_tokens={shape.swarm_new_tokens}",
        f"generation.batch_size={shape.swarm_questions * shape.group}",
        f"training.own_groups={shape.swarm_questions}",
        "sharing.shared_groups=4",
        f"training.micro_batch_size={shape.micro_batch_size}",
        "training.lr=1e-6",
        "tasks.eval_size=4",
        "tasks.eval_every=100",
    ]


def round_seconds(folder: Path) -> list[float]:
    """Each round's seconds from a node's metrics.jsonl."""
    path = folder / "metrics.jsonl"
    if not path.exists():
        return []
    records = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return [r["total_s"] for r in records if r.get("kind") == "round"]


def rejection_reasons(folder: Path) -> dict[str, int]:
    """Received groups a node rejected, by reason, from its ledger (rows and counted ones)."""
    from sqlalchemy import func, select

    from swarm.ledger import Ledger
    from swarm.ledger.queries import rejected_rows_since
    from swarm.ledger.schema import RejectionCountRow

    path = folder / "ledger.sqlite"
    if not path.exists():
        return {}
    ledger = Ledger(f"sqlite:///{path}", create=False)
    reasons: dict[str, int] = {}
    try:
        with ledger.reader() as session:
            for _, _, reason, rows in rejected_rows_since(session, 0.0):
                reasons[reason] = reasons.get(reason, 0) + rows
            counted = select(RejectionCountRow.reason, func.sum(RejectionCountRow.count))
            for reason, count in session.execute(counted.group_by(RejectionCountRow.reason)):
                reasons[f"{reason} (counted)"] = int(count or 0)
    finally:
        ledger.close()
    return reasons


NODE_PACKAGES = ("libp2p", "trio", "sqlalchemy", "reasoning_gym", "msgspec", "cryptography")


def swarm_missing() -> str | None:
    """Why a node cannot run in this Python (a package it needs is missing), or None."""
    import importlib.util

    absent = [p for p in NODE_PACKAGES if importlib.util.find_spec(p) is None]
    return f"a node needs {', '.join(absent)}, not installed here" if absent else None


def run_swarm(
    shape: Shape,
    device: str,
    out: Path,
    rounds: int = 5,
    nodes: int = 4,
    timeout: float | None = None,
) -> dict:
    """Run the swarm to its end (or `timeout` seconds) and sum up what it exchanged."""
    from swarm.ops.demo import run_demo
    from swarm.p2p.swarm_key import generate_key, write_key_file

    out.mkdir(parents=True, exist_ok=True)
    model = save_model(shape, out / "model")
    key = out / "swarm.key"
    write_key_file(key, generate_key())
    summary = run_demo(
        nodes, rounds, out / "nodes", None, swarm_settings(shape, model, device, key), timeout
    )
    per_node = []
    for node in summary["per_node"]:
        folder = out / "nodes" / node["name"]
        seconds = round_seconds(folder)
        per_node.append(
            {
                "name": node["name"],
                "exit_code": node["exit_code"],
                "rounds": len(seconds),
                "sent": node.get("sent", 0),
                "received": node.get("received", 0),
                "accepted": node.get("accepted", 0),
                "rejected": node.get("rejected", 0),
                "rejections": rejection_reasons(folder),
                "round_s": seconds,
            }
        )
    received = sum(n["received"] for n in per_node)
    accepted = sum(n["accepted"] for n in per_node)
    failed = sum(n["rejections"].get("pull_failed", 0) for n in per_node)
    delivered = received - failed
    times = [s for n in per_node for s in n["round_s"]]
    return {
        "nodes": nodes,
        "rounds": rounds,
        "exchange": "pull",
        "shared_groups": 4,
        "group_size": shape.group,
        "questions_per_round": shape.swarm_questions,
        "max_new_tokens": shape.swarm_new_tokens,
        "wall_s": summary["wall_s"],
        "groups_sent": sum(n["sent"] for n in per_node),
        "groups_received": received,
        "groups_accepted": accepted,
        "pulls_failed": failed,  # recorded as rejected with reason pull_failed
        "groups_delivered": delivered,
        # the goal's figure: pulls delivered and verified, of all pulls the nodes made
        "accepted_share": accepted / received if received else None,
        "verified_share_of_delivered": accepted / delivered if delivered else None,
        "median_round_s": statistics.median(times) if times else None,
        "all_exited_cleanly": all(n["exit_code"] == 0 for n in per_node),
        "per_node": per_node,
    }
