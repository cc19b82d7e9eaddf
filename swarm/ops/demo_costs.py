"""What each node of a local swarm cost: its peak memory (sampled from /proc while it runs),
its rounds' times and verification's share of them, the spot checks it made, the groups it
pulled, verified and trained on, and the bytes of a group on the wire. Read from the node's
own files (metrics.jsonl, ledger.sqlite), never written to."""

from __future__ import annotations

import json
import statistics
from pathlib import Path


def vm_hwm_mb(pid: int) -> float | None:
    """A live process's peak resident memory (Linux VmHWM), in MB; None where unknown."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


def round_costs(folder: Path) -> dict:
    """Per-round figures from a node's metrics.jsonl: medians of its round, generate, train
    and verification times, verification's share, and totals of spot checks and groups."""
    path = folder / "metrics.jsonl"
    rows = []
    if path.exists():
        for line in path.read_text().splitlines():
            record = json.loads(line) if line.strip() else {}
            if record.get("kind") == "round":
                rows.append(record)
    if not rows:
        return {}
    total = sum(r["total_s"] for r in rows)
    verify = sum(r.get("verify_s", 0.0) for r in rows)
    return {
        "rounds_timed": len(rows),
        "round_s_median": statistics.median(r["total_s"] for r in rows),
        "generate_s_median": statistics.median(r["generate_s"] for r in rows),
        "train_s_median": statistics.median(r["train_s"] for r in rows),
        "verify_s_median": statistics.median(r.get("verify_s", 0.0) for r in rows),
        "verify_share": verify / total if total > 0 else 0.0,
        "spot_checks": sum(r.get("spot_checks", 0) for r in rows),
        "shared_trained": sum(r.get("shared_groups", 0) for r in rows),
    }


def group_bytes(folder: Path) -> dict:
    """Mean signed bytes of the groups a node sent and accepted (from its ledger)."""
    from sqlalchemy import func, select

    from swarm.core.errors import LedgerError
    from swarm.ledger import Ledger
    from swarm.ledger.schema import GroupRow

    path = folder / "ledger.sqlite"
    if not path.exists():
        return {}
    ledger = Ledger(f"sqlite:///{path}", create=False)
    try:
        with ledger.reader() as s:
            rows = s.execute(
                select(GroupRow.status, func.avg(func.length(GroupRow.body)))
                .where(GroupRow.body.is_not(None))
                .group_by(GroupRow.status)
            ).all()
    except LedgerError:
        return {}
    finally:
        ledger.close()
    return {f"{status}_group_bytes": float(mean) for status, mean in rows if mean is not None}
