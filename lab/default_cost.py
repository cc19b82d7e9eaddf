"""What each arm of the default study costs a node, timed on an idle machine.

The verdict units record their seconds, but they ran two to five at a time on a shared
machine, so their wall-clock says more about the load than about the arm. This runs each arm
of the default study alone, one after another, at its tuned rate on the tuning seed, for a
few rounds with a small held-out set (so the end-of-unit evaluation does not dominate), and
reports `default_study.cost_rows` over those runs. Units already in the output folder are
reused, so a stopped run resumes where it stopped; one of another length is refused.
"""

from __future__ import annotations

import json
from pathlib import Path

from rich.console import Console

from lab.default_study import TESTBEDS, cost_rows
from lab.experiment import STUDIES, TUNING_SEED, parse_arm
from lab.sapo_cli import main as sapo_main
from lab.sapo_report import chosen_lrs, load_units
from lab.sapo_tables import cost_table

STUDY = STUDIES["default"]
PROTOCOL = "paper"


def tuned_rates(results: Path, testbed: str) -> dict[str, float]:
    """Each arm's rate as the verdict ran it: the best on the tuning seed of that testbed."""
    arms = [parse_arm(a) for a in STUDY.arms]
    return chosen_lrs(results / STUDY.folder(PROTOCOL, testbed), arms, STUDY.learning_rates)


def time_arms(results: Path, out: Path, rounds: int, eval_size: int, console: Console) -> dict:
    """Run every arm alone on both testbeds (skipping finished runs); the cost rows per testbed."""
    payload: dict = {"rounds": rounds, "eval_size": eval_size, "seed": TUNING_SEED, "testbeds": {}}
    for testbed in TESTBEDS:
        rates = tuned_rates(results, testbed)
        for arm, lr in rates.items():
            argv = ["run", "--study", STUDY.name, "--testbed", testbed, "--arms", arm]
            argv += ["--lr", f"{lr:g}", "--seeds", str(TUNING_SEED), "--rounds", str(rounds)]
            argv += ["--eval-size", str(eval_size), "--results", str(out)]
            console.print(f"{testbed} {arm} at lr {lr:g}: {rounds} rounds")
            if sapo_main(argv):
                raise SystemExit(f"error: the {testbed} {arm} run failed")
        folder = out / STUDY.folder(PROTOCOL, testbed)
        units = load_units(folder)
        stale = sorted({u["arm"] for u in units if u["rounds"] != rounds})
        if stale:  # a unit's file name has no length, so it was reused and cannot be timed
            raise SystemExit(
                f"error: {folder / 'units'} holds runs of another length for {', '.join(stale)}: "
                "remove them or pass another --out"
            )
        cost = cost_rows(units)
        cost_table(f"{testbed}, each arm alone", cost, console)
        payload["testbeds"][testbed] = {"rates": rates, "cost": cost}
    return payload


def run(results: Path, out: Path, rounds: int, eval_size: int) -> int:
    console = Console(highlight=False)
    payload = time_arms(results, out, rounds, eval_size, console)
    path = out / "default-cost.json"
    path.write_text(json.dumps(payload, indent=1))
    console.print(f"wrote {path}")
    return 0
