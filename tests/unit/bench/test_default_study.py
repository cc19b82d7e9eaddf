"""The default study's rule and cost table, with hand-made numbers (lab.default_study)."""

from __future__ import annotations

import pytest

from lab.default_study import cost_rows, decide, held_out_losses, judge
from lab.experiment import STUDIES, parse_arm
from lab.tuning import rates_below

SEEDS = range(6, 12)


def _testbed(ratios: dict[str, list[float]], held_out: dict[str, list[dict]] | None = None):
    """(cumulative, held_out) where each arm's cumulative is its ratio to 100 per seed."""
    cumulative = {"8/0": {s: 100.0 for s in SEEDS}, "4/0": {s: 100.0 for s in SEEDS}}
    for arm, values in ratios.items():
        cumulative[arm] = {s: 100.0 * v for s, v in zip(SEEDS, values, strict=True)}
    flat = {s: {"sum": 0.5} for s in SEEDS}
    held = {arm: dict(flat) for arm in cumulative}
    for arm, rows in (held_out or {}).items():
        held[arm] = dict(zip(SEEDS, rows, strict=True))
    return cumulative, held


def test_a_candidate_passes_with_a_clear_gain_on_one_testbed_and_no_loss_on_the_other():
    gap = _testbed({"4/4-fam": [1.12, 1.14, 1.13, 1.15, 1.12, 1.14]})
    skills = _testbed({"4/4-fam": [1.00, 1.01, 0.99, 1.00, 1.02, 1.00]})
    verdict = judge("C1", {"gap": gap, "skills": skills})
    assert verdict.passed, verdict.why
    assert verdict.equal_cost[0].baseline == "4/0"
    assert verdict.equal_cost[0].mean == pytest.approx(1.1333, abs=1e-3)


def test_a_small_gain_everywhere_or_a_loss_on_one_testbed_fails():
    small = _testbed({"4/4-fam": [1.04, 1.05, 1.06, 1.05, 1.04, 1.06]})
    assert not judge("C1", {"gap": small, "skills": small}).passed  # never >= 1.10
    gain = _testbed({"4/4-fam": [1.2] * 5 + [1.3]})
    loss = _testbed({"4/4-fam": [0.97, 0.96, 0.98, 0.97, 0.99, 0.96]})
    verdict = judge("C1", {"gap": gain, "skills": loss})
    assert not verdict.passed
    assert any("skills: mean" in w for w in verdict.why)
    assert any("CI low" in w for w in verdict.why)


def test_a_held_out_family_that_ends_clearly_lower_fails_the_candidate():
    rows = [{"sum": 0.4 + d} for d in (0.0, 0.01, -0.01, 0.0, 0.02, -0.02)]
    gap = _testbed({"4/4-fam": [1.2] * 6}, {"4/4-fam": rows})
    verdict = judge("C1", {"gap": gap, "skills": _testbed({"4/4-fam": [1.0] * 6})})
    assert not verdict.passed and any("held-out lower on sum" in w for w in verdict.why)
    # a difference within its noise is not a loss
    assert (
        held_out_losses(
            dict(
                zip(
                    SEEDS, [{"f": 0.5 + d} for d in (0.1, -0.1, 0.1, -0.1, 0.1, -0.12)], strict=True
                )
            ),
            {s: {"f": 0.5} for s in SEEDS},
            list(SEEDS),
        )
        == []
    )


def test_c2_is_judged_against_8_0_and_the_default_is_the_passing_candidate_best_against_8_0():
    c2 = _testbed({"4/4-joint+fam": [1.15] * 5 + [1.16], "4/4-fam": [1.2] * 5 + [1.21]})
    verdicts = [judge(name, {"gap": c2, "skills": c2}) for name in ("C1", "C2")]
    assert verdicts[1].equal_cost[0].baseline == "8/0"
    assert all(v.passed for v in verdicts)
    assert decide(verdicts) == "C1"  # 1.20 x 8/0 against 1.15
    failing = _testbed({"4/4-joint+fam": [0.9] * 6, "4/4-fam": [0.9] * 6})
    assert decide([judge(n, {"gap": failing, "skills": failing}) for n in ("C1", "C2")]) == ""


def test_cost_rows_count_generation_training_time_and_reward_per_generated_completion():
    unit = {
        "arm": "4/4-joint+fam",
        "rounds": 10,
        "nodes": 2,
        "completions": 8,
        "generated_questions": 8,
        "local_groups": [40, 40],
        "shared_groups": [30, 40],
        "seconds": 50.0,
        "cumulative_own_reward": 10.0,  # sum over 20 node-rounds of a mean over 32 completions
    }
    row = cost_rows([unit])["4/4-joint+fam"]
    assert row["generated_per_round"] == 64
    assert row["trained_per_round"] == (80 + 70) * 8 / 20
    assert row["seconds_per_round"] == 5.0
    assert row["reward_per_generated"] == pytest.approx(10.0 * 32 / (64 * 20))


def test_rates_below_step_down_once_when_the_smallest_rate_wins():
    grid = STUDIES["default"].learning_rates
    assert grid == (3e-5, 1e-4)
    tuned = [
        {"arm": "8/0", "lr": 3e-5, "cumulative_own_reward": 5.0},
        {"arm": "8/0", "lr": 1e-4, "cumulative_own_reward": 4.0},
        {"arm": "4/0", "lr": 3e-5, "cumulative_own_reward": 3.0},
        {"arm": "4/0", "lr": 1e-4, "cumulative_own_reward": 4.0},
        {"arm": "4/4-fam", "lr": 3e-5, "cumulative_own_reward": 9.0},  # 1e-4 not run yet
    ]
    assert rates_below(tuned, ["8/0", "4/0", "4/4-fam"], grid) == {"8/0": 1e-5}
    done = tuned + [{"arm": "8/0", "lr": 1e-5, "cumulative_own_reward": 6.0}]
    assert rates_below(done, ["8/0"], grid) == {}  # 1e-5 won: no second step


def test_the_candidates_arms_pull_only_from_their_own_family():
    c1, c2 = parse_arm("4/4-fam"), parse_arm("4/4-joint+fam")
    assert c1.sharing() == {"shared_from": "same-family"}
    assert c2.sharing() == {"shared_advantage": "joint", "shared_from": "same-family"}
    assert c2.generated_questions == 8 and c1.generated_questions == 4
    assert STUDIES["default"].seeds == tuple(range(6, 12))
