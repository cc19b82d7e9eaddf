"""The scale study's report: every result under a folder as one table, summary.json and a plot.

Per-node cost against swarm size N for the simulated exchanges (`lab.scale_sim`), the
real process runs (`lab.scale_real`) and the delta simulation (`lab.delta_sim`).
The gossip exchange cannot be simulated at 1,000 or 10,000 nodes (each node would verify
16,000 or 160,000 groups a round); its cost there is the line fitted to its measured sizes,
drawn dashed and marked "model" in the table. `scripts/bench_scale.py report` runs it.
"""

from __future__ import annotations

import json
from pathlib import Path

METRICS = ("bytes_in", "bytes_out", "cpu_s", "verified", "cheap_checked", "ledger_rows", "peers")
MODEL_NODES = (8, 32, 100, 1000, 10000)


def write(path: Path, data: dict) -> None:
    """`data` as sorted, indented JSON at `path`, and a line saying so."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n")
    print(f"  wrote {path}", flush=True)


def row(label: str, n: int, per_node: dict, result: dict | None, model: bool = False) -> str:
    """One line of the table: a node's mean cost per round at swarm size `n`."""

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


def report(out: Path) -> None:
    """Every JSON under `out` gathered: the table printed, summary.json and scale.png."""
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
