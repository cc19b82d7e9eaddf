"""Which units `scripts/sapo_experiment.py` plans after the channel verdict: the negative control
at plain 4/4's tuned rate, and 8/0, 4/0 and the best channel on another testbed."""

from __future__ import annotations

import json
from pathlib import Path

import pytest


def _unit(folder: Path, arm: str, seed: int, lr: float, reward: float) -> None:
    path = folder / "units" / f"{arm.replace('/', '-')}_s{seed}_lr{lr:g}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(
        json.dumps({"arm": arm, "seed": seed, "lr": lr, "cumulative_own_reward": reward})
    )


def _plan(experiment, *argv):
    args = experiment.parse_args(list(argv))
    return [(arm.name, seed, lr) for arm, seed, lr in experiment.units_for(args)]


def test_the_negative_control_runs_at_plain_4_4s_tuned_rate(sapo_experiment, tmp_path):
    gap = tmp_path / "channels-paper-gap"
    for lr, reward in ((1e-4, 5.0), (3e-4, 9.0), (1e-3, 7.0)):
        _unit(gap, "4/4", 100, lr, reward)
    plan = _plan(sapo_experiment, "control", "--results", str(tmp_path))
    assert plan == [("4/4-shuf", seed, 3e-4) for seed in range(6)]


def test_another_testbed_runs_8_0_4_0_and_the_best_channel_once_the_gap_verdict_is_done(
    sapo_experiment, tmp_path
):
    gap = tmp_path / "channels-paper-gap"
    for arm in ("4/4-joint", "4/4-recv", "4/4-shape", "4/4-parts"):
        for lr in (1e-4, 3e-4, 1e-3):
            _unit(gap, arm, 100, lr, 10.0 if lr == 1e-4 else 1.0)
        for seed in range(6):
            last = arm == "4/4-shape" and seed == 5
            if not last:
                _unit(gap, arm, seed, 1e-4, 20.0 if arm == "4/4-shape" else 10.0)
    with pytest.raises(SystemExit, match="4/4-shape seed 5"):
        _plan(sapo_experiment, "tune", "--testbed", "skills", "--results", str(tmp_path))
    _unit(gap, "4/4-shape", 5, 3e-4, 99.0)  # a rate the tuning did not choose: not counted
    with pytest.raises(SystemExit, match="not finished"):
        _plan(sapo_experiment, "tune", "--testbed", "skills", "--results", str(tmp_path))
    _unit(gap, "4/4-shape", 5, 1e-4, 20.0)
    plan = _plan(sapo_experiment, "tune", "--testbed", "skills", "--results", str(tmp_path))
    assert {arm for arm, _, _ in plan} == {"8/0", "4/0", "4/4-shape"}
    assert {seed for _, seed, _ in plan} == {100} and len(plan) == 9
