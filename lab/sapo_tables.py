"""The SAPO experiment's report tables, one function each (`lab.sapo_report` calls them):
each prints a table and returns what it showed, for report.json; `plot` draws the curves.
"""

from __future__ import annotations

import statistics
from collections import defaultdict
from pathlib import Path

from rich.console import Console
from rich.table import Table

from lab.experiment import TUNING_SEED, Study
from lab.tuning import best_lr
from swarm.policy.skills import GAP_SWARM, SKILL_SWARM, family_of

# Families a model knows without a systematic error on every example ("strong").
STRONG = {p.name: set(p.families) - set(p.weak) for p in SKILL_SWARM + GAP_SWARM}
BARE = {p.name for p in SKILL_SWARM + GAP_SWARM if p.answer_format == "bare"}
WEAK = {p.name: set(p.weak) for p in GAP_SWARM}


def tuning_scores(units: list[dict]) -> dict[str, dict[float, float]]:
    """Cumulative own reward per arm and learning rate, of the tuning units given."""
    scores: dict[str, dict[float, float]] = defaultdict(dict)
    for u in units:
        scores[u["arm"]][u["lr"]] = u["cumulative_own_reward"]
    return scores


def swarm_by_family(evals: list[dict]) -> dict[str, float]:
    """Mean over the swarm's nodes of held-out accuracy per family."""
    families = sorted({f for e in evals for f in e["by_family"]})
    return {f: statistics.fmean(e["by_family"].get(f, 0.0) for e in evals) for f in families}


def tuning_table(units: list[dict], console: Console, learning_rates: tuple[float, ...]) -> dict:
    scores = tuning_scores(units)
    if not scores:
        return {}
    table = Table(
        title=f"tuning seed {TUNING_SEED}: cumulative own-rollout reward per learning rate"
    )
    table.add_column("arm")
    for lr in learning_rates:
        table.add_column(f"lr {lr:g}", justify="right")
    for arm, by_lr in sorted(scores.items()):
        best = best_lr(by_lr)
        table.add_row(
            arm,
            *[
                ("" if lr not in by_lr else f"{by_lr[lr]:.1f}" + (" *" if lr == best else ""))
                for lr in learning_rates
            ],
        )
    console.print(table)
    return {arm: dict(by_lr) for arm, by_lr in scores.items()}


def seed_table(cumulative: dict, batch: dict, console: Console) -> dict:
    seeds = sorted({s for by_seed in cumulative.values() for s in by_seed})
    if not seeds:
        return {}
    table = Table(
        title="cumulative reward per seed: own fresh rollouts / training batch (sum over 8 nodes and all rounds)"
    )
    table.add_column("arm")
    for s in seeds:
        table.add_column(f"seed {s}", justify="right")
    out = {}
    for arm in sorted(cumulative):
        cells = []
        for s in seeds:
            own, bat = cumulative[arm].get(s), batch[arm].get(s)
            cells.append("" if own is None else f"{own:.1f} / {bat:.1f}")
        table.add_row(arm, *cells)
        out[arm] = {
            str(s): {"own": cumulative[arm][s], "batch": batch[arm][s]} for s in cumulative[arm]
        }
    console.print(table)
    return out


def comparison_table(
    comparisons: list[dict],
    console: Console,
    title: str = "pre-registered comparisons (cumulative own-rollout reward, paired seeds)",
) -> None:
    if not comparisons:
        return
    table = Table(title=title)
    for col in (
        "candidate vs baseline",
        "ratio per seed",
        "wins",
        "mean ratio [95 % CI]",
        "held-out delta per family",
        "verdict",
    ):
        table.add_column(col)
    for c in comparisons:
        table.add_row(
            f"{c['candidate']} vs {c['baseline']}",
            " ".join(f"{r:.3f}" for r in c["ratios"]),
            f"{c['wins']}/{len(c['seeds'])}",
            f"{c['mean_ratio']:.3f} [{c['ci_low']:.3f}, {c['ci_high']:.3f}]",
            " ".join(f"{f.split('_')[0]} {d:+.2f}" for f, d in c["family_deltas"].items()),
            "PASS" if c["passed"] else "fail: " + "; ".join(c["why"]),
        )
    console.print(table)


