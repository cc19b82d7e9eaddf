"""Study 4 (`--study protect`): its arms resolve to valid node configs on both testbeds, its
tuning is bracketed before a verdict, and its rule is study 3's against 4/0."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from lab.experiment import STUDIES, Protocol, RunShape, node_config, parse_arm
from lab.protect_study import BASELINE, CANDIDATES, decide, judge
from lab.tuning import bracketing_rates, rate_step, unbracketed
from swarm.config import build_config
from swarm.policy.skills import GAP_SWARM, SKILL_SWARM, mix_table

STUDY = STUDIES["protect"]
SEEDS = STUDY.seeds


def test_the_study_is_registered_as_pre_registered():
    assert STUDY.arms == ("4/0", *CANDIDATES.values())
    assert STUDY.seeds == tuple(range(12, 18)) and STUDY.rounds == 300
    assert STUDY.learning_rates == (3e-5, 1e-4, 3e-4) and STUDY.bracket == "both"
    assert STUDY.folder("paper", "gap") == "protect-paper-gap"
    # no seed of an earlier study: 0-5 (studies 1 and 2), 6-11 (study 3), 100 (tuning)
    assert not set(STUDY.seeds) & set(range(12)) and 100 not in STUDY.seeds
    for arm in CANDIDATES.values():  # both generate what 4/0 generates
        assert parse_arm(arm).generated_questions == parse_arm(BASELINE).generated_questions


@pytest.mark.parametrize("testbed", [GAP_SWARM, SKILL_SWARM], ids=["gap", "skills"])
@pytest.mark.parametrize("name", STUDY.arms)
def test_every_arm_resolves_to_a_valid_config_on_every_node(name, testbed):
    arm = parse_arm(name)
    for index, model in enumerate(testbed):
        table = node_config(
            arm,
            Protocol.PAPER,
            {"preset": "custom", "mix": mix_table()},
            model.name,
            index=index,
            seed=12,
            lr=1e-4,
            run_dir="r",
            shape=RunShape(rounds=300),
        )
        s = build_config(table, f"study 4 {name} node {index}").sharing
        assert s.shared_groups == arm.shared
        if name == "4/0":
            continue
        assert (s.shared_from, s.shared_normalizer) == ("same-family", "parts")
        if "gate" in arm.channels:
            assert (s.shared_weight_control, s.shared_weight, s.own_signal_weight) == (
                "own-signal",
                0.5,
                0.1,
            )
        else:
            assert (s.shared_weight_control, s.shared_weight) == ("fixed", 0.25)


def test_rate_steps_walk_the_half_decade_ladder():
    assert rate_step(1e-4, up=True) == 3e-4 and rate_step(3e-4, up=True) == 1e-3
    assert rate_step(3e-5, up=False) == 1e-5 and rate_step(1e-5, up=False) == 3e-6
    for lr in (1e-6, 3e-6, 1e-5, 3e-5, 1e-4, 3e-4, 1e-3):
        assert rate_step(rate_step(lr, up=True), up=False) == lr


def _tuned(arm: str, scores: dict[float, float]) -> list[dict]:
    return [{"arm": arm, "lr": lr, "cumulative_own_reward": r} for lr, r in scores.items()]


def test_bracketing_steps_beyond_a_winning_end_until_the_best_is_inside():
    grid = STUDY.learning_rates
    inside = _tuned("4/0", {3e-5: 1.0, 1e-4: 3.0, 3e-4: 2.0})
    assert bracketing_rates(inside, ["4/0"], grid) == {}
    unfinished = _tuned("4/0", {3e-5: 1.0, 1e-4: 3.0})  # 3e-4 not run: nothing beyond yet
    assert bracketing_rates(unfinished, ["4/0"], grid) == {}
    top = _tuned("4/0", {3e-5: 1.0, 1e-4: 2.0, 3e-4: 3.0})
    assert bracketing_rates(top, ["4/0"], grid) == {"4/0": [1e-3]}
    assert unbracketed(top, ["4/0"], grid) == ["4/0 0.001"]
    still_top = top + _tuned("4/0", {1e-3: 4.0})
    assert bracketing_rates(still_top, ["4/0"], grid) == {"4/0": [1e-3, 3e-3]}
    done = still_top + _tuned("4/0", {3e-3: 0.5})
    assert bracketing_rates(done, ["4/0"], grid) == {"4/0": [1e-3, 3e-3]}
    assert unbracketed(done, ["4/0"], grid) == []
    bottom = _tuned("4/0", {3e-5: 3.0, 1e-4: 2.0, 3e-4: 1.0})
    assert bracketing_rates(bottom, ["4/0"], grid) == {"4/0": [1e-5]}


def _unit(folder: Path, arm: str, seed: int, lr: float, reward: float) -> None:
    path = folder / "units" / f"{arm.replace('/', '-')}_s{seed}_lr{lr:g}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(
        json.dumps({"arm": arm, "seed": seed, "lr": lr, "cumulative_own_reward": reward})
    )


def _plan(experiment, *argv):
    args = experiment.parse_args(list(argv))
    return [(arm.name, seed, lr) for arm, seed, lr in experiment.units_for(args)]


def test_tune_brackets_then_the_verdict_runs_seeds_12_to_17(sapo_experiment, tmp_path):
    common = ["--study", "protect", "--testbed", "skills", "--results", str(tmp_path)]
    plan = _plan(sapo_experiment, "tune", *common)
    assert len(plan) == 9 and {seed for _, seed, _ in plan} == {100}
    folder = tmp_path / "protect-paper-skills"
    for arm in STUDY.arms:
        for lr, reward in ((3e-5, 1.0), (1e-4, 2.0), (3e-4, 3.0 if arm == "4/0" else 0.5)):
            _unit(folder, arm, 100, lr, reward)
    assert _plan(sapo_experiment, "tune", *common)[9:] == [("4/0", 100, 1e-3)]
    with pytest.raises(SystemExit, match="not bracketed yet.*4/0 0.001"):
        _plan(sapo_experiment, "verdict", *common)
    _unit(folder, "4/0", 100, 1e-3, 0.1)
    verdict = _plan(sapo_experiment, "verdict", *common)
    assert {seed for _, seed, _ in verdict} == set(range(12, 18)) and len(verdict) == 18
    assert {(arm, lr) for arm, _, lr in verdict} == {
        ("4/0", 3e-4),
        ("4/4-parts25+fam", 1e-4),
        ("4/4-gate+fam", 1e-4),
    }


def _testbed(ratios: dict[str, list[float]]):
    cumulative = {"4/0": {s: 100.0 for s in SEEDS}}
    for arm, values in ratios.items():
        cumulative[arm] = {s: 100.0 * v for s, v in zip(SEEDS, values, strict=True)}
    held = {arm: {s: {"sum": 0.5} for s in SEEDS} for arm in cumulative}
    return cumulative, held


def test_the_rule_is_study_3s_against_4_0_and_the_better_passing_candidate_wins():
    p, g = CANDIDATES["P"], CANDIDATES["G"]
    gap = _testbed(
        {p: [1.12, 1.13, 1.12, 1.14, 1.12, 1.13], g: [1.15, 1.16, 1.15, 1.17, 1.15, 1.16]}
    )
    skills = _testbed(
        {p: [1.00, 1.01, 1.00, 1.02, 1.00, 1.01], g: [0.97, 0.98, 0.96, 0.97, 0.99, 0.97]}
    )
    verdicts = [judge(name, {"gap": gap, "skills": skills}) for name in CANDIDATES]
    assert verdicts[0].passed, verdicts[0].why
    assert not verdicts[1].passed and any("skills: mean" in w for w in verdicts[1].why)
    assert verdicts[0].equal_cost[0].baseline == "4/0" and verdicts[0].against_8_0 == ()
    assert decide(verdicts) == "P"
    both = _testbed({p: [1.12] * 5 + [1.13], g: [1.15] * 5 + [1.16]})
    assert decide([judge(n, {"gap": both, "skills": both}) for n in CANDIDATES]) == "G"
    flat = _testbed({p: [1.0] * 5 + [1.01], g: [1.0] * 5 + [1.01]})
    assert decide([judge(n, {"gap": flat, "skills": flat}) for n in CANDIDATES]) == ""


def test_report_waits_for_units_and_writes_the_studys_decision_file(sapo_experiment, tmp_path):
    assert sapo_experiment.main(["report", "--study", "protect", "--results", str(tmp_path)]) == 0
    decision = json.loads((tmp_path / "protect-decision.json").read_text())
    assert decision == {"study": "protect", "testbeds": {}}
