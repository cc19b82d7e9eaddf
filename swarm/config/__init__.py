"""Configuration: one documented, frozen dataclass per component, loaded from TOML.

A config file has one table per component (`[node]`, `[policy]`, `[generation]`,
`[training]`, `[sharing]`, `[tasks]`, `[ledger]`, `[p2p]`, `[verify]`, `[sync]`, `[monitor]`); every key is
optional and defaults to the value documented in its section class. Values are then overridden
by environment variables (`SWARM__<SECTION>__<KEY>=value`, e.g. `SWARM__TRAINING__LR=1e-5`) and
finally by the CLI (`--set training.lr=1e-5`, plus a few dedicated flags).

Any unknown section or key, wrong type or out-of-range value is a `ConfigError` whose
message names the file and the key, on one line; a retired key's names the key that
replaced it (`renames.RENAMED`). This package imports no torch, so
`swarm-node --help` stays instant.

The modules: `fields` (`opt`, a key's declaration), `daemon`, `learning`, `sharing` and
`peers` (the section dataclasses), `renames` (retired keys and their new names, values whose meaning changed), `schema` (`Config` and what derives from it), `build` (a mapping to a
`Config`), `validate` (cross-field rules), `load` (files, env and `--set`), `dump` (TOML
back out), `preflight` (checks of a whole config before anything loads).
"""

from __future__ import annotations

from swarm.config.build import build_config, who_set
from swarm.config.daemon import LedgerSection, MonitorSection, NodeSection
from swarm.config.fields import opt
from swarm.config.learning import GenerationSection, PolicySection, TasksSection, TrainingSection
from swarm.config.peers import WORKER_BASE_MB, P2PSection, SyncSection, VerifySection
from swarm.config.renames import RENAMED
from swarm.config.schema import SECTIONS, Config, describe_config, task_mix
from swarm.config.sharing import SharingSection

__all__ = [
    "RENAMED",
    "SECTIONS",
    "WORKER_BASE_MB",
    "Config",
    "GenerationSection",
    "LedgerSection",
    "MonitorSection",
    "NodeSection",
    "P2PSection",
    "PolicySection",
    "SharingSection",
    "SyncSection",
    "TasksSection",
    "TrainingSection",
    "VerifySection",
    "build_config",
    "describe_config",
    "opt",
    "task_mix",
    "who_set",
]
