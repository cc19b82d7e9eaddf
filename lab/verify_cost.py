"""What verification costs: checks per second for valid and invalid groups, and its share of a round.

What it measures, on what and how, is said once: in `scripts/bench_verify.py`'s help.
`run` takes the options of `scripts/bench_verify.py` (config, rounds,
sets, repeat, out), prints a table and writes JSON.
"""

from __future__ import annotations

import dataclasses
import json
import statistics
import tempfile
import time
from pathlib import Path

from rich.console import Console
from rich.table import Table

PEERS = (1, 4, 8)


TARGET_SHARE = 0.03


def run_rounds(args):
    """Run a real node; return (config, peer id, median round seconds, the signed groups it sent)."""
    from swarm.config.load import load_config
    from swarm.ledger import GroupRow, RoundRow
    from swarm.node import Node
    from swarm.wire import SignedGroup

    with tempfile.TemporaryDirectory(prefix="bench-verify-") as tmp:
        overrides = [
            *args.sets,
            f'node.run_dir="{tmp}"',
            f"node.rounds={args.rounds + 1}",
            "tasks.eval_size=0",
        ]
        if not any(s.startswith("policy.device") for s in args.sets):
            overrides.append('policy.device="cpu"')
        config = load_config(args.config, overrides)
        node = Node(config)
        try:
            node.run()
        finally:
            node.close()
        with node.ledger.reader() as session:
            rounds = (
                session.query(RoundRow).order_by(RoundRow.round).all()[1:]
            )  # drop the warm-up round
            sent = [
                SignedGroup(r.body, r.signature)
                for r in session.query(GroupRow).filter(GroupRow.direction == "sent")
            ]
        return config, node, statistics.median(r.total_s for r in rounds), len(rounds), sent


def per_group_seconds(fn, items, repeat: int) -> float:
    """Median over passes of (seconds for one pass over `items`) / len(items)."""
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn(items)
        times.append((time.perf_counter() - t) / len(items))
    return statistics.median(times)


def spot_check_cost(config, node, sent, repeat: int) -> tuple[float, int]:
    """Seconds per group of the token spot check, and how many of the node's own groups it flagged.

    The node's groups were sampled at earlier policy versions than the weights checked here,
    so a flag would be a false positive of the loose bounds; it is counted, not hidden.
    """
    from swarm.core.errors import RejectedMessage
    from swarm.policy.prompts import build_prompt
    from swarm.verify.spotcheck import SpotChecker, SpotCheckSettings
    from swarm.wire import decode_group

    checker = SpotChecker(
        node.policy.model,
        node.policy.tokenizer,
        SpotCheckSettings(
            completions=config.verify.spot_check_completions,
            min_prob=config.verify.spot_check_min_prob,
        ),
    )
    items = [(decode_group(s.body), s.content_hash) for s in sent]
    flagged = 0

    def run(pairs):
        nonlocal flagged
        flagged = 0
        for group, digest in pairs:
            prompt = build_prompt(
                node.policy.tokenizer, group.question, config.policy.prompt_format()
            )
            try:
                checker.check(group, digest, prompt)
            except RejectedMessage:
                flagged += 1

    return per_group_seconds(run, items, repeat), flagged


