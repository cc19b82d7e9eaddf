"""What a node process costs in memory and start-up time, stage by stage.

What it measures, on what and how, is said once: in `scripts/bench_footprint.py`'s help.
Each child is this module run as a program.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
KINDS = ("imports", "tiny", "network")
# The node's heavy imports in the order `swarm-node join` makes them.
IMPORTS = (
    "swarm",
    "swarm.config",
    "swarm.wire",
    "swarm.ledger",
    "swarm.p2p.libp2p",
    "torch",
    "swarm.node.lifecycle",
    "transformers",
    "transformers.models.llama.modeling_llama",
)


# -- children: each prints one JSON line ------------------------------------------------------


def child_imports() -> dict:
    import importlib

    from lab.footprint import rss_mb

    rows, before = [], rss_mb()
    for name in IMPORTS:
        t = time.perf_counter()
        importlib.import_module(name)
        if name == "swarm.config":  # the easy mix's dataset, as a node builds its tasks
            from swarm.tasks import EASY_MIX, TaskSpec, build_task

            build_task(TaskSpec.make(EASY_MIX[0].dataset, EASY_MIX[0].config, 0, 0))
        now = rss_mb()
        rows.append(
            {
                "module": name,
                "added_mb": round(now - before, 1),
                "rss_mb": round(now, 1),
                "seconds": round(time.perf_counter() - t, 3),
                "modules": len(sys.modules),
            }
        )
        before = now
    return {"imports": rows}


def child_tiny(args) -> dict:
    from lab.footprint import Stages, memory_map

    stages = Stages()
    with stages.measure("import swarm"):
        import swarm  # noqa: F401
    with stages.measure("import node"):
        from swarm.config.load import load_config
        from swarm.node import Node
    with tempfile.TemporaryDirectory(prefix="bench-footprint-") as tmp:
        overrides = [*args.sets, f'node.run_dir="{tmp}"', f"node.rounds={args.rounds}"]
        config = load_config(args.config, overrides)
        with stages.measure("build (policy, ledger)"):
            node = Node(config)
        try:
            with stages.measure("start (libp2p)"):
                node.start()
            with stages.measure("evaluate"):
                node.evaluate()
            for i in range(args.rounds):
                with stages.measure(f"round {i}"):
                    node.run_round()
            with stages.measure("checkpoint"):
                node.checkpoint()
        finally:
            with stages.measure("close"):
                node.close()
        where = memory_map()
    return {
        "config": args.config or "(defaults)",
        "overrides": args.sets,
        "stages": [s.as_dict() for s in stages.stages],
        "peak_mb": stages.peak_mb,
        "memory_map_mb": where,
    }


def child_network(args) -> dict:
    from lab.footprint import Stages, memory_map

    stages = Stages()
    with stages.measure("import swarm"):
        import swarm  # noqa: F401
    with stages.measure("import network node"):
        from lab.network_node import NetworkNode, NetworkNodeSettings, run_paced
    with stages.measure("build"):
        node = NetworkNode.over_libp2p(NetworkNodeSettings(), listen="/ip4/127.0.0.1/tcp/0")
    helpers = []
    try:
        with stages.measure("start (libp2p)"):
            node.start()
        start_at = time.time() + 4.0
        cmd = [
            sys.executable,
            "-m",
            "lab.network_node",
            "--rounds",
            str(args.rounds),
            "--start-at",
            str(start_at),
            "--bootstrap",
            node.transport.listen_addrs()[0],
        ]
        env = {**os.environ, "PYTHONPATH": os.environ.get("PYTHONPATH") or str(ROOT)}
        helpers = [subprocess.Popen(cmd, stdout=subprocess.DEVNULL, env=env) for _ in range(2)]
        costs = []
        for i in range(args.rounds):
            with stages.measure(f"round {i}"):
                costs += run_paced(node, 1, 2.0, start_at + 2.0 * i)
    finally:
        with stages.measure("close"):
            node.close()
        for helper in helpers:
            helper.wait(timeout=60)
    return {
        "stages": [s.as_dict() for s in stages.stages],
        "peak_mb": stages.peak_mb,
        "memory_map_mb": memory_map(),
        "rounds": [
            {k: c.as_dict()[k] for k in ("accepted", "verified", "bytes_in", "bytes_out")}
            for c in costs
        ],
    }


# -- the parent -------------------------------------------------------------------------------


def run_child(kind: str, args) -> dict:
    """Measure `kind` in a fresh Python process (this module run as a program)."""
    settings = {"rounds": args.rounds, "config": args.config, "sets": args.sets}
    cmd = [sys.executable, "-m", "lab.node_footprint", kind, json.dumps(settings)]
    # PYTHONPATH, when set, names the code measured (e.g. another checkout, for a before/after)
    env = {**os.environ, "PYTHONPATH": os.environ.get("PYTHONPATH") or str(ROOT)}
    out = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=1800)
    if out.returncode != 0:
        raise RuntimeError(f"{kind} failed:\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def show(kind: str, result: dict) -> None:
    from rich.console import Console
    from rich.table import Table

    console = Console()
    if kind == "imports":
        table = Table(title="imports, in the order a node makes them")
        for col in ("module", "adds MB", "RSS MB", "seconds", "modules loaded"):
            table.add_column(col, justify="right")
        for r in result["imports"]:
            table.add_row(
                r["module"],
                f"{r['added_mb']:.1f}",
                f"{r['rss_mb']:.0f}",
                f"{r['seconds']:.2f}",
                str(r["modules"]),
            )
        console.print(table)
        return
    table = Table(title=f"{kind} node: peak RSS {result['peak_mb']:.0f} MB")
    for col in ("stage", "wall s", "CPU s", "RSS after MB", "peak MB", "modules"):
        table.add_column(col, justify="right")
    for s in result["stages"]:
        table.add_row(
            s["name"],
            f"{s['wall_s']:.2f}",
            f"{s['cpu_s']:.2f}",
            f"{s['rss_mb']:.0f}",
            f"{s['peak_mb']:.0f}",
            str(s["modules"]),
        )
    console.print(table)
    where = ", ".join(f"{k} {v:.0f}" for k, v in list(result["memory_map_mb"].items())[:6])
    print(f"resident at the end, MB: {where}")


def run(args) -> int:
    """Each measurement (`args.only`, else all) in its own process; tables, then the JSON.

    `args` holds only, config, sets, rounds and out (the options of scripts/bench_footprint.py)."""
    results: dict[str, Any] = {"python": sys.version.split()[0], "cpus": os.cpu_count()}
    for kind in args.only or KINDS:
        results[kind] = run_child(kind, args)
        show(kind, results[kind])
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(results, indent=2))
    print(f"wrote {out}")
    return 0


def child(kind: str, args) -> dict:
    """One measurement, in this process."""
    if kind == "imports":
        return child_imports()
    return child_tiny(args) if kind == "tiny" else child_network(args)


if __name__ == "__main__":  # a child: python -m lab.node_footprint KIND SETTINGS-JSON
    print(json.dumps(child(sys.argv[1], SimpleNamespace(**json.loads(sys.argv[2])))))
