"""Scoring completions: extracting the answer, the dataset's own correctness, the format bonus.

Local and pure: the last `<answer>...</answer>` (under the lenient rule, else the whole
text) is asked of the dataset's scorer for correctness in [0, 1], plus an optional bonus for
a completion that ends with its tagged answer.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from enum import StrEnum

from swarm.tasks.build import Task, cached_dataset

ANSWER_OPEN = "<answer>"
ANSWER_CLOSE = "</answer>"


class AnswerRule(StrEnum):
    """Which text of a completion is scored as its answer."""

    LENIENT = "lenient"  # the last tagged answer, else the whole completion
    TAGGED = "tagged"  # only a tagged answer; a completion without one scores 0 (the paper's rule)


def last_tagged_answer(completion: str) -> tuple[int, int, int] | None:
    """(start, end, close_end) of the last `<answer>...</answer>` (the regex
    `<answer>(.*?)</answer>` matched left to right), or None; `completion[start:end]` is
    its text.

    Linear in the completion's length: the two search positions only move forward, so
    completions crafted with thousands of unclosed tags cost no more than plain text (a
    backtracking regex tried every opening tag against the rest of the text).
    """
    last = None
    pos = 0
    while True:
        opened = completion.find(ANSWER_OPEN, pos)
        if opened < 0:
            return last
        start = opened + len(ANSWER_OPEN)
        end = completion.find(ANSWER_CLOSE, start)
        if end < 0:
            return last
        pos = end + len(ANSWER_CLOSE)
        last = (start, end, pos)


def extract_answer(completion: str) -> tuple[str, bool]:
    """The answer a completion gives, and whether it used the `<answer>` tag.

    The last tagged answer wins (models often restate); without a tag the whole completion,
    stripped, is taken as the answer so untagged but correct output still scores.
    """
    found = last_tagged_answer(completion)
    if found:
        return completion[found[0] : found[1]].strip(), True
    return completion.strip(), False


def well_formatted(completion: str) -> bool:
    """Whether a completion ends with its tagged answer: only whitespace after the last `</answer>`.

    This is what earns the format bonus. Text after the answer is never scored, so without
    this rule nothing stops it from drifting during RL into each node's own filler
    (`<answer>7</answer>1</answer>10`); peers then trained on each other's filler, tokens
    they would never sample themselves, and sharing rollouts did more harm than good.
    """
    found = last_tagged_answer(completion)
    return found is not None and not completion[found[2] :].strip()


def score_completion(
    task: Task,
    completion: str,
    format_weight: float = 0.0,
    rule: AnswerRule = AnswerRule.LENIENT,
    partial_credit: bool = True,
) -> float:
    """Reward of one completion: dataset correctness in [0, 1], plus `format_weight` if well
    formatted.

    Under `AnswerRule.TAGGED` a completion without a tagged answer is not correct at all.
    Many reasoning-gym scorers give partial credit (an answer containing the right one, a
    word right in some places, a number close by); without `partial_credit` correctness is
    1 for a fully correct answer and 0 otherwise.
    """
    answer, tagged = extract_answer(completion)
    if rule == AnswerRule.TAGGED and not tagged:
        return 0.0  # no tag, so not well formatted either: no bonus
    dataset = cached_dataset(task.spec.dataset, task.spec.config_json, task.spec.seed)
    try:
        correctness = float(dataset.score_answer(answer, task.entry))
    except Exception:  # noqa: BLE001 - a scorer choking on odd model output scores zero
        correctness = 0.0
    if not math.isfinite(correctness):
        correctness = 0.0
    correctness = min(1.0, max(0.0, correctness))
    if not partial_credit:
        correctness = 1.0 if correctness >= 1.0 else 0.0
    return correctness + (format_weight if well_formatted(completion) else 0.0)


def is_correct(task: Task, completion: str, rule: AnswerRule = AnswerRule.LENIENT) -> bool:
    """Whether a completion is fully correct (used for accuracy, not for reward)."""
    return score_completion(task, completion, rule=rule) >= 1.0


@dataclass(frozen=True)
class Scoring:
    """How a node scores its completions: its `tasks.format_reward`, `answer_rule` and
    `partial_credit` settings in one value."""

    format_weight: float = 0.0
    rule: AnswerRule = AnswerRule.LENIENT
    partial_credit: bool = True

    def reward(self, task: Task, completion: str) -> float:
        return score_completion(
            task, completion, self.format_weight, self.rule, self.partial_credit
        )

    def correct(self, task: Task, completion: str) -> bool:
        return is_correct(task, completion, self.rule)

    def from_parts(self, correctness: float, tagged: bool, formatted: bool) -> float:
        """The reward from a completion's parts: lenient, partial correctness in [0, 1], whether
        it tagged an answer, whether it ends with it (what `score_completion` computes)."""
        if self.rule == AnswerRule.TAGGED and not tagged:
            return 0.0
        if not self.partial_credit:
            correctness = 1.0 if correctness >= 1.0 else 0.0
        return correctness + (self.format_weight if formatted else 0.0)


def claim_rules(format_weight: float) -> tuple[Scoring, ...]:
    """Every scoring a sender declaring `format_weight` may have used for its claimed rewards.

    The wire declares the format bonus but not the answer rule or partial credit, so a
    receiver accepts claims made under any of the four; it trains on its own rewards anyway.
    """
    return tuple(
        Scoring(format_weight, rule, partial) for rule in AnswerRule for partial in (True, False)
    )
