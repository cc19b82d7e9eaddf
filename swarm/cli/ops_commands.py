"""Commands that read (or, ban and unban, amend) a node's ledger: status, peers,
contributions, replay, doctor, ban, unban."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from swarm.cli.app import app
from swarm.cli.common import (
    ConfigOption,
    JsonOption,
    LedgerOption,
    RunDirOption,
    SetOption,
    SinceOption,
    UntilOption,
    checked_ledger_url,
    ledger_url,
    load,
)
from swarm.core.errors import SwarmError

SORT_HELP = (
    "Order by: advantage, used, accepted, rejected, received, reward, deltas, last-seen, "
    "first-seen or peer."
)


def _run_dir_flag(run_dir: str | None) -> dict:
    return {"node.run_dir": ("--run-dir", run_dir)}


@app.command()
def status(
    config: ConfigOption = None,
    sets: SetOption = None,
    run_dir: Annotated[
        str | None, typer.Option(help="Node folder to inspect (overrides node.run_dir).")
    ] = None,
    ledger: LedgerOption = None,
    last: Annotated[int, typer.Option(min=1, help="How many recent rounds to show.")] = 10,
    json_out: JsonOption = False,
) -> None:
    """Show a node's latest rounds, evaluations and update counts from its ledger."""
    cfg = load(config, sets, _run_dir_flag(run_dir))
    from swarm.ops.status import show_status

    show_status(ledger_url(cfg, ledger), last=last, as_json=json_out)


def _ops_data(config, sets, run_dir, ledger, sort, since, until) -> dict:
    from swarm.ops.contributions import SORT_KEYS, Window, parse_when
    from swarm.ops.views import collect

    if sort not in SORT_KEYS:
        raise SwarmError(f"--sort must be one of {', '.join(SORT_KEYS)}, not {sort!r}")
    cfg = load(config, sets, _run_dir_flag(run_dir))
    window = Window(parse_when(since), parse_when(until))
    return collect(checked_ledger_url(cfg, ledger), window, sort)


@app.command()
def peers(
    config: ConfigOption = None,
    sets: SetOption = None,
    run_dir: RunDirOption = None,
    ledger: LedgerOption = None,
    sort: Annotated[str, typer.Option(help=SORT_HELP)] = "last-seen",
    since: SinceOption = None,
    until: UntilOption = None,
    json_out: JsonOption = False,
) -> None:
    """List the peers in a node's ledger: model, first and last seen, groups received, accepted,
    rejected and used, bans. Peer IDs are shortened to their last characters ('ban' takes that
    form, a unique prefix, or the full ID; --json prints them in full)."""
    from swarm.ops.views import show_peers

    show_peers(_ops_data(config, sets, run_dir, ledger, sort, since, until), json_out)


@app.command()
def contributions(
    config: ConfigOption = None,
    sets: SetOption = None,
    run_dir: RunDirOption = None,
    ledger: LedgerOption = None,
    sort: Annotated[str, typer.Option(help=SORT_HELP)] = "advantage",
    since: SinceOption = None,
    until: UntilOption = None,
    json_out: JsonOption = False,
    plot: Annotated[
        Path | None,
        typer.Option(
            help="Also draw each peer's contribution over time (advantage used, groups accepted) "
            "to this PNG."
        ),
    ] = None,
) -> None:
    """Show what each peer contributed to this node: groups accepted and rejected (by reason),
    used in updates, advantage and reward they carried, deltas exchanged; and this node's own
    contribution."""
    from swarm.ops.contributions import Window, parse_when
    from swarm.ops.views import plot_contributions, show_contributions

    data = _ops_data(config, sets, run_dir, ledger, sort, since, until)
    show_contributions(data, json_out)
    if plot is not None:
        count = plot_contributions(
            data["ledger"], Window(parse_when(since), parse_when(until)), plot
        )
        typer.echo(f"wrote {plot} ({count} peers)", err=json_out)


