"""Verifiable tasks: specs, rebuilding a task from its spec, task mixes, and verifiers.

A task instance is fully described by a `TaskSpec` `(dataset, config, seed, index)`. Any peer
rebuilds the question *and its ground truth* from the spec with reasoning-gym, so a rollout
never has to be trusted for what the question or the right answer was.

Scoring is local and pure: `score_completion` extracts the answer from a completion (the last
`<answer>...</answer>`; under the lenient rule, else the whole text) and asks the dataset's
own scorer for correctness in [0, 1], plus an optional format bonus for using the tag.

The modules: `specs` (`TaskSpec`), `build` (rebuilding a task), `scoring` (rewards and
answer rules), `mixes` (task mixes and the task streams drawn from them), and below them
`cache`, `guard` and `datasets` (built datasets cached by bytes, guarded scorers,
reasoning-gym imported one dataset at a time).

Deliberately not here: prompting (see `swarm.policy.prompts`) and anything about models.
"""

from __future__ import annotations

from swarm.tasks.build import MAX_SPEC_INDEX, Task, build_task
from swarm.tasks.mixes import (
    EASY_MIX,
    PRESET_MIXES,
    SAPO_DATASETS,
    SAPO_MIX,
    MixEntry,
    eval_specs,
    sample_specs,
    stream_seed,
    validate_mix,
)
from swarm.tasks.scoring import (
    ANSWER_CLOSE,
    ANSWER_OPEN,
    AnswerRule,
    Scoring,
    claim_rules,
    extract_answer,
    is_correct,
    last_tagged_answer,
    score_completion,
    well_formatted,
)
from swarm.tasks.specs import TaskSpec, canonical_config

__all__ = [
    "ANSWER_CLOSE",
    "ANSWER_OPEN",
    "EASY_MIX",
    "MAX_SPEC_INDEX",
    "PRESET_MIXES",
    "SAPO_DATASETS",
    "SAPO_MIX",
    "AnswerRule",
    "MixEntry",
    "Scoring",
    "Task",
    "TaskSpec",
    "build_task",
    "canonical_config",
    "claim_rules",
    "eval_specs",
    "extract_answer",
    "is_correct",
    "last_tagged_answer",
    "sample_specs",
    "score_completion",
    "stream_seed",
    "validate_mix",
    "well_formatted",
]
