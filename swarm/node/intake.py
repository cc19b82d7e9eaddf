"""Intake: the expensive checks on peers' groups, outside any ledger transaction.

The gossip validator and `Verifier.recheck` have already run the cheap checks. Here each
group that passed them gets the costly ones: copycat, the peer's verification share, the
task rebuilt from its spec, the question, every claimed reward recomputed
(`Verifier.verify_content`), and, on a node with a model, the token spot check on groups of
its exact model and version (`SpotCheck`: a forward pass each, a budget a round). A group
already in the ledger, or seen earlier in the same batch, is a duplicate and is not checked.

`Intake.verify` touches no database: the caller reads the known content hashes first (a
short read), and stores the plain `IntakeOutcome` afterwards in one short write
(`swarm.node.sharing`), so the ledger's write lock is never held while groups are re-scored
and another process (`swarm-node ban`) never waits on it.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from swarm.config import Config
from swarm.core.errors import RejectedMessage
from swarm.core.reasons import Reason
from swarm.node.state import NodeState
from swarm.policy.model import Policy
from swarm.policy.prompts import PromptFormat, build_prompt
from swarm.policy.source import same_weights
from swarm.tasks import Task
from swarm.verify.gate import Verifier, blamed_peer
from swarm.verify.message import Accepted, Rejection
from swarm.verify.spotcheck import SpotChecker
from swarm.wire import RolloutGroup


@dataclass(frozen=True)
class Verified:
    """A received group that passed every check, with this node's own view of it."""

    item: Accepted
    task: Task  # rebuilt from the group's spec
    rewards: tuple[float, ...]  # recomputed under this node's scoring
    ours: bool  # of this node's model and base weights (same tokenizer: tokens reusable)


@dataclass
class IntakeOutcome:
    """What one batch came to: accepted groups, rejections, duplicates (each in arrival order)."""

    accepted: list[Verified] = field(default_factory=list)
    rejected: list[Rejection] = field(default_factory=list)  # failed an expensive check
    duplicates: list[Rejection] = field(default_factory=list)  # in the ledger or the batch


class SpotCheck:
    """The token spot check of a node with a model: a sample of a group's tokens re-scored by
    its own model, on groups of its exact model and version, at most `per_round` groups a
    round (each costs a forward pass)."""

    def __init__(
        self,
        checker: SpotChecker,
        policy: Policy,
        state: NodeState,
        prompt_format: PromptFormat,
        per_round: int,
    ):
        self.checker = checker
        self.policy = policy
        self.state = state
        self.prompt_format = prompt_format
        self.per_round = per_round
        self._left = per_round

    @classmethod
    def from_config(
        cls, config: Config, checker: SpotChecker, policy: Policy, state: NodeState
    ) -> SpotCheck:
        return cls(
            checker,
            policy,
            state,
            config.policy.prompt_format(),
            config.verify.spot_check_groups_per_round,
        )

    def new_round(self) -> None:
        """A new round: its budget of spot checks."""
        self._left = self.per_round

    @property
    def done(self) -> int:
        """Spot checks made this round."""
        return self.per_round - self._left

    def ours(self, group: RolloutGroup) -> bool:
        """Whether `group` claims this node's model and base weights."""
        policy = self.policy
        return same_weights(group.model, group.base_hash, policy.model_id, policy.base_hash)

    def check(self, item: Accepted) -> None:
        """Re-score a sample of the group's tokens if it claims our exact model and version and
        the round's budget allows; raises `RejectedMessage(implausible_tokens)` on a failure."""
        group = item.group
        if self._left <= 0 or not self.ours(group):
            return
        if group.policy_version != self.state.policy_version:
            return
        self._left -= 1
        prompt = build_prompt(self.policy.tokenizer, group.question, self.prompt_format)
        self.checker.check(group, item.signed.content_hash, prompt)


class Intake:
    """Runs the expensive checks on a batch of received groups (see the module docstring).

    `spot_check` is None on a node without a model (an observer): it checks no tokens and
    pools no group as its own model's."""

    def __init__(self, config: Config, verifier: Verifier, spot_check: SpotCheck | None = None):
        self.verifier = verifier
        self.spot_check = spot_check
        self.format_reward = config.tasks.format_reward
        self.scoring = config.tasks.scoring()

    def new_round(self) -> None:
        """A new round (the spot check's budget renews)."""
        if self.spot_check is not None:
            self.spot_check.new_round()

    @property
    def spot_checks(self) -> int:
        """Token spot checks made this round."""
        return self.spot_check.done if self.spot_check is not None else 0

    def verify(self, items: Iterable[Accepted], known: frozenset[str]) -> IntakeOutcome:
        """Check each group of the batch; `known` holds the content hashes already in the
        ledger (sent or accepted). Touches no database."""
        outcome, seen = IntakeOutcome(), set()
        for item in items:
            digest = item.signed.content_hash
            if digest in seen or digest in known:
                outcome.duplicates.append(item.rejected(Reason.DUPLICATE, "already received"))
                continue
            seen.add(digest)
            try:
                outcome.accepted.append(self._verified(item))
            except RejectedMessage as e:
                outcome.rejected.append(item.rejected(e.reason, e.detail))
        return outcome

    def _verified(self, item: Accepted) -> Verified:
        """The expensive checks on one group; raises `RejectedMessage` on a failure."""
        group = item.group
        task, rewards = self.verifier.verify_content(
            group,
            self.format_reward,
            self.scoring,
            peer=blamed_peer(item.source, group.sender),
        )
        spot = self.spot_check
        if spot is not None:
            spot.check(item)
        return Verified(item, task, rewards, ours=spot is not None and spot.ours(group))
