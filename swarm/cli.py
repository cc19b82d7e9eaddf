"""The `swarm-node` command line.

Config is parsed and checked before anything heavy is imported, so `--help` and config
errors are instant; torch, transformers and libp2p are imported inside the commands that
need them. Every `SwarmError` is printed as one line (`error: ...`) with exit code 2;
anything else is a bug and keeps its traceback.
"""

from __future__ import annotations

import signal
import sys
from pathlib import Path
from typing import Annotated

import typer

from swarm.errors import SwarmError

app = typer.Typer(
    name="swarm-node",
    help="A node of a decentralized RL swarm: trains its own policy with GRPO on verifiable tasks, "
    "shares signed rollouts with peers and keeps a ledger of every contribution.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode="markdown",  # joins docstring lines into paragraphs in --help
)

ConfigOption = Annotated[
    Path | None,
    typer.Option("--config", "-c", help="TOML config file (see node_config/ for annotated presets). Defaults apply without one."),
]
SetOption = Annotated[
    list[str] | None,
    typer.Option("--set", "-s", help="Override one config key, e.g. --set training.lr=1e-5 (repeatable). Wins over the file and SWARM__<SECTION>__<KEY> env vars."),
]


def _load(config: Path | None, sets: list[str] | None, **flags):
    """Config from file + env + --set, then the dedicated flags (which win over all)."""
    from swarm.config import load_config

    overrides = list(sets or [])
    for key, value in flags.items():
        if value is not None:
            overrides.append(f"{key}={_toml_literal(value)}")
    return load_config(config, overrides)


def _toml_literal(value) -> str:
    if isinstance(value, list):
        return "[" + ", ".join(_toml_literal(v) for v in value) + "]"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'
    return str(value)


@app.command()
def join(
    config: ConfigOption = None,
    sets: SetOption = None,
    rounds: Annotated[int | None, typer.Option(help="Stop once this many rounds exist in total (overrides node.rounds; 0 runs until stopped).")] = None,
    run_dir: Annotated[str | None, typer.Option(help="Folder for identity, ledger and checkpoints (overrides node.run_dir).")] = None,
    model: Annotated[str | None, typer.Option(help="Hugging Face model name or path, or 'swarm-tiny' (overrides policy.model).")] = None,
    seed: Annotated[int | None, typer.Option(help="Seed of this node (overrides node.seed).")] = None,
    bootstrap: Annotated[list[str] | None, typer.Option(help="Multiaddr /ip4/.../tcp/.../p2p/12D3KooW... of a peer to join through (repeatable; replaces p2p.bootstrap).")] = None,
    listen: Annotated[str | None, typer.Option(help="Multiaddr to listen on, e.g. /ip4/0.0.0.0/tcp/4001 (overrides p2p.listen).")] = None,
    display: Annotated[str, typer.Option(help="Progress display: auto (live on a terminal, lines otherwise), live, lines or none.")] = "auto",
) -> None:
    """Run a node: generate, score, share and train, round after round.

    With no bootstrap peers the node trains alone (solo mode). It resumes from the latest
    checkpoint in its run folder. Ctrl-C stops it after the current round, with the ledger
    and a checkpoint written; a second Ctrl-C aborts at once.
    """
    cfg = _load(
        config, sets,
        **{"node.rounds": rounds, "node.run_dir": run_dir, "policy.model": model, "node.seed": seed, "p2p.listen": listen,
           "p2p.bootstrap": bootstrap or None},
    )
    if display not in ("auto", "live", "lines", "none"):
        raise SwarmError(f"--display must be auto, live, lines or none, not {display!r}")
    from swarm.node import Node
    from swarm.ops.display import make_reporter

    reporter = make_reporter(display)
    node = Node(cfg, reporter=reporter)
    previous = signal.getsignal(signal.SIGINT)

    def on_interrupt(signum, frame):
        if node.stop_requested:  # second Ctrl-C: give up on a clean stop
            signal.signal(signal.SIGINT, previous)
            raise KeyboardInterrupt
        reporter.message("stopping after the current round (Ctrl-C again to abort)...")
        node.request_stop()

    signal.signal(signal.SIGINT, on_interrupt)
    signal.signal(signal.SIGTERM, on_interrupt)
    try:
        state = node.run()
    finally:
        node.close()
        signal.signal(signal.SIGINT, previous)
    typer.echo(f"stopped at round {state.round}, policy v{state.policy_version}; ledger and checkpoint in {cfg.run_dir}")


