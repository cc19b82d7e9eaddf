"""The default study: should a node that joins train on its peers' groups? Its rule, pure.

Pre-registered in docs/studies/3-default.md before any of its verdict units ran.
Two candidate defaults, each a 4/4 arm that pulls only from peers of its own model family
(`sharing.shared_from = "same-family"`):

- C1 = plain 4/4 (`4/4-fam`): 4 own questions a round, up to 4 peers' groups. It generates as
  many completions as 4/0, its equal-cost baseline.
- C2 = the joint baseline (`4/4-joint+fam`): the node also generates G completions for each
  shared task, so it generates as many as 8/0, its equal-cost baseline.

A candidate passes if, on each testbed, against its equal-cost baseline, its mean per-seed
ratio of cumulative own-rollout reward is at least 1.00 with the paired 95 % CI's lower end at
least 0.98; on at least one testbed the mean is at least 1.10 with a CI that excludes 1; and
on no testbed does any family's held-out accuracy end below the baseline's by more than twice
the standard error of the per-seed difference. If both pass, the one with the higher mean
ratio against 8/0 (averaged over the two testbeds) becomes the default; if neither does, the
default stays `sharing.shared_groups = 0`.

`cost_rows` is what a volunteer weighs beside the rule: completions generated and trained on
per node and round, wall-clock per round, reward per generated completion.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from lab.experiment import paired_ci, parse_arm

CANDIDATES: dict[str, str] = {"C1": "4/4-fam", "C2": "4/4-joint+fam"}
EQUAL_COST: dict[str, str] = {"C1": "4/0", "C2": "8/0"}  # the baseline generating as much
TESTBEDS = ("gap", "skills")
MIN_MEAN = 1.00  # on every testbed
MIN_CI_LOW = 0.98  # on every testbed
MIN_GAIN = 1.10  # on at least one testbed, with a CI that excludes 1
HELD_OUT_SE = 2.0  # a family may end lower by at most this many standard errors


@dataclass(frozen=True)
class TestbedResult:
    """One candidate against one baseline on one testbed, over paired seeds."""

    testbed: str
    baseline: str
    seeds: tuple[int, ...]
    ratios: tuple[float, ...]
    mean: float
    ci_low: float
    ci_high: float
    held_out_losses: tuple[str, ...] = ()  # "family -0.081 (2 SE = 0.034)"


@dataclass(frozen=True)
class Judgement:
    """A candidate under the rule: each testbed against its equal-cost baseline and 8/0."""

    name: str
    arm: str
    equal_cost: tuple[TestbedResult, ...]
    against_8_0: tuple[TestbedResult, ...]
    passed: bool
    why: tuple[str, ...] = field(default=())

    @property
    def mean_vs_8_0(self) -> float:
        return statistics.fmean(r.mean for r in self.against_8_0)

    @property
    def mean_vs_equal_cost(self) -> float:
        return statistics.fmean(r.mean for r in self.equal_cost)


def against(
    testbed: str,
    candidate: str,
    baseline: str,
    cumulative: Mapping[str, Mapping[int, float]],
    held_out: Mapping[str, Mapping[int, Mapping[str, float]]],
) -> TestbedResult:
    """`candidate` vs `baseline` over the seeds both ran. `cumulative[arm][seed]`: the swarm's
    cumulative own-rollout reward; `held_out[arm][seed][family]`: end-of-run accuracy."""
    seeds = tuple(sorted(set(cumulative.get(candidate, {})) & set(cumulative.get(baseline, {}))))
    if not seeds:
        raise ValueError(f"{testbed}: no seed has both {candidate} and {baseline}")
    ratios = tuple(cumulative[candidate][s] / cumulative[baseline][s] for s in seeds)
    mean, low, high = paired_ci(ratios)
    losses = held_out_losses(held_out.get(candidate, {}), held_out.get(baseline, {}), seeds)
    return TestbedResult(testbed, baseline, seeds, ratios, mean, low, high, tuple(losses))


def held_out_losses(cand: Mapping, base: Mapping, seeds: Sequence[int]) -> list[str]:
    """Families whose held-out accuracy ends lower than the baseline's by more than
    `HELD_OUT_SE` standard errors of the per-seed difference."""
    families = sorted({f for s in seeds for f in cand.get(s, {})})
    out = []
    for f in families:
        diffs = [
            cand[s][f] - base[s][f] for s in seeds if f in cand.get(s, {}) and f in base.get(s, {})
        ]
        if len(diffs) < 2:
            continue
        mean = statistics.fmean(diffs)
        se = statistics.stdev(diffs) / math.sqrt(len(diffs))
        if mean < -HELD_OUT_SE * se:
            out.append(f"{f} {mean:+.3f} ({HELD_OUT_SE:g} SE = {HELD_OUT_SE * se:.3f})")
    return out


def judge(
    name: str,
    by_testbed: Mapping[str, tuple[Mapping, Mapping]],
) -> Judgement:
    """Candidate `name` (C1 or C2) under the rule; `by_testbed[testbed] = (cumulative,
    held_out)` as in `against`."""
    arm, base = CANDIDATES[name], EQUAL_COST[name]
    equal = tuple(against(t, arm, base, *by_testbed[t]) for t in TESTBEDS)
    vs_8_0 = tuple(against(t, arm, "8/0", *by_testbed[t]) for t in TESTBEDS)
    why = failures(equal, base)
    return Judgement(name, arm, equal, vs_8_0, not why, tuple(why))


def failures(equal: Sequence[TestbedResult], base: str) -> list[str]:
    """The rule's clauses a candidate misses against its equal-cost baseline `base`, one
    line each ([] when it passes); `equal`: its result on each testbed."""
    why = []
    for r in equal:
        if r.mean < MIN_MEAN:
            why.append(f"{r.testbed}: mean {r.mean:.3f} x {base} < {MIN_MEAN:.2f}")
        if r.ci_low < MIN_CI_LOW:
            why.append(f"{r.testbed}: CI low {r.ci_low:.3f} < {MIN_CI_LOW}")
        if r.held_out_losses:
            why.append(f"{r.testbed}: held-out lower on " + ", ".join(r.held_out_losses))
    if not any(r.mean >= MIN_GAIN and r.ci_low > 1.0 for r in equal):
        why.append(f"no testbed at >= {MIN_GAIN:.2f} x {base} with a CI above 1")
    return why


def decide(judgements: Sequence[Judgement]) -> str:
    """The candidate that becomes the default ("" when none passes): among those that pass,
    the higher mean ratio against 8/0 (ties: the first listed)."""
    passing = [j for j in judgements if j.passed]
    if not passing:
        return ""
    return max(passing, key=lambda j: j.mean_vs_8_0).name


def cost_rows(units: Sequence[Mapping]) -> dict[str, dict[str, float]]:
    """Per arm, averaged over its units: completions generated and trained on per node and
    round, seconds per round (the whole swarm, one process), reward per generated completion
    (cumulative own-rollout reward over completions generated)."""
    by_arm: dict[str, list[Mapping]] = {}
    for u in units:
        by_arm.setdefault(u["arm"], []).append(u)
    out = {}
    for arm, items in sorted(by_arm.items()):
        generated, trained, seconds, per_completion = [], [], [], []
        for u in items:
            node_rounds = u["rounds"] * u["nodes"]
            made = u["generated_questions"] * u["completions"] * node_rounds
            groups = sum(u["local_groups"]) + sum(u["shared_groups"])
            generated.append(made / node_rounds)
            trained.append(groups * u["completions"] / node_rounds)
            seconds.append(u["seconds"] / u["rounds"])
            # own reward: a node-round's mean over its I own questions' completions
            own_completions = parse_arm(u["arm"]).own * u["completions"]
            per_completion.append(u["cumulative_own_reward"] * own_completions / made)
        out[arm] = {
            "units": len(items),
            "generated_per_round": statistics.fmean(generated),
            "trained_per_round": statistics.fmean(trained),
            "seconds_per_round": statistics.fmean(seconds),
            "reward_per_generated": statistics.fmean(per_completion),
        }
    return out
