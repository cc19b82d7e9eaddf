"""Showing a running node to a person: a live rich display, plain lines, or nothing.

The node reports events to a `Reporter`; how they look is decided here. `LiveReporter` draws
a table of recent rounds with a reward sparkline under a progress bar (terminals);
`LineReporter` prints one line per round (logs, pipes, CI); `SilentReporter` is for tests.
`Reporters` passes every event to several reporters: the terminal's, and the node's log,
experiment log and metrics (`swarm.monitor.logs`, `swarm.monitor.explog`, `swarm.monitor.metrics`).
"""

from __future__ import annotations

import collections
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field

from rich.console import Console, Group, RenderableType
from rich.live import Live
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
)
from rich.table import Table

SPARKS = "▁▂▃▄▅▆▇█"


@dataclass(frozen=True)
class RoundReport:
    """What one round did, for display (the ledger has the full record)."""

    round: int
    policy_version: int
    mean_reward: float
    accuracy: float
    groups: int
    trained_groups: int
    shared_groups: int
    skipped: bool
    loss: float
    generate_s: float
    train_s: float
    total_s: float
    tokens_generated: int
    peers: int = 0
    received: int = 0
    accepted: int = 0
    rejected: int = 0
    refused: int = 0  # messages the transport refused by itself (oversize, unsigned...): not groups
    optimizer_steps: int = 0
    batch_reward: float = 0.0  # mean reward of the groups trained on (own and shared)
    tagged: float = 0.0  # share of own completions that give an <answer>-tagged answer
    shared_families: tuple[
        str, ...
    ] = ()  # the task family (dataset) of each shared group trained on
    score_s: float = 0.0  # scoring own completions (generate, score and train are parts of total)
    verify_s: float = 0.0  # checking peers' groups: re-scoring, spot checks (part of other_s)
    spot_checks: int = 0  # peers' groups whose tokens this node's model re-scored

    @property
    def other_s(self) -> float:
        """The round's time outside generating, scoring and training (sharing, records...)."""
        return max(0.0, self.total_s - self.generate_s - self.score_s - self.train_s)


@dataclass(frozen=True)
class EvalReport:
    round: int
    policy_version: int
    accuracy: float
    questions: int
    by_family: dict[str, float] = field(default_factory=dict)  # accuracy per dataset


@dataclass(frozen=True)
class SwarmSample:
    """Where a node stands with the swarm, taken after each round (an observer's: each pass).

    Counters are totals since this process started the node; the rest is the current value.
    """

    role: str
    round: int  # rounds completed (an observer's passes)
    policy_version: int
    peers: int
    groups_sent: int = 0
    groups_received: int = 0  # peers' groups, duplicates not counted
    groups_accepted: int = 0
    rejected: Mapping[str, int] = field(default_factory=dict)  # `Reason` code -> groups
    manifests: int = 0  # peers' delta manifests recorded (observer)
    delta_published: int = -1  # a trainer's newest version served as deltas (-1: none)
    delta_applied: int = -1  # a generator's version from its trainer's deltas (-1: none)
    bytes_in: Mapping[str, int] = field(default_factory=dict)  # "gossip" | "blob" -> bytes
    bytes_out: Mapping[str, int] = field(default_factory=dict)
    refused: Mapping[str, int] = field(default_factory=dict)  # the transport's own refusals


@dataclass
class RunInfo:
    """Facts about the run shown once at the top."""

    name: str
    model: str
    device: str
    run_dir: str
    peer_id: str
    start_round: int
    target_rounds: int  # 0: until stopped
    notes: list[str] = field(default_factory=list)
    metrics_url: str = ""  # where Prometheus metrics are served (the bound port), if they are


