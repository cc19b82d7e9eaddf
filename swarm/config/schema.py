"""The whole configuration: `Config` (one field per section), the section table, and what
is derived from a config (the task mix it selects, every key with its default and help)."""

from __future__ import annotations

import dataclasses
import typing
from dataclasses import dataclass, field
from pathlib import Path

from swarm.config.daemon import LedgerSection, MonitorSection, NodeSection
from swarm.config.learning import GenerationSection, PolicySection, TasksSection, TrainingSection
from swarm.config.peers import P2PSection, SyncSection, VerifySection
from swarm.config.sharing import SharingSection


@dataclass(frozen=True)
class Config:
    """A node's whole configuration."""

    node: NodeSection = field(default_factory=NodeSection)
    policy: PolicySection = field(default_factory=PolicySection)
    generation: GenerationSection = field(default_factory=GenerationSection)
    training: TrainingSection = field(default_factory=TrainingSection)
    sharing: SharingSection = field(default_factory=SharingSection)
    tasks: TasksSection = field(default_factory=TasksSection)
    ledger: LedgerSection = field(default_factory=LedgerSection)
    p2p: P2PSection = field(default_factory=P2PSection)
    verify: VerifySection = field(default_factory=VerifySection)
    sync: SyncSection = field(default_factory=SyncSection)
    monitor: MonitorSection = field(default_factory=MonitorSection)

    @property
    def run_dir(self) -> Path:
        return Path(self.node.run_dir)

    @property
    def ledger_url(self) -> str:
        return self.ledger.url or f"sqlite:///{self.run_dir / 'ledger.sqlite'}"

    @property
    def task_seed(self) -> int:
        return self.tasks.seed if self.tasks.seed >= 0 else 1000 + self.node.seed

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


SECTIONS: dict[str, type] = {
    f.name: typing.get_type_hints(Config)[f.name] for f in dataclasses.fields(Config)
}


def task_mix(config: Config):
    """The `MixEntry` tuple the config selects (imports reasoning-gym lazily via swarm.tasks)."""
    from swarm.tasks import PRESET_MIXES, MixEntry

    if config.tasks.preset != "custom":
        return PRESET_MIXES[config.tasks.preset]
    return tuple(
        MixEntry(str(e["dataset"]), float(e.get("weight", 1.0)), dict(e.get("config", {})))
        for e in config.tasks.mix
    )


def describe_config() -> list[tuple[str, str, str]]:
    """(key, default, help) for every config key, for `swarm-node config keys` and docs."""
    rows = []
    for section, cls in SECTIONS.items():
        for f in dataclasses.fields(cls):
            default = f.default if f.default is not dataclasses.MISSING else f.default_factory()  # type: ignore[operator]
            rows.append((f"{section}.{f.name}", repr(default), f.metadata.get("help", "")))
    return rows