def measure(config, peer_id: str, sent, repeat: int) -> dict:
    import msgspec

    from swarm.core.identity import create_identity, peer_id_of
    from swarm.tasks import TaskSpec
    from swarm.verify.gate import Verifier, VerifySettings
    from swarm.verify.rescore_pool import InProcess, RescoreWorker, WorkerSettings
    from swarm.wire import SignedGroup, decode_group, encode_group, pack_messages
    from swarm.wire.signing import sign_group

    settings = VerifySettings.from_config(config)
    fmt = config.tasks.format_reward
    messages = [
        pack_messages([s])[0] for s in sent
    ]  # one group per message: the worst case for overheads
    groups = [decode_group(s.body) for s in sent]

    worker = RescoreWorker(WorkerSettings.from_config(config))

    def fresh(rescorer=None, **changes):
        return Verifier(dataclasses.replace(settings, **changes), rescorer=rescorer or InProcess())

    def admit(msgs):
        v = fresh()  # new state each pass, or every group would be a duplicate
        for m in msgs:
            accepted, rejected = v.admit(m, peer_id)
            assert accepted and not rejected, rejected

    def recheck(with_signature: bool):
        def run(msgs):
            v = fresh(recheck_signatures=with_signature)
            for m in msgs:
                assert v.recheck(m, peer_id)[0]

        return run

    def content(gs):
        v = fresh()
        for g in gs:
            v.verify_content(g, fmt)

    def content_in_worker(gs):
        v = fresh(worker)
        for g in gs:
            v.verify_content(g, fmt)

    def rejected_by(reason: str, admit_only: bool, source: str = peer_id):
        def run(msgs):
            v = fresh()
            for m in msgs:
                accepted, rejected = v.admit(m, source)
                if admit_only:
                    assert rejected and rejected[0].reason == reason, rejected
                    continue
                try:
                    v.verify_content(accepted[0].group, fmt)
                except Exception as e:  # noqa: BLE001 - checked right below
                    assert getattr(e, "reason", None) == reason, e
                else:
                    raise AssertionError(f"expected {reason}")

        return run

    mallory = create_identity(b"\x42" * 32)
    me = peer_id_of(mallory)
    garbage = [bytes([i % 256]) * 600 for i in range(len(sent))]
    forged = [pack_messages([SignedGroup(s.body, b"\x00" * 64)])[0] for s in sent]
    replace = msgspec.structs.replace
    inflated = [
        pack_messages(
            [sign_group(replace(g, sender=me, rewards=(1.1,) * len(g.rewards)), mallory)]
        )[0]
        for g in groups
    ]
    unknown = [
        pack_messages(
            [
                sign_group(
                    replace(g, sender=me, task=TaskSpec.make("no_such_dataset", {}, 0, i)), mallory
                )
            ]
        )[0]
        for i, g in enumerate(groups)
    ]
    assert encode_group(groups[0]) == sent[0].body

    valid = {
        "admit (gossip validator)": per_group_seconds(admit, messages, repeat),
        "recheck with signature (inbox)": per_group_seconds(recheck(True), messages, repeat),
        "recheck without signature (inbox)": per_group_seconds(recheck(False), messages, repeat),
        "verify_content (rebuild, re-score)": per_group_seconds(content, groups, repeat),
    }
    content_in_worker(groups[:1])  # the worker's start is not a group's cost
    valid["verify_content in the worker"] = per_group_seconds(content_in_worker, groups, repeat)
    worker.close()
    invalid = {
        "undecodable (garbage)": per_group_seconds(
            rejected_by("undecodable", True), garbage, repeat
        ),
        "bad_signature (forged)": per_group_seconds(
            rejected_by("bad_signature", True), forged, repeat
        ),
        "reward_mismatch (inflated)": per_group_seconds(
            rejected_by("reward_mismatch", False, me), inflated, repeat
        ),
        "unlisted_task (unknown dataset)": per_group_seconds(
            rejected_by("unlisted_task", True, me), unknown, repeat
        ),
    }
    return {
        "valid": valid,
        "invalid": invalid,
        "groups": len(sent),
        "worker_round_trip_ms": worker.stats.overhead_ms,
        "completions_per_group": statistics.mean(len(g.completions) for g in groups),
    }


