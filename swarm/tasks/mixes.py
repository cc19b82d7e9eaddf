"""Task mixes and the task streams drawn from them: presets, checking a mix, a node's
deterministic specs per round, a sender's stream seed, the held-out evaluation set."""

from __future__ import annotations

import hashlib
import math
import random
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from swarm.core.errors import TaskError
from swarm.tasks.build import build_task
from swarm.tasks.specs import TaskSpec


@dataclass(frozen=True)
class MixEntry:
    """One dataset in a task mix: its reasoning-gym name, sampling weight and config."""

    dataset: str
    weight: float = 1.0
    config: Mapping[str, Any] = field(default_factory=dict)


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
