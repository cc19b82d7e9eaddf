"""Task specs: the `(dataset, config, seed, index)` value that names one task instance.

A spec travels in every rollout group, so its config is kept as canonical JSON: specs are
hashable, compare equal whatever key order they were built with, and encode to one byte
string (`swarm.wire` checks their bounds).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import msgspec

from swarm.core.errors import TaskError


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


def canonical_config(config: Mapping[str, Any]) -> str:
    """Deterministic JSON for a dataset config (sorted keys, lists for tuples, no spaces)."""
    try:
        return json.dumps(config, sort_keys=True, separators=(",", ":"), allow_nan=False)
    except (TypeError, ValueError) as e:
        raise TaskError(f"dataset config is not plain JSON data: {e}") from None