def show(result: dict, console: Console) -> None:
    table = Table(
        title=f"verification cost per group: {result['model']}, {result['completions_per_group']:.0f} completions "
        f"of <= {result['max_new_tokens']} tokens, {result['groups_measured']} real groups"
    )
    for column in ("check", "µs per group", "groups/s"):
        table.add_column(column, justify="right")
    for name, seconds in result["seconds_per_group"].items():
        table.add_row(name, f"{seconds * 1e6:.0f}", f"{1 / seconds:,.0f}")
    table.add_row(
        "valid group, all stages",
        f"{result['valid_group_total_s'] * 1e6:.0f}",
        f"{result['valid_groups_per_s']:,.0f}",
    )
    console.print(table)
    here = result["seconds_per_group"]["verify_content (rebuild, re-score)"]
    there = result["seconds_per_group"]["verify_content in the worker"]
    console.print(
        f"verification worker: {(there - here) * 1e6:+.0f} µs per group against this process "
        f"({here * 1e6:.0f} -> {there * 1e6:.0f} µs), of which "
        f"{result['worker_round_trip_ms'] * 1e3:.0f} µs in the pipes"
    )
    console.print(
        f"spot check: {result['spot_check_completions_per_group']} completion(s) per group; "
        f"{result['spot_check_flagged_own_groups']} of the node's own {result['groups_measured']} groups flagged "
        "(sampled at earlier versions than the weights checked)"
    )
    shares = Table(
        title=f"share of a {result['median_round_s']:.2f} s round ({result['questions_per_round']} groups "
        f"per peer per round, at most {result['spot_check_groups_per_round']} spot-checked, "
        f"target < {result['target_share']:.0%})"
    )
    for column in ("peers", "groups verified per round", "verify s per round", "share of round"):
        shares.add_column(column, justify="right")
    for peers, share in result["share_of_round_by_peers"].items():
        n = peers * result["questions_per_round"]
        shares.add_row(
            str(peers), str(n), f"{share * result['median_round_s']:.4f}", f"{share:.2%}"
        )
    console.print(shares)


def summarize(
    args, config, costs: dict, round_s: float, rounds_timed: int, spot_s: float, spot_flagged: int
) -> dict:
    """The figures as the JSON records them: per check, per valid group, and the share of a
    round that P peers' groups would take."""
    per_round = config.generation.questions_per_round
    recheck = (
        "recheck with signature (inbox)"
        if config.verify.recheck_signatures
        else "recheck without signature (inbox)"
    )
    content = (
        "verify_content in the worker"
        if config.verify.worker
        else "verify_content (rebuild, re-score)"
    )
    per_valid = sum(costs["valid"][k] for k in ("admit (gossip validator)", recheck, content))
    # Worst case for the spot check: every peer declares our model and version, so the node
    # spends its whole per-round allowance of spot checks.
    spot_per_round = (
        costs["valid"]["spot check (same model and version only)"]
        * config.verify.spot_check_groups_per_round
    )
    share = {
        p: (p * per_round * per_valid + min(spot_per_round, p * per_round * spot_s)) / round_s
        for p in PEERS
    }
    result = {
        "config": args.config or "defaults",
        "overrides": args.sets,
        "model": config.policy.model,
        "questions_per_round": per_round,
        "completions_per_question": config.generation.completions_per_question,
        "max_new_tokens": config.generation.max_new_tokens,
        "rounds_timed": rounds_timed,
        "median_round_s": round_s,
        "recheck_signatures": config.verify.recheck_signatures,
        "seconds_per_group": {**costs["valid"], **costs["invalid"]},
        "groups_per_s": {k: 1 / v for k, v in {**costs["valid"], **costs["invalid"]}.items()},
        "valid_group_total_s": per_valid,
        "valid_groups_per_s": 1 / per_valid,
        "share_of_round_by_peers": share,
        "target_share": TARGET_SHARE,
        "groups_measured": costs["groups"],
        "completions_per_group": costs["completions_per_group"],
        "spot_check_completions_per_group": config.verify.spot_check_completions,
        "spot_check_groups_per_round": config.verify.spot_check_groups_per_round,
        "spot_check_flagged_own_groups": spot_flagged,
        "worker_round_trip_ms": costs["worker_round_trip_ms"],
    }
    return result


def run(args) -> int:
    """Time the rounds, measure every check, print the table, write the JSON (2: a bad config)."""
    from swarm.core.errors import SwarmError

    console = Console()
    try:
        config, node, round_s, rounds_timed, sent = run_rounds(args)
        costs = measure(config, node.peer_id, sent, args.repeat)
        spot_s, spot_flagged = spot_check_cost(config, node, sent, args.repeat)
        costs["valid"]["spot check (same model and version only)"] = spot_s
    except SwarmError as e:
        console.print(f"error: {e}")
        return 2
    result = summarize(args, config, costs, round_s, rounds_timed, spot_s, spot_flagged)
    show(result, console)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2))
    console.print(f"wrote {out}")
    return 0
