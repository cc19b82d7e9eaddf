"""Cross-field checks of a built `Config`: rules that involve more than one key (the task mix
and its preset, the catalogue, bootstrap addresses, [sync] against the node's role, the
verification worker's memory, a sampling temperature GRPO can learn from)."""

from __future__ import annotations

from collections.abc import Mapping

from swarm.config.peers import WORKER_BASE_MB
from swarm.config.schema import Config
from swarm.core.errors import ConfigError
from swarm.p2p.addresses import PEER_ID_PATTERN


def check_cross_field(config: Config, origin) -> None:
    """Rules that involve more than one key; `origin(section, key)` names where a value came from."""
    source = origin("tasks", "mix", "tasks.preset")
    if config.tasks.preset == "custom" and not config.tasks.mix:
        raise ConfigError(f'{source}: tasks.mix must list datasets when tasks.preset = "custom"')
    if config.tasks.preset != "custom" and config.tasks.mix:
        raise ConfigError(f'{source}: tasks.mix is only used with tasks.preset = "custom"')
    listed = origin("verify", "task_catalogue")
    for i, entry in enumerate(config.verify.task_catalogue):
        if (
            not isinstance(entry, Mapping)
            or "dataset" not in entry
            or set(entry) - {"dataset", "config"}
        ):
            raise ConfigError(
                f"{listed}: verify.task_catalogue[{i}] must be a table with keys dataset and config"
            )
    for i, entry in enumerate(config.tasks.mix):
        if not isinstance(entry, Mapping) or "dataset" not in entry:
            raise ConfigError(f"{source}: tasks.mix[{i}] must be a table with a 'dataset' key")
        extra = set(entry) - {"dataset", "weight", "config"}
        if extra:
            raise ConfigError(
                f"{source}: tasks.mix[{i}]: unknown key {sorted(extra)[0]!r} (expected dataset, weight, config)"
            )
        if not isinstance(entry.get("config", {}), Mapping):
            raise ConfigError(f"{source}: tasks.mix[{i}].config must be a table")
        weight = entry.get("weight", 1.0)
        if isinstance(weight, bool) or not isinstance(weight, int | float) or not weight > 0:
            raise ConfigError(f"{source}: tasks.mix[{i}].weight must be a positive number")
    if config.p2p.cost_ban_at <= config.p2p.cost_graylist_at:
        raise ConfigError(
            f"{origin('p2p', 'cost_ban_at')}: p2p.cost_ban_at ({config.p2p.cost_ban_at:g}) must be "
            f"above p2p.cost_graylist_at ({config.p2p.cost_graylist_at:g})"
        )
    p2p = config.p2p
    if p2p.exchange == "pull" and p2p.max_connections <= p2p.pull_lists:
        raise ConfigError(
            f"{origin('p2p', 'max_connections', 'p2p.pull_lists')}: p2p.max_connections ({p2p.max_connections}) must be above p2p.pull_lists ({p2p.pull_lists}): a node asks that many peers a round, and past its bound its fetches are refused"
        )
    for key in ("bootstrap", "relays"):
        for i, addr in enumerate(getattr(p2p, key)):
            if not isinstance(addr, str) or "/p2p/" not in addr:
                raise ConfigError(
                    f"{origin('p2p', key)}: p2p.{key}[{i}] must be a multiaddr ending in /p2p/<peer id>, got {addr!r}"
                )
    _check_sync(config, origin)
    v = config.verify
    if v.worker and v.task_cache_mb + WORKER_BASE_MB > v.worker_memory_mb // 2:
        raise ConfigError(
            f"{origin('verify', 'task_cache_mb', 'verify.worker_memory_mb')}: verify.task_cache_mb ({v.task_cache_mb}) plus {WORKER_BASE_MB} MB must fit in half of verify.worker_memory_mb ({v.worker_memory_mb}): a group that takes the worker past half its limit is rejected"
        )
    if config.generation.temperature == 0 and config.node.role != "observer":
        raise ConfigError(
            f"{origin('generation', 'temperature', 'node.role')}: generation.temperature = 0 gives every group equal rewards and GRPO nothing to learn"
        )


def _check_sync(config: Config, origin) -> None:
    """The [sync] keys against the node's role."""
    follow, role = config.sync.follow, config.node.role
    if role == "generator" and not follow:
        raise ConfigError(
            f'{origin("node", "role", "sync.follow")}: node.role = "generator" needs sync.follow = the peer ID of the trainer to follow'
        )
    if follow and role != "generator":
        raise ConfigError(
            f'{origin("sync", "follow", "node.role")}: sync.follow is only used with node.role = "generator"'
        )
    if follow and not PEER_ID_PATTERN.match(follow):
        raise ConfigError(
            f"{origin('sync', 'follow')}: sync.follow = {follow!r} is not a peer ID (expected 12D3KooW followed by 44 base58 characters)"
        )
    if config.sync.keep_deltas < config.sync.anchor_every:
        raise ConfigError(
            f"{origin('sync', 'keep_deltas', 'sync.anchor_every')}: sync.keep_deltas ({config.sync.keep_deltas}) must be at least sync.anchor_every ({config.sync.anchor_every}), so a follower starting from the latest anchor finds every delta after it"
        )
    if config.sync.publish_deltas and role != "trainer":
        raise ConfigError(
            f'{origin("sync", "publish_deltas", "node.role")}: sync.publish_deltas needs node.role = "trainer" (only a trainer makes new versions)'
        )
