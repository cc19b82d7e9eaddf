"""Study 4: sharing that never costs a node its own learning. Its rule, pure.

Pre-registered in docs/studies/4-protect.md before any of its verdict units ran. Two
candidates, each a 4/4 arm that pulls only from its own model family (`shared_from =
"same-family"`) and normalises own and shared tokens apart (`shared_normalizer = "parts"`),
so a node's own tokens weigh what they weigh when it trains alone:

- P = `4/4-parts25+fam`: every shared group at a quarter of the own part's weight.
- G = `4/4-gate+fam`: a per-node control, each node on its own evidence: peers' groups of a
  task family weigh 0.1 where one of the node's own groups on that family carried learning
  signal within the last `need_window` rounds (a family it is learning by itself), 0.5
  elsewhere (`swarm.batch_choice.learning_families`, `own_signal_weights`).

Both generate what 4/0 generates, so 4/0 is each one's equal-generation baseline. The rule is
study 3's (`lab.default_study.failures`): on each testbed a mean per-seed ratio of
cumulative own-rollout reward of at least 1.00 with the paired 95 % CI's lower end at least
0.98; on at least one testbed at least 1.10 with a CI that excludes 1; on no testbed a family's
held-out accuracy below the baseline's by more than twice the standard error of the per-seed
difference. If both pass, the one with the higher mean ratio against 4/0 (averaged over the two
testbeds) becomes the default; if neither does, the default stays `sharing.shared_groups = 0`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from lab.default_study import (
    TESTBEDS,
    Judgement,
    against,
    cost_rows,
    failures,
)

CANDIDATES: dict[str, str] = {"P": "4/4-parts25+fam", "G": "4/4-gate+fam"}
BASELINE = "4/0"  # generates as many completions as either candidate
DECISION_FILE = "protect-decision.json"

__all__ = ["BASELINE", "CANDIDATES", "DECISION_FILE", "TESTBEDS", "cost_rows", "decide", "judge"]


def judge(name: str, by_testbed: Mapping[str, tuple[Mapping, Mapping]]) -> Judgement:
    """Candidate `name` (P or G) under the rule; `by_testbed[testbed] = (cumulative,
    held_out)` as in `default_study.against`. No 8/0 runs in this study (`against_8_0` is
    empty)."""
    arm = CANDIDATES[name]
    equal = tuple(against(t, arm, BASELINE, *by_testbed[t]) for t in TESTBEDS)
    why = failures(equal, BASELINE)
    return Judgement(name, arm, equal, (), not why, tuple(why))


def decide(judgements: Sequence[Judgement]) -> str:
    """The candidate that becomes the default ("" when none passes): among those that pass,
    the higher mean ratio against 4/0 over the two testbeds (ties: the first listed)."""
    passing = [j for j in judgements if j.passed]
    if not passing:
        return ""
    return max(passing, key=lambda j: j.mean_vs_equal_cost).name
