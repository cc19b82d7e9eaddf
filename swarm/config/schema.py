"""The whole configuration: `Config` (one field per section), the section table, and what
is derived from a config (the task mix it selects, the longest prompt of a sample of its
questions, every key with its default and help)."""

from __future__ import annotations

import dataclasses
import typing
from dataclasses import dataclass, field
from pathlib import Path

from swarm.config.daemon import LedgerSection, MonitorSection, NodeSection
from swarm.config.learning import GenerationSection, PolicySection, TasksSection, TrainingSection
from swarm.config.peers import P2PSection, SyncSection, VerifySection
from swarm.config.sharing import SharingSection

CONTEXT_SAMPLE = 64  # questions of the training stream (and as many held-out ones) measured


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


def longest_prompt(config: Config, tokenizer) -> tuple[int, str]:
    """Tokens of the longest prompt among a sample of the mix's training and held-out
    questions, formatted as the node formats them, and its dataset."""
    from swarm.policy.prompts import build_prompt
    from swarm.tasks import build_task, eval_specs, sample_specs

    mix = task_mix(config)
    specs = sample_specs(mix, config.task_seed, 0, CONTEXT_SAMPLE)
    specs += eval_specs(mix, config.tasks.eval_seed, min(config.tasks.eval_size, CONTEXT_SAMPLE))
    longest, dataset = 0, ""
    for spec in specs:
        prompt = build_prompt(tokenizer, build_task(spec).question, config.policy.prompt_format())
        length = len(tokenizer(prompt, add_special_tokens=False, verbose=False)["input_ids"])
        if length > longest:
            longest, dataset = length, spec.dataset
    return longest, dataset
