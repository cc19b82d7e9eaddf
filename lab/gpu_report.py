"""The GPU bench end to end: the arms, the swarm, the goals, a table and the JSON.

`run` is what `scripts/gpu_bench.py` calls. The goals it checks are the project's for one
H100 or H200 at the 0.5B shape: continuous batching at least 5x plain `generate` in
generated tokens/s; a round at least 2x faster than TRL's step on the same work; training
MFU at least 30 %; peak memory at most 24 GB; the swarm verifying at least 99 % of what it
received. Each is recorded as met, missed or not measured, never assumed.
"""

from __future__ import annotations

import json
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from rich.console import Console
from rich.table import Table

from lab.gpu_bench import run_bench
from lab.gpu_shapes import SHAPES


@dataclass(frozen=True)
class Options:
    """What the command asked for."""

    shape: str
    device: str
    backends: tuple[str, ...]
    trl: bool
    swarm: bool
    out: Path
    budget_s: float = 420.0  # arms and the swarm start only within it


def goals(result: dict) -> dict:
    """Each goal: met (True), missed (False) or not measured (None), with its figure."""
    arms = {a["backend"]: a for a in result["arms"]}
    ours = [a for name, a in arms.items() if name != "trl"]
    best = min(ours, key=lambda a: a["round_s"]) if ours else None
    out: dict[str, dict] = {}
    if "continuous" in arms and "transformers" in arms:
        ratio = (
            arms["continuous"]["generation_tokens_per_s"]
            / arms["transformers"]["generation_tokens_per_s"]
        )
        out["continuous_over_generate_5x"] = {"value": ratio, "met": ratio >= 5}
    if best and "trl" in arms:
        ratio = arms["trl"]["round_s"] / best["round_s"]
        out["round_2x_trl"] = {"value": ratio, "best": best["backend"], "met": ratio >= 2}
    if best and "mfu" in best:
        out["training_mfu_30pct"] = {"value": best["mfu"], "met": best["mfu"] >= 0.30}
    if best and "peak_reserved_gb" in best:
        peak = best["peak_reserved_gb"]
        out["peak_memory_24gb"] = {"value": peak, "met": peak <= 24}
    swarm = result.get("swarm")
    if swarm and swarm.get("accepted_share") is not None:
        share = swarm["accepted_share"]
        out["swarm_verified_99pct"] = {"value": share, "met": share >= 0.99}
    return out


def table(result: dict) -> Table:
    """One row per arm, the limits in the title."""
    limits = result["limits"]
    title = (
        f"GPU bench: {result['shape']} ({result['parameters']:,} parameters) on {limits['card']}"
    )
    if "training_bound_tokens_per_s" in limits:
        title += (
            f"\nlimits: decode {limits['decode_bound_tokens_per_s_fp32_weights']:,.0f} tok/s "
            f"(fp32 weights) / {limits['decode_bound_tokens_per_s_bf16_weights']:,.0f} (bf16), "
            f"training {limits['training_bound_tokens_per_s']:,.0f} tok/s at the bf16 peak"
        )
    grid = Table(title=title)
    for column in ("arm", "gen tok/s", "train tok/s", "MFU", "round s", "peak GB"):
        grid.add_column(column, justify="right")
    for arm in result["arms"]:
        grid.add_row(
            arm["backend"],
            f"{arm['generation_tokens_per_s']:,.0f}",
            f"{arm['training_tokens_per_s']:,.0f}",
            f"{arm['mfu']:.1%}" if "mfu" in arm else "-",
            f"{arm['round_s']:.2f}",
            peak(arm),
        )
    for arm, why in result["skipped"].items():
        grid.add_row(arm, f"not run: {why}", "", "", "", "")
    if any(arm.get("engine_in_peak") for arm in result["arms"]):
        grid.caption = (
            "* with vLLM's in-process engine: its weights and the KV cache it reserves up front "
            "(gpu_memory_utilization of the card, used or not)"
        )
    return grid


def peak(arm: dict) -> str:
    """An arm's peak GPU memory (torch's allocator); starred where a vLLM engine is in it."""
    if "peak_reserved_gb" not in arm:
        return "-"
    return f"{arm['peak_reserved_gb']:.1f}" + ("*" if arm.get("engine_in_peak") else "")


def write(result: dict, out: Path) -> None:
    """The result as JSON at `out` (replaced whole: a reader never sees half of it)."""
    out.parent.mkdir(parents=True, exist_ok=True)
    partial = out.with_name(out.name + ".partial")
    partial.write_text(json.dumps(result, indent=2) + "\n")
    partial.replace(out)


def run(options: Options, console: Console | None = None) -> dict:
    """Every arm, then the swarm; the result written to `options.out` and shown."""
    console = console or Console()
    started = time.perf_counter()
    deadline = started + options.budget_s
    shape = SHAPES[options.shape]
    with tempfile.TemporaryDirectory(prefix="gpu-bench-") as scratch:
        result = run_bench(
            options.shape,
            shape,
            options.device,
            options.backends,
            options.trl,
            Path(scratch) / "model",
            deadline,
            save=lambda partial: write(partial, options.out),
        )
        if options.swarm:
            from lab.gpu_swarm import run_swarm, swarm_missing

            left = deadline - time.perf_counter()
            why = swarm_missing() or (None if left > 60 else "the time budget was spent")
            if why:
                result["skipped"]["swarm"] = why
            else:
                console.print("swarm: 4 join processes")
                swarm_dir = Path(scratch) / "swarm"
                result["swarm"] = run_swarm(shape, options.device, swarm_dir, timeout=left)
    result["goals"] = goals(result)
    result["wall_s"] = time.perf_counter() - started
    write(result, options.out)
    console.print(table(result))
    for name, goal in result["goals"].items():
        console.print(f"{name}: {goal['value']:.3g} ({'met' if goal['met'] else 'missed'})")
    if "swarm" in result:
        s = result["swarm"]
        console.print(
            f"swarm: {s['groups_accepted']} of {s['groups_received']} pulls delivered and "
            f"verified ({s['pulls_failed']} fetches failed); median round "
            f"{s['median_round_s']} s"
        )
    console.print(f"wrote {options.out} ({result['wall_s']:.0f} s)")
    return result
