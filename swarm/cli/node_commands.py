"""Commands that run or prepare a node: join, init, demo, config, export."""

from __future__ import annotations

import signal
from pathlib import Path
from typing import Annotated

import typer

from swarm.cli.app import app
from swarm.cli.common import ConfigOption, SetOption, load, load_traced
from swarm.core.errors import SwarmError

DISPLAYS = ("auto", "live", "lines", "none")


@app.command()
def join(
    config: ConfigOption = None,
    sets: SetOption = None,
    rounds: Annotated[
        int | None,
        typer.Option(
            help="Stop once this many rounds exist in total (overrides node.rounds; 0 runs until "
            "stopped)."
        ),
    ] = None,
    run_dir: Annotated[
        str | None,
        typer.Option(
            help="Folder for identity, ledger and checkpoints (overrides node.run_dir). One node "
            "per folder: a second join on it is refused."
        ),
    ] = None,
    model: Annotated[
        str | None,
        typer.Option(
            help="Hugging Face model name, local model folder, .gguf file, 'smollm2-135m' (a real model fetched once) or 'swarm-tiny' (overrides "
            "policy.model)."
        ),
    ] = None,
    seed: Annotated[
        int | None, typer.Option(help="Seed of this node (overrides node.seed).")
    ] = None,
    bootstrap: Annotated[
        list[str] | None,
        typer.Option(
            help="Multiaddr /ip4/.../tcp/.../p2p/12D3KooW... of a peer to join through "
            "(repeatable; replaces p2p.bootstrap)."
        ),
    ] = None,
    listen: Annotated[
        str | None,
        typer.Option(
            help="Multiaddr to listen on, e.g. /ip4/0.0.0.0/tcp/4001 (overrides p2p.listen)."
        ),
    ] = None,
    display: Annotated[
        str,
        typer.Option(
            help="Progress display: auto (live on a terminal, lines otherwise), live, lines or "
            "none."
        ),
    ] = "auto",
    metrics: Annotated[
        str | None,
        typer.Option(
            metavar="HOST:PORT",
            help="Serve Prometheus metrics at http://HOST:PORT/metrics, e.g. 127.0.0.1:9400 "
            "(overrides monitor.metrics).",
        ),
    ] = None,
    log_format: Annotated[
        str | None,
        typer.Option(
            help="node.log in the run folder as text or json lines (overrides monitor.log_format)."
        ),
    ] = None,
    tensorboard: Annotated[
        bool,
        typer.Option(
            "--tensorboard",
            help="Also write TensorBoard event files to RUN_DIR/tensorboard (sets "
            "monitor.tensorboard; needs the tensorboard package).",
        ),
    ] = False,
) -> None:
    """Run a node: generate, score, share and train, round after round.

    With no bootstrap peers the node trains alone (solo mode). It resumes from the latest
    checkpoint in its run folder. The whole config is checked before the model is loaded
    (the same checks as 'swarm-node config'). Ctrl-C stops it after the current round, with
    the ledger and a checkpoint written; a second Ctrl-C aborts at once. The node logs to
    node.log and records each round and evaluation in metrics.jsonl, both in its run folder.
    With node.role = "observer" it loads no model: it verifies and records what the swarm
    sends, pass after pass.
    """
    if display not in DISPLAYS:
        raise SwarmError(f"--display must be auto, live, lines or none, not {display!r}")
    loaded = load_traced(
        config,
        sets,
        {
            "node.rounds": ("--rounds", rounds),
            "node.run_dir": ("--run-dir", run_dir),
            "policy.model": ("--model", model),
            "node.seed": ("--seed", seed),
            "p2p.listen": ("--listen", listen),
            "p2p.bootstrap": ("--bootstrap", bootstrap or None),
            "monitor.metrics": ("--metrics", metrics),
            "monitor.log_format": ("--log-format", log_format),
            "monitor.tensorboard": ("--tensorboard", True if tensorboard else None),
        },
    )
    cfg = loaded.config
    from swarm.config.preflight import preflight
    from swarm.node.runlock import check_free

    check_free(cfg.run_dir)  # before anything slow: one node per run folder
    preflight(cfg, loaded.where)
    if _target_reached(cfg):
        return
    from swarm.policy.source import use_cache_offline

    if cfg.node.role != "observer" and use_cache_offline(cfg.policy.model):
        typer.echo(f"the hub is unreachable: {cfg.policy.model} loads from the local cache")
    _run_node(cfg, display)


