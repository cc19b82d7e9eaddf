"""The SAPO experiment's design and statistics: arms, protocols, testbeds, the verdict rule.

Pure data and functions; `scripts/sapo_experiment.py` runs the swarms and writes results,
docs/studies/ explains the choices. An arm `I/J` is a swarm whose every node trains each
round on its I own groups and up to J groups shared by peers. As in the SAPO paper's public
code, a node configured I/J generates I questions a round: 4/4 generates half of what 8/0
does, and 4/0 (same generation as 4/4, no sharing) separates "more data" from "peers' data".

Two protocols:
- `paper`: the paper's training rules: zero-advantage filter on shared groups only (all own
  groups are trained on), shared groups from each sender's latest round, uniform sampling
  with no per-peer cap, torch Adam with its defaults, no gradient clipping, one optimizer
  step a round, reward = correctness of the tagged answer only (no format bonus).
- `ours`: this project's defaults: the filter on every group, AdamW (betas 0.9/0.99),
  gradient clipping at 1, at most 2 groups per peer, shared groups at most one version behind
  (same model) and held at most 10 minutes; the same reward, so the arms compare training rules only.

Testbeds: `skills` (the eight built-in skill models of `swarm.policy.skills`, which know
different task families, answer in two formats and come in two sizes: the heterogeneous
swarm SAPO's premise needs), `tiny` (eight copies of the built-in tiny model on one-digit
sums, the homogeneous control) and `sapo` (any model on the paper's nine datasets, for GPUs).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum

from swarm.core.errors import ConfigError


class Protocol(StrEnum):
    PAPER = "paper"
    OURS = "ours"


class Testbed(StrEnum):
    SKILLS = "skills"
    GAP = "gap"
    TINY = "tiny"
    SAPO = "sapo"


# The sharing channels an arm can add to plain GRPO (docs/studies/2-channels.md), as `[sharing]` settings.
# "shuf" is the negative control: shared groups' rewards shuffled within each group. It is no
# config key but the node's `RoundLoop.shuffle_shared_rewards` (`Arm.shuffles_rewards`).
CHANNELS: dict[str, dict] = {
    "joint": {"shared_advantage": "joint"},
    "recv": {"shared_advantage": "receiver"},
    "shape": {"shared_shaping": 0.1},
    "parts": {"shared_normalizer": "parts", "shared_weight": 0.5},
    # study 4: own tokens never diluted, peers' groups at a quarter of the own part's weight
    "parts25": {"shared_normalizer": "parts", "shared_weight": 0.25},
    # study 4: per family, peers' groups weigh 0.5 where the node's own groups carried no
    # signal lately and 0.1 where they did (a family it is learning by itself)
    "gate": {
        "shared_normalizer": "parts",
        "shared_weight": 0.5,
        "shared_weight_control": "own-signal",
        "own_signal_weight": 0.1,
    },
    "shuf": {},
    # not a channel but a peer filter: pull only from peers of this node's model family
    "fam": {"shared_from": "same-family"},
}


@dataclass(frozen=True)
class Arm:
    """One swarm configuration: I own groups and J shared groups per update, the sampler,
    and the sharing channels added to plain GRPO ("4/4-joint+shape")."""

    own: int
    shared: int
    sampler: str = "uniform"  # or "need" (sharing.shared_sampling)
    channels: tuple[str, ...] = ()  # keys of CHANNELS

    @property
    def name(self) -> str:
        parts = ([] if self.sampler == "uniform" else [self.sampler]) + list(self.channels)
        return f"{self.own}/{self.shared}" + (f"-{'+'.join(parts)}" if parts else "")

    @property
    def generated_questions(self) -> int:
        """Questions a node generates completions for a round: its own I, plus the J shared
        tasks under the joint baseline (so 8/0 is a joint 4/4's equal-cost rival)."""
        return self.own + (self.shared if "joint" in self.channels else 0)

    def sharing(self) -> dict:
        """The `[sharing]` settings of this arm's channels."""
        out: dict = {}
        for channel in self.channels:
            out.update(CHANNELS[channel])
        return out

    @property
    def shuffles_rewards(self) -> bool:
        """The negative control: its nodes shuffle shared groups' rewards before training
        (set on each node's `RoundLoop.shuffle_shared_rewards`; no config key)."""
        return "shuf" in self.channels

    @property
    def slug(self) -> str:
        """The arm's name as a file name part ("4/4-need" -> "4-4-need")."""
        return self.name.replace("/", "-")

    @property
    def questions(self) -> int:
        """Questions a node generates a round: I (the paper's code: one per own group)."""
        return self.own


ARMS: dict[str, Arm] = {
    a.name: a for a in (Arm(8, 0), Arm(4, 0), Arm(4, 4), Arm(6, 2), Arm(2, 6), Arm(4, 4, "need"))
}
LEARNING_RATES = (3e-5, 1e-4, 3e-4)
TUNING_SEED = 100  # never a verdict seed
VERDICT_SEEDS = tuple(range(6))


@dataclass(frozen=True)
class Study:
    """One pre-registered experiment: its arms, learning rates, length and comparisons."""

    name: str
    arms: tuple[str, ...]
    learning_rates: tuple[float, ...]
    rounds: int
    comparisons: tuple[tuple[str, str], ...]  # (candidate, baseline)
    folder_prefix: str = ""  # results/sapo/<prefix><protocol>-<testbed>
    controls: tuple[tuple[str, str], ...] = ()  # (control, baseline): no gain expected
    seeds: tuple[int, ...] = VERDICT_SEEDS  # the verdict's seeds
    # tuning beyond the grid (`lab.tuning`): "" none, "below" one step below when the
    # smallest rate wins (study 3), "both" until the best rate is bracketed (study 4)
    bracket: str = ""

    def folder(self, protocol: str, testbed: str) -> str:
        return f"{self.folder_prefix}{protocol}-{testbed}"


CHANNEL_ARMS = ("4/4", "4/4-joint", "4/4-recv", "4/4-shape", "4/4-parts")
CHANNELS_ONLY = CHANNEL_ARMS[1:]  # the arms among which the best channel is chosen
NEGATIVE_CONTROL = "4/4-shuf"  # run at plain 4/4's rate over the verdict seeds
STUDIES: dict[str, Study] = {
    # The first verdict (skills testbed): does plain SAPO pay? (docs/studies/1-sharing.md)
    "sharing": Study(
        "sharing",
        tuple(ARMS),
        LEARNING_RATES,
        150,
        (("4/4", "8/0"), ("4/4", "4/0"), ("4/4-need", "4/4"), ("6/2", "8/0"), ("2/6", "8/0")),
    ),
    # The second (gap testbed, then the best channel on skills): can a receiver-relative
    # channel make sharing pay? Every 4/4 arm is judged against both 8/0 and 4/0.
    "channels": Study(
        "channels",
        ("8/0", "4/0", *CHANNEL_ARMS),
        (1e-4, 3e-4, 1e-3),
        300,
        tuple((arm, base) for arm in CHANNEL_ARMS for base in ("8/0", "4/0")),
        folder_prefix="channels-",
        controls=((NEGATIVE_CONTROL, "4/0"), (NEGATIVE_CONTROL, "4/4")),
    ),
    # The third (both testbeds): which default should a joining node have? Two candidates
    # that pull only from their own model family, against the baselines that generate as
    # much; fresh seeds; the rule is `lab.default_study` (docs/studies/3-default.md).
    "default": Study(
        "default",
        ("8/0", "4/0", "4/4-fam", "4/4-joint+fam"),
        (3e-5, 1e-4),
        300,
        (),  # judged by its own rule across both testbeds (`lab.default_study`)
        folder_prefix="default-",
        seeds=tuple(range(6, 12)),
        bracket="below",
    ),
    # The fourth (both testbeds): sharing that never costs a node its own learning. Two
    # candidates that keep own tokens undiluted, against 4/0 (which generates as much); the
    # rule is study 3's (`lab.protect_study`).
    "protect": Study(
        "protect",
        ("4/0", "4/4-parts25+fam", "4/4-gate+fam"),
        (3e-5, 1e-4, 3e-4),
        300,
        (),  # judged by study 3's rule across both testbeds (`lab.protect_study`)
        folder_prefix="protect-",
        seeds=tuple(range(12, 18)),
        bracket="both",
    ),
}
# Pre-registered acceptance of the first two studies (docs/studies/), for a candidate arm
# against a baseline; the default study has its own rule (`lab.default_study`).
MIN_MEAN_RATIO = 1.15
T_975 = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306, 9: 2.262}


