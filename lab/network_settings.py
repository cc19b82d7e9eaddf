"""What a network-only node (`lab.network_node`) is told to do each round
(`NetworkNodeSettings`, `ExchangeKind`), and what each round cost it (`RoundCost`).
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from dataclasses import dataclass, field

from lab.synthetic import SyntheticShape
from swarm.exchange.pull import PullSettings
from swarm.verify.gate import VerifySettings

SYNTHETIC_MODEL = "synthetic"
SYNTHETIC_BASE = "0" * 64

ByteMeter = Callable[[], tuple[int, int]]  # cumulative (bytes in, bytes out)


class ExchangeKind(enum.StrEnum):
    """Which exchange protocol a network-only node speaks."""

    GOSSIP = "gossip"  # every group to every node (the protocol so far)
    PULL = "pull"  # announcements served, sampled peers asked, sampled groups pulled


@dataclass(frozen=True)
class NetworkNodeSettings:
    """What a network-only node does each round."""

    swarm_id: str = "swarm-local"
    exchange: ExchangeKind = ExchangeKind.GOSSIP
    preset: str = "easy"  # task mix (swarm.tasks.PRESET_MIXES)
    task_seed: int = -1  # -1: derived from the peer ID, so no two nodes share task specs
    # (with the pull exchange the stream is always bound to the peer ID: `stream_seed`)
    groups_per_round: int = 16  # Q: groups made and shared per round
    own_groups: int = 16  # I
    shared_groups: int = 8  # J
    per_peer_cap: int = 2
    max_held_s: float = 600.0  # sampler staleness (sharing.max_held_s)
    shape: SyntheticShape = field(default_factory=SyntheticShape)
    format_bonus: float = 0.1
    pool_size: int = 4096
    verify: VerifySettings | None = None  # default: this swarm, default bounds
    pull: PullSettings = field(default_factory=PullSettings)  # the pull exchange's budget
    policy_version: int = 0  # the version its groups claim (they are synthetic: no model)


@dataclass
class RoundCost:
    """What one round cost this node, and what it chose."""

    round: int
    published: int = 0  # own groups shared
    bytes_in: int = 0  # over the round's window (see `run_paced`)
    bytes_out: int = 0
    cpu_s: float = 0.0  # process CPU over the round's window, network thread included
    work_cpu_s: float = 0.0  # CPU of the round's own work (make, share, verify, choose)
    wall_s: float = 0.0
    cheap_checked: int = 0  # peers' groups (or announcements) through the cheap checks
    verified: int = 0  # peers' groups verified fully (task rebuilt, rewards re-scored)
    accepted: int = 0
    rejected: int = 0
    duplicates: int = 0
    ledger_rows: int = 0  # rows a trainer would write for this round
    peers: int = 0
    chosen: list[tuple[str, float]] = field(default_factory=list)  # (sender, age s) of J chosen
    extra: dict = field(default_factory=dict)  # the exchange's own counters

    def as_dict(self) -> dict:
        return dict(self.__dict__)