def _target_reached(cfg) -> bool:
    """Say so, and stop, if the run folder already holds node.rounds rounds."""
    target = cfg.node.rounds
    if target == 0:
        return False
    from swarm.policy.checkpoint import completed_rounds

    done = completed_rounds(cfg.run_dir / "checkpoints")
    if done < target:
        return False
    typer.echo(
        f"{cfg.run_dir} already holds {done} rounds (node.rounds = {target}): nothing to do; "
        "raise --rounds to train further (0 runs until stopped)"
    )
    return True


def _run_node(cfg, display: str) -> None:
    from swarm.monitor.logs import NodeLog
    from swarm.node.makers import make_run_folder

    make_run_folder(cfg)
    log = NodeLog.for_config(cfg)  # first: library noise while loading goes there too
    try:
        log.capture_process(transformers=cfg.node.role != "observer")
        _run_logged(cfg, display, log)
    finally:
        log.close()


def _run_logged(cfg, display: str, log) -> None:
    from swarm.monitor.display import make_reporter
    from swarm.node import make_node

    reporter = make_reporter(display)
    node = make_node(cfg, reporter=reporter, log=log)
    previous = signal.getsignal(signal.SIGINT)

    def on_interrupt(signum, frame):
        if node.stop_requested:  # second Ctrl-C: give up on a clean stop
            signal.signal(signal.SIGINT, previous)
            raise KeyboardInterrupt
        step = "pass" if cfg.node.role == "observer" else "round"
        reporter.message(f"stopping after the current {step} (Ctrl-C again to abort)...")
        node.request_stop()

    signal.signal(signal.SIGINT, on_interrupt)
    signal.signal(signal.SIGTERM, on_interrupt)
    try:
        state = node.run()
    finally:
        node.close()
        signal.signal(signal.SIGINT, previous)
    if cfg.node.role == "observer":
        typer.echo(f"stopped after {state.round} passes; ledger and node.log in {cfg.run_dir}")
        return
    typer.echo(
        f"stopped at round {state.round}, policy v{state.policy_version}; ledger and checkpoint "
        f"in {cfg.run_dir}"
    )


@app.command()
def init(
    config: ConfigOption = None,
    sets: SetOption = None,
    run_dir: Annotated[
        str | None,
        typer.Option(
            help="Node folder (overrides node.run_dir); the identity is its identity.key."
        ),
    ] = None,
) -> None:
    """Create this node's persistent identity (Ed25519, libp2p format, mode 0600); show its peer ID.

    'join' with the same run folder reuses it. Running init again keeps the existing identity:
    an identity is never overwritten. Refused, as by 'join', where a new identity would not be
    on p2p.allow_list, or where the run folder holds a ledger but its identity was lost.
    """
    loaded = load_traced(config, sets, {"node.run_dir": ("--run-dir", run_dir)})
    cfg = loaded.config
    from swarm.config.preflight import check_identity
    from swarm.core.identity import identity_exists, load_or_create_identity, peer_id_of

    check_identity(cfg, loaded.where)  # what join refuses: off the allow-list, a lost key
    path = cfg.run_dir / "identity.key"
    verb = "existing" if identity_exists(path) else "new"
    peer_id = peer_id_of(load_or_create_identity(path))  # never replaces a file
    typer.echo(f"{verb} identity {path}")
    typer.echo(f"peer ID: {peer_id}")
    listen = cfg.p2p.listen
    if listen.endswith("/tcp/0"):
        typer.echo(
            f"listen address: {listen} (a free port is chosen by join; it writes the full address "
            f"to {cfg.run_dir / 'node.json'})"
        )
    else:
        typer.echo(f"listen address: {listen}/p2p/{peer_id}")


@app.command()
def demo(
    nodes: Annotated[
        int, typer.Option(min=1, max=32, help="How many node processes to start on 127.0.0.1.")
    ] = 4,
    rounds: Annotated[
        int, typer.Option(min=1, help="Rounds each node runs before it stops by itself.")
    ] = 30,
    out: Annotated[
        Path | None,
        typer.Option(help="Run folder (default: runs/demo-<time>); one sub-folder per node."),
    ] = None,
    config: ConfigOption = None,
    sets: SetOption = None,
    timeout: Annotated[
        float | None,
        typer.Option(
            help="Stop every node after this many seconds (default: generous, from nodes and "
            "rounds)."
        ),
    ] = None,
    model: Annotated[
        str,
        typer.Option(
            help="A real model for every node (e.g. smollm2-135m, a .gguf file, a Hugging Face "
            "name or folder): small rounds for a CPU, lr 1e-5, worked examples in the prompt, "
            "sharing with same-family peers. Default: the built-in tiny model."
        ),
    ] = "",
) -> None:
    """Run a local swarm: N node processes on loopback sharing signed rollouts, with a live table.

    Each node has its own identity, ledger and checkpoints under the run folder. At the end
    the demo writes summary.json and reward.png (reward per node over rounds) there.
    """
    import time as _time

    from swarm.ops.demo import run_demo

    folder = out or Path("runs") / f"demo-{_time.strftime('%Y%m%d-%H%M%S')}"
    summary = run_demo(nodes, rounds, folder, config, list(sets or []), timeout, model)
    if any(n["exit_code"] not in (0, None) for n in summary["per_node"]):
        raise typer.Exit(1)


