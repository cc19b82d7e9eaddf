"""Tables, verdict, JSON and PNG from the units `scripts/sapo_experiment.py` wrote.

    python scripts/sapo_experiment.py report [--protocol paper --testbed skills]

Reads <results>/<protocol>-<testbed>/units/*.json; writes report.json and cumulative.png
beside them. The acceptance rule is `lab.experiment.compare`, pre-registered in
docs/studies/ before the verdict run. The default study (`--study default`) is judged across
both testbeds by `lab.default_study` (`report_default`): default-decision.json; study 4
(`--study protect`) by the same rule in `lab.protect_study`: protect-decision.json.
"""

from __future__ import annotations

import json
from collections import defaultdict
from dataclasses import asdict
from pathlib import Path
from typing import Any

from rich.console import Console

from lab.experiment import (
    CHANNELS_ONLY,
    STUDIES,
    TUNING_SEED,
    Arm,
    Study,
    best_channel,
    compare,
)
from lab.sapo_tables import (
    comparison_table,
    cost_table,
    format_table,
    held_out_table,
    plot,
    seed_table,
    swarm_by_family,
    tagged_nodes_table,
    tuning_scores,
    tuning_table,
    warmed_table,
    weak_table,
)
from lab.tuning import best_lr
from swarm.core.errors import ConfigError


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
    scores = tuning_scores([u for u in load_units(folder) if u["seed"] == TUNING_SEED])
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
    tuning = tuning_scores([u for u in units if u["seed"] == TUNING_SEED])
    lrs = {arm: best_lr(scores) for arm, scores in tuning.items() if scores}
    return [u for u in units if u["seed"] != TUNING_SEED and lrs.get(u["arm"]) in (None, u["lr"])]


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
        # the grid's rates and any beyond it that bracketing ran (lab.tuning)
        "tuning": tuning_table(
            tuning, console, tuple(sorted({*study.learning_rates, *(u["lr"] for u in tuning)}))
        ),
    }
    chosen = _at_tuned_rates(units)
    cumulative: dict[str, dict[int, float]] = defaultdict(dict)
    batch: dict[str, dict[int, float]] = defaultdict(dict)
    held_out: dict[str, dict[int, dict[str, float]]] = defaultdict(dict)
    for u in chosen:
        cumulative[u["arm"]][u["seed"]] = u["cumulative_own_reward"]
        batch[u["arm"]][u["seed"]] = u["cumulative_batch_reward"]
        held_out[u["arm"]][u["seed"]] = swarm_by_family(u["held_out_end"])
    payload["per_seed"] = seed_table(cumulative, batch, console)
    payload["comparisons"] = []
    for cand, base in study.comparisons:
        if cumulative.get(cand) and cumulative.get(base):
            payload["comparisons"].append(asdict(compare(cand, base, cumulative, held_out)))
    comparison_table(payload["comparisons"], console)
    payload["controls"] = [
        asdict(compare(control, base, cumulative, held_out))
        for control, base in study.controls
        if cumulative.get(control) and cumulative.get(base)
    ]
    comparison_table(payload["controls"], console, "negative control (no gain expected)")
    channels = [a for a in CHANNELS_ONLY if a in cumulative]
    if study.name == "channels" and channels:
        try:
            payload["best_channel"] = best_channel(cumulative, channels)
            console.print(
                f"best channel (highest mean cumulative own reward): {payload['best_channel']}"
            )
        except ConfigError as exc:
            console.print(f"best channel: not yet ({exc})")
    payload["held_out"] = held_out_table(chosen, console)
    payload["format"] = format_table(chosen, console)
    payload["warmed"] = warmed_table(chosen, console)
    payload["weak_by_node"] = weak_table(chosen, console)
    payload["tagged_nodes"] = tagged_nodes_table(chosen, study, console)
    (folder / "report.json").write_text(json.dumps(payload, indent=1))
    if chosen:
        plot(chosen, folder / "cumulative.png")
    console.print(
        f"wrote {folder / 'report.json'}" + (f" and {folder / 'cumulative.png'}" if chosen else "")
    )
    return 0


# the studies judged across both testbeds: their rule's module and the decision file it writes
RULES = {
    "default": ("lab.default_study", "default-decision.json"),
    "protect": ("lab.protect_study", "protect-decision.json"),
}


def report_default(
    results: Path, console: Console, protocol: str = "paper", study_name: str = "default"
) -> int:
    """Each testbed's tables, then the study's rule over both (study 3, `default`, or study 4,
    `protect`), the cost of each arm, and the decision (once every verdict unit of both
    testbeds is in): default-decision.json or protect-decision.json."""
    import importlib

    module, decision_file = RULES[study_name]
    rule = importlib.import_module(module)
    from lab.default_study import cost_rows

    study = STUDIES[study_name]
    by_testbed: dict[str, tuple] = {}
    testbeds: dict[str, dict] = {}
    payload: dict[str, Any] = {"study": study_name, "testbeds": testbeds}
    for testbed in rule.TESTBEDS:
        folder = results / study.folder(protocol, testbed)
        if not load_units(folder):
            console.print(f"{testbed}: no units yet in {folder / 'units'}")
            continue
        if report(folder, console, study):
            return 2
        chosen = _at_tuned_rates(load_units(folder))
        cumulative: dict[str, dict[int, float]] = defaultdict(dict)
        held_out: dict[str, dict[int, dict[str, float]]] = defaultdict(dict)
        for u in chosen:
            cumulative[u["arm"]][u["seed"]] = u["cumulative_own_reward"]
            held_out[u["arm"]][u["seed"]] = swarm_by_family(u["held_out_end"])
        by_testbed[testbed] = (cumulative, held_out)
        missing = [
            f"{a} seed {s}"
            for a in study.arms
            for s in study.seeds
            if s not in cumulative.get(a, {})
        ]
        cost = cost_rows(chosen)
        cost_table(testbed, cost, console)
        testbeds[testbed] = {"missing": missing, "cost": cost}
    if len(by_testbed) < len(rule.TESTBEDS) or any(t["missing"] for t in testbeds.values()):
        console.print("decision: not yet (every arm needs every verdict seed on both testbeds)")
    else:
        judgements = [rule.judge(name, by_testbed) for name in rule.CANDIDATES]
        payload["judgements"] = [
            asdict(j)
            | (
                {"mean_vs_8_0": j.mean_vs_8_0}
                if j.against_8_0
                else {"mean_vs_equal_cost": j.mean_vs_equal_cost}
            )
            for j in judgements
        ]
        payload["default"] = rule.decide(judgements)
        for j in judgements:
            verdict = "PASS" if j.passed else "fail: " + "; ".join(j.why)
            ratios = ", ".join(
                f"{r.testbed} {r.mean:.3f} [{r.ci_low:.3f}, {r.ci_high:.3f}]" for r in j.equal_cost
            )
            console.print(f"{j.name} ({j.arm}) vs {j.equal_cost[0].baseline}: {ratios}; {verdict}")
        console.print(f"decision: {payload['default'] or 'neither passes: shared_groups stays 0'}")
    path = results / decision_file
    path.write_text(json.dumps(payload, indent=1))
    console.print(f"wrote {path}")
    return 0
