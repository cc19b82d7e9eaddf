"""`swarm-node status`: a node's recent rounds, evaluations and update counts, from its ledger.

Reads the ledger only (works on a running node's ledger thanks to WAL, or on a copy).
"""

from __future__ import annotations

import json
from pathlib import Path

from rich.console import Console
from rich.table import Table

from swarm.config.preflight import OBSERVER_MODEL
from swarm.core.errors import SwarmError
from swarm.ledger import Ledger, get_meta, last_round, latest_evals, latest_rounds, update_totals
from swarm.monitor.display import shown_model

IDENTITY_KEY = "model_identity"  # the ledger's meta key for the node's model as peers see it


def model_shown(model: str | None, identity: str | None) -> str:
    """The node's model in a view's header: its identity (`name@hash`, what peers see) and
    where it was loaded from; a ledger written before identities were recorded (or an
    observer's, which has no model) shows what it recorded."""
    if identity and model:
        return shown_model(identity, model)
    if model and model != OBSERVER_MODEL:
        return f"{model} (its name@hash is recorded when the node next starts)"
    return str(model)


def collect_status(url: str, last: int = 10) -> dict:
    """Plain data for the status view."""
    ledger = Ledger(url, create=False)  # reading must not change a (possibly running) node's ledger
    try:
        with ledger.reader() as session:
            rounds = latest_rounds(session, last)
            evals = latest_evals(session, 5)
            return {
                "ledger": url,
                "node_name": get_meta(session, "node_name"),
                "model": get_meta(session, "model"),
                "model_identity": get_meta(session, IDENTITY_KEY),
                "last_round": last_round(session),
                "updates": update_totals(session),
                "rounds": [
                    {
                        "round": r.round,
                        "policy_version": r.policy_version,
                        "mean_reward": r.mean_reward,
                        "accuracy": r.accuracy,
                        "questions": r.questions,
                        "completions": r.completions,
                        "tokens_generated": r.tokens_generated,
                        "generate_s": r.generate_s,
                        "score_s": r.score_s,
                        "train_s": r.train_s,
                        "other_s": r.other_s,
                        "total_s": r.total_s,
                    }
                    for r in rounds
                ],
                "evals": [
                    {
                        "round": e.round,
                        "policy_version": e.policy_version,
                        "accuracy": e.accuracy,
                        "questions": e.questions,
                    }
                    for e in evals
                ],
            }
    finally:
        ledger.close()


def show_status(
    url: str, last: int = 10, as_json: bool = False, console: Console | None = None
) -> None:
    data = collect_status(url, last)
    console = console or Console()
    if as_json:
        console.print_json(json.dumps(data))
        return
    if data["last_round"] is None:
        console.print(f"ledger {url}: no rounds recorded yet")
        return
    updates = ", ".join(f"{k.replace('_', ' ')} {v}" for k, v in sorted(data["updates"].items()))
    console.print(
        f"node {data['node_name']} · model {model_shown(data['model'], data['model_identity'])} · last round {data['last_round']} · updates: {updates}"
    )
    table = Table(title="latest rounds", header_style="bold")
    for column in (
        "round",
        "version",
        "reward",
        "correct",
        "tokens",
        "gen s",
        "score s",
        "train s",
        "other s",
    ):
        table.add_column(column, justify="right")
    for r in data["rounds"]:
        table.add_row(
            str(r["round"]),
            f"v{r['policy_version']}",
            f"{r['mean_reward']:.3f}",
            f"{r['accuracy']:.1%}",
            str(r["tokens_generated"]),
            f"{r['generate_s']:.2f}",
            f"{r['score_s']:.2f}",
            f"{r['train_s']:.2f}",
            f"{r['other_s']:.2f}",
        )
    console.print(table)
    if data["evals"]:
        evals = Table(title="held-out accuracy (greedy)", header_style="bold")
        for column in ("after round", "version", "accuracy", "questions"):
            evals.add_column(column, justify="right")
        for e in data["evals"]:
            evals.add_row(
                str(e["round"]),
                f"v{e['policy_version']}",
                f"{e['accuracy']:.1%}",
                str(e["questions"]),
            )
        console.print(evals)


def run_folder_summary(run_dir: Path) -> str:
    """One line on what a run folder holds: its peer ID, and its ledger's node, model and
    last round (read only; a folder a node is running in is fine)."""
    if not run_dir.is_dir():
        return f"run folder {run_dir} does not exist yet: join creates it"
    parts = [f"run folder {run_dir}"]
    info = _node_info(run_dir / "node.json")
    if (run_dir / "identity.key").exists():
        unknown = "not started yet: 'swarm-node init --run-dir' names it"
        parts.append(f"peer {info.get('peer_id', f'({unknown})')}")
    else:
        parts.append("no identity yet (init or join makes one)")
    path = run_dir / "ledger.sqlite"
    if not path.exists():
        parts.append("no ledger yet")
        return " · ".join(parts)
    try:
        data = collect_status(f"sqlite:///{path.resolve()}", last=1)
    except SwarmError as e:
        parts.append(f"ledger unreadable ({e})")
        return " · ".join(parts)
    last = data["last_round"]
    parts.append(
        f"ledger of node {data['node_name']}, model "
        f"{model_shown(data['model'], data['model_identity'])}, "
        + ("no rounds yet" if last is None else f"last round {last}")
    )
    return " · ".join(parts)


def _node_info(path: Path) -> dict:
    try:
        info = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return info if isinstance(info, dict) else {}
