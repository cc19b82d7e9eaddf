"""The config sections about the daemon itself: who it is and where it keeps its files
(`[node]`), its ledger (`[ledger]`), and what it tells its operator (`[monitor]`)."""

from __future__ import annotations

from dataclasses import dataclass

from swarm.config.fields import opt


@dataclass(frozen=True)
class NodeSection:
    """The daemon itself: who it is, where it keeps its files, how long it runs."""

    name: str = opt("node", "Display name of this node in tables and plots.")
    role: str = opt(
        "trainer",
        "trainer: generate, share and train; generator: follow a trainer's weights and share; observer: only collect and verify.",
        choices=("trainer", "generator", "observer"),
    )
    run_dir: str = opt(
        "runs/node",
        "Folder for this node's identity, ledger and checkpoints (created if missing; relative: to the config file's folder).",
        path=True,
    )
    rounds: int = opt(0, "Stop after this many rounds in total (0: run until stopped).", min=0)
    seed: int = opt(0, "Seed for sampling, task streams and everything random in this node.", min=0)
    checkpoint_every: int = opt(
        10, "Write a checkpoint every this many rounds (and always on a clean stop).", min=1
    )
    keep_checkpoints: int = opt(3, "How many recent checkpoints to keep on disk.", min=1)
    observe_every_s: float = opt(
        5.0,
        "Observer role: seconds between its passes over what arrived (node.rounds counts passes).",
        min=0.05,
        max=3600.0,
    )


@dataclass(frozen=True)
class LedgerSection:
    """Where the contribution ledger lives."""

    url: str = opt(
        "",
        "SQLAlchemy URL of the ledger ('' : SQLite file ledger.sqlite in node.run_dir; a relative sqlite:/// path in a config file is relative to its folder).",
    )
    rejected_rows_per_peer: int = opt(
        32,
        "Rejected groups of one peer stored as rows (with their signed bytes) per "
        "ledger.count_window_s; past it they are only counted, as duplicates and a banned "
        "peer's messages always are (table rejection_counts).",
        min=0,
    )
    count_window_s: float = opt(
        3600.0,
        "Window of the per-peer row quota and of the rejection counters, in seconds.",
        min=1.0,
    )
    keep_days: float = opt(
        0.0,
        "Prune rejected rows, rejection counters and this node's own sent groups older than "
        "this many days (0: keep them all).",
        min=0.0,
    )
    keep_bodies_days: float = opt(
        0.0,
        "Drop the signed bytes of accepted groups older than this many days, keeping their "
        "rows and figures (0: keep them; never those younger than verify.max_age_s, which a "
        "restart reads back). Replay counts such a group as body_pruned.",
        min=0.0,
    )
    max_mb: int = opt(
        0,
        "Prune, oldest first, rejected rows and counters, then this node's own sent groups, "
        "then accepted groups' signed bytes (not their rows), while the ledger's data exceed "
        "this many MB (0: no cap). Rounds, updates, accepted groups' rows and their uses, "
        "and bytes younger than verify.max_age_s are never pruned.",
        min=0,
    )


@dataclass(frozen=True)
class MonitorSection:
    """What a node tells its operator besides the terminal: log file, metrics, experiment logs."""

    log_format: str = opt(
        "text",
        "node.log in the run folder (rotated): text (time, level, message) or json (one JSON "
        "object a line).",
        choices=("text", "json"),
    )
    log_max_mb: int = opt(10, "Rotate node.log when it reaches this many MB.", min=1, max=10_000)
    log_backups: int = opt(5, "Rotated logs kept (node.log.1 ... node.log.N).", min=0, max=1000)
    metrics: str = opt(
        "",
        "HOST:PORT to serve Prometheus metrics on (e.g. 127.0.0.1:9400; port 0: any free one); "
        "'' : off.",
    )
    tensorboard: bool = opt(
        False,
        "Also write TensorBoard event files to tensorboard/ in the run folder (needs the "
        "tensorboard package).",
    )
