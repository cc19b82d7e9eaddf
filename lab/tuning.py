"""Choosing a SAPO study's learning rates on the tuning seed: the best rate, and the steps
that bracket it. Pure functions over tuning units (dicts with arm, lr, cumulative_own_reward).

Rates sit on the half-decade ladder 1e-5, 3e-5, 1e-4, 3e-4, ... (`rate_step`). Study 3 stepped
down once when its grid's smallest rate won (`rates_below`); study 4 steps beyond whichever
end of the rates run so far wins, until the best has a worse rate run on each side
(`bracketing_rates`). docs/studies/4-protect.md pre-registers both.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

from swarm.core.errors import ConfigError

MAX_STEPS = 3  # at most this many steps beyond a study's grid, on either side


def best_lr(scores: Mapping[float, float]) -> float:
    """The learning rate with the highest cumulative reward (ties: the smaller rate)."""
    if not scores:
        raise ConfigError("no tuning result to choose a learning rate from")
    return max(sorted(scores), key=lambda lr: scores[lr])


def rate_step(lr: float, up: bool) -> float:
    """The next rate on the half-decade ladder (1, 3 x a power of ten) above or below `lr`."""
    if not lr > 0:
        raise ConfigError(f"a learning rate must be positive, got {lr!r}")
    exponent = math.floor(math.log10(lr) + 1e-9)
    three = lr / 10**exponent > 2.0  # on the ladder's 3 rung
    if up:
        value = 10 ** (exponent + 1) if three else 3 * 10**exponent
    else:
        value = 10**exponent if three else 3 * 10 ** (exponent - 1)
    return float(f"{value:.0e}")


def rates_below(
    tuned: Sequence[Mapping], arms: Sequence[str], grid: Sequence[float]
) -> dict[str, float]:
    """Arms whose best tuning result is the grid's smallest rate, with the rate one step
    below it (a third, at one significant figure: 3e-5 -> 1e-5), once every grid rate of the
    arm has run (study 3's rule)."""
    lowest = min(grid)
    below = float(f"{lowest / 3:.0e}")
    out = {}
    for arm in arms:
        scores = {u["lr"]: u["cumulative_own_reward"] for u in tuned if u["arm"] == arm}
        if all(lr in scores for lr in grid) and best_lr(scores) == lowest:
            out[arm] = below
    return out


def bracketing_rates(
    tuned: Sequence[Mapping], arms: Sequence[str], grid: Sequence[float]
) -> dict[str, list[float]]:
    """Per arm, the rates beyond `grid` its tuning needs (study 4's rule): once every rate
    planned so far has run, if the best is the smallest (largest) of them, one ladder step
    below (above) it is planned too; repeated until the best has a worse neighbour on both
    sides, at most `MAX_STEPS` steps on a side. An arm with a planned rate not yet run gets
    it listed (so a plan is stable while its units run); arms with nothing beyond are left
    out."""
    out: dict[str, list[float]] = {}
    for arm in arms:
        scores = {u["lr"]: u["cumulative_own_reward"] for u in tuned if u["arm"] == arm}
        planned = sorted(set(grid))
        extra: list[float] = []
        while all(lr in scores for lr in planned):
            best = best_lr({lr: scores[lr] for lr in planned})
            low, high = planned[0], planned[-1]
            if best == low and sum(lr < min(grid) for lr in planned) < MAX_STEPS:
                step = rate_step(low, up=False)
            elif best == high and sum(lr > max(grid) for lr in planned) < MAX_STEPS:
                step = rate_step(high, up=True)
            else:
                break
            extra.append(step)
            planned = sorted({*planned, step})
        if extra:
            out[arm] = extra
    return out


def unbracketed(tuned: Sequence[Mapping], arms: Sequence[str], grid: Sequence[float]) -> list[str]:
    """'arm lr' for each rate `bracketing_rates` plans that has not run: a verdict waits for
    them (empty when every arm's tuning is bracketed or at its step limit)."""
    ran = {(u["arm"], u["lr"]) for u in tuned}
    return [
        f"{arm} {lr:g}"
        for arm, rates in bracketing_rates(tuned, arms, grid).items()
        for lr in rates
        if (arm, lr) not in ran
    ]