def held_out_table(units: list[dict], console: Console) -> dict:
    per_arm: dict[str, dict[str, list[tuple[float, float]]]] = defaultdict(
        lambda: defaultdict(list)
    )
    for u in units:
        start, end = swarm_by_family(u["held_out_start"]), swarm_by_family(u["held_out_end"])
        for f in end:
            per_arm[u["arm"]][f].append((start.get(f, 0.0), end[f]))
    if not per_arm:
        return {}
    families = sorted({f for fams in per_arm.values() for f in fams})
    table = Table(title="held-out greedy accuracy per family, swarm mean over seeds: start -> end")
    table.add_column("arm")
    for f in families:
        table.add_column(f, justify="right")
    out = {}
    for arm in sorted(per_arm):
        row = {
            f: (statistics.fmean(a for a, _ in v), statistics.fmean(b for _, b in v))
            for f, v in per_arm[arm].items()
        }
        table.add_row(
            arm, *[f"{row[f][0]:.0%} -> {row[f][1]:.0%}" if f in row else "" for f in families]
        )
        out[arm] = row
    console.print(table)
    return out


def warmed_cells(unit: dict) -> dict[bool, list[tuple[float, float]]]:
    """Held-out accuracy (start, end) per node and family, split by whether the node's model
    knows the family (warmed on it without a systematic error on every example; only nodes
    running a skill- or gap-swarm model count)."""
    warm = STRONG
    cells: dict[bool, list[tuple[float, float]]] = {True: [], False: []}
    for model, start, end in zip(
        unit["models"], unit["held_out_start"], unit["held_out_end"], strict=True
    ):
        if model not in warm:
            continue
        for dataset, accuracy in end["by_family"].items():
            warmed = family_of(dataset) in warm[model]
            cells[warmed].append((start["by_family"].get(dataset, 0.0), accuracy))
    return cells


def warmed_table(units: list[dict], console: Console) -> dict:
    """Did a node learn a family it was not warmed on (where only peers' groups carry signal)?"""
    per_arm: dict[str, dict[bool, list[tuple[float, float]]]] = defaultdict(
        lambda: {True: [], False: []}
    )
    for u in units:
        for warmed, cells in warmed_cells(u).items():
            per_arm[u["arm"]][warmed] += cells
    per_arm = {a: c for a, c in per_arm.items() if c[True] or c[False]}
    if not per_arm:
        return {}
    table = Table(
        title="held-out accuracy on a node's warmed vs other families (mean over nodes and "
        "seeds): start -> end"
    )
    for column in ("arm", "warmed families", "other families"):
        table.add_column(column, justify="left" if column == "arm" else "right")
    out = {}
    for arm in sorted(per_arm):
        row = {
            ("warmed" if warmed else "other"): (
                statistics.fmean(a for a, _ in cells),
                statistics.fmean(b for _, b in cells),
            )
            for warmed, cells in per_arm[arm].items()
            if cells
        }
        table.add_row(
            arm,
            *[
                f"{row[k][0]:.1%} -> {row[k][1]:.1%}" if k in row else ""
                for k in ("warmed", "other")
            ],
        )
        out[arm] = row
    console.print(table)
    return out


def tagged_nodes_table(units: list[dict], study: Study, console: Console) -> dict:
    """The comparisons and warmed-family gains over the tagged nodes only (a bare node's own
    groups carry almost no signal under the tagged rule, so it can dominate a swarm's sums)."""
    if not any(m in BARE for u in units for m in u["models"]):
        return {}
    cumulative: dict[str, dict[int, float]] = defaultdict(dict)
    gains: dict[str, list[float]] = defaultdict(list)
    for u in units:
        tagged = [k for k, m in enumerate(u["models"]) if m not in BARE]
        cumulative[u["arm"]][u["seed"]] = sum(sum(u["own_reward"][k]) for k in tagged)
        for k in tagged:
            start, end = u["held_out_start"][k]["by_family"], u["held_out_end"][k]["by_family"]
            gains[u["arm"]] += [
                end[d] - start.get(d, 0.0)
                for d in end
                if family_of(d) in STRONG.get(u["models"][k], ())
            ]
    table = Table(
        title="tagged nodes only: cumulative own reward ratios; warmed-family held-out gain"
    )
    for col in ("comparison", "ratio per seed", "mean ratio", "candidate gain", "baseline gain"):
        table.add_column(col)
    out = {}
    for cand, base in study.comparisons:
        seeds = sorted(set(cumulative.get(cand, {})) & set(cumulative.get(base, {})))
        if not seeds:
            continue
        ratios = [cumulative[cand][s] / cumulative[base][s] for s in seeds]
        cg, bg = (mean_se(gains[cand]), mean_se(gains[base]))
        table.add_row(
            f"{cand} vs {base}",
            " ".join(f"{r:.3f}" for r in ratios),
            f"{statistics.fmean(ratios):.3f}",
            f"{cg[0]:+.1%} ± {cg[1]:.1%}",
            f"{bg[0]:+.1%} ± {bg[1]:.1%}",
        )
        out[f"{cand} vs {base}"] = {
            "ratios": ratios,
            "mean_ratio": statistics.fmean(ratios),
            "gain": {cand: cg, base: bg},
        }
    console.print(table)
    return out


