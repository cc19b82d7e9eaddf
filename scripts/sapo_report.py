"""Tables, verdict, JSON and PNG from the units `scripts/sapo_experiment.py` wrote.

    python scripts/sapo_experiment.py report [--protocol paper --testbed skills]

Reads <results>/<protocol>-<testbed>/units/*.json; writes report.json and cumulative.png
beside them. The acceptance rule is `swarm.bench.experiment.compare`, pre-registered in
docs/SAPO.md before the verdict run. The default study (`--study default`) is judged across
both testbeds by `swarm.bench.default_study` (`report_default`): default-decision.json.
"""

from __future__ import annotations

import json
import statistics
from collections import defaultdict
from dataclasses import asdict
from pathlib import Path

from rich.console import Console
from rich.table import Table

from swarm.bench.experiment import (
    CHANNELS_ONLY,
    STUDIES,
    TUNING_SEED,
    Arm,
    Study,
    best_channel,
    best_lr,
    compare,
)
from swarm.core.errors import ConfigError
from swarm.policy.skills import GAP_SWARM, SKILL_SWARM, family_of

# Families a model knows without a systematic error on every example ("strong").
STRONG = {p.name: set(p.families) - set(p.weak) for p in SKILL_SWARM + GAP_SWARM}
BARE = {p.name for p in SKILL_SWARM + GAP_SWARM if p.answer_format == "bare"}
WEAK = {p.name: set(p.weak) for p in GAP_SWARM}


def load_units(folder: Path) -> list[dict]:
    return [json.loads(p.read_text()) for p in sorted((folder / "units").glob("*.json"))]


def model_sets(units: list[dict]) -> dict[tuple[str, ...], list[str]]:
    """Units by the model digests they ran (() where a unit recorded none): names per set."""
    sets: dict[tuple[str, ...], list[str]] = defaultdict(list)
    for u in units:
        sets[tuple(u.get("model_digests") or ())].append(f"{u['arm']} s{u['seed']} lr{u['lr']:g}")
    return sets


def refuse_mixed_models(units: list[dict]) -> str:
    """'' if every unit ran the same model bytes, else a one-line reason to compare nothing."""
    sets = model_sets(units)
    if len(sets) <= 1:
        return ""
    described = "; ".join(
        f"{(d[0][:12] + '...') if d else 'unrecorded'}: {len(names)} units (e.g. {names[0]})"
        for d, names in sets.items()
    )
    return f"units ran different model bytes, so their seeds are not paired: {described}"


def chosen_lrs(
    folder: Path,
    arms: list[Arm],
    learning_rates: tuple[float, ...] = STUDIES["sharing"].learning_rates,
) -> dict[str, float]:
    """Each arm's learning rate: the best on the tuning seed (every rate must have run)."""
    scores = _tuning_scores([u for u in load_units(folder) if u["seed"] == TUNING_SEED])
    missing = [a.name for a in arms if len(scores[a.name]) < len(learning_rates)]
    if missing:
        raise SystemExit(
            f"error: tuning is not finished for {', '.join(missing)}: run the tune command first"
        )
    return {a.name: best_lr(scores[a.name]) for a in arms}


def verdict_cumulative(folder: Path) -> dict[str, dict[int, float]]:
    """Cumulative own reward per arm and verdict seed, each arm at its tuned rate."""
    cumulative: dict[str, dict[int, float]] = defaultdict(dict)
    for u in _at_tuned_rates(load_units(folder)):
        cumulative[u["arm"]][u["seed"]] = u["cumulative_own_reward"]
    return cumulative


def _at_tuned_rates(units: list[dict]) -> list[dict]:
    """The verdict units (not the tuning seed) that ran their arm's tuned rate; an arm never
    tuned (a control) counts at any rate."""
    tuning = _tuning_scores([u for u in units if u["seed"] == TUNING_SEED])
    lrs = {arm: best_lr(scores) for arm, scores in tuning.items() if scores}
    return [u for u in units if u["seed"] != TUNING_SEED and lrs.get(u["arm"]) in (None, u["lr"])]


def _tuning_scores(units: list[dict]) -> dict[str, dict[float, float]]:
    scores: dict[str, dict[float, float]] = defaultdict(dict)
    for u in units:
        scores[u["arm"]][u["lr"]] = u["cumulative_own_reward"]
    return scores


def report(folder: Path, console: Console, study: Study = STUDIES["sharing"]) -> int:
    units = load_units(folder)
    if not units:
        console.print(f"no units in {folder / 'units'}")
        return 1
    mixed = refuse_mixed_models(units)
    if mixed:
        console.print(f"error: {mixed}")
        return 2
    tuning = [u for u in units if u["seed"] == TUNING_SEED]
    payload: dict = {
        "folder": str(folder),
        "study": study.name,
        "model_digests": next(iter(model_sets(units))),
        "tuning": _tuning_table(tuning, console, study.learning_rates),
    }
    chosen = _at_tuned_rates(units)
    cumulative = defaultdict(dict)
    batch = defaultdict(dict)
    held_out = defaultdict(dict)
    for u in chosen:
        cumulative[u["arm"]][u["seed"]] = u["cumulative_own_reward"]
        batch[u["arm"]][u["seed"]] = u["cumulative_batch_reward"]
        held_out[u["arm"]][u["seed"]] = _swarm_by_family(u["held_out_end"])
    payload["per_seed"] = _seed_table(cumulative, batch, console)
    payload["comparisons"] = []
    for cand, base in study.comparisons:
        if cumulative.get(cand) and cumulative.get(base):
            payload["comparisons"].append(asdict(compare(cand, base, cumulative, held_out)))
    _comparison_table(payload["comparisons"], console)
    payload["controls"] = [
        asdict(compare(control, base, cumulative, held_out))
        for control, base in study.controls
        if cumulative.get(control) and cumulative.get(base)
    ]
    _comparison_table(payload["controls"], console, "negative control (no gain expected)")
    channels = [a for a in CHANNELS_ONLY if a in cumulative]
    if study.name == "channels" and channels:
        try:
            payload["best_channel"] = best_channel(cumulative, channels)
            console.print(
                f"best channel (highest mean cumulative own reward): {payload['best_channel']}"
            )
        except ConfigError as exc:
            console.print(f"best channel: not yet ({exc})")
    payload["held_out"] = _held_out_table(chosen, console)
    payload["format"] = _format_table(chosen, console)
    payload["warmed"] = _warmed_table(chosen, console)
    payload["weak_by_node"] = _weak_table(chosen, console)
    payload["tagged_nodes"] = _tagged_nodes_table(chosen, study, console)
    (folder / "report.json").write_text(json.dumps(payload, indent=1))
    if chosen:
        _plot(chosen, folder / "cumulative.png")
    console.print(
        f"wrote {folder / 'report.json'}" + (f" and {folder / 'cumulative.png'}" if chosen else "")
    )
    return 0


