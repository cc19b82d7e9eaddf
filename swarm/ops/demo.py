"""`swarm-node demo`: a local swarm of N node processes on loopback, watched live.

The parent prepares one run folder with a sub-folder per node (identity, config, ledger,
checkpoints, log), picks a free loopback port for each, and starts every node as its own
`swarm-node join` process bootstrapped to node 0 (and its predecessor). While they run it
shows a live table read from each node's ledger (round, reward, groups sent, received,
accepted, rejected). Each node stops by itself after `--rounds`; the parent then writes
`summary.json` and `reward.png` (reward per node over rounds) and exits. Ctrl-C stops
every node cleanly; a node that outlives the time limit is killed.

Deliberately not here: anything a node does. The demo only launches, watches and reports.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from rich.console import Console
from rich.live import Live
from rich.table import Table

from swarm.core.errors import SwarmError
from swarm.ops.demo_costs import group_bytes, round_costs, vm_hwm_mb
from swarm.policy.prompts import ARITHMETIC_EXAMPLES

# Settings for a swarm of tiny-model nodes sharing 2 CPU cores; a key the --config file sets,
# and --set, override them.
DEMO_DEFAULTS = (
    'policy.device="cpu"',
    "generation.questions_per_round=16",
    "generation.completions_per_question=8",
    "generation.max_new_tokens=8",
    "training.lr=3e-4",
    "training.own_groups=16",
    "sharing.shared_groups=4",  # so that the demo shows the pull exchange at work
    "tasks.eval_size=100",
    "tasks.eval_every=10",
    "node.checkpoint_every=10",
)


def examples_toml(examples) -> str:
    """Worked examples as a TOML inline array of tables, for `--set policy.prompt_examples=`."""
    tables = (f"{{question = {json.dumps(q)}, answer = {json.dumps(a)}}}" for q, a in examples)
    return "[" + ", ".join(tables) + "]"


EXAMPLES_TOML = examples_toml(ARITHMETIC_EXAMPLES)
# For a real model (--model, e.g. smollm2-135m): rounds small enough for four of them on
# 2 cores, its learning rate, and the worked examples that teach it the answer format
# (node_config/smollm2-cpu.toml); sharing only with peers of its own model family.
REAL_DEMO_DEFAULTS = (
    'policy.device="cpu"',
    'policy.dtype="float32"',
    "policy.prompt_examples=" + EXAMPLES_TOML,
    "generation.questions_per_round=4",
    "generation.completions_per_question=8",
    "generation.max_new_tokens=32",
    "training.lr=1e-5",
    "training.own_groups=4",
    "training.micro_batch_size=8",  # as the preset: a node's peak 2.92 GB (docs/BENCHMARKS.md)
    'training.optimizer_state="bf16"',  # AdamW's moments in bf16: 0.51 GB less a node
    "sharing.shared_groups=4",
    'sharing.shared_from="same-family"',
    "tasks.eval_size=32",
    "tasks.eval_every=10",
    "node.checkpoint_every=10",
    "node.keep_checkpoints=1",
)
SECONDS_A_ROUND = {"tiny": 30.0, "real": 240.0}  # per node sharing a core: the default timeout
STOP_GRACE_S = 60.0  # a stopped node's last round, evaluation and checkpoint: at least this


def round_seconds(kind: str, nodes: int) -> float:
    """A generous round's time for the model's kind with `nodes` processes on 2 cores."""
    return SECONDS_A_ROUND[kind] * max(1.0, nodes / 2)


def stop_grace(kind: str, nodes: int) -> float:
    """How long a node asked to stop (Ctrl-C, the time limit) may take to finish its current
    round, evaluate and write its checkpoint before it is killed: a round's time, and at
    least `STOP_GRACE_S` (a real model's round took 100-160 s with 4 nodes on 2 cores, past
    the 60 s it was given)."""
    return max(STOP_GRACE_S, round_seconds(kind, nodes))


def demo_defaults(model: str) -> tuple[str, ...]:
    """The demo's settings for a model: the tiny model's, or a real model's."""
    from swarm.policy.source import is_builtin

    if not model or is_builtin(model):
        return DEMO_DEFAULTS
    return (f'policy.model="{model}"', *REAL_DEMO_DEFAULTS)