def mean_se(values: list[float]) -> tuple[float, float]:
    """(mean, standard error) of `values` ((0, 0) if empty)."""
    if not values:
        return 0.0, 0.0
    se = statistics.stdev(values) / len(values) ** 0.5 if len(values) > 1 else 0.0
    return statistics.fmean(values), se


def weak_table(units: list[dict], console: Console) -> dict:
    """Each gap-swarm node's held-out accuracy on its weak families (mean over seeds): where
    only peers' groups carry signal, so where a sharing channel should show."""
    per_arm: dict[str, dict[int, list[tuple[float, float]]]] = defaultdict(
        lambda: defaultdict(list)
    )
    for u in units:
        for k, (model, start, end) in enumerate(
            zip(u["models"], u["held_out_start"], u["held_out_end"], strict=True)
        ):
            for dataset, accuracy in end["by_family"].items():
                if family_of(dataset) in WEAK.get(model, ()):
                    per_arm[u["arm"]][k].append((start["by_family"].get(dataset, 0.0), accuracy))
    if not per_arm:
        return {}
    nodes = sorted({k for by_node in per_arm.values() for k in by_node})
    table = Table(
        title="held-out accuracy on each node's weak families (mean over seeds): start -> end"
    )
    table.add_column("arm")
    for k in nodes:
        table.add_column(f"node {k}", justify="right")
    out = {}
    for arm in sorted(per_arm):
        cells = {
            k: (statistics.fmean(a for a, _ in v), statistics.fmean(b for _, b in v))
            for k, v in per_arm[arm].items()
        }
        table.add_row(
            arm, *[f"{cells[k][0]:.0%} -> {cells[k][1]:.0%}" if k in cells else "" for k in nodes]
        )
        out[arm] = {str(k): c for k, c in cells.items()}
    console.print(table)
    return out


def format_table(units: list[dict], console: Console, window: int = 10) -> dict:
    """Share of completions that tag their answer, first vs last `window` rounds, per node."""
    per_arm: dict[str, list[list[tuple[float, float]]]] = defaultdict(list)
    for u in units:
        per_arm[u["arm"]].append(
            [(statistics.fmean(t[:window]), statistics.fmean(t[-window:])) for t in u["tagged"]]
        )
    if not per_arm:
        return {}
    table = Table(
        title=f"answers tagged, per node (mean over seeds): first {window} rounds -> last {window}"
    )
    table.add_column("arm")
    n = max(len(v[0]) for v in per_arm.values())
    for k in range(n):
        table.add_column(f"node {k}", justify="right")
    out = {}
    for arm in sorted(per_arm):
        runs = per_arm[arm]
        cells = [
            (statistics.fmean(r[k][0] for r in runs), statistics.fmean(r[k][1] for r in runs))
            for k in range(len(runs[0]))
        ]
        table.add_row(arm, *[f"{a:.0%} -> {b:.0%}" for a, b in cells])
        out[arm] = cells
    console.print(table)
    return out


def plot(units: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    fig, ax = plt.subplots(figsize=(8, 4.8))
    by_arm = defaultdict(list)
    for u in units:
        per_round = np.sum(np.array(u["own_reward"]), axis=0)  # sum over nodes
        by_arm[u["arm"]].append(np.cumsum(per_round))
    for arm, curves in sorted(by_arm.items()):
        length = min(len(c) for c in curves)
        stack = np.stack([c[:length] for c in curves])
        x = np.arange(1, length + 1)
        ax.plot(x, stack.mean(axis=0), label=f"{arm} ({len(curves)} seeds)", linewidth=1.6)
        ax.fill_between(x, stack.min(axis=0), stack.max(axis=0), alpha=0.15)
    ax.set_xlabel("round")
    ax.set_ylabel("cumulative own-rollout reward (sum over nodes)")
    ax.set_title("Does sharing pay? mean over seeds, band: min-max across seeds")
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def cost_table(testbed: str, cost: dict, console: Console) -> None:
    table = Table(title=f"{testbed}: what each arm costs a node (per node and round)")
    for col in (
        "arm",
        "generated",
        "trained on",
        "seconds a round (8 nodes)",
        "reward / generated",
    ):
        table.add_column(col, justify="right")
    for arm, row in cost.items():
        table.add_row(
            arm,
            f"{row['generated_per_round']:.0f}",
            f"{row['trained_per_round']:.1f}",
            f"{row['seconds_per_round']:.2f}",
            f"{row['reward_per_generated']:.4f}",
        )
    console.print(table)