class Reporter:
    """Receives a node's events. The base class ignores them all (silent)."""

    def start(self, info: RunInfo) -> None: ...

    def round(self, report: RoundReport) -> None: ...

    def evaluation(self, report: EvalReport) -> None: ...

    def message(self, text: str) -> None: ...

    def swarm(self, sample: SwarmSample) -> None: ...

    def stop(self) -> None: ...

    def close(self) -> None:
        """Release what the reporter holds (files, a server); the node is done with it."""


SilentReporter = Reporter


class Reporters(Reporter):
    """Passes every event to each of `reporters`, in order."""

    def __init__(self, reporters: list[Reporter]):
        self.reporters = list(reporters)

    def start(self, info: RunInfo) -> None:
        for r in self.reporters:
            r.start(info)

    def round(self, report: RoundReport) -> None:
        for r in self.reporters:
            r.round(report)

    def evaluation(self, report: EvalReport) -> None:
        for r in self.reporters:
            r.evaluation(report)

    def message(self, text: str) -> None:
        for r in self.reporters:
            r.message(text)

    def swarm(self, sample: SwarmSample) -> None:
        for r in self.reporters:
            r.swarm(sample)

    def stop(self) -> None:
        for r in self.reporters:
            r.stop()

    def close(self) -> None:
        for r in self.reporters:
            r.close()


def sparkline(values: list[float], width: int = 40) -> str:
    """A one-line chart of `values` (the last `width` of them)."""
    values = values[-width:]
    if not values:
        return ""
    low, high = min(values), max(values)
    span = (high - low) or 1.0
    return "".join(
        SPARKS[min(len(SPARKS) - 1, int((v - low) / span * (len(SPARKS) - 1) + 0.5))]
        for v in values
    )


def round_line(r: RoundReport) -> str:
    """One round on one line (`LineReporter`, node.log)."""
    update = "skipped (no signal)" if r.skipped else f"loss {r.loss:+.4f}"
    shared = f" shared {r.shared_groups}" if r.shared_groups else ""
    swarm = (
        f"  peers {r.peers} recv {r.received} ok {r.accepted} rej {r.rejected}"
        + (f" refused {r.refused}" if r.refused else "")
        if (r.peers or r.received or r.refused)
        else ""
    )
    return (
        f"round {r.round:>5}  v{r.policy_version:<5} reward {r.mean_reward:.3f}  correct {r.accuracy:6.1%}  "
        f"groups {r.trained_groups}/{r.groups}{shared}  {update}  "
        f"gen {r.generate_s:.2f}s train {r.train_s:.2f}s round {r.total_s:.2f}s{swarm}"
    )


def eval_line(report: EvalReport) -> str:
    """One evaluation on one line."""
    return (
        f"held-out accuracy {report.accuracy:.1%} on {report.questions} questions "
        f"(round {report.round}, v{report.policy_version})"
    )


def shown_model(identity: str, source: str) -> str:
    """A node's model as its operator reads it: the identity peers see (`name@hash`), then
    where it was loaded from (`policy.model`) when the identity does not already say so."""
    return identity if source in identity else f"{identity} (from {source})"


def header_lines(info: RunInfo) -> list[str]:
    """What both reporters print once when a node starts."""
    until = f"until round {info.target_rounds}" if info.target_rounds else "until stopped"
    first = (
        f"node {info.name} ({info.peer_id}) model {info.model} on {info.device}, "
        f"starting at round {info.start_round}, {until}; files in {info.run_dir}"
    )
    if info.metrics_url:
        first += f"; metrics at {info.metrics_url}"
    return [first, *info.notes]


class LineReporter(Reporter):
    """One plain line per event: for logs and non-interactive output."""

    def __init__(self, stream=None):
        self.console = Console(file=stream or sys.stdout, highlight=False, soft_wrap=True)

    def start(self, info: RunInfo) -> None:
        for line in header_lines(info):
            self.console.print(line)

    def round(self, report: RoundReport) -> None:
        self.console.print(round_line(report))

    def evaluation(self, report: EvalReport) -> None:
        self.console.print(eval_line(report))

    def message(self, text: str) -> None:
        self.console.print(text)