@app.command()
def init(
    config: ConfigOption = None,
    sets: SetOption = None,
    run_dir: Annotated[str | None, typer.Option(help="Node folder (overrides node.run_dir); the identity is its identity.key.")] = None,
) -> None:
    """Create this node's persistent identity (Ed25519, libp2p format, mode 0600) and show its peer ID.

    `join` with the same run folder reuses it. Running init again keeps the existing identity.
    """
    cfg = _load(config, sets, **{"node.run_dir": run_dir})
    from swarm.p2p.identity import (
        create_identity,
        identity_exists,
        load_identity,
        peer_id_of,
        save_identity,
    )

    path = cfg.run_dir / "identity.key"
    if identity_exists(path):
        key, verb = load_identity(path), "existing"
    else:
        key, verb = create_identity(), "new"
        save_identity(key, path)
    peer_id = peer_id_of(key)
    typer.echo(f"{verb} identity {path}")
    typer.echo(f"peer ID: {peer_id}")
    listen = cfg.p2p.listen
    if listen.endswith("/tcp/0"):
        typer.echo(f"listen address: {listen} (a free port is chosen by join; it writes the full address to {cfg.run_dir / 'node.json'})")
    else:
        typer.echo(f"listen address: {listen}/p2p/{peer_id}")


@app.command()
def demo(
    nodes: Annotated[int, typer.Option(min=1, max=32, help="How many node processes to start on 127.0.0.1.")] = 4,
    rounds: Annotated[int, typer.Option(min=1, help="Rounds each node runs before it stops by itself.")] = 30,
    out: Annotated[Path | None, typer.Option(help="Run folder (default: runs/demo-<time>); one sub-folder per node.")] = None,
    config: ConfigOption = None,
    sets: SetOption = None,
    timeout: Annotated[float | None, typer.Option(help="Stop every node after this many seconds (default: generous, from nodes and rounds).")] = None,
) -> None:
    """Run a local swarm: N node processes on loopback sharing signed rollouts, with a live table.

    Each node has its own identity, ledger and checkpoints under the run folder. At the end
    the demo writes summary.json and reward.png (reward per node over rounds) there.
    """
    import time as _time

    from swarm.ops.demo import run_demo

    folder = out or Path("runs") / f"demo-{_time.strftime('%Y%m%d-%H%M%S')}"
    summary = run_demo(nodes, rounds, folder, config, list(sets or []), timeout)
    if any(n["exit_code"] not in (0, None) for n in summary["per_node"]):
        raise typer.Exit(1)


@app.command()
def status(
    config: ConfigOption = None,
    sets: SetOption = None,
    run_dir: Annotated[str | None, typer.Option(help="Node folder to inspect (overrides node.run_dir).")] = None,
    ledger: Annotated[str | None, typer.Option(help="Ledger file or SQLAlchemy URL to read instead of the node's.")] = None,
    last: Annotated[int, typer.Option(min=1, help="How many recent rounds to show.")] = 10,
    json_out: Annotated[bool, typer.Option("--json", help="Print JSON instead of tables.")] = False,
) -> None:
    """Show a node's latest rounds, evaluations and update counts from its ledger."""
    cfg = _load(config, sets, **{"node.run_dir": run_dir})
    from swarm.ops.status import show_status

    show_status(_ledger_url(cfg, ledger), last=last, as_json=json_out)


@app.command("config")
def config_cmd(
    config: ConfigOption = None,
    sets: SetOption = None,
    keys: Annotated[bool, typer.Option("--keys", help="List every config key with its default and meaning.")] = False,
) -> None:
    """Check a config and print the effective values (or every key's documentation with --keys)."""
    from swarm.config import describe_config

    if keys:
        for key, default, help_text in describe_config():
            typer.echo(f"{key} = {default}\n    {help_text}")
        return
    cfg = _load(config, sets)
    import json

    typer.echo(json.dumps(cfg.to_dict(), indent=2))


# -- operating a swarm: peers, contributions, replay, doctor, cluster init ---------------