@app.command()
def replay(
    config: ConfigOption = None,
    sets: SetOption = None,
    ledger: LedgerOption = None,
    run_dir: RunDirOption = None,
    train: Annotated[
        bool,
        typer.Option(
            "--train",
            help="Train a fresh policy.model on the verified groups, one update per recorded "
            "round (the node's GRPO path and batch rules: training.own_groups sent + "
            "sharing.shared_groups accepted groups), and report held-out accuracy before "
            "and after.",
        ),
    ] = False,
    export: Annotated[
        Path | None,
        typer.Option(
            help="Write the verified groups to this JSONL file, one record per completion: prompt "
            "(formatted for policy.model), completion, ground_truth, reward, advantage and "
            "where it came from; loads with datasets and TRL as it is. With no group to "
            "export, nothing is written and one line says why."
        ),
    ] = None,
    swarm_id: Annotated[
        str | None, typer.Option(help="Also require every group to belong to this swarm id.")
    ] = None,
    format_reward: Annotated[
        float | None,
        typer.Option(
            min=0.0,
            max=1.0,
            help="Format bonus for completions ending with a tagged answer, in the rewards "
            "trained on (default: tasks.format_reward); claimed rewards are checked with "
            "each sender's declared bonus.",
        ),
    ] = None,
    passes: Annotated[
        int, typer.Option(min=1, max=100, help="Passes over the stored groups with --train.")
    ] = 1,
    eval_size: Annotated[
        int | None,
        typer.Option(
            min=1,
            help="Held-out questions for the before/after accuracy (default: tasks.eval_size).",
        ),
    ] = None,
    json_out: JsonOption = False,
) -> None:
    """Re-verify every rollout group stored in a ledger, offline: signature, rebuilt task,
    recomputed rewards.

    Needs no network and no run folder: a ledger copied from another machine is enough.
    Groups the ledger holds no bytes of are counted apart, not as failures: sent or accepted
    ones whose bytes its retention pruned (ledger.keep_bodies_days, ledger.max_mb), and
    rejected ones refused before their bytes were fetched or decoded. Optionally export
    what passes, or train a fresh model on it.
    """
    import json

    from rich.console import Console
    from rich.progress import Progress

    from swarm.ops.replay import (
        count_rows,
        empty_export_reason,
        prompt_model_note,
        verify_ledger,
    )
    from swarm.verify.rescore_pool import RescoreWorker, WorkerSettings

    cfg = load(config, sets, _run_dir_flag(run_dir))
    url = checked_ledger_url(cfg, ledger)
    weight = cfg.tasks.format_reward if format_reward is None else format_reward
    err = Console(stderr=True)
    # each stored group re-scored as a live node does: in a worker, within verify's deadline
    # and memory limit (a peer's group may name a costly task)
    rescorer = RescoreWorker(WorkerSettings.from_config(cfg)) if cfg.verify.worker else None
    try:
        with Progress(console=err, transient=True, disable=not err.is_terminal) as progress:
            task = progress.add_task("verifying stored groups", total=count_rows(url))
            report, groups = verify_ledger(
                url,
                weight,
                swarm_id,
                progress=lambda n: progress.advance(task, n),
                rescorer=rescorer,
            )
    finally:
        if rescorer is not None:
            rescorer.close()
    result: dict = {"ledger": url, "verify": report.as_dict()}
    if not json_out:
        typer.echo(report.summary())
    if export is not None:
        empty = empty_export_reason(report, swarm_id)
        if empty:
            raise SwarmError(f"nothing to export, {export} not written: {empty}")
        result["export"] = _export(export, groups, cfg, json_out)
        note = prompt_model_note(url, cfg.policy.model)
        if note:
            typer.echo(note, err=True)
    if train:
        result["train"] = _train(groups, cfg, passes, eval_size, err, json_out)
    if json_out:
        typer.echo(json.dumps(result, indent=2))


def _export(path: Path, groups, cfg, quiet: bool) -> dict:
    from swarm.ops.replay import prompt_formatter, write_jsonl

    records = write_jsonl(path, groups, prompt_formatter(cfg), cfg.training.scale_advantages)
    if not quiet:
        typer.echo(f"wrote {records} completions of {len(groups)} groups to {path}")
    return {"path": str(path), "records": records, "groups": len(groups)}


def _train(groups, cfg, passes: int, eval_size: int | None, err, quiet: bool) -> dict:
    from rich.progress import Progress

    from swarm.ops.replay import plan_updates, train_offline

    updates = passes * len(plan_updates(groups))
    with Progress(console=err, transient=True, disable=not err.is_terminal) as progress:
        task = progress.add_task("training on stored groups", total=updates)
        if not err.is_terminal and not quiet:
            typer.echo(f"training {cfg.policy.model} on {len(groups)} groups: {updates} updates...")
        trained = train_offline(
            groups, cfg, passes, eval_size, progress=lambda _s, n: progress.advance(task, n)
        )
    if not quiet:
        typer.echo(
            f"trained {trained.model} with {trained.updates} updates ({trained.skipped_updates} "
            f"skipped) on "
            f"{trained.groups_trained} groups in {trained.seconds:.0f}s: held-out accuracy "
            f"{trained.accuracy_before:.1%} -> {trained.accuracy_after:.1%} on "
            f"{trained.eval_questions} questions"
        )
    return trained.as_dict()


