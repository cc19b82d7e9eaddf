"""One source for each default: a component's settings built with no arguments hold what a
default config gives it, so a component used without a config (a test, a bench, a tool)
behaves as a default node's does, and a default changes in one place, the config section.

Each row of MIRRORS is a component: its settings built bare, the function that builds them
from a config, and the fields that are no config key's default (with why). A component
whose settings come from the config joins with one row; the transport's settings belong
here once they are built from `[p2p]` (e.g. `Mirror("CostSettings", CostSettings, ...)`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

import pytest

from swarm.config import Config, P2PSection
from swarm.exchange.pull import PullSettings
from swarm.node.makers import pull_settings
from swarm.verify.gate import VerifySettings
from swarm.verify.reputation import ReputationSettings
from swarm.verify.rescore_pool import WorkerSettings
from swarm.verify.spotcheck import SpotCheckSettings


@dataclass(frozen=True)
class Mirror:
    name: str
    bare: Callable[[], object]
    from_config: Callable[[Config], object]
    exempt: Mapping[str, str] = field(default_factory=dict)  # field -> why it is no key's


MIRRORS = [
    Mirror(
        "VerifySettings",
        lambda: VerifySettings(swarm_id=P2PSection().swarm_id),
        VerifySettings.from_config,
        {"task_catalogue": "bare: any task (tools); a node's: its own mix and the catalogue"},
    ),
    Mirror("ReputationSettings", ReputationSettings, ReputationSettings.from_config),
    Mirror("WorkerSettings", WorkerSettings, WorkerSettings.from_config),
    Mirror("SpotCheckSettings", SpotCheckSettings, SpotCheckSettings.from_config),
    Mirror(
        "PullSettings",
        PullSettings,
        pull_settings,
        {
            "pull_groups": "derived: shared_groups + 2, none while sharing.shared_groups = 0",
            "seed_salt": "derived: the node's task seed",
        },
    ),
]


@pytest.mark.parametrize("mirror", MIRRORS, ids=lambda m: m.name)
def test_bare_settings_hold_the_default_configs_values(mirror: Mirror):
    bare, built = mirror.bare(), mirror.from_config(Config())
    differ = {
        f.name: (getattr(bare, f.name), getattr(built, f.name))
        for f in dataclasses.fields(bare)  # type: ignore[arg-type]
        if f.name not in mirror.exempt and getattr(bare, f.name) != getattr(built, f.name)
    }
    assert differ == {}, f"{mirror.name}: field -> (bare default, default config's)"


@pytest.mark.parametrize("mirror", MIRRORS, ids=lambda m: m.name)
def test_every_exempt_field_exists(mirror: Mirror):
    names = {f.name for f in dataclasses.fields(mirror.bare())}  # type: ignore[arg-type]
    assert set(mirror.exempt) <= names