@app.command("config")
def config_cmd(
    config: ConfigOption = None,
    sets: SetOption = None,
    run_dir: Annotated[
        str | None,
        typer.Option(
            help="Node folder (overrides node.run_dir), as for join: the config that folder's "
            "node runs with, checked against what it holds (its identity against the "
            "allow-list, its ledger's model)."
        ),
    ] = None,
    keys: Annotated[
        bool, typer.Option("--keys", help="List every config key with its default and meaning.")
    ] = False,
    dump: Annotated[
        bool,
        typer.Option(
            "--dump",
            help="Print the effective config as TOML (every key; paths absolute), which 'join "
            "--config' reads back. Checks only the values, not the machine.",
        ),
    ] = False,
    plan: Annotated[
        bool,
        typer.Option(
            "--plan",
            help="After every check, print the memory plan as a table: each part's peak "
            "memory (weights, master weights, gradients, optimizer, generation cache, "
            "activations with and without checkpointing, verification worker) against what "
            "this machine has. Exit 2 if it does not fit.",
        ),
    ] = False,
) -> None:
    """Check a config as 'join' would, before loading anything, and print the effective values.

    Catches every config error 'join' would hit at start: values, addresses (and whether the
    listen port is free), the swarm key, the identity against the allow-list, the model
    folder, the task mix, whether its prompts fit the model's context, and whether a round's
    peak memory fits this machine (--plan prints each part). With --run-dir, the config of
    that node folder, and one line on stderr of what the folder holds.
    """
    from swarm.config import describe_config

    if keys:
        for key, default, help_text in describe_config():
            typer.echo(f"{key} = {default}\n    {help_text}")
        return
    loaded = load_traced(config, sets, {"node.run_dir": ("--run-dir", run_dir)})
    if dump:
        from swarm.config.dump import dump_config

        header = (
            f"effective swarm-node config (from {loaded.source}); "
            "load with: swarm-node join --config FILE"
        )
        typer.echo(dump_config(loaded.config, header), nl=False)
        return
    if plan:
        _print_plan(loaded)
        return
    from swarm.config.preflight import preflight

    preflight(loaded.config, loaded.where)
    import json

    if run_dir is not None:  # what that folder holds, beside its config (stdout stays JSON)
        from swarm.ops.status import run_folder_summary

        typer.echo(run_folder_summary(loaded.config.run_dir), err=True)
    typer.echo(json.dumps(loaded.config.to_dict(), indent=2))


def _print_plan(loaded) -> None:
    """Every check; then the memory plan's table, and its refusal (exit 2) if it does not fit."""
    from swarm.config.memory import PlanRefused, config_plan, plan_table
    from swarm.config.preflight import preflight

    try:
        preflight(loaded.config, loaded.where)
    except PlanRefused as refused:
        typer.echo("\n".join(plan_table(refused.plan)))
        raise
    planned = config_plan(loaded.config)
    if planned is None:
        cfg = loaded.config
        why = (
            "an observer loads no model"
            if cfg.node.role == "observer"
            else f"{cfg.policy.model}'s config.json is not on this machine"
        )
        typer.echo(f"no memory plan: {why}")
        return
    typer.echo("\n".join(plan_table(planned)))


@app.command()
def export(
    out: Annotated[
        Path, typer.Option(help="Folder to write the model to (must not exist, or be empty).")
    ],
    config: ConfigOption = None,
    sets: SetOption = None,
    run_dir: Annotated[
        str | None,
        typer.Option(
            help="Node folder whose newest checkpoint to export (overrides node.run_dir)."
        ),
    ] = None,
) -> None:
    """Write a node's current policy (its newest checkpoint) as a Hugging Face model folder.

    The folder holds config.json, model.safetensors and the tokenizer files, so
    AutoModelForCausalLM.from_pretrained(OUT) loads it without swarm-node.
    """
    cfg = load(config, sets, {"node.run_dir": ("--run-dir", run_dir)})
    from swarm.ops.export import export_policy

    result = export_policy(cfg.run_dir, out)
    typer.echo(
        f"wrote {result.model} at policy v{result.policy_version} (round {result.round}, "
        f"{result.dtype}) from {result.checkpoint.name} to {result.out}"
    )