LedgerOption = Annotated[str | None, typer.Option(help="Ledger file or SQLAlchemy URL to read instead of the node's (e.g. a copy from another machine).")]
RunDirOption = Annotated[str | None, typer.Option(help="Node folder whose ledger to read (overrides node.run_dir).")]
SinceOption = Annotated[str | None, typer.Option(help="Only what happened since then: a duration back from now (30m, 2h, 1d), an ISO date/time or unix seconds.")]
UntilOption = Annotated[str | None, typer.Option(help="Only what happened until then (same forms as --since).")]
JsonOption = Annotated[bool, typer.Option("--json", help="Print JSON instead of tables.")]


def _ops_data(config, sets, run_dir, ledger, sort, since, until) -> dict:
    from swarm.ops.contributions import SORT_KEYS, Window, parse_when
    from swarm.ops.views import collect

    if sort not in SORT_KEYS:
        raise SwarmError(f"--sort must be one of {', '.join(SORT_KEYS)}, not {sort!r}")
    cfg = _load(config, sets, **{"node.run_dir": run_dir})
    window = Window(parse_when(since), parse_when(until))
    return collect(_checked_ledger_url(cfg, ledger), window, sort)


@app.command()
def peers(
    config: ConfigOption = None,
    sets: SetOption = None,
    run_dir: RunDirOption = None,
    ledger: LedgerOption = None,
    sort: Annotated[str, typer.Option(help="Order by: advantage, used, accepted, rejected, received, reward, deltas, last-seen, first-seen or peer.")] = "last-seen",
    since: SinceOption = None,
    until: UntilOption = None,
    json_out: JsonOption = False,
) -> None:
    """List the peers in a node's ledger: model, first and last seen, groups received, accepted, rejected and used, bans."""
    from swarm.ops.views import show_peers

    show_peers(_ops_data(config, sets, run_dir, ledger, sort, since, until), json_out)


@app.command()
def contributions(
    config: ConfigOption = None,
    sets: SetOption = None,
    run_dir: RunDirOption = None,
    ledger: LedgerOption = None,
    sort: Annotated[str, typer.Option(help="Order by: advantage, used, accepted, rejected, received, reward, deltas, last-seen, first-seen or peer.")] = "advantage",
    since: SinceOption = None,
    until: UntilOption = None,
    json_out: JsonOption = False,
    plot: Annotated[Path | None, typer.Option(help="Also draw each peer's contribution over time (advantage used, groups accepted) to this PNG.")] = None,
) -> None:
    """Show what each peer contributed to this node: groups accepted and rejected (by reason), used in updates,
    advantage and reward they carried, deltas exchanged; and this node's own contribution."""
    from swarm.ops.contributions import Window, parse_when
    from swarm.ops.views import plot_contributions, show_contributions

    data = _ops_data(config, sets, run_dir, ledger, sort, since, until)
    show_contributions(data, json_out)
    if plot is not None:
        count = plot_contributions(data["ledger"], Window(parse_when(since), parse_when(until)), plot)
        typer.echo(f"wrote {plot} ({count} peers)", err=json_out)


