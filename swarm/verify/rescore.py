"""Re-scoring: a peer's group rebuilt and scored by this node's own verifier, never on its word.

A shared group's task is rebuilt from its spec with reasoning-gym (the question text must
be the one the spec rebuilds) and every completion is scored locally: correctness from the
dataset's scorer, and whether it ends with its tagged answer (which earns a format bonus).
The verifier compares the sender's claimed rewards with these under the sender's declared
bonus (and any answer rule, which the wire does not declare); training uses them under this
node's own scoring.

Deliberately not here: what to do with a mismatch (`swarm.verify.gate`, `swarm.ops.replay`) or
the experience pool that keeps re-scored groups (`swarm.experience`).
"""

from __future__ import annotations

from dataclasses import dataclass

from swarm.core.errors import RejectedMessage, TaskError
from swarm.core.reasons import Reason
from swarm.tasks import (
    AnswerRule,
    Scoring,
    Task,
    build_task,
    extract_answer,
    score_completion,
    well_formatted,
)
from swarm.wire import RolloutGroup


@dataclass(frozen=True)
class Rescored:
    """A peer's group as this node's verifier sees it: the rebuilt task, per-completion scores."""

    task: Task
    correctness: tuple[float, ...]  # dataset score in [0, 1] (lenient answer, partial credit)
    tagged: tuple[bool, ...]  # whether the completion tagged an answer
    well_formatted: tuple[bool, ...]  # whether it ends with its tagged answer (earns the bonus)

    def rewards(
        self,
        format_weight: float,
        rule: AnswerRule = AnswerRule.LENIENT,
        partial_credit: bool = True,
    ) -> tuple[float, ...]:
        """The rewards under a scoring (ours for training, the sender's for its claims)."""
        return self.scored(Scoring(format_weight, rule, partial_credit))

    def scored(self, scoring: Scoring) -> tuple[float, ...]:
        return tuple(
            scoring.from_parts(c, t, f)
            for c, t, f in zip(self.correctness, self.tagged, self.well_formatted, strict=True)
        )


def rescore_group(group: RolloutGroup) -> Rescored:
    """Rebuild the group's task and score its completions locally; reject what does not rebuild.

    A spec naming an unknown dataset or a config the dataset refuses is a rejection
    (`bad_task`), as is a question text other than the one the spec rebuilds.
    """
    try:
        task = build_task(group.task)
    except TaskError as e:
        raise RejectedMessage(Reason.BAD_TASK, str(e)[:300]) from None
    if task.question != group.question:
        raise RejectedMessage(
            Reason.QUESTION_MISMATCH, "the question text is not the one the task spec rebuilds"
        )
    correctness = tuple(score_completion(task, c, 0.0) for c in group.completions)
    tagged = tuple(extract_answer(c)[1] for c in group.completions)
    formatted = tuple(well_formatted(c) for c in group.completions)
    return Rescored(task, correctness, tagged, formatted)


def rescore(group: RolloutGroup, format_weight: float) -> tuple[Task, tuple[float, ...]]:
    """The rebuilt task and the rewards this node's verifier gives the group's completions."""
    result = rescore_group(group)
    return result.task, result.rewards(format_weight)
