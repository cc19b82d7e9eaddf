"""What the verifier enforces: `VerifySettings`, built from the config's `[verify]` and
`[p2p]` sections, whose defaults are the config's (one source for each), and the values
derived from the config (the automatic byte burst, the task catalogue)."""

from __future__ import annotations

from dataclasses import dataclass, field

from swarm.config import GenerationSection, VerifySection
from swarm.config.peers import AUTO_BYTE_BURST
from swarm.tasks import canonical_config
from swarm.verify.reputation import ReputationSettings

BYTES_PER_TOKEN = 16  # a completion's text and token ids on the wire, generously
MIN_BYTE_BURST = 8 * 1024 * 1024


def auto_byte_burst(generation) -> int:
    """`verify.rate_bytes_burst = -1`: what two of our own rounds would send, at least 8 MiB."""
    g = generation
    tokens = g.questions_per_round * g.completions_per_question * g.max_new_tokens
    return max(MIN_BYTE_BURST, 2 * tokens * BYTES_PER_TOKEN)


def byte_burst(burst: int, generation) -> int:
    """`verify.rate_bytes_burst` in bytes: `AUTO_BYTE_BURST` resolved from the node's own rounds."""
    return auto_byte_burst(generation) if burst == AUTO_BYTE_BURST else burst


# The defaults below are the config's (`swarm.config.VerifySection`): one source for each.
_CONFIG = VerifySection()


@dataclass(frozen=True)
class VerifySettings:
    """What the verifier enforces (built from the config's [verify] and [p2p] sections;
    each default is the config key's, `rate_bytes_burst` resolved for the default rounds)."""

    swarm_id: str
    allow_list: frozenset[str] = frozenset()
    max_age_s: float = _CONFIG.max_age_s
    max_future_s: float = _CONFIG.max_future_s
    max_version_rewind: int = _CONFIG.max_version_rewind
    reward_tolerance: float = _CONFIG.reward_tolerance
    rate_groups_per_s: float = _CONFIG.rate_groups_per_s
    rate_burst: int = _CONFIG.rate_burst
    rate_bytes_per_s: float = _CONFIG.rate_bytes_per_s
    rate_bytes_burst: int = byte_burst(_CONFIG.rate_bytes_burst, GenerationSection())
    copycat_overlap: float = _CONFIG.copycat_overlap
    recheck_signatures: bool = _CONFIG.recheck_signatures
    # (dataset, canonical config JSON) a peer's task may name; None: any (offline tools, tests;
    # a node's is its own mix and verify.task_catalogue)
    task_catalogue: frozenset[tuple[str, str]] | None = None
    reputation: ReputationSettings = field(default_factory=ReputationSettings)
    peer_verify_share: float = _CONFIG.peer_verify_share  # seconds of re-scoring a second
    peer_verify_burst_s: float = _CONFIG.peer_verify_burst_s  # 0: no per-peer limit

    @classmethod
    def from_config(cls, config) -> VerifySettings:
        v = config.verify
        return cls(
            swarm_id=config.p2p.swarm_id,
            allow_list=frozenset(config.p2p.allow_list),
            max_age_s=v.max_age_s,
            max_future_s=v.max_future_s,
            max_version_rewind=v.max_version_rewind,
            reward_tolerance=v.reward_tolerance,
            rate_groups_per_s=v.rate_groups_per_s,
            rate_burst=v.rate_burst,
            rate_bytes_per_s=v.rate_bytes_per_s,
            rate_bytes_burst=byte_burst(v.rate_bytes_burst, config.generation),
            copycat_overlap=v.copycat_overlap,
            recheck_signatures=v.recheck_signatures,
            task_catalogue=task_catalogue(config),
            reputation=ReputationSettings.from_config(config),
            peer_verify_share=v.peer_verify_share,
            peer_verify_burst_s=v.peer_verify_burst_s,
        )


def task_catalogue(config) -> frozenset[tuple[str, str]]:
    """The tasks peers' groups may name: the node's own mix and `verify.task_catalogue`."""
    from swarm.config import task_mix

    entries = [(e.dataset, dict(e.config)) for e in task_mix(config)]
    entries += [
        (str(e["dataset"]), dict(e.get("config", {}))) for e in config.verify.task_catalogue
    ]
    return frozenset((dataset, canonical_config(cfg)) for dataset, cfg in entries)