def unset_by_file(defaults: tuple[str, ...], base_config: Path | None) -> list[str]:
    """The `defaults` whose key the config file does not set (the file wins over them)."""
    from swarm.config.load import load_with_origins

    if base_config is None:
        return list(defaults)
    origins = load_with_origins(base_config, env={}).origins
    kept = []
    for item in defaults:
        section, _, key = item.partition("=")[0].partition(".")
        if (section, key) not in origins:
            kept.append(item)
    return kept


@dataclass
class DemoNode:
    """One node process of the demo and what the parent knows of it."""

    index: int
    folder: Path
    peer_id: str
    port: int
    process: subprocess.Popen | None = None
    exit_code: int | None = None
    stats: dict = field(default_factory=dict)
    peak_rss_mb: float = 0.0  # the node process's peak resident memory, sampled while it ran

    @property
    def name(self) -> str:
        return f"node-{self.index}"

    @property
    def addr(self) -> str:
        return f"/ip4/127.0.0.1/tcp/{self.port}/p2p/{self.peer_id}"


def free_ports(count: int) -> list[int]:
    """`count` distinct loopback ports that are free right now."""
    sockets, ports = [], []
    try:
        for _ in range(count):
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.bind(("127.0.0.1", 0))
            sockets.append(s)
            ports.append(s.getsockname()[1])
    finally:
        for s in sockets:
            s.close()
    return ports


def prepare(
    out: Path,
    nodes: int,
    rounds: int,
    base_config: Path | None,
    sets: list[str],
    defaults: tuple[str, ...] = DEMO_DEFAULTS,
) -> list[DemoNode]:
    """Create identities (or reuse those of an earlier demo in `out`) and per-node config files."""
    from swarm.config.load import load_config
    from swarm.core.identity import load_or_create_identity, peer_id_of

    if nodes < 1:
        raise SwarmError("--nodes must be at least 1")
    try:
        out.mkdir(parents=True, exist_ok=True)
        for i in range(nodes):
            (out / f"node-{i}").mkdir(exist_ok=True)
    except OSError as e:
        reason = e.strerror or e
        raise SwarmError(
            f"cannot create the demo folder {out}: {reason}: choose a writable --out"
        ) from None
    ports = free_ports(nodes)
    demo = []
    for i in range(nodes):
        folder = out / f"node-{i}"
        key = load_or_create_identity(folder / "identity.key")  # never replaces an identity
        demo.append(DemoNode(index=i, folder=folder, peer_id=peer_id_of(key), port=ports[i]))
    for node in demo:
        bootstrap = [demo[0].addr] if node.index > 0 else []
        if node.index > 1:
            bootstrap.append(demo[node.index - 1].addr)
        overrides = [
            *unset_by_file(defaults, base_config),
            *sets,
            f'node.name="{node.name}"',
            f'node.run_dir="{node.folder}"',
            f"node.rounds={rounds}",
            f"node.seed={node.index}",
            f'p2p.listen="/ip4/127.0.0.1/tcp/{node.port}"',
            "p2p.bootstrap=[" + ", ".join(f'"{a}"' for a in bootstrap) + "]",
        ]
        config = load_config(base_config, overrides)  # validates before anything starts
        write_toml(node.folder / "config.toml", config.to_dict())
    return demo


def write_toml(path: Path, data: dict) -> None:
    """Write a config (as `Config.to_dict()` gives it) to a TOML file that `load_config` reads back."""
    from swarm.config.dump import write_config

    write_config(path, data, "written by swarm-node demo; the effective config of this node")


