"""`swarm-node peers` and `swarm-node contributions`: the ledger's per-peer figures, shown.

Reads a ledger (never writes: a running node may own it), asks `swarm.ops.contributions` for
plain data and presents it as rich tables for people, JSON for scripts, or a plot of
contribution over time.

Deliberately not here: the queries themselves (`swarm.ops.contributions`).
"""

from __future__ import annotations

import json
import time
from pathlib import Path

from rich.console import Console
from rich.table import Table

from swarm.ledger import Ledger, get_meta
from swarm.ops.contributions import (
    Window,
    contribution_timeline,
    group_count,
    own_contribution,
    peer_contributions,
)
from swarm.ops.status import IDENTITY_KEY, model_shown


def collect(url: str, window: Window, sort: str) -> dict:
    """Plain data for both views: node facts, every peer's figures, and our own contribution."""
    ledger = Ledger(url, create=False)
    try:
        with ledger.reader() as session:
            peers = peer_contributions(session, window, sort)
            own = own_contribution(session, window)
            return {
                "ledger": url,
                "node_name": get_meta(session, "node_name"),
                "model": get_meta(session, "model"),
                "model_identity": get_meta(session, IDENTITY_KEY),
                "groups_in_ledger": group_count(session),
                "window": {"since": window.since, "until": window.until},
                "peers": [p.as_dict() for p in peers],
                "own": own.__dict__,
            }
    finally:
        ledger.close()


def _console() -> Console:
    """Piped output gets room for the whole table instead of rich's 80-column default."""
    console = Console()
    return console if console.is_terminal else Console(width=180)


def _when(t: float | None) -> str:
    return "" if t is None else time.strftime("%m-%d %H:%M:%S", time.localtime(t))


def _short(peer_id: str) -> str:
    """Peer IDs all start alike (12D3KooW): their tail tells them apart."""
    return peer_id if len(peer_id) <= 16 else f"…{peer_id[-10:]}"


def _by_reason(counts: dict[str, int]) -> str:
    """'reason n, reason n', most frequent first."""
    return ", ".join(f"{r} {n}" for r, n in sorted(counts.items(), key=lambda x: (-x[1], x[0])))


def _refused(p: dict) -> str:
    """Messages the transport refused from a peer by itself (not groups), with their reasons."""
    counts = p["refused_by_reason"]
    return f"{sum(counts.values())} ({_by_reason(counts)})" if counts else "0"


def _reward(value: float | None) -> str:
    return "" if value is None else f"{value:.3f}"


def show_peers(data: dict, as_json: bool, console: Console | None = None) -> None:
    """The peers view: who this node has heard from, when, and how their groups fared."""
    console = console or _console()
    if as_json:
        keys = (
            "peer_id",
            "model",
            "first_seen",
            "last_seen",
            "addrs",
            "banned",
            "received",
            "accepted",
            "rejected",
            "rejected_by_reason",
            "refused_by_reason",
            "used",
        )
        console.print_json(
            json.dumps({**data, "peers": [{k: p[k] for k in keys} for p in data["peers"]]})
        )
        return
    console.print(_header(data))
    if not data["peers"]:
        console.print("no peers recorded")
        return
    table = Table(title="peers", header_style="bold")
    for column in (
        "peer",
        "model",
        "first seen",
        "last seen",
        "recv",
        "accept",
        "reject",
        "refused",
        "used",
        "banned",
    ):
        table.add_column(
            column,
            justify="left" if column in ("peer", "model", "refused", "banned") else "right",
            no_wrap=column not in ("model", "refused", "banned"),
        )
    for p in data["peers"]:
        table.add_row(
            _short(p["peer_id"]),
            p["model"],
            _when(p["first_seen"]),
            _when(p["last_seen"]),
            str(p["received"]),
            str(p["accepted"]),
            str(p["rejected"]),
            _refused(p),
            str(p["used"]),
            p["banned"],
        )
    console.print(table)


def show_contributions(data: dict, as_json: bool, console: Console | None = None) -> None:
    """The contributions view: per-peer use and advantage, rejections by reason, deltas, and our own."""
    console = console or _console()
    if as_json:
        console.print_json(json.dumps(data))
        return
    console.print(_header(data))
    table = Table(title="contributions of peers to this node", header_style="bold")
    columns = (
        "peer",
        "recv",
        "accept",
        "rejected (by reason)",
        "refused (by reason)",
        "used",
        "adv Σ",
        "adv mean",
        "reward",
        "used reward",
        "deltas in/out",
        "last seen",
    )
    for column in columns:
        table.add_column(
            column,
            justify="left" if "reason" in column or column == "peer" else "right",
            no_wrap="reason" not in column,
        )
    for p in data["peers"]:
        reasons = _by_reason(p["rejected_by_reason"])
        table.add_row(
            _short(p["peer_id"]) + (" [red](banned)[/red]" if p["banned"] else ""),
            str(p["received"]),
            str(p["accepted"]),
            f"{p['rejected']}" + (f" ({reasons})" if reasons else ""),
            _refused(p),
            str(p["used"]),
            f"{p['advantage_total']:.1f}",
            f"{p['advantage_mean']:.2f}",
            _reward(p["mean_reward"]),
            _reward(p["used_reward"]),
            f"{p['deltas_from']}/{p['deltas_to']}",
            _when(p["last_seen"]),
        )
    if data["peers"]:
        console.print(table)
    else:
        console.print("no peers recorded")
    own = data["own"]
    served = ", ".join(f"{_short(k)} {v}" for k, v in sorted(own["served_to"].items()))
    console.print(
        f"this node's contribution: {own['groups_published']} groups published (mean reward "
        f"{_reward(own['mean_reward']) or '-'}), {own['deltas_published']} deltas published, "
        f"{own['deltas_served']} served ({own['delta_bytes_served']} bytes){': ' + served if served else ''}. "
        "How peers used our groups is in their ledgers, not ours."
    )


def _header(data: dict) -> str:
    window = data["window"]
    span = ""
    if window["since"] is not None or window["until"] is not None:
        span = f" · window {_when(window['since']) or 'start'} → {_when(window['until']) or 'now'}"
    model = model_shown(data["model"], data["model_identity"])
    return f"node {data['node_name']} · model {model} · {data['groups_in_ledger']} groups in ledger{span}"


def plot_contributions(url: str, window: Window, path: Path) -> int:
    """Draw cumulative advantage used and groups accepted per peer over time; return how many peers."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ledger = Ledger(url, create=False)
    try:
        with ledger.reader() as session:
            timeline = contribution_timeline(session, window)
    finally:
        ledger.close()
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(9, 6), sharex=True)
    start = min((points[0][0] for points in timeline.values() if points), default=0.0)
    for peer_id, points in sorted(timeline.items()):
        minutes = [(t - start) / 60 for t, _, _ in points]
        top.step(minutes, [a for _, a, _ in points], where="post", label=_short(peer_id))
        bottom.step(minutes, [n for _, _, n in points], where="post", label=_short(peer_id))
    top.set_ylabel("advantage used (sum |A|)")
    top.set_title("contribution of each peer to this node over time")
    bottom.set_ylabel("groups accepted")
    bottom.set_xlabel("minutes since the first contribution")
    for ax in (top, bottom):
        ax.grid(alpha=0.3)
    if timeline:
        top.legend(fontsize=8)
    fig.tight_layout()
    try:
        fig.savefig(path, dpi=120)
    except OSError as e:
        from swarm.core.errors import SwarmError

        raise SwarmError(f"cannot write plot {path}: {e.strerror or e}") from None
    finally:
        plt.close(fig)
    return len(timeline)