@app.command()
def doctor(
    config: ConfigOption = None,
    sets: SetOption = None,
    run_dir: RunDirOption = None,
    ledger: LedgerOption = None,
    gpu_only: Annotated[
        bool,
        typer.Option(
            "--gpu",
            help="Check only this machine's GPU stack (CUDA, the torch build, vLLM's import and "
            "version against the pins), against what the config asks for; needs no run folder.",
        ),
    ] = False,
    network: Annotated[
        bool,
        typer.Option(
            "--network",
            help="Check only the network, as this node would join it (its config, identity "
            "and swarm key): dial each p2p.bootstrap address and say in one line each how far "
            "it got (reached, refused, timed out, unreachable, wrong swarm key, wrong peer ID, "
            "not on its allow-list, other protocol version); then AutoNAT's verdict (reached "
            "peers asked to dial this node back) and the address peers see it at, the "
            "reservation each p2p.relays relay holds, and what peers' dated announcements say "
            "of the clocks. Exits 0 when the node can take part: a bootstrap peer reached, or "
            "none configured and others can reach it (it listens, or a relay holds a "
            "reservation).",
        ),
    ] = False,
    timeout: Annotated[
        float,
        typer.Option(
            min=0.1,
            max=120.0,
            help="With --network: seconds each step of a dial may take (TCP connection, first "
            "answer, handshake).",
        ),
    ] = 5.0,
    json_out: JsonOption = False,
) -> None:
    """Check a node's ledger, checkpoints and this machine's GPU stack (or, with --network,
    whether it reaches its swarm and the swarm reaches it): SQLite integrity,
    schema version, round history (no gaps, no duplicate live rounds), the ledger's size (on
    disk, in use, rows), checkpoints loadable, the newest one backed by the ledger; CUDA,
    the torch build (CPU or CUDA, version), vLLM's import and version against
    constraints/gpu.txt. Each finding that is not ok says what to run.

    Safe on a running node: the ledger is read from a consistent snapshot. Exits 0 when
    healthy, 1 when a problem was found (the GPU stack is a problem only where the config
    asks for CUDA or vLLM). With --ledger only the ledger is checked; with --gpu only the
    GPU stack; with --network only the network (see --network), which reads the run folder's
    identity and writes nothing.
    """
    import json

    from swarm.ops.doctor import diagnose, healthy

    if network and (gpu_only or ledger is not None):
        raise SwarmError("--network checks only the network: give it without --gpu and --ledger")
    cfg = load(config, sets, _run_dir_flag(run_dir))
    findings = []
    if network:
        from swarm.ops.network_doctor import network_findings

        findings = network_findings(cfg, timeout)
    elif not gpu_only:
        url = ledger_url(cfg, ledger)  # a file that is no ledger is a finding, not a usage error
        checkpoints = None if ledger is not None else cfg.run_dir / "checkpoints"
        findings = diagnose(url, checkpoints)
    if not network and (gpu_only or ledger is None):
        from swarm.ops.gpu_stack import GpuNeeds, gpu_pins, probe, stack_findings

        findings += stack_findings(probe(), GpuNeeds.from_config(cfg), *gpu_pins())
    if json_out:
        out = {"healthy": healthy(findings), "findings": [f.__dict__ for f in findings]}
        where = {} if network else {"ledger": None if gpu_only else url}
        typer.echo(json.dumps({**where, **out}, indent=2))
    else:
        marks = {"ok": "ok     ", "warning": "warning", "problem": "PROBLEM"}
        for f in findings:
            typer.echo(f"{marks[f.level]}  {f.check}: {f.message}")
        typer.echo("healthy" if healthy(findings) else "problems found")
    if not healthy(findings):
        raise typer.Exit(1)


PeerArgument = Annotated[
    str,
    typer.Argument(
        metavar="PEER",
        help="The peer: its full ID (12D3KooW...), a unique prefix of it, or the short form "
        "'swarm-node peers' prints (…XyZ1234567).",
    ),
]
BanRunDirOption = Annotated[
    str | None,
    typer.Option(help="Folder of the node whose ledger holds its bans (overrides node.run_dir)."),
]


def _ban_target(config, sets, run_dir, peer: str) -> tuple[str, str]:
    from swarm.ops.peer_ids import known_peers, resolve_peer

    cfg = load(config, sets, _run_dir_flag(run_dir))
    url = checked_ledger_url(cfg, None)
    return url, resolve_peer(peer, known_peers(url))


@app.command()
def ban(
    peer: PeerArgument,
    reason: Annotated[str, typer.Option(help="Why, for the ledger.")] = "",
    config: ConfigOption = None,
    sets: SetOption = None,
    run_dir: BanRunDirOption = None,
) -> None:
    """Refuse every rollout group from a peer. A running node picks the ban up within one round."""
    url, peer_id = _ban_target(config, sets, run_dir, peer)
    from swarm.verify.bans import ban as ban_peer

    typer.echo(ban_peer(url, peer_id, reason))


@app.command()
def unban(
    peer: PeerArgument,
    config: ConfigOption = None,
    sets: SetOption = None,
    run_dir: BanRunDirOption = None,
) -> None:
    """Lift a ban, set by 'ban' or automatically by the peer's reputation (which starts afresh)."""
    url, peer_id = _ban_target(config, sets, run_dir, peer)
    from swarm.verify.bans import unban as unban_peer

    typer.echo(unban_peer(url, peer_id))