class LiveReporter(Reporter):
    """A live terminal view: progress bar, reward sparkline, recent rounds and evaluations."""

    def __init__(self, console: Console | None = None, history: int = 12):
        self.console = console or Console()
        self.rows: collections.deque[RoundReport] = collections.deque(maxlen=history)
        self.rewards: list[float] = []
        self.evals: list[EvalReport] = []
        self.progress = Progress(
            TextColumn("[bold]{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            console=self.console,
        )
        self.task_id: TaskID | None = None
        self.live: Live | None = None
        self.info: RunInfo | None = None

    def start(self, info: RunInfo) -> None:
        self.info = info
        for line in header_lines(info):  # the header stays above the live area
            self.console.print(line)
        total = info.target_rounds or None
        self.task_id = self.progress.add_task("rounds", total=total, completed=info.start_round)
        self.live = Live(
            self._render(), console=self.console, refresh_per_second=4, transient=False
        )
        self.live.start()

    def round(self, report: RoundReport) -> None:
        self.rows.append(report)
        self.rewards.append(report.mean_reward)
        if self.task_id is not None:
            self.progress.update(self.task_id, completed=report.round + 1)
        self._refresh()

    def evaluation(self, report: EvalReport) -> None:
        self.evals.append(report)
        self._refresh()

    def swarm(self, sample: SwarmSample) -> None:
        if sample.role == "observer" and self.task_id is not None:  # passes, not rounds
            self.progress.update(self.task_id, completed=sample.round)
            self._refresh()

    def message(self, text: str) -> None:
        if self.live is not None:
            self.live.console.print(text)
        else:
            self.console.print(text)

    def stop(self) -> None:
        if self.live is not None:
            self._refresh()
            self.live.stop()
            self.live = None

    def _refresh(self) -> None:
        if self.live is not None:
            self.live.update(self._render())

    def _render(self):
        table = Table(expand=False, box=None, header_style="bold")
        for column in (
            "round",
            "version",
            "reward",
            "correct",
            "groups",
            "update",
            "gen s",
            "train s",
            "round s",
        ):
            table.add_column(column, justify="right")
        for r in self.rows:
            table.add_row(
                str(r.round),
                f"v{r.policy_version}",
                f"{r.mean_reward:.3f}",
                f"{r.accuracy:.1%}",
                f"{r.trained_groups}/{r.groups}"
                + (f" +{r.shared_groups}" if r.shared_groups else ""),
                "skipped" if r.skipped else f"{r.loss:+.4f}",
                f"{r.generate_s:.2f}",
                f"{r.train_s:.2f}",
                f"{r.total_s:.2f}",
            )
        lines: list[RenderableType] = [
            self.progress,
            f"reward per round  {sparkline(self.rewards)}",
            table,
        ]
        if self.rows and (self.rows[-1].peers or self.rows[-1].received or self.rows[-1].refused):
            r = self.rows[-1]
            refused = f" · messages refused by the transport {r.refused}" if r.refused else ""
            lines.append(
                f"swarm: {r.peers} peers connected · groups received {r.received}, accepted {r.accepted}, rejected {r.rejected}{refused}"
            )
        if self.evals:
            first, last = self.evals[0], self.evals[-1]
            lines.append(
                f"held-out accuracy: {first.accuracy:.1%} at v{first.policy_version} -> "
                f"{last.accuracy:.1%} at v{last.policy_version} ({last.questions} questions)"
            )
        return Group(*lines)


def make_reporter(kind: str = "auto") -> Reporter:
    """'live' for terminals, 'lines' for logs, 'none'; 'auto' picks live on a TTY."""
    if kind == "auto":
        kind = "live" if sys.stdout.isatty() else "lines"
    return {"live": LiveReporter, "lines": LineReporter, "none": SilentReporter}[kind]()
