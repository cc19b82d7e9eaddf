"""The scale study's runs: N nodes simulated in one process, real node processes over libp2p,
and a trainer's delta upload to its followers, one JSON result each.

`sim` runs N network-only nodes over the memory transport (`lab.scale_sim`: real
tasks, signatures, verification, sampler; simulated time); `real` runs network-only node
processes and tiny-model trainers over libp2p on 127.0.0.1 (`lab.scale_real`);
`deltas` simulates followers fetching a trainer's deltas (`lab.delta_sim`); `report`
is `lab.scale_report`. `run` takes the options of `scripts/bench_scale.py`.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path

from lab.scale_report import report, row, write

ROOT = Path(__file__).resolve().parents[1]


def progress(label: str) -> Callable[[str], None]:
    """A progress callback: each message on its own line after `label`."""
    return lambda message: print(f"{label} {message}", flush=True)


def cmd_sim(args) -> None:
    """`scripts/bench_scale.py sim`."""
    from lab.network_node import ExchangeKind
    from lab.scale_sim import SimSettings, simulate

    for n in args.nodes:
        settings = SimSettings(
            nodes=n,
            exchange=ExchangeKind(args.exchange),
            rounds=args.rounds,
            warmup=args.warmup,
            view_rounds=args.view_rounds,
            hostile=args.hostile,
            greedy=args.greedy,
            sketch=args.sketch,
            sampled_views=args.sampled_views,
            most_sampled_views=args.most_sampled_views,
            loss=args.loss,
            latency_s=args.latency,
            churn=args.churn,
            vanished=args.vanished,
        )
        label = f"  [{n} {args.exchange}]"
        result = simulate(settings, progress(label))
        attack = f"-hostile{args.hostile:g}-greedy{args.greedy}" if result["adversary"] else ""
        attack += f"-sketch{args.sketch}" if args.sketch != 128 else ""
        attack += f"-views{args.view_rounds}" if args.view_rounds != 20 else ""
        attack += f"-sampled{args.sampled_views}" if args.sampled_views != 1 else ""
        attack += f"-most{args.most_sampled_views}" if args.most_sampled_views != 16 else ""
        for name, value in (("loss", args.loss), ("latency", args.latency), ("churn", args.churn)):
            attack += f"-{name}{value:g}" if value else ""
        attack += f"-vanished{args.vanished:g}" if args.churn and args.vanished != 1 else ""
        write(Path(args.out) / f"sim-{args.exchange}-{n}{attack}.json", result)
        print(row(f"sim {args.exchange}", n, result["per_node"], result), flush=True)
        if result["adversary"]:
            print(f"  adversary: {json.dumps(result['adversary'])}", flush=True)
        print(f"  replaced {result['replaced_nodes']}, lost {result['lost_fetches']}", flush=True)
        wait = result["per_node"]["wait_s"]
        print(
            f"  waited per node and round: mean {wait['mean']:.2f} s, p95 {wait['p95']:.2f} s, max {wait['max']:.2f} s, delivered {100 * result['delivery']['delivered']:.1f} %",
            flush=True,
        )


def cmd_real(args) -> None:
    """`scripts/bench_scale.py real`."""
    from lab.scale_real import RealSettings, run_real

    s = RealSettings(
        network=args.network,
        trainers=args.trainers,
        exchange=args.exchange,
        rounds=args.rounds,
        period_s=args.period,
        trainer_rounds=args.trainer_rounds,
        nice=args.nice,
        max_connections=args.max_connections,
    )
    tag = args.tag or f"{args.exchange}-{args.network}+{args.trainers}"
    out = Path(args.out)
    work = ROOT / "runs" / f"bench_scale-{tag}-{int(time.time())}"
    result = run_real(s, work, lambda m: print(f"  [{tag}] {m}", flush=True))
    result["work_dir"] = str(work.relative_to(ROOT))
    write(out / f"real-{tag}.json", result)
    summary = result["summary"]
    print(row(f"real {args.exchange}", args.network, summary["per_node"], None))
    print(json.dumps({k: v for k, v in summary.items() if k != "per_node"}, indent=1))


def cmd_deltas(args) -> None:
    """`scripts/bench_scale.py deltas`."""
    from lab.delta_sim import DeltaSimSettings, simulate_deltas

    rows = [
        simulate_deltas(
            DeltaSimSettings(followers=n, hold=hold, bad_holders=n // 10 if hold else 0)
        )
        for n in args.followers
        for hold in (0, 4)
    ]
    write(Path(args.out) / "deltas.json", {"runs": rows})
    for r in rows:
        s = r["settings"]
        print(
            f"followers {s['followers']:5}  hold {s['hold']}  bad holders {s['bad_holders']:4}"
            f"  trainer sends {r['trainer_payloads_per_version']:6.1f} payloads/version"
            f" ({r['payload_bytes'] / 1e3:.1f} kB each), {r['trainer_upload_per_version'] / 1e3:9.1f}"
            f" kB in all  from holders {r['from_holders']:5}  all bit-exact {r['all_in_step']}"
        )


def run(args) -> int:
    """The subcommand `args.command` with its options."""
    commands = {"sim": cmd_sim, "real": cmd_real, "deltas": cmd_deltas}
    if args.command == "report":
        report(Path(args.out))
    else:
        commands[args.command](args)
    return 0
