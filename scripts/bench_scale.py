"""What a node costs per round as the swarm grows, for the gossip and the pull exchange.

    python scripts/bench_scale.py sim --exchange pull --nodes 100 1000 10000
    python scripts/bench_scale.py sim --exchange gossip --nodes 8 32 100
    python scripts/bench_scale.py real --network 32 --trainers 8          # processes, libp2p
    python scripts/bench_scale.py deltas --followers 10 100 1000          # a trainer's upload
    python scripts/bench_scale.py report                                  # table, JSON, PNG

`sim` runs N network-only nodes in this process over the memory transport
(`swarm.bench.scale_sim`: real tasks, signatures, verification, sampler; simulated time) and
writes one JSON per run; `real` runs network-only node processes and tiny-model trainers
over libp2p on 127.0.0.1 (`swarm.bench.scale_real`); `deltas` simulates followers fetching a
trainer's deltas (`swarm.bench.delta_sim`); `report` gathers every JSON under --out into
summary.json, prints the table and draws scale.png: per-node cost against N, log axes. The
gossip exchange cannot be simulated at 1,000 or 10,000 nodes (each node would verify 16,000
or 160,000 groups a round); its cost there is the line fitted to its measured sizes, drawn
dashed and marked "model" in the table.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

METRICS = ("bytes_in", "bytes_out", "cpu_s", "verified", "cheap_checked", "ledger_rows", "peers")
MODEL_NODES = (8, 32, 100, 1000, 10000)


def parse_args(argv=None):
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--out", default="results/scale", help="folder of the JSON results")
    sub = parser.add_subparsers(dest="command", required=True)
    sim = sub.add_parser("sim", help="N nodes in one process over the memory transport")
    sim.add_argument("--exchange", choices=("pull", "gossip"), default="pull")
    sim.add_argument("--nodes", type=int, nargs="+", default=[100, 1000], help="swarm sizes")
    sim.add_argument("--rounds", type=int, default=4, help="rounds, warm-up included")
    sim.add_argument("--warmup", type=int, default=2, help="rounds not measured")
    sim.add_argument(
        "--view-rounds", type=int, default=20, help="view shuffles before round 0 (pull)"
    )
    sim.add_argument("--hostile", type=float, default=0.0, help="share of colluding identities")
    sim.add_argument("--greedy", type=int, default=0, help="greedy viewers (fetch every view)")
    sim.add_argument("--sketch", type=int, default=128, help="history sample (0: from the view)")
    sim.add_argument(
        "--sampled-views", type=int, default=1, help="views heard a refresh from sampled peers"
    )
    sim.add_argument(
        "--most-sampled-views",
        type=int,
        default=16,
        help="... at most, while they still teach a node new IDs (= --sampled-views: fixed)",
    )
    sim.add_argument("--loss", type=float, default=0.0, help="share of fetches lost")
    sim.add_argument("--latency", type=float, default=0.0, help="seconds per fetch")
    sim.add_argument("--churn", type=float, default=0.0, help="share replaced each round")
    real = sub.add_parser("real", help="node processes over libp2p on 127.0.0.1")
    real.add_argument("--exchange", choices=("pull", "gossip"), default="pull")
    real.add_argument("--network", type=int, default=32, help="network-only processes")
    real.add_argument("--trainers", type=int, default=8, help="tiny-model trainer processes")
    real.add_argument("--rounds", type=int, default=12)
    real.add_argument("--period", type=float, default=15.0, help="seconds per round")
    real.add_argument("--trainer-rounds", type=int, default=4)
    real.add_argument("--nice", type=int, default=15)
    real.add_argument("--max-connections", type=int, default=64, help="per network-only process")
    real.add_argument("--tag", default="", help="name of the result (default: from sizes)")
    deltas = sub.add_parser("deltas", help="a trainer's upload per version, by followers")
    deltas.add_argument("--followers", type=int, nargs="+", default=[10, 100, 1000])
    sub.add_parser("report", help="table, summary.json and scale.png from the results")
    return parser.parse_args(argv)


def cmd_sim(args) -> None:
    from swarm.bench.network_node import ExchangeKind
    from swarm.bench.scale_sim import SimSettings, simulate

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
        )
        label = f"  [{n} {args.exchange}]"
        result = simulate(settings, lambda m, label=label: print(f"{label} {m}", flush=True))
        attack = f"-hostile{args.hostile:g}-greedy{args.greedy}" if result["adversary"] else ""
        attack += f"-sketch{args.sketch}" if args.sketch != 128 else ""
        attack += f"-views{args.view_rounds}" if args.view_rounds != 20 else ""
        attack += f"-sampled{args.sampled_views}" if args.sampled_views != 1 else ""
        attack += f"-most{args.most_sampled_views}" if args.most_sampled_views != 16 else ""
        for name, value in (("loss", args.loss), ("latency", args.latency), ("churn", args.churn)):
            attack += f"-{name}{value:g}" if value else ""
        write(Path(args.out) / f"sim-{args.exchange}-{n}{attack}.json", result)
        print(row(f"sim {args.exchange}", n, result["per_node"], result), flush=True)
        if result["adversary"]:
            print(f"  adversary: {json.dumps(result['adversary'])}", flush=True)
        print(f"  replaced {result['replaced_nodes']}, lost {result['lost_fetches']}", flush=True)


def cmd_real(args) -> None:
    from swarm.bench.scale_real import RealSettings, run_real

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
    from swarm.bench.delta_sim import DeltaSimSettings, simulate_deltas

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


def write(path: Path, data: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n")
    print(f"  wrote {path}", flush=True)


def row(label: str, n: int, per_node: dict, result: dict | None, model: bool = False) -> str:
    def mean(key):
        value = per_node[key]
        return value["mean"] if isinstance(value, dict) else value

    extra = ""
    if result is not None:
        f = result.get("fairness", {})
        extra = (
            f"  delivered {result['delivery']['delivered']:.3f}  age {result['age_s']['mean']:5.0f}s"
            f"  cv/ideal {f.get('sender_cv_ratio', 0):.2f}  hub {f.get('hub_ratio', 0):.2f}"
            f"  loud {f.get('loud_ratio', 0):.2f}"
        )
    return (
        f"{label + (' (model)' if model else ''):<22} N={n:<6} in {mean('bytes_in') / 1e3:9.1f} kB"
        f"  out {mean('bytes_out') / 1e3:9.1f} kB  cpu {mean('cpu_s') * 1e3:8.1f} ms"
        f"  verified {mean('verified'):8.1f}  checked {mean('cheap_checked'):8.1f}"
        f"  rows {mean('ledger_rows'):8.1f}  peers {mean('peers'):5.1f}{extra}"
    )


def fit_line(points: list[tuple[int, float]]) -> tuple[float, float]:
    """Least-squares a + b (N - 1) through measured (N, value) points; a flat line at their
    mean when the fit would fall (what does not grow with N stays)."""
    xs = [n - 1 for n, _ in points]
    ys = [v for _, v in points]
    mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
    var = sum((x - mx) ** 2 for x in xs)
    b = sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / var if var else 0.0
    if b < 0:
        return my, 0.0
    return my - b * mx, b


def cmd_report(args) -> None:
    out = Path(args.out)
    sims = [json.loads(p.read_text()) for p in sorted(out.glob("sim-*.json"))]
    reals = {p.stem: json.loads(p.read_text()) for p in sorted(out.glob("real-*.json"))}
    deltas = (
        json.loads((out / "deltas.json").read_text()) if (out / "deltas.json").exists() else None
    )
    series: dict[str, list[tuple[int, dict, dict]]] = {}
    for r in sims:
        series.setdefault(r["settings"]["exchange"], []).append(
            (r["settings"]["nodes"], r["per_node"], r)
        )
    lines, models = [], {}
    for exchange, points in sorted(series.items()):
        for n, per_node, r in sorted(points, key=lambda p: p[0]):
            lines.append(row(f"sim {exchange}", n, per_node, r))
        if exchange == "gossip" and len(points) >= 2:
            models[exchange] = {
                key: fit_line([(n, pn[key]["mean"]) for n, pn, _ in points]) for key in METRICS
            }
            measured = {n for n, _, _ in points}
            for n in MODEL_NODES:
                if n not in measured:
                    per_node = {k: a + b * (n - 1) for k, (a, b) in models[exchange].items()}
                    lines.append(row("sim gossip", n, per_node, None, model=True))
    for tag, r in reals.items():
        lines.append(row(tag, r["settings"]["network"], r["summary"]["per_node"], None))
    print("\n".join(lines))
    summary = {
        "sim": [
            {
                "exchange": r["settings"]["exchange"],
                "nodes": r["settings"]["nodes"],
                "per_node_mean": {k: v["mean"] for k, v in r["per_node"].items()},
                "delivery": r["delivery"],
                "age_s": r["age_s"],
                "fairness": r["fairness"],
            }
            for r in sims
        ],
        "gossip_model": models.get("gossip", {}),
        "real": {tag: r["summary"] for tag, r in reals.items()},
        "deltas": deltas,
    }
    write(out / "summary.json", summary)
    plot(series, models.get("gossip", {}), reals, out / "scale.png")


def plot(series, gossip_model, reals, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = (
        ("bytes_in", "bytes in per round", 1.0),
        ("cpu_s", "CPU s per round", 1.0),
        ("verified", "groups verified per round", 1.0),
        ("ledger_rows", "ledger rows", 1.0),
    )
    fig, axes = plt.subplots(1, len(panels), figsize=(4.2 * len(panels), 3.8))
    colours = {"pull": "tab:blue", "gossip": "tab:red"}
    for ax, (key, title, _) in zip(axes, panels, strict=True):
        for exchange, points in sorted(series.items()):
            pts = sorted((n, pn[key]["mean"]) for n, pn, _ in points)
            ax.plot(
                *zip(*pts, strict=True),
                "o-",
                color=colours.get(exchange),
                label=f"{exchange} (sim)",
            )
        if gossip_model:
            a, b = gossip_model[key]
            xs = list(MODEL_NODES)
            ax.plot(
                xs,
                [max(a + b * (n - 1), 1e-9) for n in xs],
                "--",
                color="tab:red",
                label="gossip (model)",
            )
        for tag, r in reals.items():
            ax.plot(
                [r["settings"]["network"]],
                [max(r["summary"]["per_node"][key], 1e-9)],
                "*",
                markersize=13,
                markeredgecolor="black",
                color=colours.get(r["settings"]["exchange"]),
                label=f"{tag} (libp2p)",
            )
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("nodes N")
        ax.set_title(title)
        ax.grid(True, which="both", alpha=0.3)
    axes[0].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    print(f"  wrote {path}")


def main(argv=None) -> int:
    args = parse_args(argv)
    {"sim": cmd_sim, "real": cmd_real, "deltas": cmd_deltas, "report": cmd_report}[args.command](
        args
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