def parse_arm(text: str) -> Arm:
    """An arm from its name ("4/4", "4/4-need", "4/4-joint+shape"); one-line errors otherwise."""
    try:
        counts, _, rest = text.strip().partition("-")
        own, shared = (int(x) for x in counts.split("/"))
    except ValueError:
        raise ConfigError(
            f"bad arm {text!r}: write I/J[-option+option], e.g. 4/4 or 4/4-recv"
        ) from None
    options = [o for o in rest.split("+") if o] if rest else []
    unknown = [o for o in options if o not in CHANNELS and o not in ("need", "uniform")]
    if own < 1 or shared < 0 or unknown:
        raise ConfigError(
            f"bad arm {text!r}: I >= 1, J >= 0, options from need, {', '.join(CHANNELS)}"
        )
    sampler = "need" if "need" in options else "uniform"
    channels = tuple(o for o in options if o in CHANNELS)
    if (sampler == "need" or channels) and shared == 0:
        raise ConfigError(f"bad arm {text!r}: its options need shared groups (J > 0)")
    if "joint" in channels and "recv" in channels:
        raise ConfigError(f"bad arm {text!r}: joint and recv are two baselines: pick one")
    return Arm(own, shared, sampler, channels)


def protocol_training(protocol: Protocol) -> dict:
    """The `[training]` settings that differ between the protocols."""
    paper = protocol == Protocol.PAPER
    return {
        "optimizer": "adam" if paper else "adamw",
        "max_grad_norm": 0.0 if paper else 1.0,
        "signal_filter": "shared" if paper else "all",
        "minibatch_size": 0,
        "epochs": 1,
        "kl_coef": 0.0,
        "clip_low": 0.2,
        "clip_high": 0.28,
    }