def launch(node: DemoNode) -> None:
    """Start one node process; its output goes to log.txt in its folder."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}
    log = open(node.folder / "log.txt", "w")  # noqa: SIM115 - the child process owns it until it exits
    node.process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "swarm.cli",
            "join",
            "--config",
            str(node.folder / "config.toml"),
            "--display",
            "lines",
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
        env=env,
        start_new_session=True,
    )


def read_stats(node: DemoNode) -> dict:
    """Per-node figures from its ledger (empty until the node has written one)."""
    from swarm.core.errors import LedgerError
    from swarm.ledger import Ledger, RoundRow, group_counts, latest_evals

    path = node.folder / "ledger.sqlite"
    if not path.exists():
        return {}
    ledger = Ledger(f"sqlite:///{path}", create=False)  # the node owns it: never write to it
    try:
        with ledger.reader() as s:
            rounds = (
                s.query(RoundRow)
                .filter(RoundRow.superseded.is_(False))
                .order_by(RoundRow.round)
                .all()
            )
            counts = group_counts(s)
            evals = latest_evals(s, 1000)
    except LedgerError:
        return {}  # the node has not created its tables yet
    finally:
        ledger.close()
    return {
        "round": rounds[-1].round if rounds else None,
        "policy_version": rounds[-1].policy_version if rounds else 0,
        "reward": rounds[-1].mean_reward if rounds else None,
        "rewards": [r.mean_reward for r in rounds],
        "sent": counts.get("sent", 0),
        "accepted": counts.get("accepted", 0),
        "rejected": counts.get("rejected", 0),
        "received": counts.get("accepted", 0) + counts.get("rejected", 0),
        "eval_first": evals[-1].accuracy if evals else None,
        "eval_last": evals[0].accuracy if evals else None,
    }


def render(demo: list[DemoNode], rounds: int, elapsed: float) -> Table:
    table = Table(
        title=f"local swarm: {len(demo)} nodes, {rounds} rounds each · {elapsed:.0f}s",
        header_style="bold",
    )
    for column in (
        "node",
        "state",
        "round",
        "reward",
        "sent",
        "recv",
        "accept",
        "reject",
        "held-out",
    ):
        table.add_column(column, justify="right")
    for node in demo:
        st = node.stats
        state = (
            "running"
            if node.exit_code is None
            else ("done" if node.exit_code == 0 else f"failed ({node.exit_code})")
        )
        acc = (
            "" if st.get("eval_last") is None else f"{st['eval_first']:.0%} → {st['eval_last']:.0%}"
        )
        table.add_row(
            node.name,
            state,
            "" if st.get("round") is None else f"{st['round'] + 1}/{rounds}",
            "" if st.get("reward") is None else f"{st['reward']:.3f}",
            str(st.get("sent", 0)),
            str(st.get("received", 0)),
            str(st.get("accepted", 0)),
            str(st.get("rejected", 0)),
            acc,
        )
    return table


def watch(
    demo: list[DemoNode], rounds: int, timeout: float, console: Console, grace: float
) -> bool:
    """Refresh the live table until every node exits; stop them all on Ctrl-C or timeout
    (killing any still running `grace` seconds later)."""
    start = time.monotonic()
    interrupted = False
    with Live(render(demo, rounds, 0), console=console, refresh_per_second=2) as live:
        try:
            while any(n.exit_code is None for n in demo):
                for node in demo:
                    if node.exit_code is None and node.process is not None:
                        peak = vm_hwm_mb(node.process.pid)
                        node.peak_rss_mb = max(node.peak_rss_mb, peak or 0.0)
                        node.exit_code = node.process.poll()
                    node.stats = read_stats(node) or node.stats
                live.update(render(demo, rounds, time.monotonic() - start))
                if time.monotonic() - start > timeout:
                    console.print(f"time limit of {timeout:.0f}s reached: stopping every node")
                    stop_all(demo, grace)
                time.sleep(1.0)
        except KeyboardInterrupt:
            interrupted = True
            console.print("stopping every node after its current round...")
            stop_all(demo, grace)
        for node in demo:
            node.stats = read_stats(node) or node.stats
        live.update(render(demo, rounds, time.monotonic() - start))
    if not console.is_terminal:
        console.line()  # off a terminal, Live prints the final table without ending its line
    return not interrupted


def stop_all(demo: list[DemoNode], grace: float = STOP_GRACE_S) -> None:
    """SIGINT every running node (clean stop), then SIGKILL whatever is left after `grace` s."""
    for node in demo:
        if node.process and node.process.poll() is None:
            node.process.send_signal(signal.SIGINT)
    deadline = time.monotonic() + grace
    for node in demo:
        if node.process is None:
            continue
        try:
            node.exit_code = node.process.wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            node.process.kill()
            node.exit_code = node.process.wait()


def summarize(out: Path, demo: list[DemoNode], rounds: int, wall_s: float) -> dict:
    """Write summary.json and reward.png; return the summary."""
    summary = {
        "nodes": len(demo),
        "rounds": rounds,
        "processes": "separate swarm-node join processes over libp2p on 127.0.0.1",
        "wall_s": wall_s,
        "per_node": [
            {
                "name": n.name,
                "peer_id": n.peer_id,
                "exit_code": n.exit_code,
                **n.stats,
                "peak_rss_mb": n.peak_rss_mb,
                **round_costs(n.folder),
                **group_bytes(n.folder),
            }
            for n in demo
        ],
    }
    (out / "summary.json").write_text(json.dumps(summary, indent=2))
    plot_rewards(out / "reward.png", demo)
    return summary


def costs_table(summary: dict) -> Table:
    """What each node cost: round time, verification's share, spot checks, memory, bytes."""
    table = Table(title="what each node cost", header_style="bold")
    for column in ("node", "round s", "verify %", "spot checks", "shared trained",
                   "group bytes", "peak MB"):  # fmt: skip
        table.add_column(column, justify="right")
    for n in summary["per_node"]:
        table.add_row(
            n["name"],
            f"{n.get('round_s_median', 0.0):.1f}",
            f"{100 * n.get('verify_share', 0.0):.1f}",
            str(n.get("spot_checks", 0)),
            str(n.get("shared_trained", 0)),
            f"{n.get('accepted_group_bytes', n.get('sent_group_bytes', 0.0)):,.0f}",
            f"{n['peak_rss_mb']:,.0f}",
        )
    return table