@app.command()
def replay(
    config: ConfigOption = None,
    sets: SetOption = None,
    ledger: LedgerOption = None,
    run_dir: RunDirOption = None,
    train: Annotated[bool, typer.Option("--train", help="Train a fresh policy.model on the verified groups, one update per recorded round (the node's GRPO path and batch rules: training.local_groups sent + training.shared_groups accepted groups), and report held-out accuracy before and after.")] = False,
    export: Annotated[Path | None, typer.Option(help="Write the verified groups to this JSONL file, one record per completion.")] = None,
    swarm_id: Annotated[str | None, typer.Option(help="Also require every group to belong to this swarm id.")] = None,
    format_reward: Annotated[float | None, typer.Option(min=0.0, max=1.0, help="Format bonus for completions ending with a tagged answer, in the rewards trained on (default: tasks.format_reward); claimed rewards are checked with each sender's declared bonus.")] = None,
    passes: Annotated[int, typer.Option(min=1, max=100, help="Passes over the stored groups with --train.")] = 1,
    eval_size: Annotated[int | None, typer.Option(min=1, help="Held-out questions for the before/after accuracy (default: tasks.eval_size).")] = None,
    json_out: JsonOption = False,
) -> None:
    """Re-verify every rollout group stored in a ledger, offline: signature, rebuilt task, recomputed rewards.

    Needs no network and no run folder: a ledger copied from another machine is enough.
    Optionally export what passes, or train a fresh model on it.
    """
    import json

    from rich.console import Console
    from rich.progress import Progress

    from swarm.ops.replay import count_rows, train_offline, verify_ledger, write_jsonl

    cfg = _load(config, sets, **{"node.run_dir": run_dir})
    url = _checked_ledger_url(cfg, ledger)
    weight = cfg.tasks.format_reward if format_reward is None else format_reward
    err = Console(stderr=True)
    with Progress(console=err, transient=True, disable=not err.is_terminal) as progress:
        task = progress.add_task("verifying stored groups", total=count_rows(url))
        report, groups = verify_ledger(url, weight, swarm_id, progress=lambda n: progress.advance(task, n))
    result: dict = {"ledger": url, "verify": report.as_dict()}
    if not json_out:
        failed = ", ".join(f"{r} {n}" for r, n in report.failed_by_reason.most_common()) or "none"
        typer.echo(f"{report.total} stored groups: {report.passed} pass, {report.total - report.passed} fail ({failed}); "
                   f"{report.trainable} distinct sent or accepted groups verified")
    if export is not None:
        records = write_jsonl(export, groups)
        result["export"] = {"path": str(export), "records": records, "groups": len(groups)}
        if not json_out:
            typer.echo(f"wrote {records} completions of {len(groups)} groups to {export}")
    if train:
        from swarm.ops.replay import plan_updates

        updates = passes * len(plan_updates(groups))
        with Progress(console=err, transient=True, disable=not err.is_terminal) as progress:
            task = progress.add_task("training on stored groups", total=updates)
            if not err.is_terminal and not json_out:
                typer.echo(f"training {cfg.policy.model} on {len(groups)} groups: {updates} updates...")
            trained = train_offline(groups, cfg, passes, eval_size, progress=lambda _s, n: progress.advance(task, n))
        result["train"] = trained.as_dict()
        if not json_out:
            typer.echo(
                f"trained {trained.model} with {trained.updates} updates ({trained.skipped_updates} skipped) on "
                f"{trained.groups_trained} groups in {trained.seconds:.0f}s: held-out accuracy "
                f"{trained.accuracy_before:.1%} -> {trained.accuracy_after:.1%} on {trained.eval_questions} questions"
            )
    if json_out:
        typer.echo(json.dumps(result, indent=2))


@app.command()
def doctor(
    config: ConfigOption = None,
    sets: SetOption = None,
    run_dir: RunDirOption = None,
    ledger: LedgerOption = None,
    json_out: JsonOption = False,
) -> None:
    """Check a node's ledger and checkpoints: SQLite integrity, schema version, round history
    (no gaps, no duplicate live rounds), checkpoints loadable, the newest one backed by the ledger.

    Exits 0 when healthy, 1 when a problem was found. With --ledger only the ledger is checked.
    """
    import json

    from swarm.ops.doctor import diagnose, healthy

    cfg = _load(config, sets, **{"node.run_dir": run_dir})
    url = _ledger_url(cfg, ledger)  # a file that is no ledger at all is a finding here, not a usage error
    checkpoints = None if ledger is not None else cfg.run_dir / "checkpoints"
    findings = diagnose(url, checkpoints)
    if json_out:
        typer.echo(json.dumps({"ledger": url, "healthy": healthy(findings), "findings": [f.__dict__ for f in findings]}, indent=2))
    else:
        marks = {"ok": "ok     ", "warning": "warning", "problem": "PROBLEM"}
        for f in findings:
            typer.echo(f"{marks[f.level]}  {f.check}: {f.message}")
        typer.echo("healthy" if healthy(findings) else "problems found")
    if not healthy(findings):
        raise typer.Exit(1)


cluster_app = typer.Typer(help="Private clusters: shared swarm key, member identities, allow-list and configs.", no_args_is_help=True)
app.add_typer(cluster_app, name="cluster")


