"""The config section about training on peers' groups (`[sharing]`): how many a batch
takes (J), whose, how fresh, how they are drawn, and how their completions enter the loss.

Every key here tunes training on shared groups, so none of them changes what a node trains
on while `shared_groups = 0` (the pool bounds still cap the memory of the groups that
arrive under the gossip exchange). `[training]` keeps what applies to every update,
`training.own_groups` (I) among them.
"""

from __future__ import annotations

from dataclasses import dataclass

from swarm.config.fields import opt


@dataclass(frozen=True)
class SharingSection:
    """Training on peers' groups (SAPO): does nothing while shared_groups = 0."""

    shared_groups: int = opt(
        0,
        "J: shared groups from peers per update (SAPO; 0: the node trains on its own groups "
        "only, and every other [sharing] key does nothing).",
        min=0,
    )
    shared_from: str = opt(
        "any",
        "Whose groups a node pulls and trains on: any (every peer's) or same-family (only peers "
        "whose model has this node's architecture and tokenizer, as their announcements say: "
        "another family's completions are far off this node's policy; needs p2p.exchange = "
        "pull). See docs/SAPO.md.",
        choices=("any", "same-family"),
    )
    per_peer_cap: int = opt(
        2, "At most this many of a batch's shared groups from any one peer (0: no cap).", min=0
    )
    max_version_lag: int = opt(
        1,
        "Neither pull nor train on shared groups of our own model more than this many policy "
        "versions behind ours (-1: no bound). Compare "
        "verify.max_version_rewind, which measures against the sender's own newest version.",
        min=-1,
    )
    max_held_s: float = opt(
        600.0,
        "Skip shared groups this node has held (since it received them) longer than this, in "
        "seconds (0: no bound). How long ago a group was created is verify.max_age_s.",
        min=0.0,
    )
    pool_size: int = opt(
        4096, "Shared groups kept waiting for training (oldest dropped first).", min=1
    )
    pool_mb: float = opt(
        64.0,
        "Text of the shared groups kept waiting for training, in MB (oldest dropped first).",
        min=0.01,
    )
    fresh_rounds: int = opt(
        0,
        "Train only on shared groups from each sender's newest this many rounds (1: its latest "
        "round, as the paper's swarm does; 0: any round the staleness bounds allow).",
        min=0,
    )
    shared_sampling: str = opt(
        "uniform",
        "How shared groups are drawn: uniform, or need (preferring task families this node "
        "has lately succeeded least on, see need_floor and need_window).",
        choices=("uniform", "need"),
    )
    need_floor: float = opt(
        0.05,
        "shared_sampling = need: weight of a family this node always solves, relative to 1 for "
        "one it never solves (weights are linear in the failure rate in between).",
        min=1e-6,
        max=1.0,
    )
    need_window: int = opt(
        10,
        "shared_sampling = need, shared_advantage = receiver or shared_weight_control = "
        "own-signal: rounds of this node's own groups its success (or signal) per family is "
        "measured over.",
        min=1,
    )
    shared_advantage: str = opt(
        "group",
        "Baseline of a shared completion's advantage: group (its own group's mean, plain GRPO), "
        "joint (the node also generates G completions for the shared task and one baseline "
        "covers both; costs generation) or receiver (the node's own recent mean reward on the "
        "task's family, over need_window rounds). See docs/SAPO.md.",
        choices=("group", "joint", "receiver"),
    )
    shared_shaping: float = opt(
        0.0,
        "Policy shaping of shared completions' tokens: loss -A*p/(p+gamma) with this gamma "
        "instead of the clipped ratio (LUFFY's regularised importance weight; 0: off).",
        min=0.0,
        max=1.0,
    )
    shared_weight: float = opt(
        1.0,
        "With shared_normalizer = parts: the shared part's weight in the loss relative to the "
        "own part's (own tokens keep their total weight whatever the shared part holds).",
        min=0.0,
    )
    shared_normalizer: str = opt(
        "batch",
        "batch: every token of the batch weighs the same (shared tokens can swamp own ones); "
        "parts: own and shared tokens are normalised apart, the shared part times shared_weight.",
        choices=("batch", "parts"),
    )
    shared_weight_control: str = opt(
        "fixed",
        "With shared_normalizer = parts, how a shared group's weight is set: fixed "
        "(shared_weight for every one) or own-signal (per task family, from this node's own "
        "groups alone: own_signal_weight on a family where one of its own groups carried "
        "learning signal within the last need_window rounds, i.e. one it is learning by "
        "itself; shared_weight elsewhere). See docs/SAPO.md, study 4.",
        choices=("fixed", "own-signal"),
    )
    own_signal_weight: float = opt(
        0.1,
        "shared_weight_control = own-signal: the weight, relative to the own part, of shared "
        "groups of a family this node is learning by itself (shared_weight on the others).",
        min=0.0,
    )
