"""Rebuilding a task from its spec: the question and its ground truth, from reasoning-gym.

Built datasets are cached by measured bytes (`swarm.tasks.cache`, which also guards their
scorers); reasoning-gym is imported one dataset at a time (`swarm.tasks.datasets`), on first
use, so importing this module stays cheap.
"""

from __future__ import annotations

import contextlib
import io
import json
from dataclasses import dataclass, field

from swarm.core.errors import TaskError
from swarm.tasks.cache import dataset_cache
from swarm.tasks.specs import TaskSpec

# reasoning-gym datasets do not depend on `size` for item i, so one object per
# (dataset, config, seed) with a huge size can serve every index.
_DATASET_SIZE = 1 << 30
MAX_SPEC_INDEX = _DATASET_SIZE - 1


@dataclass(frozen=True)
class Task:
    """A rebuilt task: the question shown to the model and what the verifier needs."""

    spec: TaskSpec
    question: str
    answer: str | None  # reference answer (some datasets score without one)
    entry: dict = field(repr=False, compare=False)  # the raw reasoning-gym entry, for scoring


@dataset_cache  # bounded in bytes (verify.task_cache_mb); scorers guarded
def cached_dataset(name: str, config_json: str, seed: int):
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
    dataset = cached_dataset(spec.dataset, spec.config_json, spec.seed)
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