@cluster_app.command("init")
def cluster_init(
    nodes: Annotated[int, typer.Option(help="Number of members (1 to 256).")] = 3,
    out: Annotated[Path, typer.Option(help="Folder to create (refused if it already holds a cluster).")] = Path("cluster"),
    host: Annotated[list[str] | None, typer.Option(help="IPv4 address the members listen on and are dialed at: once for all members, or once per member (default 127.0.0.1).")] = None,
    base_port: Annotated[int, typer.Option(help="Member i listens on TCP port base-port + i.")] = 4100,
    swarm_id: Annotated[str, typer.Option(help="Swarm id written into every member's config (p2p.swarm_id).")] = "private-cluster",
) -> None:
    """Write a private cluster: a shared swarm key (PSK), one identity per member, the allow-list of
    their peer IDs, and one config per member with fixed listen addresses and every other member as bootstrap.

    Start member i with `swarm-node join --config OUT/member-i/config.toml`. Members refuse peers
    without the key or not on the allow-list.
    """
    from swarm.ops.cluster import init_cluster

    members = init_cluster(out, nodes, list(host or []), base_port, swarm_id)
    typer.echo(f"wrote a private cluster of {len(members)} members to {out.resolve()} (swarm key: {out.resolve() / 'swarm.key'})")
    for m in members:
        typer.echo(f"  {m.name}  {m.addr}\n      swarm-node join --config {out.resolve() / m.name / 'config.toml'}")


# -- bans --

PeerArgument = Annotated[str, typer.Argument(help="Peer ID (12D3KooW...) of the peer.")]
BanRunDirOption = Annotated[str | None, typer.Option(help="Folder of the node whose ledger holds its bans (overrides node.run_dir).")]


@app.command()
def ban(
    peer: PeerArgument,
    reason: Annotated[str, typer.Option(help="Why, for the ledger.")] = "",
    config: ConfigOption = None,
    sets: SetOption = None,
    run_dir: BanRunDirOption = None,
) -> None:
    """Refuse every rollout group from a peer. A running node picks the ban up within one round."""
    cfg = _load(config, sets, **{"node.run_dir": run_dir})
    from swarm.verify.bans import ban as ban_peer

    typer.echo(ban_peer(_ledger_url(cfg, None), peer, reason))


@app.command()
def unban(
    peer: PeerArgument,
    config: ConfigOption = None,
    sets: SetOption = None,
    run_dir: BanRunDirOption = None,
) -> None:
    """Lift a ban, whether set by `ban` or automatically by the peer's reputation (which starts afresh)."""
    cfg = _load(config, sets, **{"node.run_dir": run_dir})
    from swarm.verify.bans import unban as unban_peer

    typer.echo(unban_peer(_ledger_url(cfg, None), peer))


def _checked_ledger_url(cfg, ledger: str | None) -> str:
    """The ledger to read, refusing (one line) a file that is not a swarm-node ledger."""
    from sqlalchemy import inspect

    from swarm.errors import LedgerError
    from swarm.ledger import Ledger, get_meta

    url = _ledger_url(cfg, ledger)
    name = url[len("sqlite:///"):] if url.startswith("sqlite:///") else url
    if Path(name).is_dir():
        raise SwarmError(f"{name} is a folder, not a ledger file")
    opened = Ledger(url, create=False)
    try:
        with opened.reader() as session:
            if "meta" not in inspect(session.get_bind()).get_table_names() or get_meta(session, "schema_version") is None:
                raise SwarmError(f"{name} is not a swarm-node ledger (it has no schema version)")
    except LedgerError as e:
        raise SwarmError(f"{name} is not a readable swarm-node ledger ({str(e).rsplit(': ', 1)[-1]})") from None
    finally:
        opened.close()
    return url


def _ledger_url(cfg, ledger: str | None) -> str:
    if ledger is None:
        path = cfg.run_dir / "ledger.sqlite"
        if not cfg.ledger.url and not path.exists():
            raise SwarmError(f"no ledger at {path}: give --run-dir or --ledger")
        return cfg.ledger_url
    if "://" in ledger:
        return ledger
    if not Path(ledger).exists():
        raise SwarmError(f"ledger file {ledger} does not exist")
    return f"sqlite:///{Path(ledger).resolve()}"


def main() -> None:
    """Console entry point: run the app, printing `SwarmError`s as one line."""
    try:
        code = app(standalone_mode=False)
        if isinstance(code, int) and code:  # typer.Exit(n) is returned, not raised, in this mode
            sys.exit(code)
    except SwarmError as e:
        typer.echo(f"error: {e}", err=True)
        sys.exit(2)
    except KeyboardInterrupt:
        typer.echo("aborted", err=True)
        sys.exit(130)
    except (typer.Abort, typer.Exit) as e:
        sys.exit(getattr(e, "exit_code", 1))
    except Exception as e:  # click usage errors arrive here in non-standalone mode
        import click

        if isinstance(e, click.ClickException):
            e.show()
            sys.exit(e.exit_code)
        raise


if __name__ == "__main__":
    main()