def protocol_sharing(protocol: Protocol) -> dict:
    """The `[sharing]` settings that differ between the protocols."""
    if protocol == Protocol.PAPER:
        return {"fresh_rounds": 1, "per_peer_cap": 0, "max_version_lag": -1, "max_held_s": 0.0}
    return {"fresh_rounds": 0, "per_peer_cap": 2, "max_version_lag": 1, "max_held_s": 600.0}


# Reward in every arm and protocol: correctness of the tagged answer, 1 or 0, no format bonus.
STRICT_REWARD = {"format_reward": 0.0, "answer_rule": "tagged", "partial_credit": False}


@dataclass(frozen=True)
class RunShape:
    """What every node of a unit does besides its arm: sizes of a round and of evaluation."""

    completions: int = 8
    max_new_tokens: int = 32
    eval_size: int = 100
    rounds: int = 150


def node_config(
    arm: Arm,
    protocol: Protocol,
    testbed_tasks: dict,
    model: str,
    *,
    index: int,
    seed: int,
    lr: float,
    run_dir: str,
    shape: RunShape,
    policy: Mapping | None = None,
    extra: Mapping | None = None,
) -> dict:
    """The config table of node `index` of a unit (arm, seed, lr): for `swarm.config.build_config`."""
    training = {
        **protocol_training(protocol),
        "lr": lr,
        "own_groups": arm.own,
        "micro_batch_size": 256,
    }
    sharing = {
        **protocol_sharing(protocol),
        "shared_groups": arm.shared,
        "shared_sampling": arm.sampler,
        **arm.sharing(),
    }
    table = {
        "node": {
            "name": f"node-{index}",
            "seed": seed * 1000 + index,
            "run_dir": run_dir,
            "checkpoint_every": 1_000_000,
        },
        "policy": {"model": model, "device": "cpu", "dtype": "float32", **(policy or {})},
        "generation": {
            "questions_per_round": arm.questions,
            "completions_per_question": shape.completions,
            "max_new_tokens": shape.max_new_tokens,
        },
        "training": training,
        "sharing": sharing,
        "tasks": {
            **testbed_tasks,
            **STRICT_REWARD,
            "eval_size": shape.eval_size,
            "eval_every": 1_000_000,
        },
    }
    for section, values in (extra or {}).items():
        table.setdefault(section, {}).update(values)
    return table