def _swarm_by_family(evals: list[dict]) -> dict[str, float]:
    """Mean over the swarm's nodes of held-out accuracy per family."""
    families = sorted({f for e in evals for f in e["by_family"]})
    return {f: statistics.fmean(e["by_family"].get(f, 0.0) for e in evals) for f in families}


def _tuning_table(units: list[dict], console: Console, learning_rates: tuple[float, ...]) -> dict:
    scores = _tuning_scores(units)
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


def _seed_table(cumulative: dict, batch: dict, console: Console) -> dict:
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


def _comparison_table(
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


def _held_out_table(units: list[dict], console: Console) -> dict:
    per_arm: dict[str, dict[str, list[tuple[float, float]]]] = defaultdict(
        lambda: defaultdict(list)
    )
    for u in units:
        start, end = _swarm_by_family(u["held_out_start"]), _swarm_by_family(u["held_out_end"])
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


def _warmed_cells(unit: dict) -> dict[bool, list[tuple[float, float]]]:
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


def _warmed_table(units: list[dict], console: Console) -> dict:
    """Did a node learn a family it was not warmed on (where only peers' groups carry signal)?"""
    per_arm: dict[str, dict[bool, list[tuple[float, float]]]] = defaultdict(
        lambda: {True: [], False: []}
    )
    for u in units:
        for warmed, cells in _warmed_cells(u).items():
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


def _tagged_nodes_table(units: list[dict], study: Study, console: Console) -> dict:
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
        cg, bg = (_mean_se(gains[cand]), _mean_se(gains[base]))
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


def _mean_se(values: list[float]) -> tuple[float, float]:
    """(mean, standard error) of `values` ((0, 0) if empty)."""
    if not values:
        return 0.0, 0.0
    se = statistics.stdev(values) / len(values) ** 0.5 if len(values) > 1 else 0.0
    return statistics.fmean(values), se


def _weak_table(units: list[dict], console: Console) -> dict:
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


def _format_table(units: list[dict], console: Console, window: int = 10) -> dict:
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


def _plot(units: list[dict], path: Path) -> None:
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


def report_default(results: Path, console: Console, protocol: str = "paper") -> int:
    """Each testbed's tables, then the default study's rule over both, the cost of each arm,
    and the decision (once every verdict unit of both testbeds is in): default-decision.json."""
    from swarm.bench.default_study import CANDIDATES, TESTBEDS, cost_rows, decide, judge

    study = STUDIES["default"]
    by_testbed, payload = {}, {"study": "default", "testbeds": {}}
    for testbed in TESTBEDS:
        folder = results / study.folder(protocol, testbed)
        if not load_units(folder):
            console.print(f"{testbed}: no units yet in {folder / 'units'}")
            continue
        if report(folder, console, study):
            return 2
        chosen = _at_tuned_rates(load_units(folder))
        cumulative, held_out = defaultdict(dict), defaultdict(dict)
        for u in chosen:
            cumulative[u["arm"]][u["seed"]] = u["cumulative_own_reward"]
            held_out[u["arm"]][u["seed"]] = _swarm_by_family(u["held_out_end"])
        by_testbed[testbed] = (cumulative, held_out)
        missing = [
            f"{a} seed {s}"
            for a in study.arms
            for s in study.seeds
            if s not in cumulative.get(a, {})
        ]
        cost = cost_rows(chosen)
        _cost_table(testbed, cost, console)
        payload["testbeds"][testbed] = {"missing": missing, "cost": cost}
    if len(by_testbed) < len(TESTBEDS) or any(t["missing"] for t in payload["testbeds"].values()):
        console.print("decision: not yet (every arm needs every verdict seed on both testbeds)")
    else:
        judgements = [judge(name, by_testbed) for name in CANDIDATES]
        payload["judgements"] = [asdict(j) | {"mean_vs_8_0": j.mean_vs_8_0} for j in judgements]
        payload["default"] = decide(judgements)
        for j in judgements:
            verdict = "PASS" if j.passed else "fail: " + "; ".join(j.why)
            ratios = ", ".join(
                f"{r.testbed} {r.mean:.3f} [{r.ci_low:.3f}, {r.ci_high:.3f}]" for r in j.equal_cost
            )
            console.print(f"{j.name} ({j.arm}) vs {j.equal_cost[0].baseline}: {ratios}; {verdict}")
        console.print(f"decision: {payload['default'] or 'neither passes: shared_groups stays 0'}")
    path = results / "default-decision.json"
    path.write_text(json.dumps(payload, indent=1))
    console.print(f"wrote {path}")
    return 0


def _cost_table(testbed: str, cost: dict, console: Console) -> None:
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
