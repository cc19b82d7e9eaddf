"""Verifiable tasks: specs, rebuilding a task from its spec, task mixes, and verifiers.

A task instance is fully described by a `TaskSpec` `(dataset, config, seed, index)`. Any peer
rebuilds the question *and its ground truth* from the spec with reasoning-gym, so a rollout
never has to be trusted for what the question or the right answer was.

Scoring is local and pure: `score_completion` extracts the answer from a completion (the last
`<answer>...</answer>`; under the lenient rule, else the whole text) and asks the dataset's
own scorer for correctness in [0, 1], plus an optional format bonus for using the tag.

Deliberately not here: prompting (see `swarm.policy.prompts`) and anything about models.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import math
import random
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

import msgspec

from swarm.core.errors import TaskError
from swarm.tasks.cache import dataset_cache

# reasoning-gym datasets do not depend on `size` for item i, so one object per
# (dataset, config, seed) with a huge size can serve every index.
_DATASET_SIZE = 1 << 30
MAX_SPEC_INDEX = _DATASET_SIZE - 1

ANSWER_OPEN = "<answer>"
ANSWER_CLOSE = "</answer>"


class AnswerRule(StrEnum):
    """Which text of a completion is scored as its answer."""

    LENIENT = "lenient"  # the last tagged answer, else the whole completion
    TAGGED = "tagged"  # only a tagged answer; a completion without one scores 0 (the paper's rule)


class TaskSpec(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """Everything needed to rebuild one task: a reasoning-gym dataset, its config, seed and index.

    `config` is kept as a canonical JSON string so specs are hashable and compare equal
    whatever the key order they were built with. A spec travels in every rollout group:
    the fields are in wire order (`swarm.wire` checks their bounds).
    """

    config_json: str = msgspec.field(name="config")
    dataset: str
    index: int
    seed: int

    @classmethod
    def make(
        cls, dataset: str, config: Mapping[str, Any] | None, seed: int, index: int
    ) -> TaskSpec:
        config_json = canonical_config(config or {})
        return cls(dataset=dataset, config_json=config_json, seed=int(seed), index=int(index))

    @property
    def config(self) -> dict[str, Any]:
        return json.loads(self.config_json)

    def as_dict(self) -> dict[str, Any]:
        return {
            "dataset": self.dataset,
            "config": self.config,
            "seed": self.seed,
            "index": self.index,
        }


@dataclass(frozen=True)
class Task:
    """A rebuilt task: the question shown to the model and what the verifier needs."""

    spec: TaskSpec
    question: str
    answer: str | None  # reference answer (some datasets score without one)
    entry: dict = field(repr=False, compare=False)  # the raw reasoning-gym entry, for scoring


@dataclass(frozen=True)
class MixEntry:
    """One dataset in a task mix: its reasoning-gym name, sampling weight and config."""

    dataset: str
    weight: float = 1.0
    config: Mapping[str, Any] = field(default_factory=dict)


def canonical_config(config: Mapping[str, Any]) -> str:
    """Deterministic JSON for a dataset config (sorted keys, lists for tuples, no spaces)."""
    try:
        return json.dumps(config, sort_keys=True, separators=(",", ":"), allow_nan=False)
    except (TypeError, ValueError) as e:
        raise TaskError(f"dataset config is not plain JSON data: {e}") from None


@dataset_cache  # bounded in bytes (verify.task_cache_mb); scorers guarded
def _dataset(name: str, config_json: str, seed: int):
    """Build (and cache) a reasoning-gym dataset; translate its errors into `TaskError`."""
    from swarm.tasks.datasets import create_dataset  # only this dataset's module of reasoning-gym

    config = json.loads(config_json)
    if not isinstance(config, dict):
        raise TaskError(f"config of dataset {name!r} must be a table, got {type(config).__name__}")
    # Some datasets print progress dots while building; keep the node's output clean.
    with contextlib.redirect_stdout(io.StringIO()):
        try:
            return create_dataset(name, seed=seed, size=_DATASET_SIZE, **config)
        except Exception as e:  # noqa: BLE001 - any failure to build is a bad spec, from a peer or a config
            raise TaskError(
                f"cannot build dataset {name!r} with config {config_json}: {e}"
            ) from None


def build_task(spec: TaskSpec) -> Task:
    """Rebuild the question and ground truth of `spec`. Raises `TaskError` for a bad spec."""
    if not 0 <= spec.index <= MAX_SPEC_INDEX:
        raise TaskError(f"task index {spec.index} is out of range")
    dataset = _dataset(spec.dataset, spec.config_json, spec.seed)
    with contextlib.redirect_stdout(io.StringIO()):
        try:
            entry = dataset[spec.index]
        except Exception as e:  # noqa: BLE001 - a dataset failing on an index is a bad spec
            raise TaskError(f"cannot build item {spec.index} of {spec.dataset!r}: {e}") from None
    answer = entry.get("answer")
    return Task(
        spec=spec,
        question=str(entry["question"]),
        answer=None if answer is None else str(answer),
        entry=entry,
    )


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
    dataset = _dataset(task.spec.dataset, task.spec.config_json, task.spec.seed)
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


# ---------------------------------------------------------------------------------------------
# Task mixes


# An easy mix the built-in tiny model can learn on a CPU in minutes.
EASY_MIX: tuple[MixEntry, ...] = (
    MixEntry("chain_sum", 1.0, {"min_terms": 2, "max_terms": 2, "min_digits": 1, "max_digits": 1}),
)

# The nine datasets of the SAPO paper, at reasoning-gym's default difficulty, for real models.
SAPO_DATASETS = (
    "arc_1d",
    "basic_arithmetic",
    "base_conversion",
    "bf",
    "binary_matrix",
    "calendar_arithmetic",
    "decimal_arithmetic",
    "fraction_simplification",
    "propositional_logic",
)
SAPO_MIX: tuple[MixEntry, ...] = tuple(MixEntry(name) for name in SAPO_DATASETS)

PRESET_MIXES: dict[str, tuple[MixEntry, ...]] = {"easy": EASY_MIX, "sapo": SAPO_MIX}


def validate_mix(mix: Iterable[MixEntry]) -> tuple[MixEntry, ...]:
    """Check a mix is usable: known datasets, positive weights, configs that build."""
    mix = tuple(mix)
    if not mix:
        raise TaskError("the task mix is empty")
    for entry in mix:
        if not (entry.weight > 0 and math.isfinite(entry.weight)):
            raise TaskError(
                f"weight of dataset {entry.dataset!r} must be positive, got {entry.weight}"
            )
        build_task(TaskSpec.make(entry.dataset, entry.config, seed=0, index=0))
    return mix


def sample_specs(
    mix: tuple[MixEntry, ...], seed: int, round_index: int, count: int
) -> list[TaskSpec]:
    """The `count` task specs a node with task seed `seed` draws in round `round_index`.

    Deterministic in (seed, round, count) so a resumed node draws what it would have drawn.
    Each spec gets its own index, so no two rounds of one node repeat a spec.
    """
    rng = random.Random(f"{seed}:{round_index}")
    weights = [entry.weight for entry in mix]
    chosen = rng.choices(mix, weights=weights, k=count)
    return [
        TaskSpec.make(entry.dataset, entry.config, seed=seed, index=round_index * count + i)
        for i, entry in enumerate(chosen)
    ]


def stream_seed(peer_id: str, salt: int = 0) -> int:
    """The task-stream seed of a sender in the pull exchange: its peer ID hashed with `salt`.

    Binding the stream to the sender means no peer can announce groups for another
    sender's tasks (`swarm.verify.announcements`); `salt` (the sender's own task seed) keeps
    streams configurable.
    """
    digest = hashlib.sha256(f"swarm-node/task-stream/v1:{peer_id}:{salt}".encode()).digest()
    return int.from_bytes(digest[:8], "big") & (2**63 - 1)


def eval_specs(mix: tuple[MixEntry, ...], seed: int, count: int) -> list[TaskSpec]:
    """A fixed held-out set: specs from `seed` (pick one no training stream uses), spread over the mix."""
    return sample_specs(mix, seed=seed, round_index=0, count=count)