def plot_rewards(path: Path, demo: list[DemoNode]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 4.5))
    for node in demo:
        rewards = node.stats.get("rewards") or []
        line = ax.plot(range(len(rewards)), rewards, linewidth=0.6, alpha=0.35)[0]
        smooth = moving_average(rewards, 5)
        ax.plot(
            range(len(rewards) - len(smooth), len(rewards)),
            smooth,
            color=line.get_color(),
            linewidth=1.8,
            label=node.name,
        )
    ax.set_xlabel("round")
    ax.set_ylabel("mean reward of sampled completions")
    ax.set_title("reward per node (thin: per round, thick: 5-round moving average)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def moving_average(values: list[float], window: int) -> list[float]:
    """Trailing means over `window` values (fewer at the start, so the curve starts at round 0)."""
    out, total = [], 0.0
    for i, v in enumerate(values):
        total += v
        if i >= window:
            total -= values[i - window]
        out.append(total / min(i + 1, window))
    return out


def run_demo(
    nodes: int,
    rounds: int,
    out: Path,
    base_config: Path | None,
    sets: list[str],
    timeout: float | None,
    model: str = "",
) -> dict:
    """Run the local swarm; `model` (a model name or path) picks the real-model settings."""
    from swarm.config.load import load_config
    from swarm.config.preflight import preflight
    from swarm.policy.source import is_builtin

    console = Console()
    defaults = demo_defaults(model)
    demo = prepare(out, nodes, rounds, base_config, sets, defaults)
    first = load_config(demo[0].folder / "config.toml")
    preflight(first)  # a config mistake: one line, not N logs (a GGUF model is converted here)
    kind = "tiny" if is_builtin(first.policy.model) else "real"
    timeout = timeout or (120 + round_seconds(kind, nodes) * rounds)

    if first.policy.model == "swarm-tiny":
        from transformers.utils import logging as hf_logging

        from swarm.policy.tiny import ensure_tiny_model

        hf_logging.disable_progress_bar()  # no "Writing model shards" bar in the demo's output
        # Built once here, not in every node process at the same time; its progress bar only
        # on a terminal (elsewhere a transient bar leaves nothing but an empty line).
        ensure_tiny_model(quiet=not console.is_terminal)
    console.print(f"starting {nodes} node processes in {out} (logs: node-*/log.txt)")
    started = time.monotonic()
    try:
        for node in demo:
            launch(node)
        completed = watch(demo, rounds, timeout, console, stop_grace(kind, nodes))
    finally:
        stop_all(demo, grace=30)
    summary = summarize(out, demo, rounds, time.monotonic() - started)
    failed = [n.name for n in demo if n.exit_code not in (0, None)]
    console.print(f"wrote {out / 'summary.json'} and {out / 'reward.png'}")
    console.print(costs_table(summary))
    if failed:
        console.print(f"[red]nodes that failed: {', '.join(failed)} (see their log.txt)[/red]")
    if not completed:
        console.print("stopped early")
    return summary