# -- statistics ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Comparison:
    """A candidate arm against a baseline over paired seeds (same seeds, same models)."""

    candidate: str
    baseline: str
    seeds: tuple[int, ...]
    ratios: tuple[float, ...]  # candidate / baseline cumulative own-rollout reward, per seed
    wins: int
    mean_ratio: float
    ci_low: float
    ci_high: float
    family_deltas: dict[str, float] = field(
        default_factory=dict
    )  # held-out accuracy, mean over seeds
    passed: bool = False
    why: tuple[str, ...] = ()


def paired_ci(values: Sequence[float]) -> tuple[float, float, float]:
    """(mean, low, high): a two-sided 95 % t-interval of the mean of paired per-seed values."""
    n = len(values)
    mean = statistics.fmean(values)
    if n < 2:
        return mean, -math.inf, math.inf
    half = T_975.get(n - 1, 1.96) * statistics.stdev(values) / math.sqrt(n)
    return mean, mean - half, mean + half


def compare(
    candidate: str,
    baseline: str,
    cumulative: Mapping[str, Mapping[int, float]],
    held_out: Mapping[str, Mapping[int, Mapping[str, float]]],
    *,
    min_wins: int | None = None,
) -> Comparison:
    """Apply the pre-registered rule to `candidate` vs `baseline`.

    `cumulative[arm][seed]`: the swarm's cumulative own-rollout reward; `held_out[arm][seed]`:
    the swarm's end-of-run held-out accuracy per family. Passing needs: wins in at least
    `min_wins` seeds (default: all but one), mean ratio >= 1.15, a 95 % CI of the ratio that
    excludes 1, and held-out accuracy (mean over seeds) not lower on any family.
    """
    seeds = tuple(sorted(set(cumulative.get(candidate, {})) & set(cumulative.get(baseline, {}))))
    if not seeds:
        raise ConfigError(f"no seed has both {candidate} and {baseline}")
    ratios = tuple(cumulative[candidate][s] / cumulative[baseline][s] for s in seeds)
    wins = sum(r > 1.0 for r in ratios)
    mean, low, high = paired_ci(ratios)
    deltas = _family_deltas(held_out.get(candidate, {}), held_out.get(baseline, {}), seeds)
    need = len(seeds) - 1 if min_wins is None else min_wins
    why = []
    if wins < need:
        why.append(f"wins {wins} of {len(seeds)} seeds (needs {need})")
    if mean < MIN_MEAN_RATIO:
        why.append(f"mean ratio {mean:.3f} < {MIN_MEAN_RATIO}")
    if low <= 1.0 <= high:
        why.append(f"95 % CI [{low:.3f}, {high:.3f}] includes 1")
    worse = [f"{f} {d:+.3f}" for f, d in deltas.items() if d < 0]
    if worse:
        why.append("held-out lower on " + ", ".join(worse))
    return Comparison(
        candidate, baseline, seeds, ratios, wins, mean, low, high, deltas, not why, tuple(why)
    )


def _family_deltas(cand: Mapping, base: Mapping, seeds: Sequence[int]) -> dict[str, float]:
    """Held-out accuracy per family, candidate minus baseline, averaged over `seeds`."""
    families = sorted(
        {f for s in seeds for f in cand.get(s, {})} | {f for s in seeds for f in base.get(s, {})}
    )
    deltas = {}
    for f in families:
        pairs = [
            (cand[s][f], base[s][f]) for s in seeds if f in cand.get(s, {}) and f in base.get(s, {})
        ]
        if pairs:
            deltas[f] = statistics.fmean(c - b for c, b in pairs)
    return deltas


def best_channel(
    cumulative: Mapping[str, Mapping[int, float]],
    arms: Sequence[str] = CHANNELS_ONLY,
    seeds: Sequence[int] = VERDICT_SEEDS,
) -> str:
    """The pre-registered best channel: the arm of `arms` with the highest mean cumulative own
    reward over `seeds`, pass or fail (ties: the first listed). Every arm needs every seed."""
    missing = [f"{a} seed {s}" for a in arms for s in seeds if s not in cumulative.get(a, {})]
    if missing:
        raise ConfigError(
            f"the channel verdict is not finished ({len(missing)} units missing, e.g. {missing[0]})"
        )
    return max(arms, key=lambda a: statistics.fmean(cumulative[a][s] for s in seeds))
